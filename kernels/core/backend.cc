#include "kernels/core/backend.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace coalesce {

absl::StatusOr<BenchmarkResult> Backend::Benchmark(
    const KernelVariant& v, const Problem& p, const BenchmarkOptions& opts) {
  const OperandSizes sizes = OperandBytes(p);
  int64_t set_bytes = 0;
  for (int64_t b : sizes.inputs) set_bytes += b;
  for (int64_t b : sizes.outputs) set_bytes += b;
  const int sets = static_cast<int>(std::clamp<int64_t>(
      set_bytes > 0 ? (opts.min_footprint_bytes + set_bytes - 1) / set_bytes
                    : 1,
      1, 16));
  std::mt19937_64 rng(opts.seed);
  std::uniform_real_distribution<float> dist(0.25f, 1.0f);
  const DType dtype = std::visit([](const auto& q) { return q.dtype; }, p);
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
  BenchmarkResult r;
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
  std::sort(t.begin(), t.end());
  r.reps = static_cast<int>(t.size());
  r.buffer_sets = sets;
  if (!t.empty()) {
    r.median_seconds = t[t.size() / 2];
    r.min_seconds = t.front();
    r.max_seconds = t.back();
  }
  r.launch = rr.launch;
  return r;
}

}  // namespace coalesce
