// DeviceGroup over simulated CPU devices: placement by resident operands
// and outstanding work, cross-device staging, failure isolation, and the
// conformance suite run through the group.
#include "kernels/core/device_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/conformance.h"

namespace coalesce {
namespace {

// A simulated device whose health a test sets and whose runs can be held
// until a test lets them finish.
class TestDevice final : public Backend {
 public:
  explicit TestDevice(int index, std::string name = "")
      : inner_(CreateSimulatedCpuDevice(1, index)), device_(inner_->device()) {
    if (!name.empty()) device_.name = name;
  }
  BackendKind kind() const override { return inner_->kind(); }
  const DeviceInfo& device() const override { return device_; }
  const VariantRegistry& registry() const override {
    return inner_->registry();
  }
  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override {
    ++runs;
    if (out_of_memory) {
      return absl::ResourceExhaustedError("simulated: out of device memory");
    }
    if (hold != nullptr) {
      ++held;
      hold->WaitForNotification();
    }
    return inner_->Execute(v, p, operands, result);
  }
  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override {
    ++allocations;
    if (out_of_memory) {
      return absl::ResourceExhaustedError("simulated: out of device memory");
    }
    return inner_->AllocateResident(bytes);
  }
  absl::Status Health() const override {
    return failed ? absl::InternalError("simulated fault") : absl::OkStatus();
  }
  // Stands in for a CUDA IPC mapping: resident memory of this device, the
  // handle's text being its size.
  absl::StatusOr<std::shared_ptr<void>> OpenIpcMemory(
      absl::string_view handle, int device,
      int64_t* allocation_bytes) const override {
    if (device != 0) return absl::InternalError("a member has one device");
    ++ipc_opens;
    *allocation_bytes = static_cast<int64_t>(handle.size());
    return inner_->AllocateResident(*allocation_bytes);
  }
  absl::StatusOr<std::unique_ptr<DeviceActivityReader>>
  OpenDeviceActivityReader(int device) const override {
    if (device != 0) return absl::InternalError("a member has one device");
    ++activity_opens;
    return absl::UnimplementedError(
        absl::StrCat("simulated device ", device_.ordinal, ": no counters"));
  }

  // Sampling: on while enabled and not disabled since; refused with
  // UNAVAILABLE while sampling_refused.
  absl::StatusOr<int64_t> EnableProfileSampling(double /*fraction*/) override {
    if (sampling_refused) {
      return absl::UnavailableError("simulated: another profiler holds it");
    }
    sampling = true;
    return 4;
  }
  void DisableProfileSampling() override { sampling = false; }
  void FlushProfilerData() override { ++profiler_flushes; }

  std::atomic<bool> sampling{false};
  std::atomic<int> profiler_flushes{0};
  std::atomic<bool> sampling_refused{false};
  std::atomic<bool> failed{false};
  std::atomic<bool> out_of_memory{false};
  std::atomic<int> runs{0};
  std::atomic<int> allocations{0};
  std::atomic<int> held{0};
  absl::Notification* hold = nullptr;
  mutable std::atomic<int> ipc_opens{0};
  mutable std::atomic<int> activity_opens{0};

 private:
  std::unique_ptr<Backend> inner_;
  DeviceInfo device_;
};

struct Group {
  std::unique_ptr<DeviceGroup> group;
  std::vector<TestDevice*> devices;
};

Group MakeGroup(int n) {
  Group g;
  std::vector<std::unique_ptr<Backend>> members;
  for (int i = 0; i < n; ++i) {
    auto d = std::make_unique<TestDevice>(i);
    g.devices.push_back(d.get());
    members.push_back(std::move(d));
  }
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::Create(std::move(members));
  EXPECT_TRUE(group.ok()) << group.status();
  g.group = *std::move(group);
  return g;
}

const KernelVariant& Blocked(const Backend& b) {
  return *b.registry().Find("transpose.cpu.blocked");
}

// A transpose of rows x cols random floats: its problem and input.
struct Transpose {
  Transpose(int64_t rows, int64_t cols, uint64_t seed)
      : problem(TransposeProblem{DType::kFloat32, 1, rows, cols}),
        input(rows * cols) {
    FillRandom(input.data(), DType::kFloat32, rows * cols, seed, -1, 1);
  }
  std::vector<float> Expected() const {
    const auto& t = std::get<TransposeProblem>(problem);
    std::vector<float> out(input.size());
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int64_t c = 0; c < t.cols; ++c) {
        out[c * t.rows + r] = input[r * t.cols + c];
      }
    }
    return out;
  }
  int64_t bytes() const {
    return static_cast<int64_t>(input.size() * sizeof(float));
  }
  Problem problem;
  std::vector<float> input;
};

// Resident memory of the group holding data's bytes.
std::shared_ptr<void> Resident(DeviceGroup& g, const std::vector<float>& data) {
  const int64_t bytes = static_cast<int64_t>(data.size() * sizeof(float));
  absl::StatusOr<std::shared_ptr<void>> m = g.AllocateResident(bytes);
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(g.CopyToResident(m->get(), bytes, 0, data.data(), bytes).ok());
  return *m;
}

// One input and one output, each in host memory unless said otherwise.
Operands Ops(const void* input, void* output,
             MemorySpace input_space = MemorySpace::kHost,
             MemorySpace output_space = MemorySpace::kHost) {
  Operands ops;
  ops.inputs = {input};
  ops.input_spaces = {input_space};
  ops.outputs = {output};
  ops.output_spaces = {output_space};
  return ops;
}

Operands ResidentOps(const void* input, void* output) {
  return Ops(input, output, MemorySpace::kResident, MemorySpace::kResident);
}

std::vector<float> Read(DeviceGroup& g, const void* resident, size_t n) {
  std::vector<float> out(n);
  const int64_t bytes = static_cast<int64_t>(n * sizeof(float));
  EXPECT_TRUE(g.CopyFromResident(resident, bytes, 0, out.data(), bytes).ok());
  return out;
}

TEST(DeviceGroup, RefusesDevicesOfDifferentModels) {
  std::vector<std::unique_ptr<Backend>> members;
  members.push_back(std::make_unique<TestDevice>(0));
  members.push_back(std::make_unique<TestDevice>(1, "another model"));
  absl::StatusOr<std::unique_ptr<DeviceGroup>> g =
      DeviceGroup::Create(std::move(members));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("device 1"), std::string::npos)
      << g.status();
  EXPECT_EQ(DeviceGroup::Create({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceGroup, DescribesEveryMember) {
  Group g = MakeGroup(3);
  EXPECT_EQ(g.group->device_count(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g.group->device_at(i).ordinal, i);
    EXPECT_TRUE(g.group->device_at(i).simulated);
  }
  EXPECT_EQ(g.group->VisibleDevices().size(), 3u);
  EXPECT_EQ(g.group->concurrency(), 3 * g.devices[0]->concurrency());
}

// Every CPU variant passes the conformance suite through the group.
TEST(DeviceGroup, RunsTheConformanceSuite) {
  Group g = MakeGroup(2);
  for (const KernelVariant* v : g.group->registry().All()) {
    for (const Problem& p : ConformanceProblems(v->op(), DType::kFloat32)) {
      if (!v->CanImplement(p, g.group->device()).ok()) continue;
      const absl::Status s = CheckVariant(*g.group, *v, p, 7);
      EXPECT_TRUE(s.ok()) << s;
    }
  }
}

// With nothing in flight every device is as idle as the others: the
// lowest index. While runs are held, each new one goes to a device with
// fewer.
TEST(DeviceGroup, InlineRequestsGoToTheLeastOutstandingDevice) {
  Group g = MakeGroup(3);
  Transpose t(64, 48, 1);
  std::vector<float> out(t.input.size());
  const Operands ops = Ops(t.input.data(), out.data());
  RunResult alone;
  ASSERT_TRUE(g.group->Execute(Blocked(*g.group), t.problem, ops, &alone).ok());
  EXPECT_EQ(alone.device, 0);
  EXPECT_EQ(alone.placement, Placement::kLeastOutstanding);

  absl::Notification release;
  for (TestDevice* d : g.devices) d->hold = &release;
  std::vector<std::vector<float>> outs(3, std::vector<float>(t.input.size()));
  std::vector<RunResult> runs(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const Operands o = Ops(t.input.data(), outs[i].data());
      EXPECT_TRUE(
          g.group->Execute(Blocked(*g.group), t.problem, o, &runs[i]).ok());
    });
    // The next request is placed only once this one holds its device.
    while (g.devices[0]->held + g.devices[1]->held + g.devices[2]->held <
           i + 1) {
      std::this_thread::yield();
    }
    double outstanding = 0;
    for (int d = 0; d < 3; ++d) outstanding += g.group->OutstandingSeconds(d);
    EXPECT_GT(outstanding, 0);
  }
  release.Notify();
  for (std::thread& th : threads) th.join();
  std::vector<int> used;
  for (const RunResult& r : runs) used.push_back(r.device);
  std::sort(used.begin(), used.end());
  EXPECT_EQ(used, (std::vector<int>{0, 1, 2}));
  for (const auto& o : outs) EXPECT_EQ(o, t.Expected());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.group->OutstandingSeconds(i), 0);
}

// New memory goes to the device holding the fewest resident bytes, or
// beside `near`; a run goes where its resident operands are.
TEST(DeviceGroup, RunsWhereItsResidentOperandsLive) {
  Group g = MakeGroup(2);
  Transpose t(33, 70, 2);
  std::shared_ptr<void> first = Resident(*g.group, t.input);
  std::shared_ptr<void> second = Resident(*g.group, t.input);
  ASSERT_EQ(g.group->DeviceOfResident(first.get()), 0);
  ASSERT_EQ(g.group->DeviceOfResident(second.get()), 1);
  // An interior address belongs to its allocation's device.
  EXPECT_EQ(g.group->DeviceOfResident(static_cast<char*>(second.get()) + 4), 1);
  EXPECT_EQ(g.group->DeviceOfResident(t.input.data()), -1);

  absl::StatusOr<std::shared_ptr<void>> out = g.group->AllocateResidentOn(
      g.group->DeviceOfResident(second.get()), t.bytes());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(g.group->DeviceOfResident(out->get()), 1);
  const Operands ops = ResidentOps(second.get(), out->get());
  RunResult run;
  ASSERT_TRUE(g.group->Execute(Blocked(*g.group), t.problem, ops, &run).ok());
  EXPECT_EQ(run.device, 1);
  EXPECT_EQ(run.placement, Placement::kResident);
  EXPECT_EQ(run.staged_bytes, 0);
  EXPECT_EQ(g.devices[1]->runs, 1);
  EXPECT_EQ(g.devices[0]->runs, 0);
  EXPECT_EQ(Read(*g.group, out->get(), t.input.size()), t.Expected());
}

// An input on one device and the output on another: the run goes where
// more of the bytes are, the rest is copied there and back.
TEST(DeviceGroup, StagesOperandsOfAnotherDevice) {
  Group g = MakeGroup(2);
  Transpose t(17, 300, 3);
  std::shared_ptr<void> input = Resident(*g.group, t.input);
  std::shared_ptr<void> filler = Resident(*g.group, t.input);
  ASSERT_EQ(g.group->DeviceOfResident(input.get()), 0);
  // The output on the filler's device, 1; poisoned.
  absl::StatusOr<std::shared_ptr<void>> out = g.group->AllocateResidentOn(
      g.group->DeviceOfResident(filler.get()), t.bytes());
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(g.group->DeviceOfResident(out->get()), 1);
  Poison(out->get(), static_cast<size_t>(t.bytes()));
  const Operands ops = ResidentOps(input.get(), out->get());
  RunResult run;
  ASSERT_TRUE(g.group->Execute(Blocked(*g.group), t.problem, ops, &run).ok());
  // Equal bytes on both: the lower index, the output staged back.
  EXPECT_EQ(run.device, 0);
  EXPECT_EQ(run.staged_bytes, t.bytes());
  EXPECT_EQ(Read(*g.group, out->get(), t.input.size()), t.Expected());
  EXPECT_EQ(Read(*g.group, input.get(), t.input.size()), t.input);
}

// The server's schedulers place a run at admission (ResidentHome, else
// their own load) and ExecuteOn runs it there.
TEST(DeviceGroup, ExecuteOnRunsWhereTheCallerSays) {
  Group g = MakeGroup(3);
  Transpose t(24, 40, 9);
  std::vector<float> out(t.input.size());
  const Operands inline_ops = Ops(t.input.data(), out.data());
  EXPECT_EQ(g.group->ResidentHome(t.problem, inline_ops), -1);
  RunResult run;
  ASSERT_TRUE(
      g.group->ExecuteOn(2, Blocked(*g.group), t.problem, inline_ops, &run)
          .ok());
  EXPECT_EQ(run.device, 2);
  EXPECT_EQ(run.placement, Placement::kLeastOutstanding);
  EXPECT_EQ(out, t.Expected());

  std::shared_ptr<void> on_zero = Resident(*g.group, t.input);
  absl::StatusOr<std::shared_ptr<void>> on_one =
      g.group->AllocateResidentOn(1, t.bytes());
  ASSERT_TRUE(on_one.ok()) << on_one.status();
  const Operands ops = ResidentOps(on_zero.get(), on_one->get());
  // Equal bytes on 0 and 1: the lower index is home.
  EXPECT_EQ(g.group->ResidentHome(t.problem, ops), 0);
  ASSERT_TRUE(
      g.group->ExecuteOn(1, Blocked(*g.group), t.problem, ops, &run).ok());
  EXPECT_EQ(run.device, 1);
  EXPECT_EQ(run.staged_bytes, t.bytes());  // the input, from device 0
  EXPECT_EQ(Read(*g.group, on_one->get(), t.input.size()), t.Expected());
  EXPECT_EQ(
      g.group->ExecuteOn(3, Blocked(*g.group), t.problem, ops, &run).code(),
      absl::StatusCode::kInvalidArgument);
  g.devices[2]->failed = true;
  EXPECT_EQ(
      g.group->ExecuteOn(2, Blocked(*g.group), t.problem, inline_ops, &run)
          .code(),
      absl::StatusCode::kUnavailable);
}

TEST(DeviceGroup, AllocatesOnADeviceNamed) {
  Group g = MakeGroup(3);
  absl::StatusOr<std::shared_ptr<void>> m = g.group->AllocateResidentOn(2, 64);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(g.group->DeviceOfResident(m->get()), 2);
  EXPECT_EQ(g.group->AllocateResidentOn(3, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  g.devices[1]->failed = true;
  EXPECT_EQ(g.group->AllocateResidentOn(1, 64).status().code(),
            absl::StatusCode::kUnavailable);
  // Freed memory is forgotten.
  const void* address = m->get();
  m->reset();
  EXPECT_EQ(g.group->DeviceOfResident(address), -1);
  // Empty memory is nowhere: no byte of it can be read.
  absl::StatusOr<std::shared_ptr<void>> empty =
      g.group->AllocateResidentOn(2, 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(g.group->DeviceOfResident(empty->get()), -1);
}

// Shared device memory is mapped on the device named, and its requests run
// there; each device's counters are opened on that device.
TEST(DeviceGroup, OpensIpcMemoryAndCountersOnTheDeviceNamed) {
  Group g = MakeGroup(3);
  int64_t bytes = 0;
  absl::StatusOr<std::shared_ptr<void>> m =
      g.group->OpenIpcMemory("sixteen bytes!!!", 2, &bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(bytes, 16);
  EXPECT_EQ(g.devices[2]->ipc_opens, 1);
  EXPECT_EQ(g.devices[0]->ipc_opens + g.devices[1]->ipc_opens, 0);
  EXPECT_EQ(g.group->DeviceOfResident(m->get()), 2);
  EXPECT_EQ(g.group->OpenIpcMemory("x", 3, &bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.group->OpenIpcMemory("x", -1, &bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
  g.devices[1]->failed = true;
  EXPECT_EQ(g.group->OpenIpcMemory("x", 1, &bytes).status().code(),
            absl::StatusCode::kUnavailable);

  const absl::StatusOr<std::unique_ptr<DeviceActivityReader>> reader =
      g.group->OpenDeviceActivityReader(1);
  EXPECT_EQ(reader.status().message(), "simulated device 1: no counters");
  EXPECT_EQ(g.devices[1]->activity_opens, 1);
  EXPECT_EQ(g.group->OpenDeviceActivityReader(3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Sampling is on for every member or for none: a member that refuses it
// turns it off again on those enabled before it.
TEST(DeviceGroup, ProfileSamplingOnEveryMemberOrNone) {
  Group g = MakeGroup(3);
  g.devices[2]->sampling_refused = true;
  const absl::StatusOr<int64_t> refused = g.group->EnableProfileSampling(0.25);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("device 2"),
            absl::string_view::npos)
      << refused.status();
  for (TestDevice* d : g.devices) EXPECT_FALSE(d->sampling);

  g.devices[2]->sampling_refused = false;
  const absl::StatusOr<int64_t> every = g.group->EnableProfileSampling(0.25);
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(*every, 4);
  for (TestDevice* d : g.devices) EXPECT_TRUE(d->sampling);
  g.group->DisableProfileSampling();
  for (TestDevice* d : g.devices) EXPECT_FALSE(d->sampling);
}

// Before the server's _Exit: every member hands over its profiler's data.
TEST(DeviceGroup, ProfilerDataFlushedOnEveryMember) {
  Group g = MakeGroup(3);
  g.group->FlushProfilerData();
  for (TestDevice* d : g.devices) EXPECT_EQ(d->profiler_flushes, 1);
}

TEST(DeviceGroup, AFailedDeviceIsLeftOutAndNamed) {
  Group g = MakeGroup(3);
  Transpose t(40, 41, 4);
  std::shared_ptr<void> on_zero = Resident(*g.group, t.input);
  ASSERT_EQ(g.group->DeviceOfResident(on_zero.get()), 0);
  g.devices[0]->failed = true;
  EXPECT_TRUE(g.group->Health().ok());
  EXPECT_FALSE(g.group->HealthOf(0).ok());
  EXPECT_TRUE(g.group->HealthOf(1).ok());

  // Inline requests and new memory go to the others.
  std::vector<float> out(t.input.size());
  const Operands inline_ops = Ops(t.input.data(), out.data());
  RunResult run;
  ASSERT_TRUE(
      g.group->Execute(Blocked(*g.group), t.problem, inline_ops, &run).ok());
  EXPECT_EQ(run.device, 1);
  EXPECT_EQ(out, t.Expected());
  std::shared_ptr<void> fresh = Resident(*g.group, t.input);
  EXPECT_NE(g.group->DeviceOfResident(fresh.get()), 0);

  // A request whose tensor lives on the failed device cannot run.
  const Operands resident_ops =
      Ops(on_zero.get(), out.data(), MemorySpace::kResident);
  const absl::Status s =
      g.group->Execute(Blocked(*g.group), t.problem, resident_ops, &run);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("device 0"), std::string::npos) << s;
  EXPECT_EQ(g.devices[0]->runs, 0);

  for (TestDevice* d : g.devices) d->failed = true;
  EXPECT_FALSE(g.group->Health().ok());
  EXPECT_EQ(
      g.group->Execute(Blocked(*g.group), t.problem, inline_ops, &run).code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(g.group->AllocateResident(64).status().code(),
            absl::StatusCode::kUnavailable);
}

// A device out of memory hands on what nothing ties to it; what is tied
// to it gets its error.
TEST(DeviceGroup, ADeviceOutOfMemoryHandsOnWhatItCan) {
  Group g = MakeGroup(2);
  Transpose t(20, 30, 8);
  std::shared_ptr<void> on_zero = Resident(*g.group, t.input);
  ASSERT_EQ(g.group->DeviceOfResident(on_zero.get()), 0);
  std::shared_ptr<void> on_one = Resident(*g.group, t.input);
  ASSERT_EQ(g.group->DeviceOfResident(on_one.get()), 1);
  g.devices[0]->out_of_memory = true;
  // Equal bytes on both: device 0 is asked first, and refuses.
  const int asked = g.devices[0]->allocations;
  std::shared_ptr<void> fresh = Resident(*g.group, t.input);
  EXPECT_EQ(g.group->DeviceOfResident(fresh.get()), 1);
  EXPECT_EQ(g.devices[0]->allocations, asked + 1);

  std::vector<float> out(t.input.size());
  const Operands inline_ops = Ops(t.input.data(), out.data());
  RunResult run;
  ASSERT_TRUE(
      g.group->Execute(Blocked(*g.group), t.problem, inline_ops, &run).ok());
  EXPECT_EQ(run.device, 1);
  EXPECT_EQ(g.devices[0]->runs, 1);  // tried first, out of memory
  EXPECT_EQ(out, t.Expected());

  const Operands tied = Ops(on_zero.get(), out.data(), MemorySpace::kResident);
  EXPECT_EQ(g.group->Execute(Blocked(*g.group), t.problem, tied, &run).code(),
            absl::StatusCode::kResourceExhausted);
  g.devices[1]->out_of_memory = true;
  EXPECT_EQ(g.group->AllocateResident(64).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      g.group->Execute(Blocked(*g.group), t.problem, inline_ops, &run).code(),
      absl::StatusCode::kResourceExhausted);
}

// A batch of requests whose operands live on two devices runs as one
// launch on one of them.
TEST(DeviceGroup, StackedRunsStageEveryPart) {
  Group g = MakeGroup(2);
  Transpose a(8, 12, 5), b(8, 12, 6);
  std::shared_ptr<void> in_a = Resident(*g.group, a.input);
  std::shared_ptr<void> in_b = Resident(*g.group, b.input);
  ASSERT_NE(g.group->DeviceOfResident(in_a.get()),
            g.group->DeviceOfResident(in_b.get()));
  std::vector<float> out_a(a.input.size()), out_b(b.input.size());
  std::vector<Problem> parts = {a.problem, b.problem};
  const std::vector<Operands> ops = {
      Ops(in_a.get(), out_a.data(), MemorySpace::kResident),
      Ops(in_b.get(), out_b.data(), MemorySpace::kResident)};
  const Problem merged = TransposeProblem{DType::kFloat32, 2, 8, 12};
  RunResult run;
  ASSERT_TRUE(
      g.group->ExecuteStacked(Blocked(*g.group), merged, parts, ops, &run)
          .ok());
  EXPECT_EQ(run.staged_bytes, a.bytes());
  EXPECT_EQ(out_a, a.Expected());
  EXPECT_EQ(out_b, b.Expected());
}

}  // namespace
}  // namespace coalesce
