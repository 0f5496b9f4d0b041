// gelu_layer_norm.cuda.warp_per_row: one warp per row, the row held in
// registers (hidden <= 1024: at most 32 float32 values per lane), so x and
// residual cross memory once and y (and h) once, and both reductions are
// warp shuffles with no shared memory and no barrier. Packs of 16 bytes
// where every row is 16-byte aligned, coalesced scalar accesses otherwise.
//
// ptxas (sm_90, CUDA 13.0, -Xptxas -v): no shared memory; registers per
// thread by slots per lane (slots of 4 float32 or 8 16-bit elements; the
// smallest count that holds the row), "p": pipelined (see Pipelined):
//   float32 vector, 1-4 slots p:  56, 80-84, 110, 168
//   float32 vector, 5-8 slots:    64, 72, 80, 96
//   float32 scalar, 1-8 slots:    40, 48, 56, 64, 72, 72, 107, 118
//   16-bit vector, 1-4 slots p:   56-75, 96-104, 128, 168-198
//   16-bit scalar, 1-4 slots:     48-61, 56-64, 80, 113
// Spills of 8 to 20 bytes in a few vector instances (float32 2, 4 and 5
// slots, 16-bit 1, 3 and 4), none elsewhere. Whole rows (hidden = slots x
// pack x 32, gelu_ln::Rows::kWhole: no bounds tests), erf and tanh:
//   float32, 1-8 slots:  56 p, 84-88 p, 116-122 p, 128-132 p, 64, 66-72,
//                        82, 96
//   16-bit, 1-4 slots:   56-64 p, 96-122 p, 128-158 p, 168 p
// spilling only at 1 slot (float32 16 bytes, bfloat16 20).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/gelu_ln/kernels.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

using gelu_ln::Args;

// Longest row one warp holds in registers: 32 floats per lane.
constexpr int64_t kMaxHidden = 1024;
// Four rows per block: small enough that a few dozen rows still spread over
// many SMs, whole warps so that no row straddles blocks.
constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = 32 * kWarpsPerBlock;
// The heuristic's efficiencies: the fraction of the copy roofline a
// one-pass, register-resident row reaches, less for the scalar path (four
// or eight times the memory instructions). On the H200, per launch:
// 0.68-0.79 in float32 and, pipelined, 0.49-0.68 in 16-bit types for
// 8192-16384 rows of 768 and 1024 (`coalesce-bench kernels
// --ops=gelu_layer_norm --dtypes=float32,bfloat16,float16
// --variants=warp_per_row`).
constexpr double kVectorEfficiency = 0.8;
constexpr double kScalarEfficiency = 0.6;
// With fewer rows than kRowsPerSm per SM and rows of kFewRowsMinHidden or
// more, the H200 selection sweep (`scripts/gpu-check.sh OUT tune`: 12x517,
// 64x1024, 109x932, 192x731) ran block_per_row 1.5-1.6x faster: a warp then
// works through 8x the elements a block's thread does, and there are too
// few warps to hide it. Rows of a few dozen elements stay faster here
// (the shipped table: 3.8 against 4.3 us at 96 rows of 13).
constexpr int64_t kRowsPerSm = 4;
constexpr int64_t kFewRowsMinHidden = 256;
constexpr double kFewRowsFactor = 0.5;

// Pipelined instances (vector layout, at most 4 slots per lane: 16-bit rows
// up to 1024, float32 up to 512) are persistent: each warp takes rows w,
// w + warps in the grid, ... and loads the next row's x and residual, as
// raw packs, while it reduces, normalizes and stores the current one.
// Unpipelined, 16-bit rows of 768 and 1024 run at 0.51-0.54 of the copy
// peak with 20 warps per SM: each warp sits on one row's memory latency,
// then on its ~900 instructions, with nothing in flight between rows. The
// prefetch costs 8 registers per slot. (No minimum-blocks bound: an
// explicit one, even 1, makes ptxas take up to half again the registers
// everywhere, and a 128-register cap spills the 4-slot instances.)
constexpr bool Pipelined(int vecs, bool vector) { return vector && vecs <= 4; }

template <typename Io, int kVecs, gelu_ln::Rows kRows, bool kTanh>
__global__ void __launch_bounds__(kThreads) GeluLnWarpKernel(Args a) {
  constexpr bool kVector = gelu_ln::Packed(kRows);
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  // Loop bounds are uniform per warp, as the shuffles require.
  if constexpr (Pipelined(kVecs, kVector)) {
    // Params are pointers only, made before the first row's loads:
    // bfloat16 [16384,768] at 0.774 of the copy peak on the H200, against
    // 0.743-0.747 made after the loads (`coalesce-bench kernels
    // --ops=gelu_layer_norm --dtypes=bfloat16 --shape=16384,768
    // --variants=warp_per_row`).
    gelu_ln::PipelinedRows<Io, kVecs, kRows, kTanh, 32>(
        a, first, stride, lane, gelu_ln::WarpReducer{a.inv_hidden},
        [params = gelu_ln::GlobalParams<Io, kRows, 32>::Of(a, lane)] {
          return params;
        });
  } else {
    for (int64_t row = first; row < a.rows; row += stride) {
      gelu_ln::GeluLnRow<Io, kVecs, kRows, kTanh, 32>(
          a, row, lane, gelu_ln::WarpReducer{a.inv_hidden});
    }
  }
}

template <typename Io, int kVecs, gelu_ln::Rows kRows, bool kTanh>
absl::Status LaunchWarp(const Args& a, ExecContext& ctx) {
  constexpr bool kVector = gelu_ln::Packed(kRows);
  auto* kernel = GeluLnWarpKernel<Io, kVecs, kRows, kTanh>;
  int64_t blocks = CeilDiv(a.rows, kWarpsPerBlock);
  if constexpr (Pipelined(kVecs, kVector)) {
    blocks = PersistentGrid(kernel, kThreads, 0, ctx, blocks);
  }
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks, 0x7fffffff)));
  kernel<<<grid, block, 0, StreamOf(ctx)>>>(a);
  RecordLaunch(kernel, grid, block, 0, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// The smallest slot count per lane that holds the row: a row of 768
// 16-bit values takes 3 slots of 8, 768 float32 values 6 slots of 4.
template <typename Io, bool kVector, bool kTanh, int kVecs = 1>
absl::Status DispatchVecs(const Args& a, ExecContext& ctx) {
  if constexpr (kVecs * Io::kPack * 32 < kMaxHidden) {
    if (a.hidden > kVecs * Io::kPack * 32) {
      return DispatchVecs<Io, kVector, kTanh, kVecs + 1>(a, ctx);
    }
  }
  return gelu_ln::DispatchRows<kVector>(
      a.hidden, kVecs * Io::kPack * 32, [&](auto rows) {
        return LaunchWarp<Io, kVecs, decltype(rows)::value, kTanh>(a, ctx);
      });
}

template <typename Io, bool kVector>
absl::Status DispatchApprox(const Args& a, ExecContext& ctx) {
  return a.use_tanh ? DispatchVecs<Io, kVector, true>(a, ctx)
                    : DispatchVecs<Io, kVector, false>(a, ctx);
}

class GeluLnWarpPerRowVariant final
    : public TypedVariant<GeluLnProblem, OpKind::kGeluLayerNorm,
                          BackendKind::kCuda> {
 public:
  absl::string_view name() const override {
    return "gelu_layer_norm.cuda.warp_per_row";
  }
  absl::string_view description() const override {
    return "fused, one warp per row held in registers (hidden <= 1024), "
           "16-byte packs, two-pass warp-shuffle mean and variance";
  }

 protected:
  absl::Status CanImplementTyped(const GeluLnProblem& p,
                                 const DeviceInfo&) const override {
    if (p.hidden > kMaxHidden) {
      return absl::UnimplementedError(
          "warp_per_row holds a row in one warp's registers: hidden <= 1024");
    }
    return absl::OkStatus();
  }
  double Efficiency(const Problem& problem,
                    const DeviceInfo& dev) const override {
    const auto& p = std::get<GeluLnProblem>(problem);
    const double e = gelu_ln::WholePackRows(p.hidden, p.dtype)
                         ? kVectorEfficiency
                         : kScalarEfficiency;
    const bool few_long_rows = p.rows < kRowsPerSm * dev.multiprocessors &&
                               p.hidden >= kFewRowsMinHidden;
    return few_long_rows ? e * kFewRowsFactor : e;
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

std::unique_ptr<KernelVariant> MakeGeluLnWarpPerRowVariant() {
  return std::make_unique<GeluLnWarpPerRowVariant>();
}

}  // namespace coalesce::cuda
