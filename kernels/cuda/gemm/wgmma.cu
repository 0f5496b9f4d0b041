// gemm.cuda.wgmma: Hopper GEMM for float16/bfloat16. The copy engine (TMA,
// cp.async.bulk.tensor) streams 128x64 tiles of A and 64x256 tiles of B
// into a 4-stage shared-memory ring; warpgroup MMAs (wgmma.mma_async,
// sm_90a) read them straight from shared memory; accumulation in float32
// registers. 128x256 output tiles: at 128x128 each wgmma reads the
// shared-memory bytes per FLOP that B's extra width saves here, and the
// kernel ran at 0.70-0.76 of cuBLASLt on the H200.
//
// - Block: 3 warpgroups (384 threads). Warpgroup 0 is the producer: one
//   thread waits for a free stage, arms the stage's "full" mbarrier with
//   the bytes to expect and issues the TMA copies, which complete on that
//   barrier. Warpgroups 1 and 2 are consumers, each owning 64 rows of the
//   128x256 output tile (m64n256k16, 128 accumulators per thread): they wait
//   on "full", issue 4 wgmmas per 64-deep k-tile, and release the stage on
//   its "empty" mbarrier once those wgmmas have completed (wait_group 1
//   lets the next k-tile's wgmmas be issued first).
// - Shared tiles use the 128-byte swizzle, written by TMA and read by
//   wgmma through matrix descriptors. Rows of 64 16-bit elements (128
//   bytes) in 1024-byte atoms of 8 rows:
//   * k-contiguous operands (A [m,k], B^T stored [n,k]): one box of 64 k x
//     128 rows; K-major descriptor, stride byte offset 1024 (8-row groups),
//     k steps of 16 advance the start address by 32 bytes.
//   * mn-contiguous operands (A stored [k,m], B [k,n]): boxes of 64 mn x 64
//     k rows, 8 KB each, placed side by side; MN-major descriptor
//     (transpose bit set), leading byte offset 8192 (the next 64 mn),
//     stride byte offset 1024 (the next 8 k rows), k steps of 16 advance
//     by 2048 bytes.
//   In both layouts consumer c's 64 rows of A start 8192*c bytes into the
//   A stage.
// - Edges: TMA zero-fills out-of-range box elements (m, n and k tails);
//   the epilogue bounds-checks rows and columns. The expected transaction
//   bytes are whole boxes, out-of-range fill included.
// - Batches: one tensor map per operand with the batch as third dimension
//   (extent 1 for a broadcast operand); blockIdx.z is the batch entry.
//
// The conformance suite on the H200 checks the results, and with them the
// descriptor fields of the MN-major (transposed) layouts (`scripts/gpu-check.sh
// OUT tests`); `scripts/gpu-check.sh OUT sass` counts the HGMMA instructions.
// Register use (nvcc 13.0, sm_90a, -Xptxas -v): 156 registers in all 8
// instantiations (the bound is 168 at 384 threads), no spills, no wgmma
// serialization warning; 197696 bytes of dynamic shared memory, one block per
// SM.
//
// This file is compiled for sm_90a only (kernels/cuda/gemm/CMakeLists.txt):
// a plain sm_90 pass would reject wgmma.
#include <cuda.h>  // CUtensorMap and its enums only: no -lcuda
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/runtime/tensor_map.h"
#include "kernels/cuda/variants.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm/wgmma.cu needs sm_90a (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.wgmma";
constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kBK = 64;  // 128 bytes of 16-bit elements: one swizzle row
// Inner box extent of every tensor map, k or mn: one 128-byte swizzle row.
constexpr int kBoxInner = 64;
constexpr int kStages = 4;
constexpr int kConsumers = 2;  // warpgroups, 64 output rows each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kATileBytes = kBM * kBK * 2;  // A, one stage: 16 KB
constexpr int kBTileBytes = kBN * kBK * 2;  // B, one stage: 32 KB
// A box of 64 mn x 64 k (an mn-contiguous operand's unit) or the rows one
// consumer reads of a k-contiguous A tile: 8 KB.
constexpr int kBoxBytes = kBoxInner * kBK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
// Accumulators per consumer thread: 64 x kBN floats over 128 threads.
constexpr int kAcc = kBN / 2;
// Swizzled tiles need 1024-byte alignment; dynamic shared memory is only
// guaranteed 16, so the kernel rounds its base up and the launch asks for
// the slack.
constexpr int kSmemAlign = 1024;
constexpr int kSmemBytes =
    kSmemAlign + kStages * kStageBytes + 2 * kStages * sizeof(uint64_t);
static_assert(kBM == 2 * kBoxInner && kBN % kBoxInner == 0,
              "tiles are whole 64-wide boxes");
// A fraction of the 16-bit tensor peak (1070 TFLOP/s at 1980 MHz): 717 and
// 692 TFLOP/s at 4096^3 on the H200 in bfloat16 and float16:
// `coalesce-bench kernels --ops=gemm --dtypes=bfloat16,float16
// --shape=1,4096,4096,4096 --variants=wgmma`.
constexpr double kEfficiency = 0.65;
// Waves of tiles (TensorWavesSeconds), fitted to the 16-bit H200 selection
// sweeps' seed-7 shapes (386 with wgmma measured; every class,
// kernels/cuda/testdata/gemm_classes_seed7.txt): 6.0 us per wave and
// 9.0 ns per K (0.9 of the peak per SM), median error 9%. Tiny GEMMs take
// 8-9 us where the roofline alone said 3.
constexpr double kWaveSeconds = 6.0e-6;
constexpr double kWavePeakFraction = 0.9;

// Shared-memory matrix descriptor: start address, leading and stride byte
// offsets (all in 16-byte units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr, uint32_t lbo,
                                             uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
}
// The accumulators are written asynchronously by wgmma, behind the
// compiler's back: this empty asm pins every accumulator read and write on
// its side of the surrounding fence/wait.
__device__ __forceinline__ void FenceAccumulators(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[64x256] += A[64x16] * B[16x256]; transpose bits select MN-major
// operands (A stored [k,m], B stored [k,n]). Operands 0-127 are the
// accumulators, 128 and 129 the descriptors, 130 the scale-d flag, 131 and
// 132 the transpose bits.
#define COALESCE_WGMMA_M64N256K16(TYPE)                                       \
  asm volatile(                                                               \
      "{\n"                                                                   \
      ".reg .pred p;\n"                                                       \
      "setp.ne.b32 p, %130, 0;\n"                                             \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE            \
      " {"                                                                    \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                      \
      "%8, %9, %10, %11, %12, %13, %14, %15, "                                \
      "%16, %17, %18, %19, %20, %21, %22, %23, "                              \
      "%24, %25, %26, %27, %28, %29, %30, %31, "                              \
      "%32, %33, %34, %35, %36, %37, %38, %39, "                              \
      "%40, %41, %42, %43, %44, %45, %46, %47, "                              \
      "%48, %49, %50, %51, %52, %53, %54, %55, "                              \
      "%56, %57, %58, %59, %60, %61, %62, %63, "                              \
      "%64, %65, %66, %67, %68, %69, %70, %71, "                              \
      "%72, %73, %74, %75, %76, %77, %78, %79, "                              \
      "%80, %81, %82, %83, %84, %85, %86, %87, "                              \
      "%88, %89, %90, %91, %92, %93, %94, %95, "                              \
      "%96, %97, %98, %99, %100, %101, %102, %103, "                          \
      "%104, %105, %106, %107, %108, %109, %110, %111, "                      \
      "%112, %113, %114, %115, %116, %117, %118, %119, "                      \
      "%120, %121, %122, %123, %124, %125, %126, %127}, "                     \
      "%128, %129, p, 1, 1, %131, %132;\n"                                    \
      "}\n"                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),           \
        "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),           \
        "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),      \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),      \
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),      \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),      \
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),      \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),      \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),      \
        "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),      \
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),      \
        "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),      \
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),      \
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),      \
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]),      \
        "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),      \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),      \
        "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),      \
        "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]),      \
        "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),      \
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), \
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), \
        "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), \
        "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                              \
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA ? 1 : 0),               \
        "n"(kTransB ? 0 : 1))

// kTransA: A stored [k,m] (M-major). kTransB: B stored [n,k] (K-major);
// otherwise B [k,n] is N-major, so its transpose bit is the opposite.
template <typename T, bool kTransA, bool kTransB>
__device__ __forceinline__ void WgmmaM64N256K16(float (&d)[kAcc],
                                                uint64_t desc_a,
                                                uint64_t desc_b) {
  static_assert(kAcc == 128, "m64n256: 128 accumulators per thread");
  if constexpr (std::is_same_v<T, __half>) {
    COALESCE_WGMMA_M64N256K16("f16");
  } else {
    COALESCE_WGMMA_M64N256K16("bf16");
  }
}
#undef COALESCE_WGMMA_M64N256K16

template <typename T, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 1)
    GemmWgmmaKernel(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t base =
      (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + kSmemAlign -
       1) &
      ~uint32_t{kSmemAlign - 1};
  const uint32_t a_smem = base;
  const uint32_t b_smem = base + kStages * kATileBytes;
  const uint32_t bars = b_smem + kStages * kBTileBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };

  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;
  const TileCoord tile = GroupedTile(blockIdx.x, p.tiles_m, p.tiles_n);
  const int i0 = tile.m * kBM;
  const int j0 = tile.n * kBN;
  const int k_tiles = (p.k + kBK - 1) / kBK;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarInit(full(s), 1);  // the producer's arrive; bytes via expect_tx
      MbarInit(empty(s), kConsumers * 128);  // every consumer thread
    }
    MbarInitFence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    if (tid == 0) {
      const int za = p.stride_a != 0 ? static_cast<int>(blockIdx.z) : 0;
      const int zb = p.stride_b != 0 ? static_cast<int>(blockIdx.z) : 0;
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages;
        MbarWait(empty(s), ((kt / kStages) & 1) ^ 1);
        MbarArriveExpectTx(full(s), kStageBytes);
        const int l0 = kt * kBK;
        const uint32_t sa = a_smem + s * kATileBytes;
        const uint32_t sb = b_smem + s * kBTileBytes;
        if constexpr (!kTransA) {
          TmaLoad3d(sa, &map_a, l0, i0, za, full(s));  // 64 k x 128 m
        } else {
#pragma unroll
          for (int c = 0; c < kBM / kBoxInner; ++c) {  // 64 m x 64 k each
            TmaLoad3d(sa + c * kBoxBytes, &map_a, i0 + c * kBoxInner, l0, za,
                      full(s));
          }
        }
        if constexpr (kTransB) {
          TmaLoad3d(sb, &map_b, l0, j0, zb, full(s));  // 64 k x 256 n
        } else {
#pragma unroll
          for (int c = 0; c < kBN / kBoxInner; ++c) {  // 64 n x 64 k each
            TmaLoad3d(sb + c * kBoxBytes, &map_b, j0 + c * kBoxInner, l0, zb,
                      full(s));
          }
        }
      }
    }
    return;
  }

  const int consumer = warpgroup - 1;
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    MbarWait(full(s), (kt / kStages) & 1);
    const uint32_t sa = a_smem + s * kATileBytes + consumer * kBoxBytes;
    const uint32_t sb = b_smem + s * kBTileBytes;
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t da = kTransA ? SmemDesc(sa + kk * 2048, 8192, 1024)
                                  : SmemDesc(sa + kk * 32, 16, 1024);
      const uint64_t db = kTransB ? SmemDesc(sb + kk * 32, 16, 1024)
                                  : SmemDesc(sb + kk * 2048, 8192, 1024);
      WgmmaM64N256K16<T, kTransA, kTransB>(acc, da, db);
    }
    WgmmaCommit();
    FenceAccumulators(acc);
    // At most this k-tile's group in flight: k-tile kt-1's wgmmas have
    // read their stage, which the producer may now refill.
    WgmmaWait<1>();
    if (kt > 0) MbarArrive(empty((kt - 1) % kStages));
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);

  // Accumulator layout of m64nNk16: warp w of the warpgroup holds rows
  // 16w..16w+15; lane l holds rows l/4 and l/4+8, columns 8j + 2(l%4) and
  // +1 in d[4j..4j+3].
  const int64_t batch = blockIdx.z;
  const int warp = (tid % 128) / 32;
  const int lane = tid % 32;
  const int row = i0 + consumer * 64 + warp * 16 + lane / 4;
  // col is even: with n even, a lane's two columns are one aligned pair.
  const bool pairs = p.n % 2 == 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = j0 + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = row + 8 * h;
      if (i >= p.m) continue;
      if (pairs && col + 1 < p.n) {
        StoreGemmOutputPair<T>(p, batch, i, col, acc[4 * j + 2 * h],
                               acc[4 * j + 2 * h + 1]);
        continue;
      }
      if (col < p.n) StoreGemmOutput<T>(p, batch, i, col, acc[4 * j + 2 * h]);
      if (col + 1 < p.n) {
        StoreGemmOutput<T>(p, batch, i, col + 1, acc[4 * j + 2 * h + 1]);
      }
    }
  }
}

// A tensor map over `batches` row-major rows x cols matrices of 16-bit
// elements, batch_stride elements apart, read in boxes of box_cols x
// box_rows with the 128-byte swizzle.
absl::Status EncodeOperand(CUtensorMap* map, DType dt, const void* base,
                           int64_t rows, int64_t cols, int64_t batches,
                           int64_t batch_stride, int box_cols, int box_rows) {
  // Bytes between batch entries (a single entry gets its dense size: any
  // multiple of 16 is valid there).
  const int64_t dims[3] = {cols, rows, batches};
  const int64_t strides[2] = {cols * 2,
                              (batches > 1 ? batch_stride : rows * cols) * 2};
  const int box[3] = {box_cols, box_rows, 1};
  return EncodeTensorMap(
      map,
      dt == DType::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, kName);
}

template <typename T, bool kTransA, bool kTransB>
absl::Status LaunchWgmma(const GemmProblem& p, const GemmParams& g, dim3 grid,
                         ExecContext& ctx) {
  const int64_t entries = grid.z;
  CUtensorMap map_a, map_b;
  // A: [m,k] in boxes of 64 k x 128 m, or [k,m] in boxes of 64 m x 64 k.
  COALESCE_RETURN_IF_ERROR(
      EncodeOperand(&map_a, p.dtype, g.a, kTransA ? p.k : p.m,
                    kTransA ? p.m : p.k, g.stride_a != 0 ? entries : 1,
                    g.stride_a, kBoxInner, kTransA ? kBK : kBM));
  // B: [n,k] in boxes of 64 k x 256 n, or [k,n] in boxes of 64 n x 64 k.
  COALESCE_RETURN_IF_ERROR(
      EncodeOperand(&map_b, p.dtype, g.b, kTransB ? p.n : p.k,
                    kTransB ? p.k : p.n, g.stride_b != 0 ? entries : 1,
                    g.stride_b, kBoxInner, kTransB ? kBN : kBK));
  auto* kernel = GemmWgmmaKernel<T, kTransA, kTransB>;
  COALESCE_RETURN_IF_ERROR(AllowDynamicSharedMemory(kernel, kSmemBytes));
  const dim3 block(kThreads);
  kernel<<<grid, block, kSmemBytes, StreamOf(ctx)>>>(map_a, map_b, g);
  RecordLaunch(kernel, grid, block, kSmemBytes, ctx);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchWgmmaTyped(const GemmProblem& p, const GemmParams& g,
                              ExecContext& ctx) {
  return ForEachBatchChunk(
      p, g, [&](const GemmParams& chunk, dim3 grid) -> absl::Status {
        if (!p.trans_a && !p.trans_b) {
          return LaunchWgmma<T, false, false>(p, chunk, grid, ctx);
        }
        if (!p.trans_a && p.trans_b) {
          return LaunchWgmma<T, false, true>(p, chunk, grid, ctx);
        }
        if (p.trans_a && !p.trans_b) {
          return LaunchWgmma<T, true, false>(p, chunk, grid, ctx);
        }
        return LaunchWgmma<T, true, true>(p, chunk, grid, ctx);
      });
}

class GemmWgmmaVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  absl::string_view name() const override { return kName; }
  absl::string_view description() const override {
    return "Hopper wgmma m64n256k16 fed by TMA through a 4-stage mbarrier "
           "ring (producer warpgroup, two consumer warpgroups), 128x256x64 "
           "tiles, 128-byte swizzle; float16/bfloat16";
  }

 protected:
  // Compute capability exactly 9.0 (sm_90a code runs nowhere else);
  // float16 or bfloat16; TMA's layout rules: rows of A and B multiples of
  // 16 bytes (CheckGemmVectorLayout with 8 elements, which also makes batch
  // strides multiples of 16 bytes) and 16-byte aligned base pointers
  // (checked in Run); the 4-stage ring within the opt-in shared memory.
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo& dev) const override {
    if (dev.cc_major != 9 || dev.cc_minor != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "gemm.cuda.wgmma: needs compute capability 9.0 (sm_90a), not ",
          dev.cc_major, ".", dev.cc_minor));
    }
    if (p.dtype == DType::kFloat32) {
      return absl::UnimplementedError(
          "gemm.cuda.wgmma: float16 and bfloat16 only");
    }
    if (dev.shared_memory_per_block_optin_bytes < kSmemBytes) {
      return absl::UnimplementedError(
          absl::StrCat("gemm.cuda.wgmma: needs ", kSmemBytes,
                       " bytes of shared memory per block, the device allows ",
                       dev.shared_memory_per_block_optin_bytes));
    }
    COALESCE_RETURN_IF_ERROR(CheckGemmCommon(kName, p, kBM, kBN));
    return CheckGemmVectorLayout(kName, p, 8,
                                 "TMA row strides must be multiples of 16 "
                                 "bytes");
  }
  // One CTA per SM: its shared memory is more than half of an SM's.
  double Efficiency(const Problem& p, const DeviceInfo& dev) const override {
    const GemmProblem& g = std::get<GemmProblem>(p);
    return TensorEfficiency(g, kEfficiency) *
           TiledGemmFill(g, dev, kBM, kBN, 1);
  }
  // The roofline, or the waves of tiles one after another where that is
  // longer (short K: each wave's fixed latency).
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return std::max(KernelVariant::EstimateSeconds(p, dev),
                    TensorWavesSeconds(std::get<GemmProblem>(p), dev, kBM, kBN,
                                       kWaveSeconds, kWavePeakFraction));
  }
  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    COALESCE_RETURN_IF_ERROR(CheckGemmPointers(kName, ops, 16, false));
    const GemmParams g = MakeGemmParams(p, ops, kBM, kBN);
    if (p.dtype == DType::kFloat16) return LaunchWgmmaTyped<__half>(p, g, ctx);
    return LaunchWgmmaTyped<__nv_bfloat16>(p, g, ctx);
  }
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmWgmmaVariant() {
  return std::make_unique<GemmWgmmaVariant>();
}

}  // namespace coalesce::cuda
