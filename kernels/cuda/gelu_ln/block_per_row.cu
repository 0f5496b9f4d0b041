// gelu_layer_norm.cuda.block_per_row: one block per row for hidden up to
// 16384, the row held in registers (16 elements per thread on the vector
// path), so global memory is read once and written once, with no
// shared-memory copy of the row. Mean and variance come from the registers
// by two block sums (warp shuffles, then one float per warp in shared
// memory), the second over squares of deviations from the mean. 16-byte
// packs where every row is 16-byte aligned, coalesced scalar accesses
// otherwise.
//
// Threads x slots per thread (slots of 4 float32 or 8 16-bit elements) by
// row capacity, the smallest that holds the row (see ThreadsFor), and the
// registers ptxas (sm_90, CUDA 13.0, -Xptxas -v) gives each instance, erf /
// tanh where they differ; "p": pipelined (see Pipelined), "r": pipelined
// through a shared-memory ring (see RingPipelined):
//   capacity         1024      2048      4096     8192     16384
//   float32 vector   256x1 p   256x2 p   256x4    512x4    1024x4
//                    52-56     78-82     64       64       64
//   float32 scalar   256x1     256x2     256x4    512x4    512x8
//                    47-48     64        92-114   92-114   128
//   16-bit vector    64x2 p    128x2 p   256x2 p  512x2 r  1024x2
//                    79-80     79-80     79-80    56-63    55-63
//   16-bit scalar    -         256x1     256x2    512x2    512x4
//                              59        96       96       128
// No spills, except at the register bounds: 512x8 float32 scalar (rows
// wider than 8192 that are not 16-byte aligned), 8 to 44 bytes; 512x4
// 16-bit scalar, 8 bytes; and the 16-bit pipelined 64x2 and 128x2 at 80
// registers, 8 bytes stored and 16 or 24 loaded (with SharedParams; 256x2,
// which reads bias, gamma and beta through L1, does not spill).
// Whole rows (hidden = capacity, gelu_ln::Rows::kWhole: no bounds tests)
// take the vector path's threads and slots: float32 53-85 registers,
// 16-bit 80 pipelined (tanh 64x2 and 128x2 spill 8-16 bytes), 512x2
// 59-63, 1024x2 54-61.
// Static shared memory: a float per warp for each of the two sums (up to
// 256 bytes). Dynamic, in pipelined instances: in 16-bit rows of 8192 the
// ring's 64 KB and bias, gamma and beta as raw 16-bit packs, 48 KB; in the
// others but 16-bit 256x2 (StagesParams), bias, gamma and beta as float32,
// 3 x 16 bytes per slot and thread, up to 24 KB.
#include <cuda_runtime.h>

#include <algorithm>

#include "base/status_macros.h"
#include "kernels/cuda/gelu_ln/kernels.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

using gelu_ln::Args;

// Longest row a block holds in registers: 1024 threads x 16 elements.
constexpr int64_t kMaxHidden = 16384;
// Elements per thread: at most 16 until a block reaches its largest size.
// Blocks of at least 256 threads (8 warps) for short rows, except 16-bit
// vector rows, which keep two 16-byte slots per thread down to blocks of 64
// threads (rows of 1024): with 8 elements per thread a row's two block
// reductions cost as many instructions per element as a 16-bit element's
// arithmetic leaves room for.
constexpr int64_t kMaxPerThread = 16;
constexpr int MinThreads(int pack, bool vector) {
  return vector && pack == 8 ? 64 : 256;
}
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
// The heuristic's efficiencies. On the H200, per launch: float32 rows of
// 2048 to 8192 at 0.89-0.98 of the copy peak, 16-bit ones at 0.73-0.90
// (issue-bound), and 16-bit rows of 1024 (in 64-thread blocks) at 0.65,
// ahead of warp_per_row's 0.56-0.58 (back to back 0.74-0.75 against
// 0.62-0.66): `coalesce-bench kernels --ops=gelu_layer_norm
// --dtypes=float32,bfloat16,float16`. Other rows under 2048 elements leave
// most of a 256-thread block idle and pay two barriers for little data
// (warp_per_row serves them); the scalar path issues four or eight times
// the memory instructions with fewer threads resident. The shipped table
// overrides these where it has the shape.
constexpr int64_t kLongRow = 2048;
constexpr int64_t kLongRow16BitVector = 1024;
constexpr double kLongRowEfficiency = 0.85;
constexpr double kShortRowEfficiency = 0.5;
constexpr double kScalarFactor = 0.75;

constexpr int ThreadsFor(int64_t capacity, int pack, bool vector) {
  return static_cast<int>(
      std::clamp<int64_t>(capacity / kMaxPerThread, MinThreads(pack, vector),
                          vector ? kMaxThreadsVector : kMaxThreadsScalar));
}

// Pipelined instances (vector layout, blocks of at most 512 threads) are
// persistent: each block takes rows blockIdx.x, + gridDim.x, ... and loads
// the next row's x and residual, as raw packs, while it reduces, normalizes
// and stores the current one. Unpipelined, every block idles the memory
// system from its last load to its next row (ncu, [8192,4096] bfloat16:
// stalled on memory latency most of the time at 4 blocks per SM).
// The prefetched row costs registers (8 per slot), so these instances ask
// for fewer resident threads per SM than 1024: 512 for float32 (ptxas: 52
// to 82 registers), 768 for 16-bit types (80 registers; at 512 ptxas takes
// 111-113 and 2 or 4 fewer warps stay resident: [8192,4096] float16 at
// 0.80 of the copy peak on the H200 against 0.85 at 768, `coalesce-bench
// kernels --ops=gelu_layer_norm --dtypes=float16 --shape=8192,4096
// --variants=block_per_row`). 1024-thread blocks cannot spare the
// registers, and float32 at 4 slots per thread spills at 128.
// Being persistent, each block also stages bias, gamma and beta once, as
// float32 in shared memory (gelu_ln::SharedParams; see StagesParams for
// the exception), instead of every row reading them through L1 and, in
// 16-bit rows, converting them again: 16-bit rows of 1024, 2048 and 8192
// 1-6% faster on the H200, float32 the same within 1.5% (`coalesce-bench
// kernels --ops=gelu_layer_norm --variants=block_per_row`).
constexpr bool Pipelined(int threads, int vecs, bool vector) {
  return vector && threads <= 512 && vecs <= 2;
}
// Pipelined instances that stage bias, gamma and beta in shared memory
// (above): all but the 16-bit rows of 4096 (256x2), which the H200 ran
// slower staged: float16 [8192,4096] at 0.81 of the copy peak against 0.87
// read through L1, bfloat16 0.81 against 0.82 (`coalesce-bench kernels
// --ops=gelu_layer_norm --dtypes=float16,bfloat16 --shape=8192,4096
// --variants=block_per_row`). Why that instance alone loses is not known:
// staged, it spills 8 bytes at its 80-register bound, but so do 64x2 and
// 128x2, which gain.
constexpr bool StagesParams(int threads, int pack) {
  return !(pack == 8 && threads == 256);
}
constexpr int MinThreadsPerSmPipelined(int pack) {
  return pack == 8 ? 768 : 512;
}

// Ring-pipelined instances: 16-bit rows of 8192 (512x2) keep the next
// row's x and residual in flight to a shared-memory ring by cp.async
// (gelu_ln::SmemPipelinedRows) instead of in registers: 56-64 registers,
// so two blocks (32 warps) fit per SM where the register pipeline (106-120)
// fits one, whose every barrier stalls the whole SM. Bias, gamma and beta
// are staged once per block beside the ring as raw 16-bit packs
// (gelu_ln::RawSharedParams, 48 KB: float32 would leave room for one block
// per SM), not read through L1 each row. A ring of 2 rows: on the H200,
// back to back, [4096,8192] bfloat16 at 0.900 of the copy peak (0.864 per
// launch); with the params read through L1, 0.876 against 0.814 for the
// register pipeline and 0.802 for a ring of 3 rows (96 KB)
// (`coalesce-bench kernels --ops=gelu_layer_norm --dtypes=bfloat16
// --shape=4096,8192 --variants=block_per_row`). The other 16-bit pipelined
// instances (64x2 to 256x2, 1024 threads per SM at 64 registers) keep the
// register pipeline: with the ring they ran 5-17% slower on rows of 768 to
// 4096.
constexpr int kRingDepth = 2;
constexpr bool RingPipelined(int threads, int vecs, int pack, bool vector) {
  return vector && pack == 8 && threads == 512 && vecs == 2;
}

constexpr int MinBlocksFor(int threads, int vecs, bool vector, int pack) {
  if (RingPipelined(threads, vecs, pack, vector)) return 2;
  return std::max(
      1, (Pipelined(threads, vecs, vector) ? MinThreadsPerSmPipelined(pack)
          : vector                         ? kMinThreadsPerSmVector
                                           : kMinThreadsPerSmScalar) /
             threads);
}

// Rows x[blockIdx.x], x[blockIdx.x + gridDim.x], ... with reduce.
template <typename Io, int kThreads, int kVecs, gelu_ln::Rows kRows, bool kTanh,
          typename Reducer>
__device__ __forceinline__ void BlockRows(const Args& a,
                                          const Reducer& reduce) {
  constexpr bool kVector = gelu_ln::Packed(kRows);
  // Loop bounds are uniform per block, as the barriers require.
  if constexpr (RingPipelined(kThreads, kVecs, Io::kPack, kVector)) {
    using Params = gelu_ln::RawSharedParams<Io, kRows, kVecs, kThreads>;
    uint4* smem = reinterpret_cast<uint4*>(gelu_ln::staged_params);
    gelu_ln::SmemPipelinedRows<Io, kVecs, kRows, kTanh, kThreads, kRingDepth>(
        a, blockIdx.x, gridDim.x, threadIdx.x, reduce,
        [&] { return Params::Stage(a, threadIdx.x, smem); },
        smem + Params::kPacks);
  } else if constexpr (Pipelined(kThreads, kVecs, kVector)) {
    gelu_ln::PipelinedRows<Io, kVecs, kRows, kTanh, kThreads>(
        a, blockIdx.x, gridDim.x, threadIdx.x, reduce, [&] {
          if constexpr (StagesParams(kThreads, Io::kPack)) {
            return gelu_ln::SharedParams<Io, kVecs, kThreads>::Stage(
                a, threadIdx.x);
          } else {
            return gelu_ln::GlobalParams<Io, kRows, kThreads>::Of(a,
                                                                  threadIdx.x);
          }
        });
  } else {
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
      gelu_ln::GeluLnRow<Io, kVecs, kRows, kTanh, kThreads>(a, row, threadIdx.x,
                                                            reduce);
    }
  }
}

template <typename Io, int kThreads, int kVecs, gelu_ln::Rows kRows, bool kTanh>
__global__ void __launch_bounds__(kThreads, MinBlocksFor(kThreads, kVecs,
                                                         gelu_ln::Packed(kRows),
                                                         Io::kPack))
    GeluLnBlockKernel(Args a) {
  __shared__ float partial[2][kThreads / 32];
  BlockRows<Io, kThreads, kVecs, kRows, kTanh>(
      a, gelu_ln::BlockReducer<kThreads>{partial, a.inv_hidden});
}

template <typename Io, int kThreads, int kVecs, gelu_ln::Rows kRows, bool kTanh>
absl::Status LaunchBlock(const Args& a, ExecContext& ctx) {
  constexpr bool kVector = gelu_ln::Packed(kRows);
  auto* kernel = GeluLnBlockKernel<Io, kThreads, kVecs, kRows, kTanh>;
  int64_t blocks = a.rows;
  size_t smem = 0;
  if constexpr (Pipelined(kThreads, kVecs, kVector)) {
    if constexpr (RingPipelined(kThreads, kVecs, Io::kPack, kVector)) {
      smem = (gelu_ln::RawSharedParams<Io, kRows, kVecs, kThreads>::kPacks +
              gelu_ln::kRingPacks<kVecs, kThreads, kRingDepth>)*sizeof(uint4);
    } else if constexpr (StagesParams(kThreads, Io::kPack)) {
      smem = gelu_ln::SharedParams<Io, kVecs, kThreads>::kBytes;
    }
    // The ring and its params, 112 KB: past the default 48 KB.
    COALESCE_RETURN_IF_ERROR(AllowDynamicSharedMemory(kernel, smem));
    // As many blocks as are resident at once, each looping over rows.
    blocks = PersistentGrid(kernel, kThreads, smem, ctx, a.rows);
  }
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks, 0x7fffffff)));
  kernel<<<grid, block, smem, StreamOf(ctx)>>>(a);
  RecordLaunch(kernel, grid, block, smem, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// The smallest capacity (a power of two, see the table above) that holds
// the row.
template <typename Io, bool kVector, bool kTanh,
          int64_t kCapacity = std::max<int64_t>(
              1024, MinThreads(Io::kPack, kVector) * Io::kPack)>
absl::Status DispatchCapacity(const Args& a, ExecContext& ctx) {
  if constexpr (kCapacity < kMaxHidden) {
    if (a.hidden > kCapacity) {
      return DispatchCapacity<Io, kVector, kTanh, 2 * kCapacity>(a, ctx);
    }
  }
  constexpr int kThreads = ThreadsFor(kCapacity, Io::kPack, kVector);
  constexpr int kVecs = static_cast<int>(kCapacity / (kThreads * Io::kPack));
  static_assert(kVecs >= 1 && kThreads * kVecs * Io::kPack == kCapacity);
  return gelu_ln::DispatchRows<kVector>(a.hidden, kCapacity, [&](auto rows) {
    return LaunchBlock<Io, kThreads, kVecs, decltype(rows)::value, kTanh>(a,
                                                                          ctx);
  });
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
    const bool vector = gelu_ln::WholePackRows(p.hidden, p.dtype);
    const int64_t long_row =
        vector && ElementSize(p.dtype) == 2 ? kLongRow16BitVector : kLongRow;
    const double e =
        p.hidden >= long_row ? kLongRowEfficiency : kShortRowEfficiency;
    return vector ? e : e * kScalarFactor;
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
