#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/profiling/sampled_launch.h"
#include "kernels/cuda/runtime/benchmark.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/device_buffers.h"
#include "kernels/cuda/runtime/lane_pool.h"
#include "kernels/cuda/runtime/resident_memory.h"
#include "kernels/cuda/runtime/staging.h"

namespace coalesce {
namespace {

using cuda::Lane;

class CudaBackend final : public Backend {
 public:
  CudaBackend(DeviceInfo info, int lanes)
      : device_(std::move(info)),
        lane_count_(lanes),
        lanes_(device_.ordinal),
        resident_(device_.ordinal, &lanes_) {
    RegisterCudaVariants(registry_);
  }
  // The lanes and the resident stream are released here, on this device;
  // then, with the members, the sampler, the lanes' gates and the variants.
  ~CudaBackend() override {
    cudaSetDevice(device_.ordinal);
    lanes_.Shutdown();
    resident_.Shutdown();
  }

  absl::Status Init() {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    COALESCE_RETURN_IF_ERROR(resident_.Init());
    COALESCE_RETURN_IF_ERROR(lanes_.Init(lane_count_));
    COALESCE_ASSIGN_OR_RETURN(
        device_.measured_copy_bandwidth,
        cuda::MeasureCopyPeak(device_, lanes_.first_stream()));
    return absl::OkStatus();
  }

  BackendKind kind() const override { return BackendKind::kCuda; }
  const DeviceInfo& device() const override { return device_; }
  const VariantRegistry& registry() const override { return registry_; }

  std::vector<DeviceInfo> VisibleDevices() const override {
    std::vector<DeviceInfo> all = {device_};
    for (const DeviceInfo& d : others_) all.push_back(d);
    return all;
  }
  // The other visible devices (not served; no copy peak measured).
  void SetOtherDevices(std::vector<DeviceInfo> others) {
    others_ = std::move(others);
  }

  MemoryStats Memory() const override {
    MemoryStats m = resident_.Stats();
    m.pinned_staging_bytes = lanes_.pinned_staging_bytes();
    return m;
  }

  absl::Status Health() const override { return lanes_.health().Status(); }
  int concurrency() const override { return lane_count_; }

  absl::StatusOr<int64_t> EnableProfileSampling(double fraction) override {
    return sampling_.Enable(fraction, device_.ordinal, lanes_.health());
  }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override {
    return lanes_.OnLane([&](Lane& l) {
      absl::Status s = ExecuteOnLane(l, v, p, operands, result);
      // A failed call may leave work queued that writes resident outputs,
      // which the caller frees (on another stream) once this returns.
      if (!s.ok()) cudaStreamSynchronize(l.stream);
      return s;
    });
  }

  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override {
    return resident_.Allocate(bytes);
  }
  bool resident_is_host_addressable() const override { return false; }

  absl::StatusOr<BenchmarkResult> Benchmark(
      const KernelVariant& v, const Problem& p,
      const BenchmarkOptions& opts) override {
    BenchmarkResult result;
    COALESCE_RETURN_IF_ERROR(OnLaneUnsampled([&](Lane& l) -> absl::Status {
      COALESCE_ASSIGN_OR_RETURN(
          result, cuda::BenchmarkVariant(v, p, opts, device_, l.stream));
      return absl::OkStatus();
    }));
    return result;
  }

  absl::StatusOr<BenchmarkResult> BenchmarkCopy(
      int64_t bytes_per_side, const BenchmarkOptions& opts) override {
    if (bytes_per_side <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy benchmark of ", bytes_per_side, " bytes"));
    }
    BenchmarkResult result;
    COALESCE_RETURN_IF_ERROR(OnLaneUnsampled([&](Lane& l) -> absl::Status {
      COALESCE_ASSIGN_OR_RETURN(
          result,
          cuda::BenchmarkDeviceCopy(bytes_per_side, opts, device_, l.stream));
      return absl::OkStatus();
    }));
    return result;
  }

 protected:
  absl::Status CopyToResidentRange(void* dst, const void* src,
                                   int64_t bytes) override {
    return resident_.CopyIn(dst, src, bytes);
  }
  std::unique_ptr<ResidentWriter> OpenResidentWriter(
      void* resident, int64_t resident_bytes) override {
    return resident_.OpenWriter(resident, resident_bytes);
  }
  absl::Status CopyFromResidentRange(const void* src, void* dst,
                                     int64_t bytes) override {
    return resident_.CopyOut(src, dst, bytes);
  }

 private:
  // OnLane for the bench harness, whose launches are like every unsampled
  // one: never inside a sampled range, whose counters would take the
  // benchmark's kernels for the request's.
  template <typename F>
  absl::Status OnLaneUnsampled(F&& f) {
    return lanes_.OnLane([&](Lane& l) -> absl::Status {
      return sampling_.Unsampled([&] { return f(l); });
    });
  }

  // Host operands are staged through pooled device buffers; resident ones
  // (device memory from AllocateResident) are used in place, so the h2d and
  // d2h times count only the host operands.
  absl::Status ExecuteOnLane(Lane& l, const KernelVariant& v, const Problem& p,
                             const Operands& operands, RunResult* result) {
    const OperandSizes sizes = OperandBytes(p);
    cuda::DeviceBuffers bufs{l.stream, {}};
    Operands dev;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.h2d_start, l.stream));
    for (size_t i = 0; i < sizes.inputs.size(); ++i) {
      if (operands.input_space(i) == MemorySpace::kResident) {
        dev.inputs.push_back(operands.inputs[i]);
        continue;
      }
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(sizes.inputs[i]));
      if (d != nullptr) {
        COALESCE_RETURN_IF_ERROR(
            cuda::StageIn(l, d, operands.inputs[i], sizes.inputs[i]));
      }
      dev.inputs.push_back(d);
    }
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      if (operands.output_space(i) == MemorySpace::kResident) {
        dev.outputs.push_back(operands.outputs[i]);
        continue;
      }
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(sizes.outputs[i]));
      dev.outputs.push_back(d);
    }
    ExecContext ctx;
    ctx.stream = l.stream;
    ctx.device = &device_;
    std::optional<cuda::RangeCounters> counters;
    absl::Status sample_error;
    COALESCE_RETURN_IF_ERROR(
        sampling_.Run(l, v, p, dev, ctx, &counters, &sample_error));
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      if (sizes.outputs[i] > 0 &&
          operands.output_space(i) == MemorySpace::kHost) {
        COALESCE_RETURN_IF_ERROR(cuda::StageOut(
            l, operands.outputs[i], dev.outputs[i], sizes.outputs[i]));
      }
    }
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.d2h_stop, l.stream));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.d2h_stop));
    if (result != nullptr) {
      float h2d = 0, kern = 0, d2h = 0;
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&h2d, l.h2d_start, l.kernel_start));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&kern, l.kernel_start, l.kernel_stop));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&d2h, l.kernel_stop, l.d2h_stop));
      result->h2d_seconds = h2d * 1e-3;
      result->kernel_seconds = kern * 1e-3;
      result->d2h_seconds = d2h * 1e-3;
      result->launch = ctx.launch;
      result->sample_error = std::move(sample_error);
      if (counters.has_value()) {
        // The events around a profiled launch also time the profiler
        // (serialization, counter set-up): the GPU's own time of the
        // kernels replaces them.
        result->kernel_seconds = counters->gpu_seconds;
        result->sampled = true;
        result->achieved_occupancy = counters->achieved_occupancy;
        result->dram_bytes_per_second = counters->DramBytesPerSecond();
      }
    }
    return absl::OkStatus();
  }

  // Destroyed in reverse: the sampler, the lanes' gates (the lanes
  // themselves go in the destructor), then the variants.
  DeviceInfo device_;
  const int lane_count_;
  std::vector<DeviceInfo> others_;
  VariantRegistry registry_;
  cuda::LanePool lanes_;
  cuda::ResidentMemory resident_;
  cuda::SampledLaunches sampling_;
};
absl::StatusOr<DeviceInfo> ProbeDevice(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device visible: ", cudaGetErrorString(e)));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device visible");
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", ordinal, " requested, ", count, " visible"));
  }
  cudaDeviceProp prop{};
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo d;
  d.backend = BackendKind::kCuda;
  d.name = prop.name;
  d.ordinal = ordinal;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.multiprocessors = prop.multiProcessorCount;
  d.max_threads_per_multiprocessor = prop.maxThreadsPerMultiProcessor;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d.l2_cache_bytes = prop.l2CacheSize;
  d.shared_memory_per_block_bytes =
      static_cast<int64_t>(prop.sharedMemPerBlock);
  d.shared_memory_per_block_optin_bytes =
      static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  int mem_khz = 0, sm_khz = 0;
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, ordinal);
  cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, ordinal);
  // Double data rate: two transfers per memory clock.
  d.theoretical_bandwidth =
      2.0 * mem_khz * 1e3 * (static_cast<double>(prop.memoryBusWidth) / 8.0);
  // Roofline leads: 128 FP32 FMA lanes per SM (Hopper, Ampere), and dense
  // 16-bit tensor throughput of 2048 FMA per SM per clock on Hopper (1024
  // on Ampere).
  d.peak_fp32_flops = 2.0 * 128 * d.multiprocessors * sm_khz * 1e3;
  d.peak_tensor_flops = (prop.major >= 9 ? 2.0 * 2048 : 2.0 * 1024) *
                        d.multiprocessors * sm_khz * 1e3;
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device,
                                                           int lanes) {
  if (lanes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA lanes must be >= 0, not ", lanes));
  }
  COALESCE_ASSIGN_OR_RETURN(DeviceInfo info, ProbeDevice(device));
  auto backend = std::make_unique<CudaBackend>(
      std::move(info), lanes > 0 ? lanes : kDefaultCudaLanes);
  int count = 0;
  std::vector<DeviceInfo> others;
  if (cudaGetDeviceCount(&count) == cudaSuccess) {
    for (int i = 0; i < count; ++i) {
      if (i == device) continue;
      absl::StatusOr<DeviceInfo> d = ProbeDevice(i);
      if (d.ok()) others.push_back(*std::move(d));
    }
  }
  backend->SetOtherDevices(std::move(others));
  COALESCE_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace coalesce
