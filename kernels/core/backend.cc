#include "kernels/core/backend.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace coalesce {

int BenchmarkBufferSets(const Problem& p, const BenchmarkOptions& opts,
                        int max_sets) {
  const int64_t set_bytes = MinBytesMoved(p);
  if (set_bytes <= 0) return 1;
  return static_cast<int>(std::clamp<int64_t>(
      (opts.min_footprint_bytes + set_bytes - 1) / set_bytes, 1, max_sets));
}

BenchmarkResult SummarizeBenchmark(std::vector<double> seconds, int sets,
                                   const LaunchInfo& launch) {
  std::sort(seconds.begin(), seconds.end());
  BenchmarkResult r;
  r.reps = static_cast<int>(seconds.size());
  r.buffer_sets = sets;
  if (!seconds.empty()) {
    r.median_seconds = seconds[seconds.size() / 2];
    r.min_seconds = seconds.front();
    r.max_seconds = seconds.back();
  }
  r.launch = launch;
  return r;
}

absl::StatusOr<BenchmarkResult> Backend::Benchmark(
    const KernelVariant& v, const Problem& p, const BenchmarkOptions& opts) {
  const OperandSizes sizes = OperandBytes(p);
  // Host buffers: a few sets are enough to leave the CPU caches.
  const int sets = BenchmarkBufferSets(p, opts, 16);
  std::mt19937_64 rng(opts.seed);
  std::uniform_real_distribution<float> dist(0.25f, 1.0f);
  const DType dtype = DTypeOf(p);
  std::vector<std::vector<std::vector<char>>> in(sets), out(sets);
  std::vector<Operands> ops(sets);
  for (int s = 0; s < sets; ++s) {
    for (int64_t b : sizes.inputs) {
      in[s].emplace_back(b);
      const int64_t n = b / static_cast<int64_t>(ElementSize(dtype));
      for (int64_t i = 0; i < n; ++i) {
        StoreFromFloat(in[s].back().data(), dtype, i,
                       (i & 1 ? -1.f : 1.f) * dist(rng));
      }
      ops[s].inputs.push_back(b > 0 ? in[s].back().data() : nullptr);
    }
    for (int64_t b : sizes.outputs) {
      out[s].emplace_back(b, static_cast<char>(0xff));
      ops[s].outputs.push_back(b > 0 ? out[s].back().data() : nullptr);
    }
  }
  RunResult rr;
  for (int i = 0; i < opts.warmup; ++i) {
    absl::Status st = Execute(v, p, ops[i % sets], &rr);
    if (!st.ok()) return st;
  }
  std::vector<double> t;
  for (int i = 0; i < opts.reps; ++i) {
    absl::Status st = Execute(v, p, ops[i % sets], &rr);
    if (!st.ok()) return st;
    t.push_back(rr.kernel_seconds);
  }
  return SummarizeBenchmark(std::move(t), sets, rr.launch);
}

}  // namespace coalesce
