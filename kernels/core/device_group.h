// A backend over several devices of one model, each a Backend of its own
// with its own streams, staging and memory pools: how one server serves
// every GPU of a host (--devices). The server sees one Backend; each
// Execute runs on one member, chosen here:
// - A run with operands in resident memory (handles, device shared memory)
//   goes to the device holding most of their bytes. Resident operands on
//   another device are copied there through host memory first (outputs
//   copied back after), and RunResult::staged_bytes says how much.
// - Otherwise it goes to the healthy device with the least outstanding
//   work: the estimated seconds of the runs in flight there, then their
//   count, then the lowest index.
// - New resident memory goes where AllocateResidentOn is told, else to the
//   healthy device holding the fewest resident bytes.
// A member whose Health() fails is left out of placement and reported by
// HealthOf; runs that need its memory fail UNAVAILABLE naming it, and the
// others go on. A member out of memory (RESOURCE_EXHAUSTED) hands an
// allocation, or a run that no resident operand ties to it, to the next.
// Selection sees member 0's description (device()): every member is one model,
// so one tuning table and cache serve them all. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/core/backend.h"

namespace coalesce {

class DeviceGroup final : public Backend {
 public:
  // members: at least one, all of one kind and model (name and compute
  // capability); member i is device i of the group. INVALID_ARGUMENT
  // otherwise, naming the two that differ.
  static absl::StatusOr<std::unique_ptr<DeviceGroup>> Create(
      std::vector<std::unique_ptr<Backend>> members);
  ~DeviceGroup() override;

  BackendKind kind() const override { return members_[0]->kind(); }
  const DeviceInfo& device() const override { return members_[0]->device(); }
  const VariantRegistry& registry() const override {
    return members_[0]->registry();
  }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override;
  absl::Status ExecuteStacked(const KernelVariant& v, const Problem& merged,
                              absl::Span<const Problem> parts,
                              absl::Span<const Operands> operands,
                              RunResult* result) override;
  int ResidentHome(const Problem& p, const Operands& operands) const override;
  absl::Status ExecuteOn(int device, const KernelVariant& v, const Problem& p,
                         const Operands& operands, RunResult* result) override;
  absl::Status ExecuteStackedOn(int device, const KernelVariant& v,
                                const Problem& merged,
                                absl::Span<const Problem> parts,
                                absl::Span<const Operands> operands,
                                RunResult* result) override;
  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override;
  absl::StatusOr<std::shared_ptr<void>> AllocateResidentOn(
      int device, int64_t bytes) override;
  bool resident_is_host_addressable() const override;
  absl::StatusOr<std::shared_ptr<void>> OpenIpcMemory(
      absl::string_view handle, int device,
      int64_t* allocation_bytes) const override;
  absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
  OpenDeviceActivityReader(int device) const override;
  std::unique_ptr<ResidentWriter> OpenResidentWriter(
      void* resident, int64_t resident_bytes) override;
  absl::StatusOr<BenchmarkResult> Benchmark(
      const KernelVariant& v, const Problem& p,
      const BenchmarkOptions& opts) override;
  absl::StatusOr<BenchmarkResult> BenchmarkCopy(
      int64_t bytes_per_side, const BenchmarkOptions& opts) override;
  std::vector<DeviceInfo> VisibleDevices() const override;
  int device_count() const override {
    return static_cast<int>(members_.size());
  }
  const DeviceInfo& device_at(int i) const override {
    return members_[i]->device();
  }
  MemoryStats MemoryOf(int i) const override { return members_[i]->Memory(); }
  absl::Status HealthOf(int i) const override { return members_[i]->Health(); }
  // The members' runs at once, all together.
  int concurrency() const override;
  // Member 0's (device-level figures are per device: MemoryOf).
  MemoryStats Memory() const override { return members_[0]->Memory(); }
  // OK while any member is healthy; else member 0's error.
  absl::Status Health() const override;
  // All members or none: when one fails, those enabled before it are
  // disabled again and the error names the member.
  absl::StatusOr<int64_t> EnableProfileSampling(double fraction) override;
  void DisableProfileSampling() override;
  void FlushProfilerData() override;

  int DeviceOfResident(const void* p) const override;
  // Estimated seconds of the runs in flight on member i.
  double OutstandingSeconds(int i) const;

 protected:
  absl::Status CopyToResidentRange(void* dst, const void* src,
                                   int64_t bytes) override;
  absl::Status CopyFromResidentRange(const void* src, void* dst,
                                     int64_t bytes) override;

 private:
  struct Range {
    uintptr_t end = 0;
    int device = 0;
  };
  struct Load {
    double seconds = 0;
    int runs = 0;
  };
  class Reservation;
  struct Staging;

  explicit DeviceGroup(std::vector<std::unique_ptr<Backend>> members);
  // Wraps a member's allocation so that its range is known until freed.
  std::shared_ptr<void> Track(std::shared_ptr<void> inner, int64_t bytes,
                              int device) const;
  // The healthy member that better(a, b) (called under mu_) ranks first,
  // or -1 when none is healthy.
  // Members marked in *skip are left out too.
  int BestHealthy(const std::function<bool(int, int)>& better,
                  const std::vector<bool>* skip = nullptr) const;
  int LeastOutstandingHealthy(const std::vector<bool>* skip = nullptr) const;
  int FewestResidentBytesHealthy(const std::vector<bool>* skip = nullptr) const;
  absl::Status Unavailable(int device) const;
  // The device whose resident memory holds most of the runs' operand bytes,
  // -1 when none is resident.
  int ResidentHomeOf(absl::Span<const Problem> problems,
                     absl::Span<const Operands> operands) const;
  // Where a run goes, and why (the class comment).
  absl::StatusOr<int> Place(absl::Span<const Problem> problems,
                            absl::Span<const Operands> operands,
                            Placement* why) const;
  // *local: operands with the resident ones of other devices replaced by
  // copies on `device` (inputs filled now); Unstage copies the outputs home.
  absl::Status Stage(int device, const Problem& p, const Operands& operands,
                     Operands* local, Staging* staging);
  absl::Status Unstage(int device, Staging* staging);
  // Why a run that a caller sends to `device` goes there; INVALID_ARGUMENT
  // for an index out of range, UNAVAILABLE for a failed device.
  absl::StatusOr<Placement> Chosen(int device, absl::Span<const Problem> parts,
                                   absl::Span<const Operands> operands) const;
  // One launch on `device` (one part, or a stacked run's parts): every
  // part's operands staged, `seconds` reserved while launch runs the
  // member with the staged operands, outputs copied home, and RunResult's
  // device, placement and staged bytes reported.
  using Launch =
      std::function<absl::Status(Backend&, absl::Span<const Operands>)>;
  absl::Status RunOn(int device, Placement why, double seconds,
                     absl::Span<const Problem> parts,
                     absl::Span<const Operands> operands, const Launch& launch,
                     RunResult* result);
  // A single run: RunOn, and for one that nothing ties to `device`
  // (kLeastOutstanding), on the next healthy device while they are out of
  // memory.
  absl::Status RunPlaced(int device, Placement why, const KernelVariant& v,
                         const Problem& p, const Operands& operands,
                         RunResult* result);
  // A stacked run: RunOn with member's ExecuteStacked.
  absl::Status RunStacked(int device, Placement why, const KernelVariant& v,
                          const Problem& merged,
                          absl::Span<const Problem> parts,
                          absl::Span<const Operands> operands,
                          RunResult* result);

  std::vector<std::unique_ptr<Backend>> members_;
  mutable absl::Mutex mu_;
  // Resident allocations by start address.
  mutable std::map<uintptr_t, Range> ranges_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<int64_t> resident_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<Load> load_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coalesce
