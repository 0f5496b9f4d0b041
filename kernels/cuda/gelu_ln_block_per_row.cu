// gelu_layer_norm.cuda.block_per_row: one block per row for hidden up to
// 16384, the row held in registers (16 elements per thread on the vector
// path), so global memory is read once and written once, with no
// shared-memory copy of the row and no dynamic shared memory to configure.
// Mean and variance are two exact block reductions (warp shuffles, then one
// float per warp in shared memory) over the registers. 16-byte packs where
// every row is 16-byte aligned, coalesced scalar accesses otherwise.
//
// Threads x slots per thread (slots of 4 float32 or 8 16-bit elements) by
// row capacity, the smallest that holds the row (see ThreadsFor), and the
// registers ptxas (sm_90, CUDA 13.0, -Xptxas -v) gives each instance, erf /
// tanh where they differ; 0-byte stack frames and no spills throughout:
//   capacity         1024      2048      4096     8192     16384
//   float32 vector   256x1     256x2     256x4    512x4    1024x4
//                    40/44     43/46     64       64       64
//   float32 scalar   256x1     256x2     256x4    512x4    512x8
//                    36        56        80       80       128
//   16-bit vector    -         256x1     256x2    512x2    1024x2
//                              39/48     56-62    56-62    56-62
//   16-bit scalar    -         256x1     256x2    512x2    512x4
//                              51/53     78       78       128
// Static shared memory: two floats per warp (64 to 256 bytes); none dynamic.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu_ln_kernels.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

using gelu_ln::Args;

// Longest row a block holds in registers: 1024 threads x 16 elements.
constexpr int64_t kMaxHidden = 16384;
// Elements per thread: at most 16 until a block reaches its largest size;
// blocks of at least 256 threads (8 warps) for short rows.
constexpr int64_t kMaxPerThread = 16;
constexpr int kMinThreads = 256;
// Vector path: 16 elements per thread fit in 64 registers, so 1024 threads
// per SM stay resident whatever the block size, and a 1024-thread block
// takes the longest rows. Scalar path: ptxas needs more registers for the
// same elements (a predicate per element instead of per pack) and spilled
// at 1024 threads' cap of 64, so its blocks stop at 512 threads (cap 128)
// and its longest rows take 32 elements per thread.
constexpr int kMaxThreadsVector = 1024;
constexpr int kMaxThreadsScalar = 512;
constexpr int kMinThreadsPerSmVector = 1024;
constexpr int kMinThreadsPerSmScalar = 512;
// Leads until measured on the H200: long rows keep enough bytes in flight
// per SM to approach the copy roofline; rows under 2048 elements leave most
// of a 256-thread block idle and pay two barriers for little data (the
// warp_per_row variant serves them); the scalar path issues four or eight
// times the memory instructions with fewer threads resident. 16-bit rows
// take about 55 instructions per element (GELU, conversions, reductions)
// where the memory rate allows some 40 to 55: they may fall short.
constexpr int64_t kLongRow = 2048;
constexpr double kLongRowEfficiency = 0.85;
constexpr double kShortRowEfficiency = 0.5;
constexpr double kScalarFactor = 0.75;

constexpr int ThreadsFor(int64_t capacity, bool vector) {
  return static_cast<int>(
      std::clamp<int64_t>(capacity / kMaxPerThread, kMinThreads,
                          vector ? kMaxThreadsVector : kMaxThreadsScalar));
}

constexpr int MinBlocksFor(int threads, bool vector) {
  return std::max(
      1, (vector ? kMinThreadsPerSmVector : kMinThreadsPerSmScalar) / threads);
}

template <typename Io, int kThreads, int kVecs, bool kVector, bool kTanh>
__global__ void __launch_bounds__(kThreads, MinBlocksFor(kThreads, kVector))
    GeluLnBlockKernel(Args a) {
  __shared__ float partial[2][kThreads / 32];
  const gelu_ln::BlockReducer<kThreads> reduce{partial};
  // The loop bound is uniform per block, as the barriers require.
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    gelu_ln::GeluLnRow<Io, kVecs, kVector, kTanh, kThreads>(a, row, threadIdx.x,
                                                            reduce);
  }
}

template <typename Io, int kThreads, int kVecs, bool kVector, bool kTanh>
absl::Status LaunchBlock(const Args& a, ExecContext& ctx) {
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(a.rows, 0x7fffffff)));
  auto* kernel = GeluLnBlockKernel<Io, kThreads, kVecs, kVector, kTanh>;
  kernel<<<grid, block, 0, StreamOf(ctx)>>>(a);
  RecordLaunch(kernel, grid, block, 0, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// The smallest capacity (a power of two, see the table above) that holds
// the row.
template <typename Io, bool kVector, bool kTanh,
          int64_t kCapacity = std::max<int64_t>(1024, kMinThreads* Io::kPack)>
absl::Status DispatchCapacity(const Args& a, ExecContext& ctx) {
  if constexpr (kCapacity < kMaxHidden) {
    if (a.hidden > kCapacity) {
      return DispatchCapacity<Io, kVector, kTanh, 2 * kCapacity>(a, ctx);
    }
  }
  constexpr int kThreads = ThreadsFor(kCapacity, kVector);
  constexpr int kVecs = static_cast<int>(kCapacity / (kThreads * Io::kPack));
  static_assert(kVecs >= 1 && kThreads * kVecs * Io::kPack == kCapacity);
  return LaunchBlock<Io, kThreads, kVecs, kVector, kTanh>(a, ctx);
}

template <typename Io, bool kVector>
absl::Status DispatchApprox(const Args& a, ExecContext& ctx) {
  return a.use_tanh ? DispatchCapacity<Io, kVector, true>(a, ctx)
                    : DispatchCapacity<Io, kVector, false>(a, ctx);
}

class GeluLnBlockPerRowVariant final
    : public TypedVariant<GeluLnProblem, OpKind::kGeluLayerNorm,
                          BackendKind::kCuda> {
 public:
  absl::string_view name() const override {
    return "gelu_layer_norm.cuda.block_per_row";
  }
  absl::string_view description() const override {
    return "fused, one block per row held in registers (hidden <= 16384), "
           "16-byte packs, two-pass block-reduced mean and variance";
  }

 protected:
  absl::Status CanImplementTyped(const GeluLnProblem& p,
                                 const DeviceInfo&) const override {
    if (p.hidden > kMaxHidden) {
      return absl::UnimplementedError(
          "block_per_row holds a row in one block's registers: hidden <= "
          "16384");
    }
    return absl::OkStatus();
  }
  double Efficiency(const Problem& problem, const DeviceInfo&) const override {
    const auto& p = std::get<GeluLnProblem>(problem);
    const double e =
        p.hidden >= kLongRow ? kLongRowEfficiency : kShortRowEfficiency;
    return p.hidden * static_cast<int64_t>(ElementSize(p.dtype)) % 16 == 0
               ? e
               : e * kScalarFactor;
  }
  absl::Status RunTyped(const GeluLnProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    if (p.rows == 0 || p.hidden == 0) return absl::OkStatus();
    const Args a = gelu_ln::ArgsOf(p, ops);
    const bool vector = gelu_ln::Vectorizable(a, p.dtype);
    return gelu_ln::DispatchIo(p.dtype, [&](auto io) {
      using Io = decltype(io);
      return vector ? DispatchApprox<Io, true>(a, ctx)
                    : DispatchApprox<Io, false>(a, ctx);
    });
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGeluLnBlockPerRowVariant() {
  return std::make_unique<GeluLnBlockPerRowVariant>();
}

}  // namespace coalesce::cuda
