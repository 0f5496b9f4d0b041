#include "kernels/core/device_group.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace coalesce {

// The estimated seconds of one run, counted against its device while it
// runs.
class DeviceGroup::Reservation {
 public:
  Reservation(DeviceGroup* group, int device, double seconds)
      : group_(group), device_(device), seconds_(seconds) {
    absl::MutexLock lock(&group_->mu_);
    group_->load_[device_].seconds += seconds_;
    ++group_->load_[device_].runs;
  }
  ~Reservation() {
    absl::MutexLock lock(&group_->mu_);
    group_->load_[device_].seconds -= seconds_;
    --group_->load_[device_].runs;
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  DeviceGroup* const group_;
  const int device_;
  const double seconds_;
};

// Resident operands of one run that live on another device than the run's:
// copies on the run's device, filled before it and copied home after.
struct DeviceGroup::Staging {
  struct Home {
    int device = 0;
    void* data = nullptr;
    const void* copy = nullptr;
    int64_t bytes = 0;
  };
  std::vector<std::shared_ptr<void>> copies;
  std::vector<Home> outputs;  // copied home after the run
  int64_t bytes = 0;
};

absl::StatusOr<std::unique_ptr<DeviceGroup>> DeviceGroup::Create(
    std::vector<std::unique_ptr<Backend>> members) {
  if (members.empty()) {
    return absl::InvalidArgumentError("a device group needs a device");
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("device ", i, " is null"));
    }
    const DeviceInfo& a = members[0]->device();
    const DeviceInfo& b = members[i]->device();
    if (b.backend != a.backend || b.name != a.name ||
        b.cc_major != a.cc_major || b.cc_minor != a.cc_minor) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", i, " (", BackendName(b.backend), " ", b.name,
                       ") is not the model of device 0 (",
                       BackendName(a.backend), " ", a.name,
                       "): one server serves devices of one model, so that one "
                       "tuning table and cache serve them all"));
    }
  }
  return absl::WrapUnique(new DeviceGroup(std::move(members)));
}

DeviceGroup::DeviceGroup(std::vector<std::unique_ptr<Backend>> members)
    : members_(std::move(members)),
      resident_bytes_(members_.size(), 0),
      load_(members_.size()) {}

DeviceGroup::~DeviceGroup() = default;

std::shared_ptr<void> DeviceGroup::Track(std::shared_ptr<void> inner,
                                         int64_t bytes, int device) const {
  // An empty allocation holds no byte a run could read, and its address may
  // be another's: it is not tracked (DeviceOfResident: -1).
  if (bytes <= 0) return inner;
  const uintptr_t start = reinterpret_cast<uintptr_t>(inner.get());
  {
    absl::MutexLock lock(&mu_);
    ranges_[start] = Range{start + static_cast<uintptr_t>(bytes), device};
    resident_bytes_[device] += bytes;
  }
  void* data = inner.get();
  return std::shared_ptr<void>(
      data, [this, start, bytes, device, inner = std::move(inner)](void*) {
        absl::MutexLock lock(&mu_);
        ranges_.erase(start);
        resident_bytes_[device] -= bytes;
      });
}

int DeviceGroup::DeviceOfResident(const void* p) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  absl::MutexLock lock(&mu_);
  auto it = ranges_.upper_bound(a);
  if (it == ranges_.begin()) return -1;
  --it;
  return a < it->second.end ? it->second.device : -1;
}

double DeviceGroup::OutstandingSeconds(int i) const {
  absl::MutexLock lock(&mu_);
  return load_[i].seconds;
}

int DeviceGroup::BestHealthy(const std::function<bool(int, int)>& better,
                             const std::vector<bool>* skip) const {
  std::vector<bool> healthy(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    healthy[i] = (skip == nullptr || !(*skip)[i]) && members_[i]->Health().ok();
  }
  absl::MutexLock lock(&mu_);
  int best = -1;
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    if (healthy[i] && (best < 0 || better(i, best))) best = i;
  }
  return best;
}

int DeviceGroup::LeastOutstandingHealthy(const std::vector<bool>* skip) const {
  return BestHealthy(
      [this](int a, int b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return load_[a].seconds < load_[b].seconds ||
               (load_[a].seconds == load_[b].seconds &&
                load_[a].runs < load_[b].runs);
      },
      skip);
}

int DeviceGroup::FewestResidentBytesHealthy(
    const std::vector<bool>* skip) const {
  return BestHealthy(
      [this](int a, int b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return resident_bytes_[a] < resident_bytes_[b] ||
               (resident_bytes_[a] == resident_bytes_[b] &&
                load_[a].seconds < load_[b].seconds);
      },
      skip);
}

absl::Status DeviceGroup::Unavailable(int device) const {
  if (device < 0) {
    return absl::UnavailableError(absl::StrCat(
        "every device has failed; device 0: ", Health().message()));
  }
  return absl::UnavailableError(
      absl::StrCat("device ", device, " (", device_at(device).name,
                   ", ordinal ", device_at(device).ordinal,
                   ") has failed: ", members_[device]->Health().message(),
                   "; the other devices still serve requests whose tensors "
                   "are not on it"));
}

absl::Status DeviceGroup::Stage(int device, const Problem& p,
                                const Operands& operands, Operands* local,
                                Staging* staging) {
  *local = operands;
  const OperandSizes sizes = OperandBytes(p);
  Backend& here = *members_[device];
  std::vector<char> host;
  for (size_t i = 0; i < operands.inputs.size(); ++i) {
    if (operands.input_space(i) != MemorySpace::kResident) continue;
    const int home = DeviceOfResident(operands.inputs[i]);
    if (home < 0 || home == device) continue;
    if (!members_[home]->Health().ok()) return Unavailable(home);
    const int64_t bytes = sizes.inputs[i];
    COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<void> copy,
                              here.AllocateResident(bytes));
    host.resize(static_cast<size_t>(bytes));
    COALESCE_RETURN_IF_ERROR(members_[home]->CopyFromResident(
        operands.inputs[i], bytes, 0, host.data(), bytes));
    COALESCE_RETURN_IF_ERROR(
        here.CopyToResident(copy.get(), bytes, 0, host.data(), bytes));
    local->inputs[i] = copy.get();
    staging->copies.push_back(std::move(copy));
    staging->bytes += bytes;
  }
  for (size_t i = 0; i < operands.outputs.size(); ++i) {
    if (operands.output_space(i) != MemorySpace::kResident) continue;
    const int home = DeviceOfResident(operands.outputs[i]);
    if (home < 0 || home == device) continue;
    if (!members_[home]->Health().ok()) return Unavailable(home);
    const int64_t bytes = sizes.outputs[i];
    COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<void> copy,
                              here.AllocateResident(bytes));
    local->outputs[i] = copy.get();
    staging->outputs.push_back({home, operands.outputs[i], copy.get(), bytes});
    staging->copies.push_back(std::move(copy));
  }
  return absl::OkStatus();
}

absl::Status DeviceGroup::Unstage(int device, Staging* staging) {
  std::vector<char> host;
  for (const Staging::Home& out : staging->outputs) {
    if (!members_[out.device]->Health().ok()) return Unavailable(out.device);
    host.resize(static_cast<size_t>(out.bytes));
    COALESCE_RETURN_IF_ERROR(members_[device]->CopyFromResident(
        out.copy, out.bytes, 0, host.data(), out.bytes));
    COALESCE_RETURN_IF_ERROR(members_[out.device]->CopyToResident(
        out.data, out.bytes, 0, host.data(), out.bytes));
    staging->bytes += out.bytes;
  }
  return absl::OkStatus();
}

// The device whose resident memory holds most of the operands' bytes (-1:
// none resident), over every part of a run.
int DeviceGroup::ResidentHomeOf(absl::Span<const Problem> problems,
                                absl::Span<const Operands> operands) const {
  std::vector<int64_t> on(members_.size(), 0);
  bool any = false;
  for (size_t j = 0; j < problems.size(); ++j) {
    const OperandSizes sizes = OperandBytes(problems[j]);
    const Operands& o = operands[j];
    auto count = [&](MemorySpace space, const void* data, int64_t bytes) {
      if (space != MemorySpace::kResident) return;
      const int d = DeviceOfResident(data);
      if (d < 0) return;
      on[d] += bytes;
      any = true;
    };
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      count(o.input_space(i), o.inputs[i], sizes.inputs[i]);
    }
    for (size_t i = 0; i < o.outputs.size(); ++i) {
      count(o.output_space(i), o.outputs[i], sizes.outputs[i]);
    }
  }
  if (!any) return -1;
  return static_cast<int>(std::max_element(on.begin(), on.end()) - on.begin());
}

absl::StatusOr<int> DeviceGroup::Place(absl::Span<const Problem> problems,
                                       absl::Span<const Operands> operands,
                                       Placement* why) const {
  int device = ResidentHomeOf(problems, operands);
  if (device >= 0) {
    *why = Placement::kResident;
    if (!members_[device]->Health().ok()) return Unavailable(device);
    return device;
  }
  *why = Placement::kLeastOutstanding;
  device = LeastOutstandingHealthy();
  if (device < 0) return Unavailable(-1);
  return device;
}

absl::Status DeviceGroup::Execute(const KernelVariant& v, const Problem& p,
                                  const Operands& operands, RunResult* result) {
  Placement why = Placement::kOnlyDevice;
  COALESCE_ASSIGN_OR_RETURN(const int device,
                            Place(absl::MakeConstSpan(&p, 1),
                                  absl::MakeConstSpan(&operands, 1), &why));
  return RunPlaced(device, why, v, p, operands, result);
}

absl::Status DeviceGroup::RunPlaced(int device, Placement why,
                                    const KernelVariant& v, const Problem& p,
                                    const Operands& operands,
                                    RunResult* result) {
  const auto parts = absl::MakeConstSpan(&p, 1);
  const auto ops = absl::MakeConstSpan(&operands, 1);
  const double seconds = v.EstimateSeconds(p, device_at(device));
  const Launch launch = [&](Backend& b, absl::Span<const Operands> local) {
    return b.Execute(v, p, local[0], result);
  };
  if (why != Placement::kLeastOutstanding) {
    return RunOn(device, why, seconds, parts, ops, launch, result);
  }
  // Nothing ties the run to a device: one out of memory hands it to the
  // next.
  std::vector<bool> tried(members_.size(), false);
  absl::Status status;
  for (int d = device; d >= 0; d = LeastOutstandingHealthy(&tried)) {
    status = RunOn(d, why, seconds, parts, ops, launch, result);
    if (!absl::IsResourceExhausted(status)) return status;
    tried[d] = true;
  }
  return status;
}

absl::Status DeviceGroup::RunOn(int device, Placement why, double seconds,
                                absl::Span<const Problem> parts,
                                absl::Span<const Operands> operands,
                                const Launch& launch, RunResult* result) {
  std::vector<Operands> local(operands.size());
  std::vector<Staging> staging(operands.size());
  for (size_t j = 0; j < operands.size(); ++j) {
    COALESCE_RETURN_IF_ERROR(
        Stage(device, parts[j], operands[j], &local[j], &staging[j]));
  }
  {
    Reservation busy(this, device, seconds);
    COALESCE_RETURN_IF_ERROR(launch(*members_[device], local));
  }
  int64_t staged = 0;
  for (Staging& s : staging) {
    COALESCE_RETURN_IF_ERROR(Unstage(device, &s));
    staged += s.bytes;
  }
  result->device = device;
  result->placement = why;
  result->staged_bytes = staged;
  return absl::OkStatus();
}

absl::Status DeviceGroup::ExecuteStacked(const KernelVariant& v,
                                         const Problem& merged,
                                         absl::Span<const Problem> parts,
                                         absl::Span<const Operands> operands,
                                         RunResult* result) {
  Placement why = Placement::kOnlyDevice;
  COALESCE_ASSIGN_OR_RETURN(const int device, Place(parts, operands, &why));
  return RunStacked(device, why, v, merged, parts, operands, result);
}

int DeviceGroup::ResidentHome(const Problem& p,
                              const Operands& operands) const {
  return ResidentHomeOf(absl::MakeConstSpan(&p, 1),
                        absl::MakeConstSpan(&operands, 1));
}

absl::StatusOr<Placement> DeviceGroup::Chosen(
    int device, absl::Span<const Problem> parts,
    absl::Span<const Operands> operands) const {
  COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
  if (!members_[device]->Health().ok()) return Unavailable(device);
  return ResidentHomeOf(parts, operands) == device
             ? Placement::kResident
             : Placement::kLeastOutstanding;
}

absl::Status DeviceGroup::ExecuteOn(int device, const KernelVariant& v,
                                    const Problem& p, const Operands& operands,
                                    RunResult* result) {
  COALESCE_ASSIGN_OR_RETURN(const Placement why,
                            Chosen(device, absl::MakeConstSpan(&p, 1),
                                   absl::MakeConstSpan(&operands, 1)));
  return RunPlaced(device, why, v, p, operands, result);
}

absl::Status DeviceGroup::ExecuteStackedOn(int device, const KernelVariant& v,
                                           const Problem& merged,
                                           absl::Span<const Problem> parts,
                                           absl::Span<const Operands> operands,
                                           RunResult* result) {
  COALESCE_ASSIGN_OR_RETURN(const Placement why,
                            Chosen(device, parts, operands));
  return RunStacked(device, why, v, merged, parts, operands, result);
}

absl::Status DeviceGroup::RunStacked(int device, Placement why,
                                     const KernelVariant& v,
                                     const Problem& merged,
                                     absl::Span<const Problem> parts,
                                     absl::Span<const Operands> operands,
                                     RunResult* result) {
  return RunOn(
      device, why, v.EstimateSeconds(merged, device_at(device)), parts,
      operands,
      [&](Backend& b, absl::Span<const Operands> local) {
        return b.ExecuteStacked(v, merged, parts, local, result);
      },
      result);
}

absl::StatusOr<std::shared_ptr<void>> DeviceGroup::AllocateResident(
    int64_t bytes) {
  // A device out of memory hands the allocation to the next.
  std::vector<bool> tried(members_.size(), false);
  absl::Status status = Unavailable(-1);
  for (int d = FewestResidentBytesHealthy(); d >= 0;
       d = FewestResidentBytesHealthy(&tried)) {
    absl::StatusOr<std::shared_ptr<void>> inner =
        members_[d]->AllocateResident(bytes);
    if (inner.ok()) return Track(*std::move(inner), bytes, d);
    status = inner.status();
    if (!absl::IsResourceExhausted(status)) return status;
    tried[d] = true;
  }
  return status;
}

absl::StatusOr<std::shared_ptr<void>> DeviceGroup::AllocateResidentOn(
    int device, int64_t bytes) {
  if (device < 0) return AllocateResident(bytes);
  COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
  if (!members_[device]->Health().ok()) return Unavailable(device);
  COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<void> inner,
                            members_[device]->AllocateResident(bytes));
  return Track(std::move(inner), bytes, device);
}

bool DeviceGroup::resident_is_host_addressable() const {
  return members_[0]->resident_is_host_addressable();
}

absl::StatusOr<std::shared_ptr<void>> DeviceGroup::OpenIpcMemory(
    absl::string_view handle, int device, int64_t* allocation_bytes) const {
  COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
  // Mapped on the device that exported it, so kernels there use it in
  // place; the region's requests run there.
  if (!members_[device]->Health().ok()) return Unavailable(device);
  COALESCE_ASSIGN_OR_RETURN(
      std::shared_ptr<void> mapped,
      members_[device]->OpenIpcMemory(handle, 0, allocation_bytes));
  return Track(std::move(mapped), *allocation_bytes, device);
}

absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
DeviceGroup::OpenDeviceActivityReader(int device) const {
  COALESCE_RETURN_IF_ERROR(CheckDeviceIndex(device));
  return members_[device]->OpenDeviceActivityReader(0);
}

std::unique_ptr<ResidentWriter> DeviceGroup::OpenResidentWriter(
    void* resident, int64_t resident_bytes) {
  const int device = std::max(0, DeviceOfResident(resident));
  return members_[device]->OpenResidentWriter(resident, resident_bytes);
}

absl::Status DeviceGroup::CopyToResidentRange(void* dst, const void* src,
                                              int64_t bytes) {
  const int device = DeviceOfResident(dst);
  if (device < 0) {
    return absl::InternalError("resident copy: not memory of this backend");
  }
  return members_[device]->CopyToResident(dst, bytes, 0, src, bytes);
}

absl::Status DeviceGroup::CopyFromResidentRange(const void* src, void* dst,
                                                int64_t bytes) {
  const int device = DeviceOfResident(src);
  if (device < 0) {
    return absl::InternalError("resident copy: not memory of this backend");
  }
  return members_[device]->CopyFromResident(src, bytes, 0, dst, bytes);
}

absl::StatusOr<BenchmarkResult> DeviceGroup::Benchmark(
    const KernelVariant& v, const Problem& p, const BenchmarkOptions& opts) {
  const int device = LeastOutstandingHealthy();
  if (device < 0) return Unavailable(-1);
  Reservation busy(this, device,
                   v.EstimateSeconds(p, members_[device]->device()) *
                       (opts.warmup + opts.reps));
  return members_[device]->Benchmark(v, p, opts);
}

absl::StatusOr<BenchmarkResult> DeviceGroup::BenchmarkCopy(
    int64_t bytes_per_side, const BenchmarkOptions& opts) {
  const int device = LeastOutstandingHealthy();
  if (device < 0) return Unavailable(-1);
  return members_[device]->BenchmarkCopy(bytes_per_side, opts);
}

std::vector<DeviceInfo> DeviceGroup::VisibleDevices() const {
  std::vector<DeviceInfo> out;
  for (const std::unique_ptr<Backend>& m : members_) {
    out.push_back(m->device());
  }
  // Devices of this kind the members see but do not serve, after them.
  for (const DeviceInfo& d : members_[0]->VisibleDevices()) {
    bool served = false;
    for (const DeviceInfo& o : out) served |= o.ordinal == d.ordinal;
    if (!served) out.push_back(d);
  }
  return out;
}

int DeviceGroup::concurrency() const {
  int total = 0;
  for (const std::unique_ptr<Backend>& m : members_) total += m->concurrency();
  return total;
}

absl::Status DeviceGroup::Health() const {
  for (const std::unique_ptr<Backend>& m : members_) {
    if (m->Health().ok()) return absl::OkStatus();
  }
  return members_[0]->Health();
}

absl::StatusOr<int64_t> DeviceGroup::EnableProfileSampling(double fraction) {
  int64_t every = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    absl::StatusOr<int64_t> s = members_[i]->EnableProfileSampling(fraction);
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) members_[j]->DisableProfileSampling();
      return absl::Status(
          s.status().code(),
          absl::StrCat("device ", i, ": ", s.status().message()));
    }
    every = *s;
  }
  return every;
}

void DeviceGroup::DisableProfileSampling() {
  for (const std::unique_ptr<Backend>& m : members_) {
    m->DisableProfileSampling();
  }
}

void DeviceGroup::FlushProfilerData() {
  for (const std::unique_ptr<Backend>& m : members_) m->FlushProfilerData();
}

}  // namespace coalesce
