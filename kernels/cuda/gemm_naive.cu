// gemm.cuda.naive: the seeds' first GEMM, kept as the baseline. One thread
// per output element walks k, reading op(A)'s row and op(B)'s column
// straight from global memory (no reuse beyond what L1/L2 give), float32
// accumulation. Any shape, transpose, batch and dtype.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.naive";
// 16x16 threads: threadIdx.x runs along n, so B's rows (not transposed) and
// D's rows are read and written coalesced.
constexpr int kTile = 16;
// A fraction of the fp32 peak (66.9 TFLOP/s at 1980 MHz): 5.49 TFLOP/s at
// 4096^3 on the H200 (bench/results/h200/gemm-4096.txt).
constexpr double kEfficiency = 0.08;
// One step of the K loop (two loads, one FMA) per thread, from the H200
// sweep: 25.6-84.6 us for K of 1024-8191 with M x N of a few hundred,
// 12-25 ns per step; the plainest launch, so no extra (SimtGemmSeconds).
constexpr double kSecondsPerK = 20e-9;
constexpr double kExtraSeconds = 0;

template <typename T>
__global__ void __launch_bounds__(kTile* kTile)
    GemmNaiveKernel(GemmParams p, bool trans_a, bool trans_b) {
  const TileCoord t = GroupedTile(blockIdx.x, p.tiles_m, p.tiles_n);
  const int i = t.m * kTile + threadIdx.y;
  const int j = t.n * kTile + threadIdx.x;
  if (i >= p.m || j >= p.n) return;
  const int64_t b = blockIdx.z;
  const T* a = static_cast<const T*>(p.a) + b * p.stride_a;
  const T* bm = static_cast<const T*>(p.b) + b * p.stride_b;
  float acc = 0.0f;
  for (int l = 0; l < p.k; ++l) {
    acc = fmaf(LoadOpA(a, trans_a, p.m, p.k, i, l),
               LoadOpB(bm, trans_b, p.n, p.k, l, j), acc);
  }
  StoreGemmOutput<T>(p, b, i, j, acc);
}

struct Traits {
  static constexpr const char* kName = ::coalesce::cuda::kName;
  static constexpr const char* kDescription =
      "one thread per output, operands read from global memory, "
      "float32 accumulation (the seeds' baseline)";
  static constexpr int kTile = ::coalesce::cuda::kTile;
  static constexpr int kBlockRows = kTile;
  static constexpr double kEfficiency = ::coalesce::cuda::kEfficiency;
  static constexpr double kSecondsPerK = ::coalesce::cuda::kSecondsPerK;
  static constexpr double kExtraSeconds = ::coalesce::cuda::kExtraSeconds;
  template <typename T>
  static constexpr auto kKernel = &GemmNaiveKernel<T>;
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmNaiveVariant() {
  return std::make_unique<SimtGemmVariant<Traits>>();
}

}  // namespace coalesce::cuda
