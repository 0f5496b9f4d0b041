#include "kernels/core/backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/stacking.h"

namespace coalesce {

absl::StatusOr<std::shared_ptr<void>> Backend::AllocateResidentOn(
    int device, int64_t bytes) {
  if (device >= 0) {
    COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
  }
  return AllocateResident(bytes);
}

int Backend::IndexOfOrdinal(int64_t ordinal) const {
  for (int i = 0; i < device_count(); ++i) {
    if (device_at(i).ordinal == ordinal) return i;
  }
  return -1;
}

absl::Status Backend::CheckDeviceIndex(int device) const {
  if (device >= 0 && device < device_count()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("device index ", device,
                                                 ": this backend has ",
                                                 device_count(), " device(s)"));
}

absl::string_view PlacementName(Placement p) {
  switch (p) {
    case Placement::kOnlyDevice:
      return "only_device";
    case Placement::kResident:
      return "resident_operands";
    case Placement::kLeastOutstanding:
      return "least_outstanding";
  }
  return "unknown";
}

namespace {

// Host resident memory's alignment: a cache line, enough for the CPU
// kernels' widest vectors.
constexpr size_t kHostResidentAlignment = 64;

class SyncWriter final : public ResidentWriter {
 public:
  explicit SyncWriter(
      std::function<absl::Status(int64_t, const void*, int64_t)> copy)
      : copy_(std::move(copy)) {}
  absl::Status Write(int64_t offset, const void* src, int64_t bytes) override {
    return copy_(offset, src, bytes);
  }
  absl::Status Finish() override { return absl::OkStatus(); }

 private:
  std::function<absl::Status(int64_t, const void*, int64_t)> copy_;
};

}  // namespace

absl::Status CheckResidentRange(const char* what, int64_t size, int64_t offset,
                                int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        what, ": the range offset ", offset, " + ", bytes,
        " bytes lies outside the resident allocation of ", size, " bytes"));
  }
  return absl::OkStatus();
}

std::unique_ptr<ResidentWriter> SynchronousResidentWriter(
    std::function<absl::Status(int64_t offset, const void* src, int64_t bytes)>
        copy) {
  return std::make_unique<SyncWriter>(std::move(copy));
}

std::unique_ptr<ResidentWriter> Backend::OpenResidentWriter(
    void* resident, int64_t resident_bytes) {
  return SynchronousResidentWriter(
      [this, resident, resident_bytes](int64_t offset, const void* src,
                                       int64_t bytes) {
        return CopyToResident(resident, resident_bytes, offset, src, bytes);
      });
}

absl::Status Backend::ExecuteStacked(const KernelVariant& v,
                                     const Problem& merged,
                                     absl::Span<const Problem> parts,
                                     absl::Span<const Operands> operands,
                                     RunResult* result) {
  if (!resident_is_host_addressable()) {
    return absl::UnimplementedError(absl::StrCat(
        "the ", BackendName(kind()), " backend cannot run stacked problems"));
  }
  const std::optional<StackInfo> info = StackInfoOf(merged);
  if (!info.has_value() || parts.empty() || parts.size() != operands.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot stack ", parts.size(), " parts with ",
                     operands.size(), " operand sets into ", Describe(merged)));
  }
  const OperandSizes merged_sizes = OperandBytes(merged);
  std::vector<OperandSizes> sizes;
  sizes.reserve(parts.size());
  for (const Problem& p : parts) sizes.push_back(OperandBytes(p));
  // Every space is host-addressable here: stacked operands are gathered
  // into, and outputs scattered from, one host buffer each.
  std::vector<std::shared_ptr<void>> scratch;
  Operands all;
  for (size_t i = 0; i < merged_sizes.inputs.size(); ++i) {
    if (!info->input_stacked[i] || merged_sizes.inputs[i] == 0) {
      all.inputs.push_back(info->input_stacked[i] ? nullptr
                                                  : operands[0].inputs[i]);
      continue;
    }
    COALESCE_ASSIGN_OR_RETURN(
        std::shared_ptr<void> buf,
        Backend::AllocateResident(merged_sizes.inputs[i]));
    char* at = static_cast<char*>(buf.get());
    for (size_t j = 0; j < parts.size(); ++j) {
      if (sizes[j].inputs[i] > 0) {
        std::memcpy(at, operands[j].inputs[i], sizes[j].inputs[i]);
      }
      at += sizes[j].inputs[i];
    }
    all.inputs.push_back(buf.get());
    scratch.push_back(std::move(buf));
  }
  for (size_t i = 0; i < merged_sizes.outputs.size(); ++i) {
    COALESCE_ASSIGN_OR_RETURN(
        std::shared_ptr<void> buf,
        Backend::AllocateResident(merged_sizes.outputs[i]));
    all.outputs.push_back(merged_sizes.outputs[i] > 0 ? buf.get() : nullptr);
    scratch.push_back(std::move(buf));
  }
  COALESCE_RETURN_IF_ERROR(Execute(v, merged, all, result));
  for (size_t i = 0; i < merged_sizes.outputs.size(); ++i) {
    const char* at = static_cast<const char*>(all.outputs[i]);
    for (size_t j = 0; j < parts.size(); ++j) {
      if (sizes[j].outputs[i] > 0 && operands[j].outputs[i] != nullptr) {
        std::memcpy(operands[j].outputs[i], at, sizes[j].outputs[i]);
      }
      at += sizes[j].outputs[i];
    }
  }
  return absl::OkStatus();
}

// Resident allocations from this size on are mapped pages of their own.
constexpr size_t kOwnPagesBytes = size_t{1} << 20;

absl::StatusOr<std::shared_ptr<void>> Backend::OpenIpcMemory(
    absl::string_view /*handle*/, int /*device*/,
    int64_t* /*allocation_bytes*/) const {
  return absl::UnimplementedError(absl::StrCat(
      "CUDA IPC memory needs the CUDA backend; this server runs the ",
      BackendName(kind()), " backend"));
}

absl::StatusOr<std::shared_ptr<void>> Backend::AllocateResident(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resident allocation of ", bytes, " bytes"));
  }
  // aligned_alloc wants a multiple of the alignment, and a null result
  // for 0 bytes would read as out of memory.
  const size_t rounded = std::max<size_t>(
      (static_cast<size_t>(bytes) + kHostResidentAlignment - 1) /
          kHostResidentAlignment * kHostResidentAlignment,
      kHostResidentAlignment);
  // Large tensors get pages of their own, returned to the system when the
  // tensor is freed: from malloc's arenas they would stay resident after
  // free (glibc raises its mmap threshold to 32 MiB after the first large
  // free), so a client's deleted tensors would hold memory past its quota.
  if (rounded >= kOwnPagesBytes) {
    void* pages = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of host memory allocating ", bytes, " bytes"));
    }
    return std::shared_ptr<void>(pages,
                                 [rounded](void* q) { munmap(q, rounded); });
  }
  void* p = std::aligned_alloc(kHostResidentAlignment, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory allocating ", bytes, " bytes"));
  }
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

absl::Status Backend::CopyToResident(void* resident, int64_t resident_bytes,
                                     int64_t offset, const void* src,
                                     int64_t bytes) {
  const absl::Status range =
      CheckResidentRange("CopyToResident", resident_bytes, offset, bytes);
  if (!range.ok() || bytes == 0) return range;
  return CopyToResidentRange(static_cast<char*>(resident) + offset, src, bytes);
}

absl::Status Backend::CopyFromResident(const void* resident,
                                       int64_t resident_bytes, int64_t offset,
                                       void* dst, int64_t bytes) {
  const absl::Status range =
      CheckResidentRange("CopyFromResident", resident_bytes, offset, bytes);
  if (!range.ok() || bytes == 0) return range;
  return CopyFromResidentRange(static_cast<const char*>(resident) + offset, dst,
                               bytes);
}

absl::Status Backend::CopyToResidentRange(void* dst, const void* src,
                                          int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status Backend::CopyFromResidentRange(const void* src, void* dst,
                                            int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

int BenchmarkBufferSets(int64_t set_bytes, const BenchmarkOptions& opts,
                        int max_sets) {
  if (set_bytes <= 0) return 1;
  return static_cast<int>(std::clamp<int64_t>(
      (opts.min_footprint_bytes + set_bytes - 1) / set_bytes, 1, max_sets));
}

BenchmarkResult SummarizeBenchmark(std::vector<double> seconds,
                                   double back_to_back_seconds, int sets,
                                   const LaunchInfo& launch) {
  std::sort(seconds.begin(), seconds.end());
  BenchmarkResult r;
  r.back_to_back_seconds = back_to_back_seconds;
  r.reps = static_cast<int>(seconds.size());
  r.buffer_sets = sets;
  if (!seconds.empty()) {
    r.median_seconds = seconds[seconds.size() / 2];
    r.min_seconds = seconds.front();
    r.max_seconds = seconds.back();
  }
  r.launch = launch;
  return r;
}

absl::StatusOr<BenchmarkResult> Backend::Benchmark(
    const KernelVariant& v, const Problem& p, const BenchmarkOptions& opts) {
  const OperandSizes sizes = OperandBytes(p);
  // Host buffers: a few sets are enough to leave the CPU caches.
  const int sets = BenchmarkBufferSets(MinBytesMoved(p), opts, 16);
  std::mt19937_64 rng(opts.seed);
  std::uniform_real_distribution<float> dist(0.25f, 1.0f);
  const DType dtype = DTypeOf(p);
  std::vector<std::vector<std::vector<char>>> in(sets), out(sets);
  std::vector<Operands> ops(sets);
  for (int s = 0; s < sets; ++s) {
    for (int64_t b : sizes.inputs) {
      in[s].emplace_back(b);
      const int64_t n = b / static_cast<int64_t>(ElementSize(dtype));
      for (int64_t i = 0; i < n; ++i) {
        StoreFromFloat(in[s].back().data(), dtype, i,
                       (i & 1 ? -1.f : 1.f) * dist(rng));
      }
      ops[s].inputs.push_back(b > 0 ? in[s].back().data() : nullptr);
    }
    for (int64_t b : sizes.outputs) {
      out[s].emplace_back(b, static_cast<char>(0xff));
      ops[s].outputs.push_back(b > 0 ? out[s].back().data() : nullptr);
    }
  }
  RunResult rr;
  const auto check_cancelled = [&opts](int runs) {
    return opts.cancelled && opts.cancelled()
               ? absl::CancelledError(
                     absl::StrCat("benchmark cancelled after ", runs, " runs"))
               : absl::OkStatus();
  };
  for (int i = 0; i < opts.warmup; ++i) {
    COALESCE_RETURN_IF_ERROR(check_cancelled(i));
    absl::Status st = Execute(v, p, ops[i % sets], &rr);
    if (!st.ok()) return st;
  }
  std::vector<double> t;
  double total = 0;
  for (int i = 0; i < opts.reps; ++i) {
    COALESCE_RETURN_IF_ERROR(check_cancelled(opts.warmup + i));
    absl::Status st = Execute(v, p, ops[i % sets], &rr);
    if (!st.ok()) return st;
    t.push_back(rr.kernel_seconds);
    total += rr.kernel_seconds;
  }
  // Execute runs synchronously on the host, with no launch to overlap with
  // the previous run: back to back is the mean of the same runs.
  const double mean = t.empty() ? 0 : total / static_cast<double>(t.size());
  return SummarizeBenchmark(std::move(t), mean, sets, rr.launch);
}

absl::StatusOr<BenchmarkResult> Backend::BenchmarkCopy(
    int64_t /*bytes_per_side*/, const BenchmarkOptions& /*opts*/) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", BackendName(kind()),
      " backend has no copy to benchmark: Benchmark times Execute, no copy is "
      "a variant, and the copy peak is measured once at start-up"));
}

}  // namespace coalesce
