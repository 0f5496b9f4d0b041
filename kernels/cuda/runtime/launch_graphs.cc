#include "kernels/cuda/runtime/launch_graphs.h"

#include <memory>

#include "absl/hash/hash.h"

namespace coalesce::cuda {

size_t LaunchGraphs::KeyHash::operator()(const LaunchKey& k) const {
  return absl::HashOf(k.variant, ProblemHash()(k.problem),
                      absl::MakeConstSpan(k.operands));
}

bool LaunchGraphs::KeyEq::operator()(const LaunchKey& a,
                                     const LaunchKey& b) const {
  return a.variant == b.variant && a.operands == b.operands &&
         ProblemEq()(a.problem, b.problem);
}

void LaunchGraphs::RecentHashes::Insert(size_t h) {
  if (!set_.insert(h).second) return;
  ring_.push_back(h);
  if (ring_.size() > capacity_) {
    set_.erase(ring_.front());
    ring_.pop_front();
  }
}

// Sightings are remembered for four times as many keys as there are graphs,
// so that a client cycling through a few more buffers than that still gets
// graphs once its cycle repeats.
LaunchGraphs::LaunchGraphs(size_t capacity)
    : graphs_(capacity),
      seen_(4 * graphs_.capacity()),
      refused_(4 * graphs_.capacity()) {}

const LaunchGraphs::Graph* LaunchGraphs::Find(const LaunchKey& key) {
  // The cache keeps the graph alive until it is dropped or replaced.
  return graphs_.Find(key).get();
}

bool LaunchGraphs::ShouldCapture(const LaunchKey& key) {
  const size_t h = KeyHash()(key);
  if (refused_.Contains(h)) return false;
  if (seen_.Contains(h)) return true;
  seen_.Insert(h);
  return false;
}

void LaunchGraphs::Put(const LaunchKey& key, cudaGraphExec_t exec,
                       const LaunchInfo& launch) {
  graphs_.Put(key, std::make_shared<const Graph>(exec, launch));
}

void LaunchGraphs::Refuse(const LaunchKey& key) {
  const size_t h = KeyHash()(key);
  seen_.Erase(h);
  refused_.Insert(h);
}

}  // namespace coalesce::cuda
