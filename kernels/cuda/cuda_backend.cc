#include "kernels/cuda/cuda_backend.h"

#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "kernels/core/stacking.h"
#include "kernels/cuda/profiling/gpm_reader.h"
#include "kernels/cuda/profiling/sampled_launch.h"
#include "kernels/cuda/runtime/batch_copy.h"
#include "kernels/cuda/runtime/benchmark.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/device_buffers.h"
#include "kernels/cuda/runtime/device_clock.h"
#include "kernels/cuda/runtime/lane_pool.h"
#include "kernels/cuda/runtime/resident_memory.h"
#include "kernels/cuda/runtime/staging.h"

namespace coalesce {
namespace {

using cuda::Lane;

// Staging fills place each region at a multiple of 16 bytes, so that the
// bounce buffer's slices start 16-byte aligned for BatchCopy's vectors.
constexpr size_t kFillAlignment = 16;
size_t AlignFill(size_t n) {
  return (n + kFillAlignment - 1) / kFillAlignment * kFillAlignment;
}

// One part's slice of a merged operand that lives in host memory.
struct HostSlice {
  char* merged;    // its place in the merged device buffer
  const void* in;  // an input's bytes
  void* out;       // an output's destination
  size_t bytes;
};

// Host bytes moved through one fill of a lane's pinned staging buffer:
// pieces packed into it by memcpy, and regions (each a contiguous device
// range) moved to or from it by one cudaMemcpyAsync each.
struct StagingFill {
  struct Piece {
    size_t offset;  // in the staging buffer
    const void* in;
    void* out;
    size_t bytes;
  };
  struct Region {
    void* device;
    size_t offset;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  std::vector<Region> regions;
  size_t bytes = 0;  // the staging buffer's bytes taken so far
};

// Adds to fill the host slices of merged operands (one list per operand, in
// merged order). An operand whose host slices lie back to back in its
// merged buffer is one region; the slices of the others share a bounce
// buffer (allocated from bufs), one region, each slice a BatchCopy segment
// between it and the merged buffer (bounce to merged when to_device, else
// merged to bounce): one copy per operand at most instead of one per part.
// false, with nothing added, when they do not fit the staging buffer.
absl::StatusOr<bool> PlanFill(absl::Span<const std::vector<HostSlice>> host,
                              bool to_device, cuda::DeviceBuffers& bufs,
                              StagingFill& fill,
                              std::vector<cuda::CopySegment>& segments) {
  // Sizes first: nothing is allocated for a plan that does not fit.
  size_t direct = 0, bounced = 0;
  std::vector<bool> contiguous(host.size(), false);
  for (size_t o = 0; o < host.size(); ++o) {
    const std::vector<HostSlice>& slices = host[o];
    if (slices.empty()) continue;
    size_t sum = 0;
    for (const HostSlice& s : slices) sum += s.bytes;
    const size_t span = static_cast<size_t>(
        slices.back().merged + slices.back().bytes - slices.front().merged);
    contiguous[o] = span == sum;
    if (contiguous[o]) {
      direct += AlignFill(sum);
    } else {
      for (const HostSlice& s : slices) bounced += AlignFill(s.bytes);
    }
  }
  if (fill.bytes + direct + bounced > cuda::kStagingChunkBytes) return false;
  char* bounce = nullptr;
  if (bounced > 0) {
    COALESCE_ASSIGN_OR_RETURN(void* b,
                              bufs.Alloc(static_cast<int64_t>(bounced)));
    bounce = static_cast<char*>(b);
  }
  const size_t bounce_offset = fill.bytes + direct;
  size_t in_bounce = 0;
  for (size_t o = 0; o < host.size(); ++o) {
    const std::vector<HostSlice>& slices = host[o];
    if (slices.empty()) continue;
    if (!contiguous[o]) {
      for (const HostSlice& s : slices) {
        fill.pieces.push_back(
            {bounce_offset + in_bounce, s.in, s.out, s.bytes});
        char* b = bounce + in_bounce;
        const auto n = static_cast<int64_t>(s.bytes);
        segments.push_back(to_device ? cuda::CopySegment{b, s.merged, n}
                                     : cuda::CopySegment{s.merged, b, n});
        in_bounce += AlignFill(s.bytes);
      }
      continue;
    }
    size_t within = 0;
    for (const HostSlice& s : slices) {
      fill.pieces.push_back({fill.bytes + within, s.in, s.out, s.bytes});
      within += s.bytes;
    }
    fill.regions.push_back({slices.front().merged, fill.bytes, within});
    fill.bytes += AlignFill(within);
  }
  if (bounced > 0) {
    fill.regions.push_back({bounce, fill.bytes, bounced});
    fill.bytes += bounced;
  }
  return true;
}

// The operand sizes of each part, once Backend::ExecuteStacked's contract
// is checked: one operand set per part, every part an op of merged's
// operand count, and the parts' stacked sizes adding up to merged's (the
// shared ones equal to it), so that no copy runs past a buffer.
absl::StatusOr<std::vector<OperandSizes>> StackedSizes(
    const Problem& merged, const StackInfo& info,
    absl::Span<const Problem> parts, absl::Span<const Operands> operands) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot stack ", parts.size(), " parts with ", operands.size(),
        " operand sets into ", Describe(merged), ": ", why));
  };
  if (parts.empty() || parts.size() != operands.size()) {
    return invalid("one operand set per part, at least one part");
  }
  const OperandSizes m = OperandBytes(merged);
  std::vector<OperandSizes> sizes;
  sizes.reserve(parts.size());
  for (size_t j = 0; j < parts.size(); ++j) {
    sizes.push_back(OperandBytes(parts[j]));
    if (sizes[j].inputs.size() != m.inputs.size() ||
        sizes[j].outputs.size() != m.outputs.size() ||
        operands[j].inputs.size() < m.inputs.size() ||
        operands[j].outputs.size() < m.outputs.size()) {
      return invalid(absl::StrCat("part ", j, " has other operands"));
    }
  }
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    int64_t total = 0;
    for (const OperandSizes& s : sizes) total += s.inputs[i];
    if ((info.input_stacked[i] ? total : sizes[0].inputs[i]) != m.inputs[i]) {
      return invalid(absl::StrCat("input ", i, "'s sizes do not add up"));
    }
  }
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    int64_t total = 0;
    for (const OperandSizes& s : sizes) total += s.outputs[o];
    if (total != m.outputs[o]) {
      return invalid(absl::StrCat("output ", o, "'s sizes do not add up"));
    }
  }
  return sizes;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(DeviceInfo info, int lanes, bool launch_graphs)
      : device_(std::move(info)),
        lane_count_(lanes),
        launch_graphs_(launch_graphs),
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
    clock_.Shutdown();
  }

  absl::Status Init() {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    COALESCE_RETURN_IF_ERROR(resident_.Init());
    COALESCE_RETURN_IF_ERROR(lanes_.Init(lane_count_));
    COALESCE_RETURN_IF_ERROR(clock_.Init());
    COALESCE_ASSIGN_OR_RETURN(
        device_.measured_copy_bandwidth,
        cuda::MeasureCopyPeak(device_, lanes_.first_stream()));
    return lanes_.OnLane([&](Lane& l) -> absl::Status {
      COALESCE_ASSIGN_OR_RETURN(
          device_.event_overhead_seconds,
          cuda::MeasureEventOverhead(*l.gate, l.stream, l.kernel_start,
                                     l.kernel_stop));
      if (launch_graphs_) {
        COALESCE_ASSIGN_OR_RETURN(device_.graph_event_overhead_seconds,
                                  cuda::MeasureGraphEventOverhead(
                                      l.stream, l.kernel_start, l.kernel_stop));
      }
      return absl::OkStatus();
    });
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
  void DisableProfileSampling() override {
    cudaSetDevice(device_.ordinal);
    sampling_.Disable();
  }
  // Nsight Systems saves its buffered CUDA trace on cudaProfilerStop.
  void FlushProfilerData() override {
    cudaSetDevice(device_.ordinal);
    cudaProfilerStop();
  }

  // NVML GPM of this GPU, found by its UUID; DRAM_BW_UTIL is scaled by the
  // theoretical bandwidth from the device's properties.
  absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
  OpenDeviceActivityReader(int device) const override {
    COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
    COALESCE_ASSIGN_OR_RETURN(
        std::unique_ptr<cuda::GpmReader> reader,
        cuda::GpmReader::Create(device_.uuid, device_.theoretical_bandwidth));
    return std::unique_ptr<DeviceActivityReader>(std::move(reader));
  }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override {
    return lanes_.OnLane(
        [&](Lane& l) {
          absl::Status s = ExecuteOnLane(l, v, p, operands, result);
          // A failed call may leave work queued that writes resident
          // outputs, which the caller frees (on another stream) once this
          // returns.
          if (!s.ok()) cudaStreamSynchronize(l.stream);
          return s;
        },
        result != nullptr ? &result->stream_wait_seconds : nullptr);
  }

  absl::Status ExecuteStacked(const KernelVariant& v, const Problem& merged,
                              absl::Span<const Problem> parts,
                              absl::Span<const Operands> operands,
                              RunResult* result) override {
    const std::optional<StackInfo> info = StackInfoOf(merged);
    if (!info.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot stack ", parts.size(), " parts into ",
                       Describe(merged), ": it does not stack"));
    }
    COALESCE_ASSIGN_OR_RETURN(std::vector<OperandSizes> sizes,
                              StackedSizes(merged, *info, parts, operands));
    // One part is merged itself: its resident operands serve in place.
    if (parts.size() == 1) return Execute(v, merged, operands[0], result);
    return lanes_.OnLane(
        [&](Lane& l) {
          absl::Status s = ExecuteStackedOnLane(l, v, merged, *info, sizes,
                                                operands, result);
          if (!s.ok()) cudaStreamSynchronize(l.stream);
          return s;
        },
        result != nullptr ? &result->stream_wait_seconds : nullptr);
  }

  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override {
    return resident_.Allocate(bytes);
  }
  bool resident_is_host_addressable() const override { return false; }

  absl::StatusOr<std::shared_ptr<void>> OpenIpcMemory(
      absl::string_view handle, int device,
      int64_t* allocation_bytes) const override {
    COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
    if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a CUDA IPC memory handle has ", sizeof(cudaIpcMemHandle_t),
          " bytes, not ", handle.size()));
    }
    COALESCE_RETURN_IF_ERROR(Health());
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    void* ptr = nullptr;
    const cudaError_t opened =
        cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (opened != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it for the next call
      return absl::InvalidArgumentError(absl::StrCat(
          "the CUDA IPC memory handle does not open on device ",
          device_.ordinal, ": ", cudaGetErrorString(opened),
          " (it must come from cudaIpcGetMemHandle in another process on "
          "this host, for memory still allocated)"));
    }
    std::shared_ptr<void> memory(ptr, [device = device_.ordinal](void* p) {
      cudaSetDevice(device);
      cudaIpcCloseMemHandle(p);
    });
    // The allocation's size, from the driver (the runtime has no call for
    // it): a region may not claim more than was exported.
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDriverEntryPointByVersion(
        "cuMemGetAddressRange", &entry, 12000, cudaEnableDefault, &found));
    if (entry == nullptr || found != cudaDriverEntryPointSuccess) {
      return absl::InternalError(
          "the driver has no cuMemGetAddressRange to size the IPC memory");
    }
    using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUresult ranged = reinterpret_cast<AddressRange>(entry)(
        &base, &size, reinterpret_cast<CUdeviceptr>(ptr));
    if (ranged != CUDA_SUCCESS) {
      return absl::InternalError(absl::StrCat(
          "cuMemGetAddressRange of the IPC memory failed: error ", ranged));
    }
    // From the mapped pointer to the allocation's end.
    *allocation_bytes =
        static_cast<int64_t>(base + size - reinterpret_cast<CUdeviceptr>(ptr));
    return memory;
  }

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
    const Clock::time_point start = Clock::now();
    const std::shared_ptr<const cuda::ClockAnchor> anchor = clock_.Current();
    const OperandSizes sizes = OperandBytes(p);
    cuda::DeviceBuffers bufs{l.stream, {}};
    Operands dev;
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
    COALESCE_ASSIGN_OR_RETURN(const bool replayed,
                              MaybeReplay(l, v, p, operands, dev, ctx));
    if (!replayed) {
      COALESCE_RETURN_IF_ERROR(
          sampling_.Run(l, v, p, dev, ctx, &counters, &sample_error));
    }
    const Clock::time_point released = Clock::now();
    // StageOut waits for its copy, the last work queued: the call's end.
    bool waited = false;
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      if (sizes.outputs[i] > 0 &&
          operands.output_space(i) == MemorySpace::kHost) {
        COALESCE_RETURN_IF_ERROR(cuda::StageOut(
            l, operands.outputs[i], dev.outputs[i], sizes.outputs[i]));
        waited = true;
      }
    }
    if (!waited) {
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.kernel_stop));
    }
    COALESCE_RETURN_IF_ERROR(
        FillResult(l, ctx, counters, std::move(sample_error),
                   {start, released, Clock::now(), anchor.get()}, result));
    if (result != nullptr) result->graph_replayed = replayed;
    return absl::OkStatus();
  }

  // Launches v's call as the lane's graph of it (LaunchGraphs), capturing
  // the graph first on the call's second sighting; true when it did. Only
  // calls whose operands are all stored on the device (the addresses are
  // the call), outside profile sampling (whose ranges gate launches).
  // A call whose work a graph cannot hold falls back to the stream, for
  // good.
  absl::StatusOr<bool> MaybeReplay(Lane& l, const KernelVariant& v,
                                   const Problem& p, const Operands& operands,
                                   const Operands& dev, ExecContext& ctx) {
    if (!launch_graphs_ || sampling_.enabled()) return false;
    cuda::LaunchKey key{&v, p, {}};
    for (size_t i = 0; i < dev.inputs.size(); ++i) {
      if (dev.inputs[i] != nullptr &&
          operands.input_space(i) != MemorySpace::kResident) {
        return false;
      }
      key.operands.push_back(dev.inputs[i]);
    }
    for (size_t i = 0; i < dev.outputs.size(); ++i) {
      if (dev.outputs[i] != nullptr &&
          operands.output_space(i) != MemorySpace::kResident) {
        return false;
      }
      key.operands.push_back(dev.outputs[i]);
    }
    const cuda::LaunchGraphs::Graph* graph = l.graphs->Find(key);
    if (graph == nullptr) {
      if (!l.graphs->ShouldCapture(key)) return false;
      ExecContext captured = ctx;
      absl::StatusOr<cudaGraphExec_t> exec =
          CaptureCall(l, v, p, dev, captured);
      if (!exec.ok()) {
        cudaGetLastError();  // a refused capture leaves nothing behind
        l.graphs->Refuse(key);
        return false;
      }
      if (captured.launch.cold) {
        // One-time work (a module's load, a plan's build) ran during the
        // capture; the next sighting captures the call warm.
        cudaGraphExecDestroy(*exec);
        return false;
      }
      l.graphs->Put(key, *exec, captured.launch);
      graph = l.graphs->Find(key);
    }
    COALESCE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->exec, l.stream));
    ctx.launch = graph->launch;
    return true;
  }

  // v's launches between the lane's timing events, captured from the
  // lane's stream into an executable graph (nothing runs). Relaxed: other
  // threads' calls (an allocation, say) stay legal meanwhile.
  static absl::StatusOr<cudaGraphExec_t> CaptureCall(Lane& l,
                                                     const KernelVariant& v,
                                                     const Problem& p,
                                                     const Operands& dev,
                                                     ExecContext& ctx) {
    return cuda::CaptureGraph(
        l.stream, cudaStreamCaptureModeRelaxed, [&]() -> absl::Status {
          COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
              l.kernel_start, l.stream, cudaEventRecordExternal));
          COALESCE_RETURN_IF_ERROR(v.Run(p, dev, ctx));
          COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
              l.kernel_stop, l.stream, cudaEventRecordExternal));
          return absl::OkStatus();
        });
  }

  using Clock = std::chrono::steady_clock;
  // A call's host times: its start, the release of its kernels (their
  // launches queued, the inputs' copies before them) and its end (the
  // outputs in place); and the device clock's anchor, taken at the start.
  struct CallTimes {
    Clock::time_point start, released, end;
    const cuda::ClockAnchor* anchor;
  };

  // The kernels' events (kernel_stop reached) and the launch, into result;
  // h2d is the host's time to the kernels' release, d2h the time from there
  // to the end less the kernels'.
  static absl::Status FillResult(
      Lane& l, const ExecContext& ctx,
      const std::optional<cuda::RangeCounters>& counters,
      absl::Status sample_error, const CallTimes& t, RunResult* result) {
    if (result != nullptr) {
      float kern = 0;
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&kern, l.kernel_start, l.kernel_stop));
      const auto seconds = [](Clock::duration d) {
        return std::chrono::duration<double>(d).count();
      };
      result->h2d_seconds = seconds(t.released - t.start);
      result->kernel_seconds = kern * 1e-3;
      result->d2h_seconds =
          std::max(0.0, seconds(t.end - t.released) - kern * 1e-3);
      result->launch = ctx.launch;
      result->sample_error = std::move(sample_error);
      if (t.anchor != nullptr && !counters.has_value()) {
        // Telemetry only: a span that cannot be read stays unknown.
        absl::StatusOr<cuda::ClockSpan> span =
            cuda::DeviceClock::Span(*t.anchor, l.kernel_start, l.kernel_stop);
        if (span.ok()) {
          result->kernel_begin = span->begin;
          result->kernel_end = span->end;
        }
      }
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

  // One launch over the parts laid end to end, in a number of CUDA calls
  // that does not grow with the parts: a merged device buffer per stacked
  // input and per output; the host slices of all of them packed into one
  // staging fill (a cudaMemcpyAsync per operand, or per bounce buffer), the
  // resident ones gathered, and outputs scattered, by one BatchCopy each.
  // When the host bytes exceed one staging buffer, each slice is staged on
  // its own (StageIn, StageOut). Shared inputs come from operands[0].
  absl::Status ExecuteStackedOnLane(Lane& l, const KernelVariant& v,
                                    const Problem& merged,
                                    const StackInfo& info,
                                    absl::Span<const OperandSizes> sizes,
                                    absl::Span<const Operands> operands,
                                    RunResult* result) {
    const OperandSizes msizes = OperandBytes(merged);
    cuda::DeviceBuffers bufs{l.stream, {}};
    Operands dev;
    // Host slices that did not fit the staging fill: staged one by one.
    std::vector<HostSlice> stage_in, stage_out;
    const auto stage_all = [](absl::Span<const std::vector<HostSlice>> host,
                              std::vector<HostSlice>& staged) {
      for (const std::vector<HostSlice>& slices : host) {
        staged.insert(staged.end(), slices.begin(), slices.end());
      }
    };
    const Clock::time_point start = Clock::now();
    const std::shared_ptr<const cuda::ClockAnchor> anchor = clock_.Current();
    StagingFill in_fill, out_fill;
    std::vector<cuda::CopySegment> gather, scatter;

    // Stacked inputs, the point of the batch, get the staging fill first.
    std::vector<std::vector<HostSlice>> host_in(msizes.inputs.size());
    for (size_t i = 0; i < msizes.inputs.size(); ++i) {
      if (!info.input_stacked[i]) {
        dev.inputs.push_back(nullptr);  // shared: below
        continue;
      }
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(msizes.inputs[i]));
      dev.inputs.push_back(d);
      char* at = static_cast<char*>(d);
      for (size_t j = 0; j < sizes.size(); ++j) {
        const int64_t n = sizes[j].inputs[i];
        if (n > 0) {
          if (operands[j].input_space(i) == MemorySpace::kResident) {
            gather.push_back({operands[j].inputs[i], at, n});
          } else {
            host_in[i].push_back(
                {at, operands[j].inputs[i], nullptr, static_cast<size_t>(n)});
          }
        }
        at += n;
      }
    }
    COALESCE_ASSIGN_OR_RETURN(
        const bool inputs_fit,
        PlanFill(host_in, /*to_device=*/true, bufs, in_fill, gather));
    if (!inputs_fit) stage_all(host_in, stage_in);
    for (size_t i = 0; i < msizes.inputs.size(); ++i) {
      const int64_t n = msizes.inputs[i];
      if (info.input_stacked[i] || n == 0) continue;
      if (operands[0].input_space(i) == MemorySpace::kResident) {
        dev.inputs[i] = operands[0].inputs[i];
        continue;
      }
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(n));
      dev.inputs[i] = d;
      const std::vector<HostSlice> shared = {{static_cast<char*>(d),
                                              operands[0].inputs[i], nullptr,
                                              static_cast<size_t>(n)}};
      COALESCE_ASSIGN_OR_RETURN(
          const bool fits, PlanFill(absl::MakeConstSpan(&shared, 1),
                                    /*to_device=*/true, bufs, in_fill, gather));
      if (!fits) stage_in.push_back(shared[0]);
    }

    // Outputs: merged buffers, sliced back to the parts that want them.
    std::vector<std::vector<HostSlice>> host_out(msizes.outputs.size());
    for (size_t o = 0; o < msizes.outputs.size(); ++o) {
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(msizes.outputs[o]));
      dev.outputs.push_back(d);
      char* at = static_cast<char*>(d);
      for (size_t j = 0; j < sizes.size(); ++j) {
        const int64_t n = sizes[j].outputs[o];
        void* dst = operands[j].outputs[o];
        if (n > 0 && dst != nullptr) {
          if (operands[j].output_space(o) == MemorySpace::kResident) {
            scatter.push_back({at, dst, n});
          } else {
            host_out[o].push_back({at, nullptr, dst, static_cast<size_t>(n)});
          }
        }
        at += n;
      }
    }
    COALESCE_ASSIGN_OR_RETURN(
        const bool outputs_fit,
        PlanFill(host_out, /*to_device=*/false, bufs, out_fill, scatter));
    if (!outputs_fit) stage_all(host_out, stage_out);

    // Host to device. StageIn alternates the staging buffers from the
    // first; the fill takes the one it did not use last, whose copy is the
    // earlier one, and waits for that copy as StageIn would.
    int last_staged = -1;
    for (const HostSlice& s : stage_in) {
      COALESCE_RETURN_IF_ERROR(cuda::StageIn(l, s.merged, s.in, s.bytes));
      last_staged =
          static_cast<int>(((s.bytes - 1) / cuda::kStagingChunkBytes) & 1);
    }
    if (!in_fill.regions.empty()) {
      const int b = last_staged == 0 ? 1 : 0;
      char* staging = static_cast<char*>(l.staging[b]);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.staging_free[b]));
      for (const StagingFill::Piece& p : in_fill.pieces) {
        std::memcpy(staging + p.offset, p.in, p.bytes);
      }
      for (const StagingFill::Region& r : in_fill.regions) {
        COALESCE_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(r.device, staging + r.offset, r.bytes,
                            cudaMemcpyHostToDevice, l.stream));
      }
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventRecord(l.staging_free[b], l.stream));
    }
    COALESCE_RETURN_IF_ERROR(cuda::BatchCopy(gather, l.stream));

    ExecContext ctx;
    ctx.stream = l.stream;
    ctx.device = &device_;
    std::optional<cuda::RangeCounters> counters;
    absl::Status sample_error;
    COALESCE_RETURN_IF_ERROR(
        sampling_.Run(l, v, merged, dev, ctx, &counters, &sample_error));
    const Clock::time_point released = Clock::now();

    // Device to host. The device writes the fill's staging buffer in stream
    // order after every earlier copy out of it; staging_free marks the end
    // of this use for a later StageIn's host writes.
    COALESCE_RETURN_IF_ERROR(cuda::BatchCopy(scatter, l.stream));
    char* out_staging = static_cast<char*>(l.staging[0]);
    if (!out_fill.regions.empty()) {
      for (const StagingFill::Region& r : out_fill.regions) {
        COALESCE_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(out_staging + r.offset, r.device, r.bytes,
                            cudaMemcpyDeviceToHost, l.stream));
      }
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventRecord(l.staging_free[0], l.stream));
    }
    for (const HostSlice& s : stage_out) {
      COALESCE_RETURN_IF_ERROR(cuda::StageOut(l, s.out, s.merged, s.bytes));
    }
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(l.done, l.stream));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(l.done));
    for (const StagingFill::Piece& p : out_fill.pieces) {
      std::memcpy(p.out, out_staging + p.offset, p.bytes);
    }
    return FillResult(l, ctx, counters, std::move(sample_error),
                      {start, released, Clock::now(), anchor.get()}, result);
  }

  // Destroyed in reverse: the sampler, the lanes' gates (the lanes
  // themselves go in the destructor), then the variants.
  DeviceInfo device_;
  const int lane_count_;
  const bool launch_graphs_;
  std::vector<DeviceInfo> others_;
  VariantRegistry registry_;
  cuda::LanePool lanes_;
  cuda::ResidentMemory resident_;
  cuda::DeviceClock clock_;
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
  d.uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) d.uuid += '-';
    absl::StrAppend(&d.uuid,
                    absl::Hex(static_cast<unsigned char>(prop.uuid.bytes[i]),
                              absl::kZeroPad2));
  }
  d.runtime_version =
      absl::StrCat(CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10);
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

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device,
                                                           int lanes,
                                                           bool launch_graphs) {
  if (lanes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA lanes must be >= 0, not ", lanes));
  }
  COALESCE_ASSIGN_OR_RETURN(DeviceInfo info, ProbeDevice(device));
  auto backend = std::make_unique<CudaBackend>(
      std::move(info), lanes > 0 ? lanes : kDefaultCudaLanes, launch_graphs);
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
