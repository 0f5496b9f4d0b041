// General permutations of a collapsed shape (rank <= 6).
// - naive: one thread per output element, the input offset recomputed from
//   the output coordinates (div/mod per dimension): the baseline.
// - tiled: when the innermost dim moves, a 32x33 shared-memory tile over the
//   input's innermost dim (contiguous in the input) and the dim that becomes
//   the output's innermost (contiguous in the output), with every other dim
//   a batch coordinate; when the innermost dim is preserved, a run copy in
//   pieces of up to 16 bytes: a block per chunk of a long run, a thread per
//   piece of short ones.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/layout/permute.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"

namespace coalesce::cuda {
namespace {

struct PermParams {
  int rank;
  int64_t out_shape[kMaxRank];
  int64_t in_stride_of_out[kMaxRank];  // input stride of output dim i
};

template <typename T>
__global__ void __launch_bounds__(256)
    PermuteNaiveKernel(const T* __restrict__ in, T* __restrict__ out,
                       PermParams p, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += stride) {
    int64_t rem = i, off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      off += (rem % p.out_shape[d]) * p.in_stride_of_out[d];
      rem /= p.out_shape[d];
    }
    out[i] = in[off];
  }
}

// Dims other than the two tiled ones, as batch coordinates.
struct TileParams {
  int nrest;
  int64_t rest_size[kMaxRank];
  int64_t rest_in_stride[kMaxRank];
  int64_t rest_out_stride[kMaxRank];
  int64_t size_a, size_b;  // a: output-innermost dim, b: input-innermost
  int64_t in_stride_a;     // input stride of a (b has input stride 1)
  int64_t out_stride_b;    // output stride of b (a has output stride 1)
  int64_t tiles_a, tiles_b, num_tiles;
};

template <typename T>
__global__ void __launch_bounds__(256)
    PermuteTiledKernel(const T* __restrict__ in, T* __restrict__ out,
                       TileParams p) {
  __shared__ T tile[32][33];
  for (int64_t t = blockIdx.x; t < p.num_tiles; t += gridDim.x) {
    const int64_t tb = t % p.tiles_b;
    const int64_t ta = (t / p.tiles_b) % p.tiles_a;
    int64_t rest = t / (p.tiles_b * p.tiles_a);
    int64_t in_off = 0, out_off = 0;
    for (int d = p.nrest - 1; d >= 0; --d) {
      const int64_t c = rest % p.rest_size[d];
      rest /= p.rest_size[d];
      in_off += c * p.rest_in_stride[d];
      out_off += c * p.rest_out_stride[d];
    }
    const int64_t b = tb * 32 + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
      const int64_t a = ta * 32 + threadIdx.y + j;
      if (a < p.size_a && b < p.size_b) {
        tile[threadIdx.y + j][threadIdx.x] = in[in_off + a * p.in_stride_a + b];
      }
    }
    __syncthreads();
    const int64_t a = ta * 32 + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
      const int64_t bb = tb * 32 + threadIdx.y + j;
      if (a < p.size_a && bb < p.size_b) {
        out[out_off + bb * p.out_stride_b + a] =
            tile[threadIdx.x][threadIdx.y + j];
      }
    }
    __syncthreads();
  }
}

// Runs of `run` contiguous elements: output run r (in output order) comes
// from the input offset given by its coordinates over the outer dims. One
// block per chunk of a run: for long runs, whose index math is then paid
// once per chunk.
constexpr int kRunChunk = 4096;

template <typename V>
__global__ void __launch_bounds__(256)
    CopyRunsKernel(const V* __restrict__ in, V* __restrict__ out, PermParams p,
                   int64_t run, int64_t chunks_per_run, int64_t num_blocks) {
  for (int64_t blk = blockIdx.x; blk < num_blocks; blk += gridDim.x) {
    const int64_t r = blk / chunks_per_run;
    const int64_t start = (blk % chunks_per_run) * kRunChunk;
    int64_t rem = r, in_off = 0;
    for (int d = p.rank - 2; d >= 0; --d) {
      in_off += (rem % p.out_shape[d]) * p.in_stride_of_out[d];
      rem /= p.out_shape[d];
    }
    const int64_t end = run < start + kRunChunk ? run : start + kRunChunk;
    for (int64_t j = start + threadIdx.x; j < end; j += blockDim.x) {
      out[r * run + j] = in[in_off + j];
    }
  }
}

// The same for short runs, where a block per run would leave most of its
// threads idle: one thread per vector of the output, as naive, but moving
// V-sized pieces of runs. Index is 32-bit when every offset fits, since
// 64-bit division costs several times more instructions.
template <typename V, typename Index>
__global__ void __launch_bounds__(256)
    CopyShortRunsKernel(const V* __restrict__ in, V* __restrict__ out,
                        PermParams p, Index run, Index total) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
       i < total; i += stride) {
    Index rem = i / run;
    Index in_off = i - rem * run;
    for (int d = p.rank - 2; d >= 0; --d) {
      const Index size = static_cast<Index>(p.out_shape[d]);
      in_off += (rem % size) * static_cast<Index>(p.in_stride_of_out[d]);
      rem /= size;
    }
    out[i] = in[in_off];
  }
}

// Row-major element strides of the collapsed input.
void InputStrides(const CollapsedPermutation& c, int64_t* in_stride) {
  int64_t st = 1;
  for (int d = static_cast<int>(c.in_shape.size()) - 1; d >= 0; --d) {
    in_stride[d] = st;
    st *= c.in_shape[d];
  }
}

PermParams MakePermParams(const CollapsedPermutation& c) {
  PermParams p{};
  const int k = static_cast<int>(c.in_shape.size());
  int64_t in_stride[kMaxRank];
  InputStrides(c, in_stride);
  p.rank = k;
  for (int i = 0; i < k; ++i) {
    p.out_shape[i] = c.in_shape[c.perm[i]];
    p.in_stride_of_out[i] = in_stride[c.perm[i]];
  }
  return p;
}

unsigned GridFor(int64_t items) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(items, 0x7fffffff)));
}

template <typename T>
absl::Status LaunchNaiveTyped(const CollapsedPermutation& c, const void* in,
                              void* out, ExecContext& ctx) {
  const int64_t total = NumElements(c.in_shape);
  const dim3 grid(GridFor(std::min<int64_t>(CeilDiv(total, 256), 1 << 20)));
  PermuteNaiveKernel<T><<<grid, 256, 0, StreamOf(ctx)>>>(
      static_cast<const T*>(in), static_cast<T*>(out), MakePermParams(c),
      total);
  RecordLaunch(PermuteNaiveKernel<T>, grid, dim3(256), 0, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// Runs of at least this many pieces go a block per chunk; shorter ones a
// thread per piece.
constexpr int64_t kLongRun = 1024;

// How the run copy moves c's rows (elements of elem_bytes): in pieces of
// the widest of 16, 8 or 4 bytes (or single elements) that the row length
// and `align` (both pointers' alignment) allow; a block per chunk of
// kRunChunk pieces when a row has kLongRun pieces or more, else a thread
// per piece. The launch and the estimate both read it.
struct RunCopyPlan {
  int piece_bytes = 0;
  int64_t run = 0;    // a row, in pieces
  int64_t total = 0;  // pieces
  bool long_rows = false;
  int64_t chunks_per_run = 0;  // long rows
  int64_t blocks = 0;          // long rows
};

RunCopyPlan PlanRunCopy(const CollapsedPermutation& c, int elem_bytes,
                        int64_t align) {
  const int64_t row_bytes = c.in_shape.back() * elem_bytes;
  RunCopyPlan plan;
  plan.piece_bytes = elem_bytes;
  for (int w : {16, 8, 4}) {
    if (w > elem_bytes && row_bytes % w == 0 && align % w == 0) {
      plan.piece_bytes = w;
      break;
    }
  }
  const int64_t ratio = plan.piece_bytes / elem_bytes;
  plan.run = c.in_shape.back() / ratio;
  plan.total = NumElements(c.in_shape) / ratio;
  plan.long_rows = plan.run >= kLongRun;
  if (plan.long_rows) {
    plan.chunks_per_run = CeilDiv(plan.run, kRunChunk);
    plan.blocks = plan.total / plan.run * plan.chunks_per_run;
  }
  return plan;
}

// The runs in V-sized pieces as plan says (V of plan.piece_bytes).
template <typename T, typename V>
void LaunchRunCopyAs(const PermParams& pp, const RunCopyPlan& plan,
                     const void* in, void* out, ExecContext& ctx) {
  constexpr int64_t kRatio = sizeof(V) / sizeof(T);
  PermParams vp = pp;
  // Every outer stride is a multiple of the run, so these divide exactly.
  for (int i = 0; i < pp.rank; ++i) vp.in_stride_of_out[i] /= kRatio;
  const V* vin = static_cast<const V*>(in);
  V* vout = static_cast<V*>(out);
  cudaStream_t stream = StreamOf(ctx);
  if (plan.long_rows) {
    const dim3 grid(GridFor(plan.blocks));
    CopyRunsKernel<V><<<grid, 256, 0, stream>>>(
        vin, vout, vp, plan.run, plan.chunks_per_run, plan.blocks);
    RecordLaunch(CopyRunsKernel<V>, grid, dim3(256), 0, ctx);
    return;
  }
  const dim3 grid(
      GridFor(std::min<int64_t>(CeilDiv(plan.total, 256), 1 << 20)));
  if (plan.total < (int64_t{1} << 31)) {
    CopyShortRunsKernel<V, uint32_t><<<grid, 256, 0, stream>>>(
        vin, vout, vp, static_cast<uint32_t>(plan.run),
        static_cast<uint32_t>(plan.total));
    RecordLaunch(CopyShortRunsKernel<V, uint32_t>, grid, dim3(256), 0, ctx);
  } else {
    CopyShortRunsKernel<V, int64_t>
        <<<grid, 256, 0, stream>>>(vin, vout, vp, plan.run, plan.total);
    RecordLaunch(CopyShortRunsKernel<V, int64_t>, grid, dim3(256), 0, ctx);
  }
}

// The innermost dim stays: runs of it copied whole, in the widest pieces
// (up to 16 bytes) that the run length and the pointers allow.
template <typename T>
void LaunchRunCopy(const CollapsedPermutation& c, const void* in, void* out,
                   ExecContext& ctx) {
  const PermParams pp = MakePermParams(c);
  const uintptr_t both =
      reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out);
  // The largest power of two dividing both addresses, at most 16.
  const int64_t align = both == 0 ? 16 : std::min<int64_t>(16, both & -both);
  const RunCopyPlan plan = PlanRunCopy(c, static_cast<int>(sizeof(T)), align);
  switch (plan.piece_bytes) {
    case 16:
      return LaunchRunCopyAs<T, uint4>(pp, plan, in, out, ctx);
    case 8:
      return LaunchRunCopyAs<T, uint2>(pp, plan, in, out, ctx);
    case 4:
      return LaunchRunCopyAs<T, uint32_t>(pp, plan, in, out, ctx);
    default:
      return LaunchRunCopyAs<T, T>(pp, plan, in, out, ctx);
  }
}

// The innermost dim moves: a tile over it and the output's innermost.
template <typename T>
void LaunchTile(const CollapsedPermutation& c, const void* in, void* out,
                ExecContext& ctx) {
  const int k = static_cast<int>(c.in_shape.size());
  const int64_t total = NumElements(c.in_shape);
  int64_t in_stride[kMaxRank], out_stride_of_in[kMaxRank];
  InputStrides(c, in_stride);
  int64_t st = 1;
  for (int i = k - 1; i >= 0; --i) {
    out_stride_of_in[c.perm[i]] = st;
    st *= c.in_shape[c.perm[i]];
  }
  const int dim_a = c.perm[k - 1];
  const int dim_b = k - 1;
  TileParams tp{};
  for (int d = 0; d < k; ++d) {
    if (d == dim_a || d == dim_b) continue;
    tp.rest_size[tp.nrest] = c.in_shape[d];
    tp.rest_in_stride[tp.nrest] = in_stride[d];
    tp.rest_out_stride[tp.nrest] = out_stride_of_in[d];
    ++tp.nrest;
  }
  tp.size_a = c.in_shape[dim_a];
  tp.size_b = c.in_shape[dim_b];
  tp.in_stride_a = in_stride[dim_a];
  tp.out_stride_b = out_stride_of_in[dim_b];
  tp.tiles_a = CeilDiv(tp.size_a, 32);
  tp.tiles_b = CeilDiv(tp.size_b, 32);
  tp.num_tiles = tp.tiles_a * tp.tiles_b * (total / (tp.size_a * tp.size_b));
  const dim3 grid(GridFor(tp.num_tiles));
  const dim3 block(32, 8);
  PermuteTiledKernel<T><<<grid, block, 0, StreamOf(ctx)>>>(
      static_cast<const T*>(in), static_cast<T*>(out), tp);
  RecordLaunch(PermuteTiledKernel<T>, grid, block, 0, ctx);
}

bool KeepsInnermost(const CollapsedPermutation& c) {
  const int k = static_cast<int>(c.perm.size());
  return c.perm[k - 1] == k - 1;
}

template <typename T>
absl::Status LaunchTiledTyped(const CollapsedPermutation& c, const void* in,
                              void* out, ExecContext& ctx) {
  if (KeepsInnermost(c)) {
    LaunchRunCopy<T>(c, in, out, ctx);
  } else {
    LaunchTile<T>(c, in, out, ctx);
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status LaunchNaive(int elem_bytes, const CollapsedPermutation& c,
                         const void* in, void* out, ExecContext& ctx) {
  return elem_bytes == 4 ? LaunchNaiveTyped<uint32_t>(c, in, out, ctx)
                         : LaunchNaiveTyped<uint16_t>(c, in, out, ctx);
}

absl::Status LaunchTiled(int elem_bytes, const CollapsedPermutation& c,
                         const void* in, void* out, ExecContext& ctx) {
  return elem_bytes == 4 ? LaunchTiledTyped<uint32_t>(c, in, out, ctx)
                         : LaunchTiledTyped<uint16_t>(c, in, out, ctx);
}

// One thread per element, whatever the rank or the element size: on the
// H200 the layout sweeps (every class, float32 and 16-bit, tensors of
// 8 MB and more) ran 39-45 G elements/s, median 41-45 for every rank
// (kernels/cuda/testdata/layout_classes_seed*.txt), 0.32 G per SM.
constexpr double kNaiveElementsPerSmSecond = 0.32e9;

double NaiveEfficiency(const CollapsedPermutation&, int elem_bytes,
                       const DeviceInfo& dev) {
  const double bw = RooflineBandwidth(dev);
  if (bw <= 0 || dev.multiprocessors <= 0) return 0.2;
  // Bytes read and written per element over the copy roofline.
  return std::min(1.0, 2.0 * elem_bytes * kNaiveElementsPerSmSecond *
                           dev.multiprocessors / bw);
}

// The run copy on the H200 (permutation sweeps of every dtype,
// kernels/cuda/testdata/layout_classes_seed*.txt):
// - a thread per piece (short rows): issue-bound at a rate per SM that
//   falls with the piece, medians over shapes of 2 M pieces and more
//   0.33 (2 bytes), 0.315 (4), 0.29 (8) and 0.266 (16) G pieces/s,
//   0.26-0.34 each;
// - a block per chunk (long rows): bytes at 0.85 of the roofline plus
//   0.73 us per block and SM, plus each block's serial walk of its chunk,
//   about 0.18 us per 256 pieces, which few blocks do not hide (single
//   runs of 5-20 K pieces: 6.0-6.1 us against naive's 3.8-3.9).
constexpr double kRunCopyEfficiency = 0.85;
constexpr double kRunCopyBlockSeconds = 0.73e-6;
constexpr double kRunCopyStepSeconds = 0.18e-6;

double ShortRunPiecesPerSmSecond(int piece_bytes) {
  switch (piece_bytes) {
    case 2:
      return 0.33e9;
    case 4:
      return 0.315e9;
    case 8:
      return 0.29e9;
    default:
      return 0.266e9;
  }
}

double TiledEfficiency(const CollapsedPermutation& c, int elem_bytes,
                       const DeviceInfo& dev) {
  if (KeepsInnermost(c)) {
    const double bw = RooflineBandwidth(dev);
    if (bw <= 0 || dev.multiprocessors <= 0) return kRunCopyEfficiency;
    // Device buffers are 256-byte aligned.
    const RunCopyPlan plan = PlanRunCopy(c, elem_bytes, 16);
    if (plan.total == 0) return kRunCopyEfficiency;
    const double bytes =
        2.0 * static_cast<double>(NumElements(c.in_shape)) * elem_bytes;
    const double sms = dev.multiprocessors;
    double seconds;
    if (plan.long_rows) {
      const double steps = std::ceil(
          static_cast<double>(std::min<int64_t>(plan.run, kRunChunk)) / 256);
      seconds = bytes / (kRunCopyEfficiency * bw) +
                static_cast<double>(plan.blocks) / sms * kRunCopyBlockSeconds +
                steps * kRunCopyStepSeconds;
    } else {
      seconds =
          std::max(bytes / (kRunCopyEfficiency * bw),
                   static_cast<double>(plan.total) /
                       (ShortRunPiecesPerSmSecond(plan.piece_bytes) * sms));
    }
    return bytes / bw / seconds;
  }
  // A 32x32 tile over a dim shorter than 32 leaves the rest of its threads
  // idle. Over the filled share, transposing layouts of 16 MB and more ran
  // at medians of 0.58 of the copy peak in float32 and 0.30 in 16 bits
  // (seed-7 shapes of kernels/cuda/testdata/layout_classes_seed7.txt,
  // interquartile 0.54-0.68 and 0.28-0.36), below vec16 and tma.
  const int k = static_cast<int>(c.perm.size());
  return (elem_bytes == 2 ? 0.30 : 0.58) *
         TileUtilization(c.in_shape[c.perm[k - 1]], c.in_shape[k - 1], 32, 32);
}

}  // namespace

const PermuteKernel kNaivePermute = {&NaiveEfficiency, &LaunchNaive};
const PermuteKernel kTiledPermute = {&TiledEfficiency, &LaunchTiled};

}  // namespace coalesce::cuda
