// Batched transpose where one side is short (S <= 16): NCHW <-> NHWC for
// image inputs (C = 3, 4) and AoS <-> SoA for records of 2..16 fields.
// A square 32x32 tile would waste most of each transaction here (a row of
// C = 3 elements is 12 bytes). Instead a block takes a chunk of T positions
// along the long side: on one side that chunk is one contiguous run of S*T
// elements (the "flat" side), on the other it is S contiguous runs of T
// elements, L apart (the "segmented" side). Both are read or written with
// 16-byte vectors where aligned, so both sides stay coalesced; the gather
// between them happens in shared memory, s[k][j] with a row pitch chosen
// congruent to ceil(32/S) mod 32 so that a warp's 32 consecutive flat
// elements (k = f % S, j = f / S) fall in distinct banks.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/transpose_internal.h"

namespace coalesce::cuda {
namespace {

constexpr int kThreads = 256;
// Bytes per block chunk: 8 KB, so that eight resident blocks keep 64 KB per
// SM in flight whatever the element size, while small tensors ([32,3,224,
// 224]) still split into a few waves rather than one and a sliver.
constexpr int kChunkBytes = 8192;

struct SmallDimParams {
  int64_t rows, cols;
  int64_t long_len;  // L: the long side
  int s;             // S: the short side
  int t_len;         // T: long-side positions per chunk
  int pitch;         // shared-memory row pitch, in elements
  bool short_cols;   // true: cols = S (flat side is the input)
  int64_t chunks_per_batch;
  int64_t num_chunks;
};

// (k, j) of flat element f = j * S + k, advanced one element at a time: one
// division per 16-byte vector instead of one per element (a division by a
// run-time S costs about 20 instructions, which made 16-bit types
// instruction-bound).
struct FlatCursor {
  int k, j;
  __device__ FlatCursor(int f, int s) : k(f % s), j(f / s) {}
  __device__ void Next(int s) {
    if (++k == s) {
      k = 0;
      ++j;
    }
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    SmallDimKernel(const T* __restrict__ in, T* __restrict__ out,
                   SmallDimParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s = reinterpret_cast<T*>(smem_raw);
  constexpr int kV = 16 / sizeof(T);
  const int tid = threadIdx.x;
  for (int64_t chunk = blockIdx.x; chunk < p.num_chunks; chunk += gridDim.x) {
    const int64_t b = chunk / p.chunks_per_batch;
    const int64_t t0 = (chunk % p.chunks_per_batch) * p.t_len;
    const int64_t left = p.long_len - t0;
    const int tl = static_cast<int>(left < p.t_len ? left : p.t_len);
    const int64_t base = b * p.rows * p.cols;
    const int n = tl * p.s;
    const bool vec = kVec && tl == p.t_len;
    // Phase 1: global -> shared.
    if (p.short_cols) {  // flat input run
      const T* flat = in + base + t0 * p.s;
      if (vec) {
        for (int v = tid; v < n / kV; v += kThreads) {
          const uint4 x = reinterpret_cast<const uint4*>(flat)[v];
          const T* e = reinterpret_cast<const T*>(&x);
          FlatCursor at(v * kV, p.s);
#pragma unroll
          for (int u = 0; u < kV; ++u, at.Next(p.s)) {
            s[at.k * p.pitch + at.j] = e[u];
          }
        }
      } else {
        for (int f = tid; f < n; f += kThreads) {
          s[(f % p.s) * p.pitch + f / p.s] = flat[f];
        }
      }
    } else {  // S input rows, each a run of tl elements
      // One loop over all S runs, so every thread has work even when a run
      // is shorter than the block.
      if (vec) {
        const int per_run = tl / kV;
        for (int i = tid; i < p.s * per_run; i += kThreads) {
          const int k = i / per_run;
          const int v = i - k * per_run;
          const uint4 x = reinterpret_cast<const uint4*>(
              in + base + k * p.long_len + t0)[v];
          const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
          for (int u = 0; u < kV; ++u) s[k * p.pitch + v * kV + u] = e[u];
        }
      } else {
        for (int i = tid; i < p.s * tl; i += kThreads) {
          const int k = i / tl;
          const int j = i - k * tl;
          s[k * p.pitch + j] = in[base + k * p.long_len + t0 + j];
        }
      }
    }
    __syncthreads();
    // Phase 2: shared -> global.
    if (p.short_cols) {  // S output rows, each a run of tl elements
      if (vec) {
        const int per_run = tl / kV;
        for (int i = tid; i < p.s * per_run; i += kThreads) {
          const int k = i / per_run;
          const int v = i - k * per_run;
          uint4 x;
          T* e = reinterpret_cast<T*>(&x);
#pragma unroll
          for (int u = 0; u < kV; ++u) e[u] = s[k * p.pitch + v * kV + u];
          __stwb(reinterpret_cast<uint4*>(out + base + k * p.long_len + t0) + v, x);
        }
      } else {
        for (int i = tid; i < p.s * tl; i += kThreads) {
          const int k = i / tl;
          const int j = i - k * tl;
          out[base + k * p.long_len + t0 + j] = s[k * p.pitch + j];
        }
      }
    } else {  // flat output run
      T* flat = out + base + t0 * p.s;
      if (vec) {
        for (int v = tid; v < n / kV; v += kThreads) {
          uint4 x;
          T* e = reinterpret_cast<T*>(&x);
          FlatCursor at(v * kV, p.s);
#pragma unroll
          for (int u = 0; u < kV; ++u, at.Next(p.s)) {
            e[u] = s[at.k * p.pitch + at.j];
          }
          __stwb(reinterpret_cast<uint4*>(flat) + v, x);
        }
      } else {
        for (int f = tid; f < n; f += kThreads) {
          flat[f] = s[(f % p.s) * p.pitch + f / p.s];
        }
      }
    }
    __syncthreads();
  }
}

template <typename T>
absl::Status LaunchSmallDimTyped(const TransposeShape& sh, const void* in,
                                 void* out, ExecContext& ctx) {
  SmallDimParams p;
  p.rows = sh.rows;
  p.cols = sh.cols;
  p.short_cols = sh.cols <= sh.rows;
  p.s = static_cast<int>(p.short_cols ? sh.cols : sh.rows);
  p.long_len = p.short_cols ? sh.rows : sh.cols;
  // T: a multiple of 32 (keeps 16-byte alignment of every chunk), about
  // kChunkBytes / (S * sizeof(T)).
  p.t_len = std::max(
      32, (kChunkBytes / static_cast<int>(sizeof(T)) / p.s) / 32 * 32);
  const int want = (32 + p.s - 1) / p.s % 32;  // pitch mod 32
  p.pitch = p.t_len + want;
  p.chunks_per_batch = CeilDiv(p.long_len, p.t_len);
  p.num_chunks = sh.batch * p.chunks_per_batch;
  const size_t smem = static_cast<size_t>(p.s) * p.pitch * sizeof(T);
  const dim3 block(kThreads);
  const dim3 grid(static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(p.num_chunks, 0x7fffffff))));
  // 16-byte vectors need every run to start 16-byte aligned: the long side
  // and the batch stride in bytes must be multiples of 16.
  const bool vec = (p.long_len * sizeof(T)) % 16 == 0 &&
                   (sh.rows * sh.cols * sizeof(T)) % 16 == 0;
  auto* kernel = vec ? SmallDimKernel<T, true> : SmallDimKernel<T, false>;
  kernel<<<grid, block, smem, StreamOf(ctx)>>>(static_cast<const T*>(in),
                                               static_cast<T*>(out), p);
  RecordLaunch(kernel, grid, block, smem, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchTransposeSmallDim(const TransposeShape& s, const void* in,
                                     void* out, ExecContext& ctx) {
  return s.elem_bytes == 4 ? LaunchSmallDimTyped<uint32_t>(s, in, out, ctx)
                           : LaunchSmallDimTyped<uint16_t>(s, in, out, ctx);
}

}  // namespace coalesce::cuda
