#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/launch.h"

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

// Four independent 16-byte loads in flight per thread before the stores:
// enough bytes in flight to saturate HBM (Little's law), as a tuned copy does.
// kPrefetch > 0 (launched with LaunchAfterPriorGrid): the early start of the
// transposes (grid_dependency.cuh), so that the copy ceiling of a case is
// timed as its kernels are: every block lets the stream's next kernel be
// scheduled, asks the L2 for the lines of the first kPrefetch vectors each
// of its threads copies, then waits for the previous kernel.
template <int kPrefetch>
__global__ void CopyKernel(const uint4* __restrict__ in,
                           uint4* __restrict__ out, int64_t n, int tail) {
  constexpr int kUnroll = 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first =
      blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if constexpr (kPrefetch > 0) {
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
  CopyTail(in, out, n, tail);
  for (int64_t i = first; i < n; i += stride * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) v[u] = in[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) out[i + u * stride] = v[u];
    }
  }
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

// One element per thread over a full grid: the other common copy shape.
__global__ void CopyFlatKernel(const uint4* __restrict__ in,
                               uint4* __restrict__ out, int64_t n, int tail) {
  CopyTail(in, out, n, tail);
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// Spins until *flag reaches seq (wrap-safe) or timeout_ns pass on the
// global timer; polls about every microsecond (each read crosses PCIe).
__global__ void GateKernel(const volatile uint32_t* flag, uint32_t seq,
                           uint64_t timeout_ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (static_cast<int32_t>(*flag - seq) < 0) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) return;
    __nanosleep(500);
  }
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
  const int64_t n = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  const auto* src = static_cast<const uint4*>(in);
  auto* dst = static_cast<uint4*>(out);
  constexpr int kThreads = 256;
  if (config != 1) {
    // A device attribute read is a lookup in the runtime's cache, cheap
    // enough for every launch (and allowed while a stream is captured).
    int sms = 0, dev = 0;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (config == 0) {
      // 8 blocks per SM: more than are resident at once (6, at the 40
      // registers a thread this kernel takes), so every SM stays full.
      CopyKernel<0><<<sms * 8, kThreads, 0, stream>>>(src, dst, n, tail);
    } else if (config == 2) {
      // As config 0, its first loads prefetched.
      LaunchAfterPriorGrid(CopyKernel<4>, dim3(sms * 8), dim3(kThreads), 0,
                           stream, src, dst, n, tail);
    } else {
      // Half of every SM's threads, so that blocks of the next copy are
      // resident beside this one's and prefetch while it runs (2 of its 4
      // at 40 registers a thread; capped at 32, so that all 4 fit, it was
      // no faster: bench/results/h200/session15/). 16 vectors per thread
      // prefetched: all of a copy of up to 34 MB on the H200.
      LaunchAfterPriorGrid(CopyKernel<16>, dim3(sms * 4), dim3(kThreads), 0,
                           stream, src, dst, n, tail);
    }
  } else {
    // At least one block, for a copy of the tail alone.
    const int64_t blocks = std::max<int64_t>(1, (n + kThreads - 1) / kThreads);
    CopyFlatKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        src, dst, n, tail);
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
  // about 200 ms of copying before timing, or the peak reads low (seen on
  // the H200: 3.77 TB/s after two warm-up copies, 4.1+ after this).
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

}  // namespace coalesce::cuda
