// Host-side pieces shared by the CUDA GEMM variants (gemm_*.cu,
// gemm_cublaslt.cc): the hard constraints every variant checks, the vector
// layout test of the 16-byte load paths, and efficiency leads rescaled to
// the peak that KernelVariant::EstimateSeconds divides by. No CUDA headers,
// so that gemm_cublaslt.cc stays plain C++. Pure functions; thread-safe.
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

// A SIMT variant's estimate: a launch, plus extra_seconds (what its launch
// costs beyond the plainest kernel's: block size, set-up), plus the largest
// of three bounds: the FLOPs at `efficiency` of the peak EstimateSeconds
// uses (Efficiency), the minimum bytes at half the copy peak (their
// efficiency describes arithmetic; applied to the bytes too, as the
// default estimate does, naive's 0.02 made a 256 KB GEMM cost 3 us more
// than it measured), and the latency of the K loop, K steps of
// seconds_per_k: every thread walks all of K in order, so with few outputs
// that latency sets the time. From the H200 selection sweep (deploy/tuning/
// nvidia-h200.txt): naive took 60-235 us and reg_tiled 210-824 us for
// M x N of a few hundred and K of 2048-16383, where cuBLASLt (split-K) took
// 6-13 us; GEMMs of a few KFLOP took 3.5-4.5 us in naive, 5.0-5.4 in
// smem_tiled and 5.2-6.3 in reg_tiled.
double SimtGemmSeconds(const GemmProblem& p, const DeviceInfo& dev,
                       double efficiency, double extra_seconds,
                       double seconds_per_k);

}  // namespace coalesce::cuda
