// A backend runs kernel variants on one device. Execute takes operands in
// host memory (the bytes of a request) or in the backend's resident memory
// (tensors kept between requests, from AllocateResident) and writes outputs
// to either: a GPU backend stages host operands through device memory and
// uses resident ones in place; a CPU backend's resident memory is host
// memory and it runs everything in place. The server knows only this
// interface, never CUDA. Implementations are thread-safe: the server calls
// Execute and the resident copies from many request threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/core/device_activity.h"
#include "kernels/core/device_info.h"
#include "kernels/core/registry.h"
#include "kernels/core/variant.h"

namespace coalesce {

// Why a run went to its device (RunResult::placement).
enum class Placement : uint8_t {
  kOnlyDevice,        // the backend has one device
  kResident,          // the device holding most of its resident operands' bytes
  kLeastOutstanding,  // no resident operand: the least outstanding work
};
absl::string_view PlacementName(Placement p);

// What one Execute measured.
struct RunResult {
  double kernel_seconds = 0;  // the variant's Run, timed on the device
  // The kernels' span on a clock of the device, in seconds: one clock for
  // all of its streams and callers, so that the union of concurrent spans
  // is the time the device ran kernels (CUDA events read against one
  // anchor on a GPU, the steady clock on the CPU). Unknown where
  // kernel_end <= kernel_begin, as on a sampled launch, whose time is the
  // profiler's and has no place on the clock.
  double kernel_begin = 0;
  double kernel_end = 0;
  // Host time from the call's start to its kernels' release (host inputs
  // staged, copies and launches queued), and from there to its outputs in
  // place less kernel_seconds (0 on CPU, which computes in place).
  double h2d_seconds = 0;
  double d2h_seconds = 0;
  // The call's wait for a free stream (GPU lane) before any of its work was
  // queued; 0 on the CPU.
  double stream_wait_seconds = 0;
  LaunchInfo launch;
  // CUDA: the launches, with the events that time them, were one graph
  // replayed: this lane ran the same variant, problem and operand addresses
  // before (calls on stored operands only). The events' own share of the
  // span is then DeviceInfo::graph_event_overhead_seconds.
  bool graph_replayed = false;
  // Device counters of the variant's kernels, read by a profiler on the
  // launches that Backend::EnableProfileSampling picks. On a sampled run
  // kernel_seconds is the profiler's GPU time of those kernels: the
  // events around a profiled launch would also time the profiler.
  bool sampled = false;
  // 0..1: warps active per active cycle over the SM's maximum, averaged over
  // the SMs and weighted by kernel time (Nsight Compute's
  // sm__warps_active.avg.pct_of_peak_sustained_active / 100).
  double achieved_occupancy = 0;
  // DRAM bytes read and written over the kernels' GPU time (ncu's
  // dram__bytes.sum.per_second for a single kernel).
  double dram_bytes_per_second = 0;
  // Why a picked launch was not sampled after all (a profiler error, or a
  // kernel of other work inside its range); the launch itself succeeded.
  // Its kernel_seconds may include the profiler's overhead (when the error
  // came after the launch), so the metrics leave it out.
  absl::Status sample_error;
  // Which of the backend's devices ran it (an index below device_count();
  // 0 on a backend of one device) and why that one.
  int device = 0;
  Placement placement = Placement::kOnlyDevice;
  // Resident operand bytes copied from other devices to run here, and
  // outputs copied back to theirs (staged through host memory).
  int64_t staged_bytes = 0;
};

// Device-side timing of one variant (the bench harness): inputs random and
// resident, outputs poisoned, enough buffer sets rotated that their total
// footprint exceeds min_footprint_bytes (defeats the L2 cache).
struct BenchmarkOptions {
  int warmup = 5;
  int reps = 30;
  int64_t min_footprint_bytes = int64_t{512} << 20;
  uint64_t seed = 1;
  // Asked before each run; true stops the benchmark with CANCELLED (the
  // request that asked for it passed its deadline, its client went away, or
  // the server is shutting down). Empty: never.
  std::function<bool()> cancelled;
};

// Two timings of the same runs. Per launch (median, min, max): an event
// before and after each run, what selection and tuning compare; on a GPU the
// events and the launch add a few microseconds to each run, which dominate
// a 10 us kernel. Back to back: the runs issued in one stream with one event
// before the first and one after the last (CUTLASS profiler's method), so
// each run starts while the previous one drains: the kernel's own duration,
// as a busy stream sees it.
struct BenchmarkResult {
  double median_seconds = 0;
  double min_seconds = 0;
  double max_seconds = 0;
  double back_to_back_seconds = 0;  // mean per run
  int reps = 0;
  int buffer_sets = 0;
  LaunchInfo launch;
};

// Buffer sets of set_bytes each to rotate through so that their footprint
// reaches opts.min_footprint_bytes: at least 1, at most max_sets.
int BenchmarkBufferSets(int64_t set_bytes, const BenchmarkOptions& opts,
                        int max_sets);

// The result of timed repetitions (per-launch seconds, in any order, and the
// back-to-back mean) on `sets` buffer sets.
BenchmarkResult SummarizeBenchmark(std::vector<double> seconds,
                                   double back_to_back_seconds, int sets,
                                   const LaunchInfo& launch);

// Writes one resident allocation in pieces (PutTensor's chunks), letting a
// piece's copy run while the caller fetches the next. Write checks the
// range (OUT_OF_RANGE outside the allocation), takes what it needs of src
// before it returns (src may be reused at once), and may return before the
// bytes are in place. Finish waits until every written byte is in place and
// reports a copy that failed; call it before the allocation is read or
// freed (the destructor waits too, ignoring errors). One thread at a time.
class ResidentWriter {
 public:
  virtual ~ResidentWriter() = default;
  virtual absl::Status Write(int64_t offset, const void* src,
                             int64_t bytes) = 0;
  virtual absl::Status Finish() = 0;
};

// A writer whose Write is copy(offset, src, bytes), complete on return.
std::unique_ptr<ResidentWriter> SynchronousResidentWriter(
    std::function<absl::Status(int64_t offset, const void* src, int64_t bytes)>
        copy);

// OK when [offset, offset + bytes) lies within [0, size), else OUT_OF_RANGE
// naming `what`; no overflow for any int64 inputs.
absl::Status CheckResidentRange(const char* what, int64_t size, int64_t offset,
                                int64_t bytes);

// Memory of the device as the backend sees it; -1 where unknown.
struct MemoryStats {
  int64_t used_bytes = -1;  // in use on the device, all processes
  int64_t total_bytes = -1;
  int64_t pool_reserved_bytes = -1;  // held by the stream-ordered pool
  // Released device blocks kept for the next allocation of their size (part
  // of pool_reserved_bytes); -1 where the backend keeps none.
  int64_t block_cache_bytes = -1;
  int64_t pinned_staging_bytes = 0;  // pinned host memory for staging
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual const DeviceInfo& device() const = 0;
  virtual const VariantRegistry& registry() const = 0;
  // Runs v on p. operands.inputs/outputs follow problem.h's operand order
  // with the sizes of OperandBytes(p), each in the memory space its
  // input_space/output_space names (resident: from AllocateResident). v must
  // be one of registry()'s variants and CanImplement(p) must hold. When it
  // returns, resident outputs are written and their writes visible to the
  // resident copies and to any later Execute.
  virtual absl::Status Execute(const KernelVariant& v, const Problem& p,
                               const Operands& operands, RunResult* result) = 0;
  // Runs v once on `merged`, the problems of `parts` stacked along their
  // leading dimension (stacking.h: merged == Stacked(parts); v can
  // implement it): part j's stacked inputs come from operands[j], every
  // shared input from operands[0] (the caller made sure the parts' shared
  // inputs are equal), and part j's outputs go to operands[j]. Spaces may
  // differ between parts and operands. One RunResult for the one launch.
  // The default gathers the stacked inputs into host memory, runs Execute
  // on merged and scatters the outputs: right where resident memory is
  // host memory; elsewhere UNIMPLEMENTED.
  virtual absl::Status ExecuteStacked(const KernelVariant& v,
                                      const Problem& merged,
                                      absl::Span<const Problem> parts,
                                      absl::Span<const Operands> operands,
                                      RunResult* result);

  // Resident memory: the backend's own memory space, for tensors that
  // outlive a request (the server's handles). The default, right for the
  // CPU backend, is host memory aligned to 64 bytes (a cache line; the CPU
  // kernels' vectors). bytes of uninitialized memory, freed when the last
  // reference goes, which must be before the backend is destroyed;
  // RESOURCE_EXHAUSTED when the space is full, INVALID_ARGUMENT for
  // bytes < 0.
  virtual absl::StatusOr<std::shared_ptr<void>> AllocateResident(int64_t bytes);
  // Whether the host may dereference resident memory (CPU: it is host
  // memory; CUDA: it is device memory).
  virtual bool resident_is_host_addressable() const { return true; }
  // Maps device memory that another process on this host exported with
  // cudaIpcGetMemHandle (handle: the cudaIpcMemHandle_t's bytes) from
  // device `device` (an index below device_count()), to be used there like
  // resident memory; the mapping closes when the last reference goes,
  // which must be before the backend is destroyed.
  // *allocation_bytes: the exported allocation's size. INVALID_ARGUMENT for
  // a handle of the wrong size, one that does not open there, or a device
  // index out of range; the default, for backends without device memory,
  // is UNIMPLEMENTED.
  virtual absl::StatusOr<std::shared_ptr<void>> OpenIpcMemory(
      absl::string_view handle, int device, int64_t* allocation_bytes) const;
  // Copies bytes between host memory and [offset, offset + bytes) of a
  // resident allocation of resident_bytes bytes, in any number of calls of
  // any size (PutTensor and GetTensor copy a stream's chunks). OUT_OF_RANGE
  // unless 0 <= offset, 0 <= bytes and offset + bytes <= resident_bytes;
  // the copy is complete when the call returns. Safe to call concurrently
  // on disjoint ranges, or with an Execute that only reads the range.
  absl::Status CopyToResident(void* resident, int64_t resident_bytes,
                              int64_t offset, const void* src, int64_t bytes);
  absl::Status CopyFromResident(const void* resident, int64_t resident_bytes,
                                int64_t offset, void* dst, int64_t bytes);
  // A writer into a resident allocation of resident_bytes (ResidentWriter).
  // The default writes through CopyToResident, each piece complete on
  // return; the CUDA backend returns once a piece is in its pinned staging
  // buffers, its host-to-device copy still running.
  virtual std::unique_ptr<ResidentWriter> OpenResidentWriter(
      void* resident, int64_t resident_bytes);
  // Times v on p on the device. The default runs Execute on host buffers
  // and takes the kernel time it reports (right for the CPU backend).
  virtual absl::StatusOr<BenchmarkResult> Benchmark(
      const KernelVariant& v, const Problem& p, const BenchmarkOptions& opts);
  // Times a device-to-device copy of bytes_per_side bytes with Benchmark's
  // protocol: the ceiling a data-movement variant moving 2 x bytes_per_side
  // bytes could reach at that size, launch and tail effects included. The
  // default is UNIMPLEMENTED: the default Benchmark times Execute, and no
  // copy is a variant to Execute (the CPU backend's copy peak is a parallel
  // memcpy timed once at start-up).
  virtual absl::StatusOr<BenchmarkResult> BenchmarkCopy(
      int64_t bytes_per_side, const BenchmarkOptions& opts);
  // Every device of this backend's kind the process can see, the serving
  // ones (device_at(0) ...) first, for GetServerInfo.
  virtual std::vector<DeviceInfo> VisibleDevices() const { return {device()}; }
  // The devices this backend runs on (a DeviceGroup's members; 1
  // elsewhere), their descriptions (device_at(0) is device()), memory and
  // health. RunResult::device indexes them.
  virtual int device_count() const { return 1; }
  virtual const DeviceInfo& device_at(int /*i*/) const { return device(); }
  virtual MemoryStats MemoryOf(int /*i*/) const { return Memory(); }
  virtual absl::Status HealthOf(int /*i*/) const { return Health(); }
  // The index of the device holding most of the bytes of operands' resident
  // memory (a run of p there copies the least), or -1 when no resident
  // operand ties the run to a device; 0 on a backend of one device.
  virtual int ResidentHome(const Problem& /*p*/,
                           const Operands& /*operands*/) const {
    return 0;
  }
  // Execute and ExecuteStacked on the device of index `device` (below
  // device_count()), chosen by the caller: resident operands of other
  // devices are copied there first. The defaults, for one device, ignore
  // device.
  virtual absl::Status ExecuteOn(int /*device*/, const KernelVariant& v,
                                 const Problem& p, const Operands& operands,
                                 RunResult* result) {
    return Execute(v, p, operands, result);
  }
  virtual absl::Status ExecuteStackedOn(int /*device*/, const KernelVariant& v,
                                        const Problem& merged,
                                        absl::Span<const Problem> parts,
                                        absl::Span<const Operands> operands,
                                        RunResult* result) {
    return ExecuteStacked(v, merged, parts, operands, result);
  }
  // AllocateResident on the device of index `device` (below
  // device_count(); INVALID_ARGUMENT otherwise); -1: wherever
  // AllocateResident puts it.
  virtual absl::StatusOr<std::shared_ptr<void>> AllocateResidentOn(
      int device, int64_t bytes);
  // The index of the device of this ordinal (DeviceInfo::ordinal) among
  // the ones this backend runs on, or -1 when it runs on none.
  int IndexOfOrdinal(int64_t ordinal) const;
  // The index of the device holding resident memory p (an address inside
  // an allocation of this backend's), or -1 when none does; 0 on a backend
  // of one device.
  virtual int DeviceOfResident(const void* /*p*/) const { return 0; }
  // Executes worth running at once: the server's default for the requests
  // it lets run on this device together. The default, right for the CPU
  // backend, is 2: each Execute already spreads over every core, and a
  // second one keeps them busy while the first's thread finishes its
  // request.
  virtual int concurrency() const { return 2; }
  // For the device gauges; cheap enough to call on every scrape.
  virtual MemoryStats Memory() const { return {}; }
  // Non-OK after a fault that makes the device unusable (sticky CUDA error).
  virtual absl::Status Health() const { return absl::OkStatus(); }
  // From now on samples the device counters (RunResult::sampled and what
  // follows it) of every Nth Execute, N = round(1 / fraction), and returns
  // N; a later call changes N. INVALID_ARGUMENT unless 0 < fraction <= 1;
  // where the backend cannot sample, an error saying why (the default,
  // UNIMPLEMENTED: no device counters; UNAVAILABLE: another profiler, e.g.
  // DCGM's profiling metrics or Nsight, holds the device's counters), and
  // Execute samples nothing.
  virtual absl::StatusOr<int64_t> EnableProfileSampling(double /*fraction*/) {
    return absl::UnimplementedError(
        absl::StrCat("the ", BackendName(kind()),
                     " backend has no device counters to sample"));
  }
  // Undoes EnableProfileSampling: no launch is sampled any more and the
  // device's counters are released (another profiler may take them). For
  // start-up, before any Execute: not while launches run. A no-op where
  // sampling is off.
  virtual void DisableProfileSampling() {}
  // Hands what an attached profiler (Nsight Systems) has buffered to it,
  // for a process about to end without its exit handlers (the server's
  // _Exit), which would otherwise drop the trace of its device calls. A
  // no-op where no profiler is attached and on backends without one.
  virtual void FlushProfilerData() {}
  // A reader of device `device`'s (an index below device_count()) whole
  // SM occupancy and DRAM throughput over intervals (DeviceActivityReader),
  // from counters that other profilers do not lock (NVML GPM on the CUDA
  // backend). The default, UNIMPLEMENTED: no such counters; otherwise an
  // error saying why the device offers none.
  virtual absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
  OpenDeviceActivityReader(int /*device*/) const {
    return absl::UnimplementedError(
        absl::StrCat("the ", BackendName(kind()),
                     " backend has no device-level activity counters"));
  }

 protected:
  // INVALID_ARGUMENT unless 0 <= device < device_count().
  absl::Status CheckDeviceIndex(int device) const;
  // The copies, range already checked (dst and src point at the first byte
  // to copy); the defaults are memcpy, for host-addressable resident
  // memory.
  virtual absl::Status CopyToResidentRange(void* dst, const void* src,
                                           int64_t bytes);
  virtual absl::Status CopyFromResidentRange(const void* src, void* dst,
                                             int64_t bytes);
};

}  // namespace coalesce
