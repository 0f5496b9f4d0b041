// A lane's CUDA graphs of calls that repeat. A request on stored operands
// (device handles) runs its variant's launches between the lane's two
// timing events; when the same variant, problem and operand addresses come
// again on the lane, as a pipelined client's requests do, the lane launches
// one graph of the three instead: one driver call in place of the launch
// gate's, the events' and the kernels', and no gate, since a graph reaches
// the device whole and its events time the kernels alone. A call is
// captured the second time it is seen, so that addresses seen once cost no
// instantiation. Internal to kernels/cuda; a LaunchGraphs belongs to its
// lane (not thread-safe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "base/lru_cache.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// What a graph replays: the variant, the problem and every operand's
// address (inputs, then outputs).
struct LaunchKey {
  const KernelVariant* variant = nullptr;
  Problem problem;
  absl::InlinedVector<const void*, 8> operands;
};

class LaunchGraphs {
 public:
  // Graphs kept per lane; each holds a few kilobytes of host and device
  // memory.
  static constexpr size_t kDefaultCapacity = 64;
  explicit LaunchGraphs(size_t capacity = kDefaultCapacity);
  // Destroys the graphs: the lane's stream must be idle.
  ~LaunchGraphs() = default;
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  // An executable graph, destroyed with its entry (dropped or replaced).
  struct Graph {
    Graph(cudaGraphExec_t exec, const LaunchInfo& launch)
        : exec(exec), launch(launch) {}
    ~Graph() {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
    }
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    cudaGraphExec_t exec;
    LaunchInfo launch;  // what the captured call reported
  };
  // key's graph, now the most recently used; null when there is none.
  const Graph* Find(const LaunchKey& key);
  // Whether key's call should be captured now: true the second time a key
  // without a graph is seen (and not refused); notes the first sighting.
  bool ShouldCapture(const LaunchKey& key);
  // Keeps exec, which it will destroy, as key's graph; the least recently
  // used graph goes when the lane holds `capacity` already.
  void Put(const LaunchKey& key, cudaGraphExec_t exec,
           const LaunchInfo& launch);
  // key's call could not be captured (a variant's work that a graph cannot
  // hold): never tried again while remembered.
  void Refuse(const LaunchKey& key);

  size_t size() const { return graphs_.size(); }

 private:
  struct KeyHash {
    size_t operator()(const LaunchKey& k) const;
  };
  struct KeyEq {
    bool operator()(const LaunchKey& a, const LaunchKey& b) const;
  };
  // A set of key hashes that forgets its oldest past `capacity`.
  class RecentHashes {
   public:
    explicit RecentHashes(size_t capacity) : capacity_(capacity) {}
    bool Contains(size_t h) const { return set_.contains(h); }
    void Insert(size_t h);
    void Erase(size_t h) { set_.erase(h); }  // its ring slot ages out

   private:
    size_t capacity_;
    absl::flat_hash_set<size_t> set_;
    std::deque<size_t> ring_;
  };

  LruCache<LaunchKey, const Graph,
           absl::flat_hash_map<LaunchKey,
                               LruEntries<LaunchKey, const Graph>::iterator,
                               KeyHash, KeyEq>>
      graphs_;
  RecentHashes seen_;
  RecentHashes refused_;
};

}  // namespace coalesce::cuda
