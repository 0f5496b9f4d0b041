// The cost of choosing a variant per request (bound: under 2 us on a
// cache hit): a repeated problem (remembered) and problems never seen
// before (the key, the stores and the heuristic each time). Google Benchmark;
// bench/check_select_benchmark.py runs it in CI and fails above the bound.
#include <benchmark/benchmark.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/selection/selector.h"

namespace coalesce {
namespace {

Problem Transpose(int64_t m, int64_t n) {
  TransposeProblem p;
  p.rows = m;
  p.cols = n;
  return p;
}

void BM_SelectCacheHit(benchmark::State& state) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  Selector s(backend.get(), SelectorOptions{});
  const Problem p = Transpose(4096, 4096);
  // Put a choice in the cache without timing a 64 MB transpose.
  const_cast<TuningStore&>(s.cache()).Put(
      s.KeyOf(p),
      {"transpose.cpu.blocked",
       1e-3,
       {{"transpose.cpu.blocked", 1e-3}, {"transpose.cpu.naive", 3e-3}}});
  for (auto _ : state) {
    absl::StatusOr<Selection> sel = s.Select(p, "");
    benchmark::DoNotOptimize(sel);
  }
}
BENCHMARK(BM_SelectCacheHit);

void BM_SelectHeuristic(benchmark::State& state) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  Selector s(backend.get(), SelectorOptions{});
  const Problem p = Transpose(4096, 4096);
  for (auto _ : state) {
    absl::StatusOr<Selection> sel = s.Select(p, "");
    benchmark::DoNotOptimize(sel);
  }
}
BENCHMARK(BM_SelectHeuristic);

void BM_SelectNewShape(benchmark::State& state) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  Selector s(backend.get(), SelectorOptions{});
  // More distinct shapes than the selector remembers, in turn: every
  // selection is a first.
  int64_t rows = 4096;
  for (auto _ : state) {
    if (++rows == 4096 + 100000) rows = 4096;
    absl::StatusOr<Selection> sel = s.Select(Transpose(rows, 4096), "");
    benchmark::DoNotOptimize(sel);
  }
}
BENCHMARK(BM_SelectNewShape);

}  // namespace
}  // namespace coalesce

BENCHMARK_MAIN();
