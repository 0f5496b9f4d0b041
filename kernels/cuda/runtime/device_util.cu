#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/device_util.h"
#include "kernels/cuda/runtime/grid_dependency.cuh"
#include "kernels/cuda/runtime/launch.h"

namespace coalesce::cuda {
namespace {

// The tail bytes past n whole vectors (fewer than 16), copied by the first
// thread of the grid: a byte loop not worth a launch of its own.
__device__ __forceinline__ void CopyTail(const uint4* __restrict__ in,
                                         uint4* __restrict__ out, int64_t n,
                                         int tail) {
  if (tail > 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    const char* src = reinterpret_cast<const char*>(in + n);
    char* dst = reinterpret_cast<char*>(out + n);
    for (int b = 0; b < tail; ++b) dst[b] = src[b];
  }
}

// The global timer, in ns: one clock for every SM.
__device__ __forceinline__ uint64_t GlobalNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A stamped launch's readings of GlobalNs for its block (kStampsPerBlock),
// written by thread 0 once every thread is past its last store: entry,
// released (past WaitForPriorGrid) and the time of this call.
__device__ __forceinline__ void WriteStamps(uint64_t* stamps, uint64_t entry,
                                            uint64_t released) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* s = stamps + kStampsPerBlock * blockIdx.x;
    s[0] = entry;
    s[1] = released;
    s[2] = GlobalNs();
  }
}

template <bool kStreaming>
__device__ __forceinline__ void StoreVector(uint4* p, uint4 v) {
  if constexpr (kStreaming) {
    __stcs(p, v);  // st.global.cs: evict first
  } else {
    *p = v;
  }
}

// A copy of n 16-byte vectors (and a tail), kUnroll independent loads in
// flight per thread before its stores (Little's law: enough bytes in flight
// to saturate HBM). kFlat: one pass, thread t of block b copying vectors
// b * blockDim.x * kUnroll + t + u * blockDim.x; else a grid-stride loop.
// kEarly (launched with LaunchAfterPriorGrid): the early start of the
// transposes (grid_dependency.cuh), so that the copy ceiling of a case is
// timed as its kernels are: every block lets the stream's next kernel be
// scheduled, asks the L2 for the lines of the first kPrefetch vectors each
// of its threads copies, then waits for the previous kernel. kStreaming:
// stores marked evict-first. kStamped: the block's times go to stamps
// (LaunchStampedCopy).
template <int kUnroll, bool kFlat, bool kEarly, int kPrefetch, bool kStreaming,
          bool kStamped = false>
__global__ void CopyKernel(const uint4* __restrict__ in,
                           uint4* __restrict__ out, int64_t n, int tail,
                           uint64_t* stamps) {
  uint64_t entry = 0;
  if constexpr (kStamped) entry = GlobalNs();
  const int64_t threads = blockDim.x;
  const int64_t first =
      blockIdx.x * threads * (kFlat ? kUnroll : 1) + threadIdx.x;
  const int64_t stride = kFlat ? threads : gridDim.x * threads;
  if constexpr (kEarly) {
    AllowNextGrid();
    // One lane in 8 covers the 128-byte line of its 8 neighbours' vectors.
    if (threadIdx.x % 8 == 0) {
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u) {
        if (first + u * stride < n) PrefetchL2(in + first + u * stride);
      }
    }
    WaitForPriorGrid();
  }
  uint64_t released = 0;
  if constexpr (kStamped) released = GlobalNs();
  CopyTail(in, out, n, tail);
  for (int64_t i = first; i < n; i += stride * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) v[u] = in[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n)
        StoreVector<kStreaming>(out + i + u * stride, v[u]);
    }
    if constexpr (kFlat) break;
  }
  if constexpr (kStamped) WriteStamps(stamps, entry, released);
}

// No work: a stamped kernel boundary alone, launched with an early start
// (kEarly, as copy config 3) or plainly.
template <bool kEarly>
__global__ void EmptyKernel(uint64_t* stamps) {
  const uint64_t entry = GlobalNs();
  if constexpr (kEarly) {
    AllowNextGrid();
    WaitForPriorGrid();
  }
  WriteStamps(stamps, entry, GlobalNs());
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void FillKernel(T* __restrict__ out, int64_t n, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += stride) {
    const uint64_t h = Mix(seed * 0x9e3779b97f4a7c15ULL + i);
    const float mag = 0.25f + 0.75f * static_cast<float>(h >> 40) * 0x1p-24f;
    out[i] = FromFloat<T>((h & 1) ? -mag : mag);
  }
}

// Spins until *flag reaches seq (wrap-safe) or timeout_ns pass on the
// global timer; polls about every microsecond (each read crosses PCIe).
__global__ void NopKernel() {}

__global__ void GateKernel(const volatile uint32_t* flag, uint32_t seq,
                           uint64_t timeout_ns) {
  const uint64_t start = GlobalNs();
  while (static_cast<int32_t>(*flag - seq) < 0) {
    if (GlobalNs() - start > timeout_ns) return;
    __nanosleep(500);
  }
}

using CopyKernelFn = void (*)(const uint4*, uint4*, int64_t, int, uint64_t*);

// A copy config: its kernel and launch shape.
struct CopyConfig {
  CopyKernelFn kernel;
  int threads;        // per block
  int blocks_per_sm;  // grid-stride kernels; 0: one pass (kFlat)
  int unroll;         // the kernel's kUnroll
  bool early;         // the kernel's kEarly: launched after the prior grid
};

// The config of CopyKernel<kUnroll, kFlat, kEarly, kPrefetch, kStreaming> on
// blocks of `threads`, `blocks_per_sm` of them per SM where it loops over
// the data (kFlat: as many as one pass takes); the other fields follow from
// the kernel's.
template <int kUnroll, bool kFlat, bool kEarly, int kPrefetch, bool kStreaming,
          bool kStamped = false>
constexpr CopyConfig MakeCopy(int threads, int blocks_per_sm = 0) {
  return {CopyKernel<kUnroll, kFlat, kEarly, kPrefetch, kStreaming, kStamped>,
          threads, kFlat ? 0 : blocks_per_sm, kUnroll, kEarly};
}

// Config 3 (below); the stamped probes run its kernel stamped, on its grid.
template <bool kStamped = false>
constexpr CopyConfig HalfSmCopy() {
  return MakeCopy<4, false, true, 16, false, kStamped>(256, 4);
}

// None is best everywhere, so the ceiling is the best of them. Configs 4 to 6
// are the fastest back to back of 1002 copy shapes swept at 3.2, 6.4, 12.8
// and 25.7 MB each way on the H200, where configs 0 to 3 reached 0.02-0.08
// of the peak less; each config's time per size: `coalesce-kernel-gap
// --json=gap.json` (config_us).
constexpr CopyConfig kCopies[kCopyConfigs] = {
    // 8 blocks per SM: more than are resident at once (6, at the 34
    // registers a thread this kernel takes), so every SM stays full.
    MakeCopy<4, false, false, 0, false>(256, 8),
    // One vector per thread over a full grid: the other common copy shape.
    MakeCopy<1, true, false, 0, false>(256),
    // As config 0, its first loads prefetched.
    MakeCopy<4, false, true, 4, false>(256, 8),
    // Half of every SM's threads, so that blocks of the next copy are
    // resident beside this one's and prefetch while it runs (2 of its 4 at
    // 40 registers a thread; a cap of 32, which fits all 4, is no faster).
    // 16 vectors per thread prefetched: all of a copy of up to 34 MB on the
    // H200.
    HalfSmCopy(),
    // 1024-thread blocks, 2 vectors each, all prefetched, streaming stores:
    // the best at 6.4 MB each way (0.815 of the peak; config 2 0.739).
    MakeCopy<2, true, true, 2, true>(1024),
    // 1024-thread blocks, 2 resident per SM (a grid of 4 per SM), 16 vectors
    // each prefetched, streaming stores: the best at 12.8 MB (0.849; config
    // 2 0.827).
    MakeCopy<1, false, true, 16, true>(1024, 4),
    // One vector per thread, started early without a prefetch, streaming
    // stores: the best at 25.7 MB (0.918; config 1 0.893).
    MakeCopy<1, true, true, 0, true>(256),
};

// The current device's SM count. A device attribute read is a lookup in the
// runtime's cache, cheap enough for every launch (and allowed while a
// stream is captured).
absl::StatusOr<int> CurrentDeviceSms() {
  int sms = 0, dev = 0;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

absl::Status LaunchCopy(int config, const void* in, void* out, int64_t bytes,
                        cudaStream_t stream) {
  if (config < 0 || config >= kCopyConfigs || bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy config ", config, " of ", bytes, " bytes: configs are 0..",
        kCopyConfigs - 1, ", bytes >= 0"));
  }
  if (bytes == 0) return absl::OkStatus();
  const CopyConfig& c = kCopies[config];
  const int64_t n = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  const auto* src = static_cast<const uint4*>(in);
  auto* dst = static_cast<uint4*>(out);
  int64_t blocks = 0;
  if (c.blocks_per_sm > 0) {
    COALESCE_ASSIGN_OR_RETURN(const int sms, CurrentDeviceSms());
    blocks = int64_t{sms} * c.blocks_per_sm;
  } else {
    // At least one block, for a copy of the tail alone.
    const int64_t per_block = int64_t{c.threads} * c.unroll;
    blocks = std::max<int64_t>(1, (n + per_block - 1) / per_block);
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  if (c.early) {
    LaunchAfterPriorGrid(c.kernel, grid, dim3(c.threads), 0, stream, src, dst,
                         n, tail, nullptr);
  } else {
    c.kernel<<<grid, c.threads, 0, stream>>>(src, dst, n, tail, nullptr);
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::StatusOr<int> StampedBlocks() {
  COALESCE_ASSIGN_OR_RETURN(const int sms, CurrentDeviceSms());
  return sms * HalfSmCopy().blocks_per_sm;
}

absl::Status LaunchStampedCopy(const void* in, void* out, int64_t bytes,
                               uint64_t* stamps, cudaStream_t stream) {
  if (bytes < 16 || bytes % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stamped copy of ", bytes, " bytes: a positive multiple of 16"));
  }
  COALESCE_ASSIGN_OR_RETURN(const int blocks, StampedBlocks());
  constexpr CopyConfig c = HalfSmCopy<true>();
  LaunchAfterPriorGrid(c.kernel, dim3(blocks), dim3(c.threads), 0, stream,
                       static_cast<const uint4*>(in), static_cast<uint4*>(out),
                       bytes / 16, 0, stamps);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status LaunchStampedEmpty(bool early_start, uint64_t* stamps,
                                cudaStream_t stream) {
  COALESCE_ASSIGN_OR_RETURN(const int blocks, StampedBlocks());
  if (early_start) {
    LaunchAfterPriorGrid(EmptyKernel<true>, dim3(blocks),
                         dim3(HalfSmCopy().threads), 0, stream, stamps);
  } else {
    EmptyKernel<false><<<blocks, HalfSmCopy().threads, 0, stream>>>(stamps);
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::StatusOr<double> MeasureCopyBandwidth(int64_t bytes, int reps,
                                            cudaStream_t stream) {
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // An early error return releases what was made (the success path below
  // releases it with its errors checked).
  absl::Cleanup release = [&] {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (a != nullptr) cudaFreeAsync(a, stream);
    if (b != nullptr) cudaFreeAsync(b, stream);
  };
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&a, bytes, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&b, bytes, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a, 0x3c, bytes, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  // The clocks ramp up from idle over tens of milliseconds: warm up for
  // about 200 ms of copying before timing, or the peak reads low (H200:
  // 3.77 TB/s after two warm-up copies, 4.1+ after this; the peak
  // `coalesce-kernel-gap` prints).
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
  for (int i = 0; i < 8; ++i) {
    COALESCE_RETURN_IF_ERROR(LaunchCopy(0, a, b, bytes, stream));
  }
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
  float probe_ms = 1;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&probe_ms, start, stop));
  const int warm = static_cast<int>(std::min(2000.0, 200.0 / (probe_ms / 8)));
  for (int i = 0; i < warm; ++i) {
    COALESCE_RETURN_IF_ERROR(LaunchCopy(i % kCopyConfigs, a, b, bytes, stream));
  }
  double best = 0;
  for (int config = 0; config < kCopyConfigs; ++config) {
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      COALESCE_RETURN_IF_ERROR(LaunchCopy(config, a, b, bytes, stream));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float t = 0;
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    best = std::max(
        best, 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3));
  }
  std::move(release).Cancel();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  COALESCE_CUDA_RETURN_IF_ERROR(cudaFreeAsync(a, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaFreeAsync(b, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return best;
}

absl::Status FillRandomDevice(void* data, DType t, int64_t n, uint64_t seed,
                              cudaStream_t stream) {
  if (n <= 0) return absl::OkStatus();
  const int threads = 256;
  const int blocks =
      static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  switch (t) {
    case DType::kFloat32:
      FillKernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(data), n,
                                                 seed);
      break;
    case DType::kFloat16:
      FillKernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(data), n,
                                                 seed);
      break;
    case DType::kBFloat16:
      FillKernel<<<blocks, threads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(data), n, seed);
      break;
  }
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LaunchGate>> LaunchGate::Create(
    uint64_t timeout_ns) {
  void* host = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&host, sizeof(uint32_t), cudaHostAllocMapped));
  *static_cast<volatile uint32_t*>(host) = 0;
  void* device = nullptr;
  if (cudaError_t e = cudaHostGetDevicePointer(&device, host, 0);
      e != cudaSuccess) {
    cudaFreeHost(host);
    return CudaStatus(e, "cudaHostGetDevicePointer", __FILE__, __LINE__);
  }
  return std::unique_ptr<LaunchGate>(
      new LaunchGate(static_cast<uint32_t*>(host),
                     static_cast<uint32_t*>(device), timeout_ns));
}

LaunchGate::~LaunchGate() {
  Open();
  cudaFreeHost(host_);
}

absl::Status LaunchGate::Close(cudaStream_t stream) {
  Open();  // a gate left closed would hold this kernel until its timeout
  GateKernel<<<1, 1, 0, stream>>>(device_, seq_ + 1, timeout_ns_);
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ++seq_;
  closed_ = true;
  return absl::OkStatus();
}

void LaunchGate::Open() {
  if (!closed_) return;
  // The launches queued before this store are visible to the device before
  // it: the driver wrote them first, and the fence orders this thread.
  std::atomic_thread_fence(std::memory_order_release);
  *static_cast<volatile uint32_t*>(host_) = seq_;
  closed_ = false;
}

namespace {

// The median of 16 spans from start to stop, each queued by submit (a
// first one before them warms up).
absl::StatusOr<double> MedianEventSpan(absl::FunctionRef<absl::Status()> submit,
                                       cudaEvent_t start, cudaEvent_t stop) {
  constexpr int kSpans = 16;
  std::vector<float> spans;
  for (int i = 0; i <= kSpans; ++i) {
    COALESCE_RETURN_IF_ERROR(submit());
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
    if (i > 0) spans.push_back(ms);
  }
  std::sort(spans.begin(), spans.end());
  return spans[spans.size() / 2] * 1e-3;
}

}  // namespace

absl::StatusOr<double> MeasureEventOverhead(LaunchGate& gate,
                                            cudaStream_t stream,
                                            cudaEvent_t start,
                                            cudaEvent_t stop) {
  return MedianEventSpan(
      [&]() -> absl::Status {
        COALESCE_RETURN_IF_ERROR(gate.Close(stream));
        absl::Cleanup open = [&gate] { gate.Open(); };
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
        NopKernel<<<1, 32, 0, stream>>>();
        COALESCE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
        return absl::OkStatus();
      },
      start, stop);
}

absl::StatusOr<cudaGraphExec_t> CaptureGraph(
    cudaStream_t stream, cudaStreamCaptureMode mode,
    absl::FunctionRef<absl::Status()> enqueue) {
  COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, mode));
  const absl::Status queued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  absl::Cleanup destroy = [graph] {
    if (graph != nullptr) cudaGraphDestroy(graph);
  };
  COALESCE_RETURN_IF_ERROR(queued);
  COALESCE_CUDA_RETURN_IF_ERROR(end);
  cudaGraphExec_t exec = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
  return exec;
}

absl::StatusOr<double> MeasureGraphEventOverhead(cudaStream_t stream,
                                                 cudaEvent_t start,
                                                 cudaEvent_t stop) {
  COALESCE_ASSIGN_OR_RETURN(
      cudaGraphExec_t exec,
      CaptureGraph(stream, cudaStreamCaptureModeThreadLocal,
                   [&]() -> absl::Status {
                     COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
                         start, stream, cudaEventRecordExternal));
                     NopKernel<<<1, 32, 0, stream>>>();
                     COALESCE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
                     COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
                         stop, stream, cudaEventRecordExternal));
                     return absl::OkStatus();
                   }));
  absl::Cleanup destroy = [exec] { cudaGraphExecDestroy(exec); };
  return MedianEventSpan(
      [&]() -> absl::Status {
        return CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch",
                          __FILE__, __LINE__);
      },
      start, stop);
}

}  // namespace coalesce::cuda
