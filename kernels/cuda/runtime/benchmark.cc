#include "kernels/cuda/runtime/benchmark.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/device_buffers.h"
#include "kernels/cuda/runtime/device_util.h"

namespace coalesce::cuda {
namespace {

// Bytes of the start-up copy that defines the peak: 2 x 512 MiB, far above
// the 60 MB L2 of an H200.
constexpr int64_t kPeakProbeBytes = int64_t{512} << 20;

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
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ev[from], ev[to]));
    return ms * 1e-3;
  }
};

struct RepTimes {
  std::vector<double> per_launch;  // seconds of each run, in order
  double back_to_back = 0;         // mean seconds per run
};

// Buffer sets of set_bytes each to rotate so that the timed runs read
// from HBM, not from L2, in at most a quarter of the device's memory.
int BenchmarkSets(int64_t set_bytes, const BenchmarkOptions& opts,
                  const DeviceInfo& device) {
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(
             BenchmarkBufferSets(set_bytes, opts, 64),
             device.memory_bytes / 4 / std::max<int64_t>(set_bytes, 1))));
}

// Waits until stream is idle, polling: the host thread sleeps instead of
// spinning in cudaStreamSynchronize, and a cancelled benchmark returns at
// once. A kernel cannot be stopped: the device finishes what was queued,
// and the buffers, freed in stream order, outlive it.
absl::Status WaitForStream(cudaStream_t stream,
                           const std::function<bool()>& cancelled) {
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return absl::OkStatus();
    if (state != cudaErrorNotReady) {
      return CudaStatus(state, "cudaStreamQuery", __FILE__, __LINE__);
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          "benchmark cancelled while the device ran it");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Runs what enqueue puts on stream as a captured graph, launched twice,
// and waits for it; enqueues it plainly where capture fails.
absl::Status ReplayCaptured(cudaStream_t stream,
                            absl::FunctionRef<absl::Status()> enqueue,
                            const std::function<bool()>& cancelled) {
  cudaGraph_t graph = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status captured = enqueue();
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (captured.ok() && end == cudaSuccess &&
      cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    absl::Status st = CudaStatus(cudaGraphLaunch(exec, stream),
                                 "cudaGraphLaunch", __FILE__, __LINE__);
    if (st.ok()) {
      st = CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch",
                      __FILE__, __LINE__);
    }
    if (st.ok()) st = WaitForStream(stream, cancelled);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return st;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  COALESCE_RETURN_IF_ERROR(enqueue());
  return WaitForStream(stream, cancelled);
}

// Times reps runs of run(rep) on stream, two ways: an event, then each run
// followed by its event (per launch); then an event, reps more runs with
// nothing between them, and an event (back to back). rep counts on through
// both parts, 0 to 2 reps - 1, for run to rotate its buffer sets by, so the
// back-to-back runs do not find the per-launch ones' data in L2. Both parts
// are captured as one CUDA graph, replayed twice (the first replay warms
// the graph up): the graph issues the runs with no host launch gap, so even
// the per-launch times are the GPU's and not the CPU's launch rate. Falls
// back to plain launches where capture fails (then the back-to-back runs
// are back to back only as far as the host enqueues them faster than they
// run).
absl::StatusOr<RepTimes> TimeReps(
    cudaStream_t stream, int reps, absl::FunctionRef<absl::Status(int rep)> run,
    const std::function<bool()>& cancelled = nullptr) {
  RepTimes t;
  if (reps <= 0) return t;
  // ev[0..reps]: per launch; ev[reps + 1], ev[reps + 2]: back to back.
  Events events;
  COALESCE_RETURN_IF_ERROR(events.Create(reps + 3));
  auto record = [&](int i) {
    // External records become event nodes of a captured graph.
    return CudaStatus(
        cudaEventRecordWithFlags(events.ev[i], stream, cudaEventRecordExternal),
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
  COALESCE_RETURN_IF_ERROR(ReplayCaptured(stream, enqueue, cancelled));
  for (int i = 0; i < reps; ++i) {
    COALESCE_ASSIGN_OR_RETURN(double s, events.Seconds(i, i + 1));
    t.per_launch.push_back(s);
  }
  COALESCE_ASSIGN_OR_RETURN(double all, events.Seconds(reps + 1, reps + 2));
  t.back_to_back = all / reps;
  return t;
}

}  // namespace

absl::StatusOr<BenchmarkResult> BenchmarkVariant(const KernelVariant& v,
                                                 const Problem& p,
                                                 const BenchmarkOptions& opts,
                                                 const DeviceInfo& device,
                                                 cudaStream_t stream) {
  // Asked before the buffers are made, and while the device runs the
  // warm-up and the timed graph (a large GEMM's runs take seconds).
  if (opts.cancelled && opts.cancelled()) {
    return absl::CancelledError("benchmark cancelled before it started");
  }
  const OperandSizes sizes = OperandBytes(p);
  const DType dtype = DTypeOf(p);
  const int sets = BenchmarkSets(MinBytesMoved(p), opts, device);
  DeviceBuffers bufs{stream, {}};
  std::vector<Operands> ops(sets);
  for (int s = 0; s < sets; ++s) {
    for (int64_t b : sizes.inputs) {
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(b));
      if (d != nullptr) {
        COALESCE_RETURN_IF_ERROR(FillRandomDevice(
            d, dtype, b / static_cast<int64_t>(ElementSize(dtype)),
            opts.seed * 131 + s * 7 + ops[s].inputs.size(), stream));
      }
      ops[s].inputs.push_back(d);
    }
    for (int64_t b : sizes.outputs) {
      COALESCE_ASSIGN_OR_RETURN(void* d, bufs.Alloc(b));
      if (d != nullptr) {
        COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d, 0xff, b, stream));
      }
      ops[s].outputs.push_back(d);
    }
  }
  ExecContext ctx;
  ctx.stream = stream;
  ctx.device = &device;
  // At least one run before the capture: a first call may do work that
  // stream capture forbids (cuBLASLt's lazy initialization invalidated the
  // capture under ncu with --warmup=0) and loads the kernel's module.
  for (int i = 0; i < std::max(1, opts.warmup); ++i) {
    COALESCE_RETURN_IF_ERROR(v.Run(p, ops[i % sets], ctx));
  }
  COALESCE_RETURN_IF_ERROR(WaitForStream(stream, opts.cancelled));
  auto run = [&](int rep) {
    ctx.launch = LaunchInfo{};
    return v.Run(p, ops[rep % sets], ctx);
  };
  COALESCE_ASSIGN_OR_RETURN(RepTimes t,
                            TimeReps(stream, opts.reps, run, opts.cancelled));
  return SummarizeBenchmark(std::move(t.per_launch), t.back_to_back, sets,
                            ctx.launch);
}

absl::StatusOr<BenchmarkResult> BenchmarkDeviceCopy(
    int64_t bytes, const BenchmarkOptions& opts, const DeviceInfo& device,
    cudaStream_t stream) {
  const int sets = BenchmarkSets(2 * bytes, opts, device);
  DeviceBuffers bufs{stream, {}};
  std::vector<void*> in(sets), out(sets);
  for (int s = 0; s < sets; ++s) {
    COALESCE_ASSIGN_OR_RETURN(in[s], bufs.Alloc(bytes));
    COALESCE_ASSIGN_OR_RETURN(out[s], bufs.Alloc(bytes));
    // A copy's time does not depend on the bytes: set as the start-up
    // peak's are, the outputs poisoned as a variant's.
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(in[s], 0x3c, bytes, stream));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out[s], 0xff, bytes, stream));
  }
  std::optional<BenchmarkResult> best;
  for (int config = 0; config < kCopyConfigs; ++config) {
    auto run = [&](int rep) {
      return LaunchCopy(config, in[rep % sets], out[rep % sets], bytes, stream);
    };
    for (int i = 0; i < std::max(1, opts.warmup); ++i) {
      COALESCE_RETURN_IF_ERROR(run(i));
    }
    COALESCE_ASSIGN_OR_RETURN(RepTimes t, TimeReps(stream, opts.reps, run));
    if (!best.has_value() || t.back_to_back < best->back_to_back_seconds) {
      best = SummarizeBenchmark(std::move(t.per_launch), t.back_to_back, sets,
                                LaunchInfo{});
    }
  }
  return *best;
}

absl::StatusOr<double> MeasureCopyPeak(const DeviceInfo& device,
                                       cudaStream_t stream) {
  const int64_t probe =
      std::min<int64_t>(kPeakProbeBytes, device.memory_bytes / 8);
  return MeasureCopyBandwidth(probe, 10, stream);
}

}  // namespace coalesce::cuda
