#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/profiling/cupti_sampler.h"
#include "kernels/cuda/runtime/device_util.h"

namespace coalesce {
namespace {

// Concurrent requests in flight on the device. Four lanes let one request's
// host-to-device copy, another's kernel and a third's device-to-host copy
// overlap (the seeds' multi-stream pattern) without oversubscribing the
// copy engines.
constexpr int kLanes = 4;
// Pinned staging chunk: large enough that a chunk's DMA (about 150 us at
// 55 GB/s for 8 MiB) hides the host memcpy of the next one, small enough
// that four lanes pin only 64 MiB.
constexpr size_t kStagingChunkBytes = size_t{8} << 20;
// Bytes of the start-up copy that defines the peak: 2 x 512 MiB, far above
// the 60 MB L2 of an H200.
constexpr int64_t kPeakProbeBytes = int64_t{512} << 20;

bool IsStickyError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorInvalidPc:
    case cudaErrorInvalidAddressSpace:
      return true;
    default:
      return false;
  }
}

struct Lane {
  cudaStream_t stream = nullptr;
  cudaEvent_t h2d_start = nullptr, kernel_start = nullptr,
              kernel_stop = nullptr, d2h_stop = nullptr;
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  // Holds the stream at kernel_start until the launches are queued.
  std::unique_ptr<cuda::LaunchGate> gate;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(DeviceInfo info) : device_(std::move(info)) {
    RegisterCudaVariants(registry_);
  }
  ~CudaBackend() override {
    cudaSetDevice(device_.ordinal);
    for (Lane& l : lanes_) {
      if (l.stream) cudaStreamSynchronize(l.stream);
      for (int i = 0; i < 2; ++i) {
        if (l.staging[i]) cudaFreeHost(l.staging[i]);
        if (l.staging_free[i]) cudaEventDestroy(l.staging_free[i]);
      }
      for (cudaEvent_t e :
           {l.h2d_start, l.kernel_start, l.kernel_stop, l.d2h_stop}) {
        if (e) cudaEventDestroy(e);
      }
      if (l.stream) cudaStreamDestroy(l.stream);
    }
    if (resident_stream_) {
      cudaStreamSynchronize(resident_stream_);
      cudaStreamDestroy(resident_stream_);
    }
  }

  absl::Status Init() {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    // Keep freed memory in the pool: requests reuse it without a driver call.
    cudaMemPool_t pool;
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetDefaultMemPool(&pool, device_.ordinal));
    uint64_t threshold = UINT64_MAX;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(
        pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&resident_stream_, cudaStreamNonBlocking));
    lanes_.resize(kLanes);
    for (Lane& l : lanes_) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
      for (cudaEvent_t* e :
           {&l.h2d_start, &l.kernel_start, &l.kernel_stop, &l.d2h_stop}) {
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(e));
      }
      for (int i = 0; i < 2; ++i) {
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(
            &l.staging_free[i], cudaEventDisableTiming));
        COALESCE_CUDA_RETURN_IF_ERROR(
            cudaMallocHost(&l.staging[i], kStagingChunkBytes));
      }
      COALESCE_ASSIGN_OR_RETURN(l.gate, cuda::LaunchGate::Create());
      free_lanes_.push_back(&l);
    }
    const int64_t probe =
        std::min<int64_t>(kPeakProbeBytes, device_.memory_bytes / 8);
    COALESCE_ASSIGN_OR_RETURN(
        device_.measured_copy_bandwidth,
        cuda::MeasureCopyBandwidth(probe, 10, lanes_[0].stream));
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
    MemoryStats m;
    m.pinned_staging_bytes =
        static_cast<int64_t>(lanes_.size()) * 2 * kStagingChunkBytes;
    if (cudaSetDevice(device_.ordinal) != cudaSuccess) {
      cudaGetLastError();
      return m;
    }
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      m.used_bytes = static_cast<int64_t>(total - free);
      m.total_bytes = static_cast<int64_t>(total);
    } else {
      cudaGetLastError();
    }
    cudaMemPool_t pool;
    uint64_t reserved = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, device_.ordinal) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent,
                                &reserved) == cudaSuccess) {
      m.pool_reserved_bytes = static_cast<int64_t>(reserved);
    } else {
      cudaGetLastError();
    }
    return m;
  }

  absl::Status Health() const override {
    absl::MutexLock lock(&health_mu_);
    return health_;
  }

  absl::StatusOr<int64_t> EnableProfileSampling(double fraction) override {
    if (!(fraction > 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the sampled fraction of launches must be in (0, 1], not ",
          fraction));
    }
    absl::MutexLock lock(&sampling_mu_);
    if (sampler_owner_ == nullptr) {
      COALESCE_RETURN_IF_ERROR(Health());
      COALESCE_ASSIGN_OR_RETURN(sampler_owner_,
                                cuda::CuptiSampler::Create(device_.ordinal));
      sampler_.store(sampler_owner_.get(), std::memory_order_release);
    }
    const int64_t interval = cuda::SampleInterval(fraction);
    picker_.SetInterval(interval);
    return interval;
  }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override {
    return OnLane([&](Lane& l) {
      absl::Status s = ExecuteOnLane(l, v, p, operands, result);
      // A failed call may leave work queued that writes resident outputs,
      // which the caller frees (on another stream) once this returns.
      if (!s.ok()) cudaStreamSynchronize(l.stream);
      return s;
    });
  }

  // Resident memory is device memory from the pool that requests use,
  // allocated and freed on a stream of its own (resident_stream_). The
  // allocation is synchronized before it is handed out, so the lanes'
  // streams may use it without an event; its free is enqueued after every
  // use has completed (Execute and the copies synchronize before they
  // return, a ResidentWriter's Finish or destructor waits for its copies,
  // and the store drops a tensor only after its users are done).
  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override {
    if (bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resident allocation of ", bytes, " bytes"));
    }
    COALESCE_RETURN_IF_ERROR(Health());
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    void* q = nullptr;
    // A 0-byte tensor still gets a distinct, freeable pointer.
    const absl::Status allocated = [&]() -> absl::Status {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMallocAsync(&q, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                          resident_stream_));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(resident_stream_));
      return absl::OkStatus();
    }();
    if (!allocated.ok()) {
      if (q != nullptr) cudaFreeAsync(q, resident_stream_);
      return Track(allocated);
    }
    const int ordinal = device_.ordinal;
    cudaStream_t stream = resident_stream_;
    return std::shared_ptr<void>(q, [ordinal, stream](void* r) {
      // The last reference may go on any thread, whose current device may
      // be another; a failure here has no caller to report to and is left
      // to the next call's error check (Track, Health).
      cudaSetDevice(ordinal);
      cudaFreeAsync(r, stream);
    });
  }
  bool resident_is_host_addressable() const override { return false; }

  absl::StatusOr<BenchmarkResult> Benchmark(
      const KernelVariant& v, const Problem& p,
      const BenchmarkOptions& opts) override {
    BenchmarkResult result;
    COALESCE_RETURN_IF_ERROR(OnLaneUnsampled([&](Lane& l) -> absl::Status {
      COALESCE_ASSIGN_OR_RETURN(result, BenchmarkOnLane(l, v, p, opts));
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
      COALESCE_ASSIGN_OR_RETURN(result,
                                BenchmarkCopyOnLane(l, bytes_per_side, opts));
      return absl::OkStatus();
    }));
    return result;
  }

 protected:
  // Host <-> resident through a lane's pinned staging buffers, as Execute
  // stages host operands; synchronized, so that the bytes are in place for
  // whichever lane reads them next.
  absl::Status CopyToResidentRange(void* dst, const void* src,
                                   int64_t bytes) override {
    return OnLane([&](Lane& l) {
      absl::Status s = StageIn(l, dst, src, static_cast<size_t>(bytes));
      const absl::Status synced =
          cuda::CudaStatus(cudaStreamSynchronize(l.stream),
                           "cudaStreamSynchronize", __FILE__, __LINE__);
      return s.ok() ? synced : s;
    });
  }
  std::unique_ptr<ResidentWriter> OpenResidentWriter(
      void* resident, int64_t resident_bytes) override {
    return std::make_unique<Writer>(this, static_cast<char*>(resident),
                                    resident_bytes);
  }
  absl::Status CopyFromResidentRange(const void* src, void* dst,
                                     int64_t bytes) override {
    return OnLane([&](Lane& l) {
      // StageOut waits for its last chunk before it returns, unless it fails
      // before: then nothing may stay queued on the lane for its next user.
      const absl::Status s = StageOut(l, dst, src, static_cast<size_t>(bytes));
      if (!s.ok()) cudaStreamSynchronize(l.stream);
      return s;
    });
  }

 private:
  // PutTensor's writer: each piece is staged through a lane's pinned
  // buffers like CopyToResidentRange, but the lane is released without
  // waiting for the last host-to-device copy; an event per lane used marks
  // where this writer's copies end on that lane's stream, and Finish waits
  // for those. Later users of a lane queue behind the copies, and StageIn
  // reuses a staging buffer only after its copy (staging_free), so the
  // source bytes stay intact.
  class Writer final : public ResidentWriter {
   public:
    Writer(CudaBackend* backend, char* base, int64_t size)
        : backend_(backend), base_(base), size_(size) {}
    ~Writer() override { Finish().IgnoreError(); }
    absl::Status Write(int64_t offset, const void* src,
                       int64_t bytes) override {
      COALESCE_RETURN_IF_ERROR(
          CheckResidentRange("ResidentWriter::Write", size_, offset, bytes));
      if (bytes == 0) return absl::OkStatus();
      return backend_->OnLane([&](Lane& l) -> absl::Status {
        absl::Status s = backend_->StageIn(l, base_ + offset, src,
                                           static_cast<size_t>(bytes));
        auto it = std::find_if(done_.begin(), done_.end(),
                               [&](const auto& e) { return e.first == &l; });
        if (it == done_.end()) it = done_.insert(done_.end(), {&l, nullptr});
        cudaEvent_t& done = it->second;
        if (s.ok() && done == nullptr) {
          s = cuda::CudaStatus(
              cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
              "cudaEventCreateWithFlags", __FILE__, __LINE__);
        }
        if (s.ok()) {
          s = cuda::CudaStatus(cudaEventRecord(done, l.stream),
                               "cudaEventRecord", __FILE__, __LINE__);
        }
        // A failed piece leaves nothing queued for the lane's next user.
        if (!s.ok()) cudaStreamSynchronize(l.stream);
        return s;
      });
    }
    absl::Status Finish() override {
      absl::Status s;
      for (auto& [lane, done] : done_) {
        if (done == nullptr) continue;
        s.Update(cuda::CudaStatus(cudaEventSynchronize(done),
                                  "cudaEventSynchronize", __FILE__, __LINE__));
        cudaEventDestroy(done);
      }
      done_.clear();
      return s;
    }

   private:
    CudaBackend* const backend_;
    char* const base_;
    const int64_t size_;
    // (lane, event) for each lane this writer's copies went through: a few.
    std::vector<std::pair<const Lane*, cudaEvent_t>> done_;
  };

  // Runs f(lane) on a free lane of this device, waiting for one, after the
  // health check; an error f returns is tracked (a sticky one makes the
  // backend unhealthy).
  template <typename F>
  absl::Status OnLane(F&& f) {
    COALESCE_RETURN_IF_ERROR(Health());
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    Lane* lane = AcquireLane();
    const absl::Status s = f(*lane);
    ReleaseLane(lane);
    return Track(s);
  }

  // OnLane for the bench harness, whose launches are like every unsampled
  // one: never inside a sampled range, whose counters would take the
  // benchmark's kernels for the request's.
  template <typename F>
  absl::Status OnLaneUnsampled(F&& f) {
    return OnLane([&](Lane& l) -> absl::Status {
      cuda::CuptiSampler* sampler = sampler_.load(std::memory_order_acquire);
      std::optional<absl::ReaderMutexLock> outside_ranges;
      if (sampler != nullptr) outside_ranges.emplace(sampler->launch_lock());
      return f(l);
    });
  }

  Lane* AcquireLane() {
    std::unique_lock<std::mutex> lock(lanes_mu_);
    lanes_cv_.wait(lock, [&] { return !free_lanes_.empty(); });
    Lane* l = free_lanes_.back();
    free_lanes_.pop_back();
    return l;
  }
  void ReleaseLane(Lane* l) {
    {
      std::lock_guard<std::mutex> lock(lanes_mu_);
      free_lanes_.push_back(l);
    }
    lanes_cv_.notify_one();
  }

  // Marks the backend unhealthy after an error that poisons the context.
  absl::Status Track(absl::Status s) {
    if (s.ok()) return s;
    const cudaError_t e = cudaPeekAtLastError();
    if (IsStickyError(e) || IsStickyError(cudaStreamQuery(nullptr))) {
      absl::MutexLock lock(&health_mu_);
      health_ = absl::InternalError(
          absl::StrCat("CUDA context is unusable after: ", s.message()));
    }
    return s;
  }

  // Host -> device through the lane's two pinned chunks: the memcpy into one
  // chunk overlaps the DMA of the other.
  absl::Status StageIn(Lane& l, void* dst, const void* src, size_t n) {
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(dst);
    for (size_t off = 0, i = 0; off < n; off += kStagingChunkBytes, ++i) {
      const size_t len = std::min(kStagingChunkBytes, n - off);
      const int b = static_cast<int>(i & 1);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.staging_free[b]));
      std::memcpy(l.staging[b], s + off, len);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          d + off, l.staging[b], len, cudaMemcpyHostToDevice, l.stream));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventRecord(l.staging_free[b], l.stream));
    }
    return absl::OkStatus();
  }

  // Device -> host: the DMA of chunk i overlaps the memcpy out of chunk i-1.
  absl::Status StageOut(Lane& l, void* dst, const void* src, size_t n) {
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(dst);
    size_t prev_off = 0, prev_len = 0;
    int prev_b = -1;
    for (size_t off = 0, i = 0; off < n; off += kStagingChunkBytes, ++i) {
      const size_t len = std::min(kStagingChunkBytes, n - off);
      const int b = static_cast<int>(i & 1);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          l.staging[b], s + off, len, cudaMemcpyDeviceToHost, l.stream));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventRecord(l.staging_free[b], l.stream));
      if (prev_b >= 0) {
        COALESCE_CUDA_RETURN_IF_ERROR(
            cudaEventSynchronize(l.staging_free[prev_b]));
        std::memcpy(d + prev_off, l.staging[prev_b], prev_len);
      }
      prev_off = off;
      prev_len = len;
      prev_b = b;
    }
    if (prev_b >= 0) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventSynchronize(l.staging_free[prev_b]));
      std::memcpy(d + prev_off, l.staging[prev_b], prev_len);
    }
    return absl::OkStatus();
  }

  // Device buffers of one call, freed stream-ordered on every exit path.
  struct DeviceBuffers {
    cudaStream_t stream;
    std::vector<void*> ptrs;
    ~DeviceBuffers() {
      for (void* q : ptrs) cudaFreeAsync(q, stream);
    }
    absl::StatusOr<void*> Alloc(int64_t bytes) {
      if (bytes <= 0) return nullptr;
      void* q = nullptr;
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&q, bytes, stream));
      ptrs.push_back(q);
      return q;
    }
  };

  // Host operands are staged through pooled device buffers; resident ones
  // (device memory from AllocateResident) are used in place, so the h2d and
  // d2h times count only the host operands.
  absl::Status ExecuteOnLane(Lane& l, const KernelVariant& v, const Problem& p,
                             const Operands& operands, RunResult* result) {
    const OperandSizes sizes = OperandBytes(p);
    DeviceBuffers bufs{l.stream, {}};
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
            StageIn(l, d, operands.inputs[i], sizes.inputs[i]));
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
        RunVariant(l, v, p, dev, ctx, &counters, &sample_error));
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      if (sizes.outputs[i] > 0 &&
          operands.output_space(i) == MemorySpace::kHost) {
        COALESCE_RETURN_IF_ERROR(
            StageOut(l, operands.outputs[i], dev.outputs[i], sizes.outputs[i]));
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
        // (serialization, counter set-up): the device's own time of the
        // kernels replaces them.
        result->kernel_seconds = counters->gpu_seconds;
        result->sampled = true;
        result->achieved_occupancy = counters->achieved_occupancy;
        result->dram_bytes_per_second = counters->DramBytesPerSecond();
      }
    }
    return absl::OkStatus();
  }

  // Runs v on the lane's stream. With sampling on, a launch the picker
  // chooses runs inside a sampled range (*counters), and every other one
  // holds the sampler's launch lock shared so that none falls inside a
  // range. A chosen launch runs unsampled when another range is open, or
  // when the profiler fails before it (*sample_error says why, also for a
  // failure after it); only the variant's own errors fail the call.
  // The lane's kernel_start and kernel_stop events are recorded around the
  // launches.
  absl::Status RunVariant(Lane& l, const KernelVariant& v, const Problem& p,
                          const Operands& dev, ExecContext& ctx,
                          std::optional<cuda::RangeCounters>* counters,
                          absl::Status* sample_error) {
    cuda::CuptiSampler* sampler = sampler_.load(std::memory_order_acquire);
    if (sampler == nullptr) return RunGated(l, v, p, dev, ctx);
    if (picker_.Pick()) {
      // No gate: the range's own device time replaces the events' span.
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_start, l.stream));
      cuda::CuptiSampler::Outcome sampled =
          sampler->TrySample(l.stream, [&]() -> absl::StatusOr<int> {
            COALESCE_RETURN_IF_ERROR(v.Run(p, dev, ctx));
            return ctx.launch.launches;
          });
      if (sampled.launched) {
        COALESCE_RETURN_IF_ERROR(sampled.launch_status);
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_stop, l.stream));
        if (sampled.counters.ok()) {
          *counters = *sampled.counters;
        } else {
          *sample_error = sampled.counters.status();
        }
        return absl::OkStatus();
      }
      if (!sampled.busy) *sample_error = sampled.counters.status();
    }
    // The gate's kernel too stays out of every range.
    absl::ReaderMutexLock lock(sampler->launch_lock());
    return RunGated(l, v, p, dev, ctx);
  }

  // v's launches between kernel_start and kernel_stop, all queued behind the
  // lane's closed gate before it opens: the events then time the kernels,
  // not the host's launch calls (cuda::LaunchGate).
  absl::Status RunGated(Lane& l, const KernelVariant& v, const Problem& p,
                        const Operands& dev, ExecContext& ctx) {
    COALESCE_RETURN_IF_ERROR(l.gate->Close(l.stream));
    absl::Cleanup open = [&l] { l.gate->Open(); };
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_start, l.stream));
    COALESCE_RETURN_IF_ERROR(v.Run(p, dev, ctx));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.kernel_stop, l.stream));
    return absl::OkStatus();
  }

  // Buffer sets of set_bytes each to rotate so that the timed runs read
  // from HBM, not from L2, in at most a quarter of the device's memory.
  int BenchmarkSets(int64_t set_bytes, const BenchmarkOptions& opts) const {
    return static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(
               BenchmarkBufferSets(set_bytes, opts, 64),
               device_.memory_bytes / 4 / std::max<int64_t>(set_bytes, 1))));
  }

  absl::StatusOr<BenchmarkResult> BenchmarkOnLane(
      Lane& l, const KernelVariant& v, const Problem& p,
      const BenchmarkOptions& opts) {
    const OperandSizes sizes = OperandBytes(p);
    const DType dtype = DTypeOf(p);
    const int sets = BenchmarkSets(MinBytesMoved(p), opts);
    DeviceBuffers bufs{l.stream, {}};
    std::vector<Operands> ops(sets);
    for (int s = 0; s < sets; ++s) {
      for (int64_t b : sizes.inputs) {
        COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(b));
        if (d != nullptr) {
          COALESCE_RETURN_IF_ERROR(cuda::FillRandomDevice(
              d, dtype, b / static_cast<int64_t>(ElementSize(dtype)),
              opts.seed * 131 + s * 7 + ops[s].inputs.size(), l.stream));
        }
        ops[s].inputs.push_back(d);
      }
      for (int64_t b : sizes.outputs) {
        COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(b));
        if (d != nullptr) {
          COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d, 0xff, b, l.stream));
        }
        ops[s].outputs.push_back(d);
      }
    }
    ExecContext ctx;
    ctx.stream = l.stream;
    ctx.device = &device_;
    // At least one run before the capture: a first call may do work that
    // stream capture forbids (cuBLASLt's lazy initialization invalidated the
    // capture under ncu with --warmup=0) and loads the kernel's module.
    for (int i = 0; i < std::max(1, opts.warmup); ++i) {
      COALESCE_RETURN_IF_ERROR(v.Run(p, ops[i % sets], ctx));
    }
    auto run = [&](int rep) {
      ctx.launch = LaunchInfo{};
      return v.Run(p, ops[rep % sets], ctx);
    };
    COALESCE_ASSIGN_OR_RETURN(RepTimes t, TimeReps(l, opts.reps, run));
    return SummarizeBenchmark(std::move(t.per_launch), t.back_to_back, sets,
                              ctx.launch);
  }

  // Benchmark's protocol for a copy of bytes (BenchmarkCopy): each of the
  // copy kernels timed on its own, the faster back to back reported (as the
  // start-up peak takes the better of them).
  absl::StatusOr<BenchmarkResult> BenchmarkCopyOnLane(
      Lane& l, int64_t bytes, const BenchmarkOptions& opts) {
    const int sets = BenchmarkSets(2 * bytes, opts);
    DeviceBuffers bufs{l.stream, {}};
    std::vector<void*> in(sets), out(sets);
    for (int s = 0; s < sets; ++s) {
      COALESCE_ASSIGN_OR_RETURN(in[s], bufs.Alloc(bytes));
      COALESCE_ASSIGN_OR_RETURN(out[s], bufs.Alloc(bytes));
      // A copy's time does not depend on the bytes: set as the start-up
      // peak's are, the outputs poisoned as a variant's.
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(in[s], 0x3c, bytes, l.stream));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(out[s], 0xff, bytes, l.stream));
    }
    std::optional<BenchmarkResult> best;
    for (int config = 0; config < cuda::kCopyConfigs; ++config) {
      auto run = [&](int rep) {
        return cuda::LaunchCopy(config, in[rep % sets], out[rep % sets], bytes,
                                l.stream);
      };
      for (int i = 0; i < std::max(1, opts.warmup); ++i) {
        COALESCE_RETURN_IF_ERROR(run(i));
      }
      COALESCE_ASSIGN_OR_RETURN(RepTimes t, TimeReps(l, opts.reps, run));
      if (!best.has_value() || t.back_to_back < best->back_to_back_seconds) {
        best = SummarizeBenchmark(std::move(t.per_launch), t.back_to_back, sets,
                                  LaunchInfo{});
      }
    }
    return *best;
  }

  // Timing events, destroyed on every exit path.
  struct Events {
    std::vector<cudaEvent_t> ev;
    ~Events() {
      for (cudaEvent_t e : ev) cudaEventDestroy(e);
    }
    absl::Status Create(int n) {
      for (int i = 0; i < n; ++i) {
        cudaEvent_t e = nullptr;
        COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
        ev.push_back(e);
      }
      return absl::OkStatus();
    }
    absl::StatusOr<double> Seconds(int from, int to) const {
      float ms = 0;
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&ms, ev[from], ev[to]));
      return ms * 1e-3;
    }
  };

  struct RepTimes {
    std::vector<double> per_launch;  // seconds of each run, in order
    double back_to_back = 0;         // mean seconds per run
  };

  // Times reps runs of run(rep) on the lane's stream, two ways: an event,
  // then each run followed by its event (per launch); then an event, reps
  // more runs with nothing between them, and an event (back to back). rep
  // counts on through both parts, 0 to 2 reps - 1, for run to rotate its
  // buffer sets by, so the back-to-back runs do not find the per-launch
  // ones' data in L2. Both parts are captured as one CUDA graph, replayed
  // twice (the first replay warms the graph up): the graph issues the runs
  // with no host launch gap, so even the per-launch times are the GPU's and
  // not the CPU's launch rate. Falls back to plain launches where capture
  // fails (then the back-to-back runs are back to back only as far as the
  // host enqueues them faster than they run).
  absl::StatusOr<RepTimes> TimeReps(
      Lane& l, int reps, absl::FunctionRef<absl::Status(int rep)> run) {
    RepTimes t;
    if (reps <= 0) return t;
    // ev[0..reps]: per launch; ev[reps + 1], ev[reps + 2]: back to back.
    Events events;
    COALESCE_RETURN_IF_ERROR(events.Create(reps + 3));
    auto record = [&](int i) {
      // External records become event nodes of a captured graph.
      return cuda::CudaStatus(cudaEventRecordWithFlags(events.ev[i], l.stream,
                                                       cudaEventRecordExternal),
                              "cudaEventRecordWithFlags", __FILE__, __LINE__);
    };
    auto enqueue = [&]() -> absl::Status {
      COALESCE_RETURN_IF_ERROR(record(0));
      for (int i = 0; i < reps; ++i) {
        COALESCE_RETURN_IF_ERROR(run(i));
        COALESCE_RETURN_IF_ERROR(record(i + 1));
      }
      COALESCE_RETURN_IF_ERROR(record(reps + 1));
      for (int i = 0; i < reps; ++i) COALESCE_RETURN_IF_ERROR(run(reps + i));
      return record(reps + 2);
    };
    COALESCE_RETURN_IF_ERROR(ReplayCaptured(l, enqueue));
    for (int i = 0; i < reps; ++i) {
      COALESCE_ASSIGN_OR_RETURN(double s, events.Seconds(i, i + 1));
      t.per_launch.push_back(s);
    }
    COALESCE_ASSIGN_OR_RETURN(double all, events.Seconds(reps + 1, reps + 2));
    t.back_to_back = all / reps;
    return t;
  }

  // Runs what enqueue puts on the lane's stream as a captured graph,
  // launched twice, and waits for it; enqueues it plainly where capture
  // fails.
  absl::Status ReplayCaptured(Lane& l,
                              absl::FunctionRef<absl::Status()> enqueue) {
    cudaGraph_t graph = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(l.stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status captured = enqueue();
    const cudaError_t end = cudaStreamEndCapture(l.stream, &graph);
    cudaGraphExec_t exec = nullptr;
    if (captured.ok() && end == cudaSuccess &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      absl::Status st = cuda::CudaStatus(cudaGraphLaunch(exec, l.stream),
                                         "cudaGraphLaunch", __FILE__, __LINE__);
      if (st.ok()) {
        st = cuda::CudaStatus(cudaGraphLaunch(exec, l.stream),
                              "cudaGraphLaunch", __FILE__, __LINE__);
      }
      if (st.ok()) {
        st = cuda::CudaStatus(cudaStreamSynchronize(l.stream),
                              "cudaStreamSynchronize", __FILE__, __LINE__);
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      return st;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    COALESCE_RETURN_IF_ERROR(enqueue());
    COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(l.stream));
    return absl::OkStatus();
  }

  DeviceInfo device_;
  std::vector<DeviceInfo> others_;
  VariantRegistry registry_;
  // Allocates and frees resident memory (AllocateResident).
  cudaStream_t resident_stream_ = nullptr;
  std::vector<Lane> lanes_;
  std::mutex lanes_mu_;
  std::condition_variable lanes_cv_;
  std::vector<Lane*> free_lanes_;
  mutable absl::Mutex health_mu_;
  absl::Status health_;
  // Device-sampled counters (EnableProfileSampling): the sampler, published
  // through sampler_ once created, and the picker that chooses the launches
  // it brackets.
  absl::Mutex sampling_mu_;
  std::unique_ptr<cuda::CuptiSampler> sampler_owner_
      ABSL_GUARDED_BY(sampling_mu_);
  std::atomic<cuda::CuptiSampler*> sampler_{nullptr};
  cuda::LaunchPicker picker_;
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

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  COALESCE_ASSIGN_OR_RETURN(DeviceInfo info, ProbeDevice(device));
  auto backend = std::make_unique<CudaBackend>(std::move(info));
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
