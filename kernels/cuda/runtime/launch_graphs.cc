#include "kernels/cuda/runtime/launch_graphs.h"

#include <algorithm>

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
    : capacity_(std::max<size_t>(capacity, 1)),
      seen_(4 * capacity_),
      refused_(4 * capacity_) {}

LaunchGraphs::~LaunchGraphs() {
  for (auto& [key, graph] : order_) cudaGraphExecDestroy(graph.exec);
}

const LaunchGraphs::Graph* LaunchGraphs::Find(const LaunchKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return &it->second->second;
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
  if (auto it = index_.find(key); it != index_.end()) {
    cudaGraphExecDestroy(it->second->second.exec);
    it->second->second = {exec, launch};
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (order_.size() >= capacity_) {
    cudaGraphExecDestroy(order_.back().second.exec);
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  order_.emplace_front(key, Graph{exec, launch});
  index_.emplace(key, order_.begin());
}

void LaunchGraphs::Refuse(const LaunchKey& key) {
  const size_t h = KeyHash()(key);
  seen_.Erase(h);
  refused_.Insert(h);
}

}  // namespace coalesce::cuda
