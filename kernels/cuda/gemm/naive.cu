// gemm.cuda.naive: the reference GEMM, the baseline the others are measured
// against. One thread per output element walks k, reading op(A)'s row and
// op(B)'s column straight from global memory (no reuse beyond what L1/L2
// give), float32 accumulation. Any shape, transpose, batch and dtype.
#include <cuda_runtime.h>

#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.naive";
// 16x16 threads: threadIdx.x runs along n, so B's rows (not transposed) and
// D's rows are read and written coalesced.
constexpr int kTile = 16;
// The cost model (SimtGemmSeconds), fitted to the H200 selection sweep's
// seed-7 shapes (bench/gemm_selection_fit.py --fit):
constexpr SimtGemmCost kCost = {
    kTile, kTile,
    // A warp covers 2 rows of 16 outputs; threads past the matrix exit.
    2, kTile,
    1,  // one K element (two loads, one FMA) per step
    // 0.10 of the fp32 peak (66.9 TFLOP/s) once many blocks share the SMs
    // (with block_seconds: 4352x3008x64 in 330 us); 4096^3 at 0.082:
    // `coalesce-bench kernels --ops=gemm --dtypes=float32
    // --shape=1,4096,4096,4096 --variants=naive`.
    0.10,
    // Tiny GEMMs (64x64x1, 320x64x1, 30x1x8): 3.5-3.7 us.
    0.55e-6,
    // One step of one block: 35-40 ns at 64x64 with K of 384-955 from L2,
    // 31-37 ns at K = 64 with few blocks.
    34e-9,
    // From HBM 55-90 ns (64x64x1920 to 6110: 74-77 ns).
    22e-9,
    // Short K, many blocks: 2432x256x1 took 7.65 us for 18 blocks per SM,
    // 97x7808x8 10.6 us for 26.
    200e-9,
    // B transposed: a warp's 16 loads of B fall K apart instead of on one
    // row (64x64x64 took 8.5 us against 5.7; with N of 2-8 they stay few:
    // 128x3x64 5.3 us). The estimates ran 1.3-1.5x short there in every
    // dtype; a grid on the H200 sweeps' seed-7 shapes (kernels/cuda/
    // testdata/gemm_classes_seed7.txt) scored by the share within 10%: 30
    // ns (10-40 tried) for 16 rows of B, N under 16 its share (counting 32
    // rows scored 2 shapes of 1800 more).
    30e-9};

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
      "reference: one thread per output, operands read from global memory, "
      "float32 accumulation";
  static constexpr int kTile = ::coalesce::cuda::kTile;
  static constexpr int kBlockRows = kTile;
  static constexpr SimtGemmCost kCost = ::coalesce::cuda::kCost;
  template <typename T>
  static constexpr auto Kernel() {
    return &GemmNaiveKernel<T>;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmNaiveVariant() {
  return std::make_unique<SimtGemmVariant<Traits>>();
}

}  // namespace coalesce::cuda
