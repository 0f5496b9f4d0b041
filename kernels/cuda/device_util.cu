#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.h"

namespace coalesce::cuda {
namespace {

// Four independent 16-byte loads in flight per thread before the stores:
// enough bytes in flight to saturate HBM (Little's law), as a tuned copy does.
__global__ void CopyKernel(const uint4* __restrict__ in, uint4* __restrict__ out,
                           int64_t n) {
  constexpr int kUnroll = 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += stride * kUnroll) {
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
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
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

}  // namespace

// One element per thread over a full grid: the other common copy shape.
__global__ void CopyFlatKernel(const uint4* __restrict__ in,
                               uint4* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i];
}

absl::StatusOr<double> MeasureCopyBandwidth(int64_t bytes, int reps,
                                            cudaStream_t stream) {
  bytes &= ~int64_t{15};
  void* a = nullptr;
  void* b = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&a, bytes, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&b, bytes, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a, 0x3c, bytes, stream));
  cudaEvent_t start, stop;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  int sms = 0, dev = 0;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t n = bytes / 16;
  const int threads = 256;
  auto launch = [&](int config) {
    if (config == 0) {
      // Enough resident blocks to fill every SM several times over.
      CopyKernel<<<sms * 8, threads, 0, stream>>>(
          static_cast<const uint4*>(a), static_cast<uint4*>(b), n);
    } else {
      CopyFlatKernel<<<static_cast<unsigned>((n + threads - 1) / threads),
                       threads, 0, stream>>>(static_cast<const uint4*>(a),
                                             static_cast<uint4*>(b), n);
    }
  };
  // The clocks ramp up from idle over tens of milliseconds: warm up for
  // about 200 ms of copying before timing, or the peak reads low (seen on
  // the H200: 3.77 TB/s after two warm-up copies, 4.1+ after this).
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
  for (int i = 0; i < 8; ++i) launch(0);
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
  float probe_ms = 1;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&probe_ms, start, stop));
  const int warm = static_cast<int>(std::min(2000.0, 200.0 / (probe_ms / 8)));
  for (int i = 0; i < warm; ++i) launch(i & 1);
  COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
  double best = 0;
  for (int config = 0; config < 2; ++config) {
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      launch(config);
      COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float t = 0;
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    best = std::max(best, 2.0 * static_cast<double>(bytes) /
                              (ms[ms.size() / 2] * 1e-3));
  }
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

}  // namespace coalesce::cuda
