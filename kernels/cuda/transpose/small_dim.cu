// Batched transpose where one side is short (S <= 16): NCHW <-> NHWC for
// image inputs (C = 3, 4) and AoS <-> SoA for records of 2..16 fields.
// A square 32x32 tile would waste most of each transaction here (a row of
// C = 3 elements is 12 bytes). Instead each side is moved in 16-byte
// vectors: on one side a run of positions is one contiguous stretch of
// S * T elements (the "flat" side), on the other it is S runs of T
// elements, L apart (the "segmented" side).
//
// Register path (the long side L a whole number of 16-byte vectors): a
// thread owns one "unit" of kV = 16 / sizeof(T) positions, i.e. S 16-byte
// vectors on either side: S consecutive vectors of the flat run, and one
// vector from each of the S segmented runs. The S x kV transpose between
// them happens in registers with compile-time indices (moves for 4-byte
// elements, one byte permute per output word for 2-byte ones), so no
// shared memory, no barrier and no per-element index arithmetic. The
// segmented side is coalesced per instruction (lane i takes vector i of a
// run); the flat side is coalesced across the thread's S accesses (the warp
// covers 32 * S * 16 contiguous bytes; L1 holds the lines for the loads,
// L2 merges the stores' sector halves). S is a template parameter (2..16).
//
// Shared-memory path (other L): a block takes a chunk of T positions, the
// gather happens in shared memory, s[k][j] with a row pitch chosen
// congruent to ceil(32/S) mod 32 so that a warp's 32 consecutive flat
// elements (k = f % S, j = f / S) fall in distinct banks.
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/grid_dependency.cuh"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {
namespace {

// The largest short side S handled (AoS records of up to 16 fields, images
// of up to 16 channels).
constexpr int64_t kSmallDimMax = 16;
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
  WaitForPriorGrid();
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
          __stwb(reinterpret_cast<uint4*>(out + base + k * p.long_len + t0) + v,
                 x);
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

// Word i of the register path's flat-side vectors, as 2-byte halves: half
// e of the flat run sits in word e / 2, half e % 2.
__device__ __forceinline__ uint32_t PackHalves(uint32_t lo_word, int lo_half,
                                               uint32_t hi_word, int hi_half) {
  // __byte_perm selects bytes 0-3 from its first operand, 4-7 from its
  // second: result = [lo half of lo_word | hi half of hi_word].
  const unsigned sel = (2 * lo_half) | (2 * lo_half + 1) << 4 |
                       (4 + 2 * hi_half) << 8 | (5 + 2 * hi_half) << 12;
  return __byte_perm(lo_word, hi_word, sel);
}

// The register path's block: small, so that the flat-output staging
// buffer (36 * S vectors per warp) fits static shared memory up to S = 16.
constexpr int kRegsThreads = 128;

// Slot of flat vector e in a warp's staging buffer: one pad vector every 8
// (a shared-memory wavefront is 8 lanes x 16 bytes), so the lane-major
// writes (e = lane * S + i) spread over the 8 bank groups for S = 2, 3, 4,
// 5, 7, 8, ... and the coalesced reads (e = 32 * i + lane) never conflict.
__device__ __forceinline__ int StageSlot(int e) { return e + e / 8; }

// One unit (16 / kElemBytes positions) per thread; blockIdx.y (strided by
// gridDim.y) is the batch. kFlatIn: the flat run is the input (cols = S:
// AoS -> SoA, NHWC -> NCHW); it is read by each thread directly (its S
// vectors are contiguous; L1 holds the lines between the S loads). A flat
// output goes through a per-warp staging buffer so that every store
// instruction writes 512 contiguous bytes: stored directly, at a stride of
// S * 16 bytes, the sector halves cost 25-50% of the bandwidth (ncu: twice
// the L2 write sectors).
template <int kElemBytes, int S, bool kFlatIn>
__global__ void __launch_bounds__(kRegsThreads)
    SmallDimRegsKernel(const uint4* __restrict__ in, uint4* __restrict__ out,
                       int64_t batch, int64_t units) {
  constexpr int kStageVecs = kFlatIn ? 1 : 32 * S + 4 * S;
  __shared__ uint4 stage[kRegsThreads / 32][kStageVecs];
  const int lane = threadIdx.x & 31;
  const int64_t warp_unit0 =
      blockIdx.x * static_cast<int64_t>(kRegsThreads) + (threadIdx.x & ~31);
  const int64_t unit = warp_unit0 + lane;
  if (warp_unit0 >= units) return;  // whole warps only: __syncwarp below
  const bool valid = unit < units;
  if constexpr (kElemBytes == 2) {
    // Early start, as tma's: the next kernel may be scheduled now, and the
    // block's first input is asked of the L2 before the wait. On the H200,
    // 16-bit elements, back to back: 3.5-6% faster on the [32,3,224,224]
    // layouts and on AoS -> SoA of 2^26 x 8, within 1% on the other AoS <->
    // SoA cases (coalesce-bench kernels --ops=convert_layout
    // --dtypes=bfloat16 --variants=small_dim). float32 keeps the plain
    // wait: early, it ran 2-14% slower (the most with a flat input).
    AllowNextGrid();
    const int64_t base = blockIdx.y * units * S;
    if constexpr (kFlatIn) {
      // The warp's 32 * S contiguous vectors: 4 * S lines, one per lane.
      for (int i = lane; i < 4 * S; i += 32) {
        const int64_t v = warp_unit0 * S + 8 * i;
        if (blockIdx.y < batch && v < units * S) PrefetchL2(in + base + v);
      }
    } else if (valid && lane % 8 == 0 && blockIdx.y < batch) {
      // A line per 8 lanes of each of the S segments.
#pragma unroll
      for (int k = 0; k < S; ++k) PrefetchL2(in + base + k * units + unit);
    }
  }
  WaitForPriorGrid();
  uint4* my_stage = stage[threadIdx.x / 32];
  // Flat words f[0 .. 4S), segmented words g[4k .. 4k + 4) of field k.
  uint32_t f[4 * S], g[4 * S];
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    // In vectors: a batch is units * S of them on either side; the flat
    // run of this unit starts at vector unit * S, field k's segment at
    // k * units + unit.
    const int64_t base = b * units * S;
    if constexpr (kFlatIn) {
      if (!valid) return;
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const uint4 v = in[base + unit * S + i];
        f[4 * i] = v.x, f[4 * i + 1] = v.y, f[4 * i + 2] = v.z,
              f[4 * i + 3] = v.w;
      }
    } else if (valid) {
#pragma unroll
      for (int k = 0; k < S; ++k) {
        const uint4 v = in[base + k * units + unit];
        g[4 * k] = v.x, g[4 * k + 1] = v.y, g[4 * k + 2] = v.z,
              g[4 * k + 3] = v.w;
      }
    }
    // Position p of field k is flat element p * S + k.
#pragma unroll
    for (int k = 0; k < S; ++k) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        if constexpr (kElemBytes == 4) {
          if constexpr (kFlatIn) {
            g[4 * k + w] = f[w * S + k];
          } else {
            f[w * S + k] = g[4 * k + w];
          }
        } else if constexpr (kFlatIn) {
          // Segmented word w of field k: positions 2w and 2w + 1.
          const int lo = 2 * w * S + k, hi = (2 * w + 1) * S + k;
          g[4 * k + w] = PackHalves(f[lo / 2], lo % 2, f[hi / 2], hi % 2);
        }
      }
    }
    if constexpr (kElemBytes == 2 && !kFlatIn) {
      // Flat word i: flat elements 2i and 2i + 1, each (position e / S,
      // field e % S), found in segmented word 4 * field + position / 2.
#pragma unroll
      for (int i = 0; i < 4 * S; ++i) {
        const int lo = 2 * i, hi = 2 * i + 1;
        f[i] = PackHalves(g[4 * (lo % S) + lo / S / 2], (lo / S) % 2,
                          g[4 * (hi % S) + hi / S / 2], (hi / S) % 2);
      }
    }
    if constexpr (kFlatIn) {
#pragma unroll
      for (int k = 0; k < S; ++k) {
        __stwb(out + base + k * units + unit,
               make_uint4(g[4 * k], g[4 * k + 1], g[4 * k + 2], g[4 * k + 3]));
      }
    } else {
      // The warp's 32 units are one contiguous flat stretch of 32 * S
      // vectors: stage lane-major, store vector-major.
#pragma unroll
      for (int i = 0; i < S; ++i) {
        my_stage[StageSlot(lane * S + i)] =
            make_uint4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]);
      }
      __syncwarp();
      const int64_t flat_end = (units - warp_unit0) * S;  // vectors in range
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int e = 32 * i + lane;
        if (e < flat_end) {
          __stwb(out + base + warp_unit0 * S + e, my_stage[StageSlot(e)]);
        }
      }
      __syncwarp();
    }
  }
}

template <int kElemBytes, int S>
absl::Status LaunchSmallDimRegs(const TransposeShape& sh, const void* in,
                                void* out, ExecContext& ctx) {
  constexpr int kV = 16 / kElemBytes;
  const bool flat_in = sh.cols <= sh.rows;
  const int64_t long_len = flat_in ? sh.rows : sh.cols;
  const int64_t units = long_len / kV;
  const dim3 block(kRegsThreads);
  const dim3 grid(static_cast<unsigned>(CeilDiv(units, kRegsThreads)),
                  static_cast<unsigned>(std::min<int64_t>(sh.batch, 65535)));
  auto* kernel = flat_in ? SmallDimRegsKernel<kElemBytes, S, true>
                         : SmallDimRegsKernel<kElemBytes, S, false>;
  LaunchAfterPriorGrid(kernel, grid, block, 0, ctx,
                       static_cast<const uint4*>(in), static_cast<uint4*>(out),
                       sh.batch, units);
  RecordLaunch(kernel, grid, block, 0, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// S from 2 to kSmallDimMax, as a template argument.
template <int kElemBytes, int S = 2>
absl::Status DispatchSmallDimRegs(int s, const TransposeShape& sh,
                                  const void* in, void* out, ExecContext& ctx) {
  if (s == S) return LaunchSmallDimRegs<kElemBytes, S>(sh, in, out, ctx);
  if constexpr (S < kSmallDimMax) {
    return DispatchSmallDimRegs<kElemBytes, S + 1>(s, sh, in, out, ctx);
  } else {
    return absl::InternalError("small_dim: short side out of range");
  }
}

// T of the shared-memory path: a multiple of 32 (keeps 16-byte alignment of
// every chunk), about kChunkBytes / (S * element bytes). An empty short side
// (only estimated, never launched) counts as 1.
int SmallDimChunkLen(int s, int elem_bytes) {
  return std::max(32, (kChunkBytes / elem_bytes / std::max(1, s)) / 32 * 32);
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
  p.t_len = SmallDimChunkLen(p.s, static_cast<int>(sizeof(T)));
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
  LaunchAfterPriorGrid(kernel, grid, block, smem, ctx,
                       static_cast<const T*>(in), static_cast<T*>(out), p);
  RecordLaunch(kernel, grid, block, smem, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// The blocks of the shared-memory path: one per chunk of about 8 KB.
int64_t SmallDimSharedBlocks(const TransposeShape& s) {
  const int64_t short_side = std::min(s.rows, s.cols);
  return s.batch *
         CeilDiv(std::max(s.rows, s.cols),
                 SmallDimChunkLen(static_cast<int>(short_side), s.elem_bytes));
}

absl::Status LaunchSmallDim(const TransposeShape& s, const void* in, void* out,
                            ExecContext& ctx) {
  if (SmallDimInRegisters(s)) {
    const int sd = static_cast<int>(std::min(s.rows, s.cols));
    return s.elem_bytes == 4 ? DispatchSmallDimRegs<4>(sd, s, in, out, ctx)
                             : DispatchSmallDimRegs<2>(sd, s, in, out, ctx);
  }
  return s.elem_bytes == 4 ? LaunchSmallDimTyped<uint32_t>(s, in, out, ctx)
                           : LaunchSmallDimTyped<uint16_t>(s, in, out, ctx);
}

absl::Status SmallDimSupports(const TransposeShape& s) {
  COALESCE_RETURN_IF_ERROR(CheckTransposeElementBytes(s));
  if (std::min(s.rows, s.cols) > kSmallDimMax) {
    return absl::UnimplementedError(
        absl::StrCat("needs rows or cols <= ", kSmallDimMax));
  }
  return absl::OkStatus();
}

// Fractions of the copy peak measured on the H200 on 2^26-record AoS
// layouts: 0.87-1.00 on the register path, 0.64-0.88 on the shared-memory
// path (lengths that are not whole 16-byte vectors) (coalesce-bench kernels
// --ops=convert_layout --variants=small_dim).
double SmallDimEfficiency(const TransposeShape& s) {
  return SmallDimInRegisters(s) ? 0.95 : 0.8;
}

}  // namespace

// Whether s takes the register path (a short side of 2 or more, the long
// side whole 16-byte vectors) rather than the shared-memory one.
bool SmallDimInRegisters(const TransposeShape& s) {
  const int64_t long_side = std::max(s.rows, s.cols);
  return std::min(s.rows, s.cols) >= 2 &&
         (long_side * s.elem_bytes) % 16 == 0 &&
         CeilDiv(long_side * s.elem_bytes / 16, kRegsThreads) <= 0x7fffffff;
}

// Eight resident blocks per SM keep the shared-memory path's 64 KB in
// flight (kChunkBytes); with fewer, as on skinny shapes of a few hundred KB
// (8655x7: 31 blocks), it runs latency-bound: 1.2-1.35x naive's time on the
// H200 (TUNE_OPS=transpose scripts/gpu-check.sh OUT tune).
double SmallDimBlockFactor(const TransposeShape& s, int multiprocessors) {
  if (SmallDimInRegisters(s) || multiprocessors <= 0) return 1.0;
  return std::min(1.0, static_cast<double>(SmallDimSharedBlocks(s)) /
                           (8.0 * multiprocessors));
}

const TransposeKernel kSmallDimTranspose = {
    &SmallDimSupports, &SmallDimEfficiency, &LaunchSmallDim};

}  // namespace coalesce::cuda
