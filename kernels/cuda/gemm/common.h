// Host-side pieces shared by the CUDA GEMM variants (gemm/*.cu,
// gemm/cublaslt.cc): the hard constraints every variant checks, the vector
// layout test of the 16-byte load paths, efficiency leads rescaled to the
// peak that KernelVariant::EstimateSeconds divides by, and the cost model
// of the SIMT kernels' estimates (SimtGemmSeconds). No CUDA headers, so that
// gemm/cublaslt.cc stays plain C++. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/device_info.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// The kernels index rows and columns with 32-bit ints; the slack keeps a
// tile's worth of out-of-range indices from overflowing.
inline constexpr int64_t kGemmMaxDim = (int64_t{1} << 31) - 1024;
// Grid limits: tiles are flattened into blockIdx.x, batch entries into
// blockIdx.z (launched in chunks of kMaxGridZ when the batch is larger).
inline constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxGridZ = 65535;

// UNIMPLEMENTED, naming `variant` and the failed constraint, unless: m, n, k
// and the batch are >= 1, m, n, k <= kGemmMaxDim, the batch strides in use
// are >= 0, and the output has at most kMaxGridX tiles of tile_m x tile_n
// (not checked when tile_m is 0: a library call has no grid of ours).
absl::Status CheckGemmCommon(absl::string_view variant, const GemmProblem& p,
                             int tile_m, int tile_n);

// OK when every row of A and B starts on a vec_elems boundary: the
// contiguous dimension (k for A, m for A^T, n for B, k for B^T) and the
// batch strides of batched operands are multiples of vec_elems. Together
// with 16-byte aligned base pointers (CheckGemmPointers) that makes every
// 16-byte chunk of a row either wholly inside or wholly outside the matrix,
// so edge tiles need one predicate per vector. Otherwise UNIMPLEMENTED
// naming the operand, the dimension and why (`purpose`).
absl::Status CheckGemmVectorLayout(absl::string_view variant,
                                   const GemmProblem& p, int vec_elems,
                                   absl::string_view purpose);

// OK when the base pointers of A and B (and C, D when check_cd) are
// multiples of `bytes`. The CUDA backend allocates every operand from the
// stream-ordered pool (256-byte aligned), so a failure is a caller bug:
// INTERNAL.
absl::Status CheckGemmPointers(absl::string_view variant, const Operands& ops,
                               int bytes, bool check_cd);

// Whether A, B, C and D are all multiples of `bytes` (no status: for
// choosing between a vector path and a scalar one).
bool GemmPointersAligned(const Operands& ops, int bytes);

// EstimateSeconds divides by the tensor-core peak whenever the problem
// allows tensor cores (16-bit dtype, or allow_tf32). A variant that computes
// on the float32 SIMT pipes reaches at most peak_fp32_flops; this converts
// its fraction of that peak into a fraction of the peak EstimateSeconds
// uses.
double SimtEfficiency(const GemmProblem& p, const DeviceInfo& dev,
                      double fraction_of_fp32_peak);
// A tensor-core variant's fraction of the 16-bit tensor peak; TF32 runs at
// half the 16-bit rate on Ampere and Hopper, so float32 halves it.
double TensorEfficiency(const GemmProblem& p, double fraction_of_16bit_peak);

// The share of a tiled tensor-core kernel's full-machine throughput that p
// gets: the useful share of its padded tile_m x tile_n output tiles
// (TileUtilization) times the share of the CTA slots (ctas_per_sm on each
// SM) its last-padded waves keep busy. A 128x256-tile kernel runs a 1000^3
// GEMM as 32 CTAs on the H200's 132 SMs: wgmma reached 103 TFLOP/s there
// against 714 at 4096^3 (512 CTAs, 3.9 waves), and 421 at 8 x 1024^3 (256
// CTAs, 1.9 waves), in bfloat16 (bench/results/h200/gemm.md). Without it,
// the estimate of a small-M or small-N GEMM charged the kernel a full
// machine's throughput and preferred it to cuBLASLt, which ran such shapes
// 3-4.3x faster. 1 where the device's SM count is unknown.
double TiledGemmFill(const GemmProblem& p, const DeviceInfo& dev, int tile_m,
                     int tile_n, int ctas_per_sm);

// A tensor-core kernel running one tile_m x tile_n tile per CTA and one CTA
// per SM, its tiles in waves over the SMs, each wave a fixed latency
// (filling the pipeline, the epilogue's stores) plus its K steps at
// peak_fraction of an SM's share of the tensor peak: a launch plus the
// waves one after another. 0 where the device's SMs or peak are unknown.
// The roofline misses this for short K, where the fixed part dominates.
double TensorWavesSeconds(const GemmProblem& p, const DeviceInfo& dev,
                          int tile_m, int tile_n, double wave_seconds,
                          double peak_fraction);

// Whether the sweep that calibrated the GEMM estimates found a problem's
// operands in HBM rather than in L2: when its minimum bytes exceed 1% of the
// L2. Selector::Measure times a shape over up to 64 rotating buffer sets, and
// naive's K step on the H200 (the selection sweep's seed-7 shapes,
// `scripts/gpu-check.sh OUT tune`) took 35-40 ns up to sets of 505 KB
// (64x64x955) and 63-90 ns from 596 KB (128x107x576, 4x151x1024, 64x512x359):
// about 0.6 MB, 1% of the 60 MB L2. (A request whose operands were just written
// may still find larger ones in L2, and run faster than estimated.)
bool GemmOperandsFromHbm(const GemmProblem& p, const DeviceInfo& dev);

// The cost model of one of our SIMT GEMM kernels (SimtGemmSeconds): how
// its grid and K loop are shaped, and what each part costs. The constants
// are fitted to the H200 selection sweep (`scripts/gpu-check.sh OUT tune`,
// then bench/gemm_selection_fit.py --fit: relative least squares over the
// 190 seed-7 shapes measured).
struct SimtGemmCost {
  int tile_m, tile_n;  // the output tile of one block
  // The granularity of the outputs computed: a tile, or a warp's share of
  // one when the threads of an edge tile past the matrix exit early.
  int pad_m, pad_n;
  int k_step;  // K elements per step of the K loop
  // Fraction of the fp32 SIMT peak on the padded FLOPs, all SMs busy.
  double efficiency;
  double extra_seconds;  // launch and set-up beyond kGpuLaunchSeconds
  // One step of the K loop of one block: the latency of its loads (from
  // L2) and its arithmetic, which no other block hides.
  double step_seconds;
  // Added to each step when the operands come from HBM
  // (GemmOperandsFromHbm).
  double hbm_step_seconds;
  // Per block, spread over the SMs: scheduling, first loads, epilogue.
  double block_seconds;
  // Added to each step when B is transposed (a kernel whose loads of B
  // then fall K apart), for a full tile_n of N; N under tile_n pays its
  // share.
  double trans_b_step_seconds = 0;
  // Per byte of D written, with 16-byte stores (N a multiple of 4) and
  // without: what the epilogue's stores add once short K leaves them
  // nothing to hide behind.
  double vector_store_seconds_per_byte = 0;
  double scalar_store_seconds_per_byte = 0;
};

// A SIMT variant's estimate: a launch, plus extra_seconds, plus the K
// loop's latency (every block walks all of K in order, so with few blocks
// that sets the time), plus the padded FLOPs at `efficiency` of the fp32
// peak (the SMs' throughput once many blocks share them; the kernels
// compute in float32 whatever the dtype), plus block_seconds per block and
// SM. A sum, not the largest of the terms: the sweep's times grew with
// both the K steps and the blocks per SM at once (naive at K = 64: 5.5-6.3
// us up to 1.5 blocks per SM, 9.6-10.2 at 3-5, 21.5-29 at 18-27).
double SimtGemmSeconds(const GemmProblem& p, const DeviceInfo& dev,
                       const SimtGemmCost& cost);

}  // namespace coalesce::cuda
