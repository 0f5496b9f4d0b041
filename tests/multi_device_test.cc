// One server over several devices, end to end: the real server with three
// simulated CPU devices (--device=cpu --cpu_devices=3), driven through the
// C++ client. GetServerInfo lists every device; PutTensor places tensors
// (pinned, or where the fewest tensor bytes are); ops run where their
// handles live, outputs kept beside them; a chain across devices is staged
// and says so; concurrent inline requests spread over the devices; and
// each device has its own series on /metrics.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/npy.h"
#include "tests/e2e_support.h"

namespace coalesce {
namespace {

using e2e::ServerUnderTest;

constexpr int kDevices = 3;

class MultiDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> server =
        ServerUnderTest::Start({"--device=cpu", "--threads=1",
                                absl::StrCat("--cpu_devices=", kDevices),
                                "--max_in_flight=6"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ClientOptions options;
    options.server = server_->address();
    options.client_id =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    if (client_ == nullptr) return;
    absl::StatusOr<v1::ListTensorsResponse> left = client_->ListTensors();
    ASSERT_TRUE(left.ok()) << left.status();
    for (const v1::TensorInfo& t : left->tensors()) {
      EXPECT_TRUE(client_->DeleteTensor(t.handle()).ok());
    }
    if (HasFailure()) {
      std::fprintf(stderr, "--- server log (tail):\n%s\n",
                   server_->LogTail().c_str());
    }
  }

  // rows x cols random floats on the server; device: pinned there.
  v1::TensorInfo Put(const std::vector<float>& values, int64_t rows,
                     int64_t cols, std::optional<int> device = std::nullopt) {
    absl::StatusOr<v1::TensorInfo> t =
        client_->PutTensor(v1::DATA_TYPE_FLOAT32, {rows, cols},
                           e2e::FloatBytes(values), "", device);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : v1::TensorInfo();
  }

  // A transpose of a handle, its output kept as a new handle, with a report.
  v1::TransposeResponse TransposeHandle(const std::string& handle) {
    v1::TransposeRequest request;
    request.mutable_input()->set_handle(handle);
    request.mutable_options()->set_report(true);
    request.mutable_options()->add_outputs()->set_placement(
        v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
    absl::StatusOr<v1::TransposeResponse> r = client_->Transpose(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::TransposeResponse();
  }

  std::vector<float> Fetch(const std::string& handle) {
    absl::StatusOr<FetchedTensor> t = client_->GetTensor(handle);
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> out(t.ok() ? t->bytes.size() / sizeof(float) : 0);
    if (t.ok()) std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
    return out;
  }

  int DeviceOf(const std::string& handle) {
    absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
    EXPECT_TRUE(list.ok()) << list.status();
    for (const v1::TensorInfo& t : list->tensors()) {
      if (t.handle() == handle) return t.device_ordinal();
    }
    ADD_FAILURE() << handle << " not listed";
    return -1;
  }

  static ServerUnderTest* server_;
  std::unique_ptr<Client> client_;
};

ServerUnderTest* MultiDeviceTest::server_ = nullptr;

TEST_F(MultiDeviceTest, ServerInfoListsEveryDevice) {
  absl::StatusOr<v1::GetServerInfoResponse> info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->devices_size(), kDevices);
  for (int i = 0; i < kDevices; ++i) {
    EXPECT_EQ(info->devices(i).ordinal(), i);
    EXPECT_TRUE(info->devices(i).serving());
    EXPECT_TRUE(info->devices(i).healthy());
  }
  EXPECT_NE(info->backend_reason().find("simulated devices 0,1,2 of 3"),
            std::string::npos)
      << info->backend_reason();
}

TEST_F(MultiDeviceTest, TensorsSpreadOrStayWherePinned) {
  const std::vector<float> v = e2e::RandomFloats(64 * 32, 1);
  std::set<int> devices;
  for (int i = 0; i < kDevices; ++i) {
    devices.insert(Put(v, 64, 32).device_ordinal());
  }
  // Equal sizes: each on the device holding the fewest bytes.
  EXPECT_EQ(devices, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(Put(v, 64, 32, 2).device_ordinal(), 2);
  absl::StatusOr<v1::TensorInfo> bad = client_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {64, 32}, e2e::FloatBytes(v), "", 7);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("header.device_ordinal: 7"),
            std::string::npos)
      << bad.status();
}

TEST_F(MultiDeviceTest, OpsRunWhereTheirHandlesLive) {
  constexpr int64_t kRows = 37, kCols = 53;
  const std::vector<float> v = e2e::RandomFloats(kRows * kCols, 2);
  for (int device = 0; device < kDevices; ++device) {
    const v1::TensorInfo input = Put(v, kRows, kCols, device);
    const v1::TransposeResponse r = TransposeHandle(input.handle());
    EXPECT_EQ(r.report().device_ordinal(), device);
    EXPECT_EQ(r.report().placement(), "resident_operands");
    EXPECT_EQ(r.report().staged_bytes(), 0);
    // The output stays beside its input.
    EXPECT_EQ(DeviceOf(r.output().handle()), device);
    EXPECT_EQ(Fetch(r.output().handle()), e2e::Transposed(v, kRows, kCols));
  }
}

// A GEMM whose operands live on two devices: it runs where more of the
// bytes are and the rest is copied there, and the result is right.
TEST_F(MultiDeviceTest, AChainAcrossDevicesIsStaged) {
  constexpr int64_t kM = 40, kK = 24, kN = 30;
  const std::vector<float> a = e2e::RandomFloats(kM * kK, 3);
  const std::vector<float> b = e2e::RandomFloats(kK * kN, 4);
  const v1::TensorInfo ha = Put(a, kM, kK, 1);
  const v1::TensorInfo hb = Put(b, kK, kN, 2);
  v1::GemmRequest request;
  request.mutable_a()->set_handle(ha.handle());
  request.mutable_b()->set_handle(hb.handle());
  request.mutable_options()->set_report(true);
  absl::StatusOr<v1::GemmResponse> r = client_->Gemm(request);
  ASSERT_TRUE(r.ok()) << r.status();
  // A has more bytes: device 1, B's bytes staged from device 2.
  EXPECT_EQ(r->report().device_ordinal(), 1);
  EXPECT_EQ(r->report().placement(), "resident_operands");
  EXPECT_EQ(r->report().staged_bytes(),
            static_cast<int64_t>(b.size() * sizeof(float)));
  std::vector<float> d(kM * kN);
  ASSERT_EQ(r->d().raw().size(), d.size() * sizeof(float));
  std::memcpy(d.data(), r->d().raw().data(), r->d().raw().size());
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) {
        want += static_cast<double>(a[i * kK + k]) * b[k * kN + j];
      }
      EXPECT_NEAR(d[i * kN + j], want, 1e-4 * kK) << i << "," << j;
    }
  }
}

// The CLI pins a tensor and lists where each lives; info lists the
// devices.
TEST_F(MultiDeviceTest, TheCliPlacesAndListsTensorsByDevice) {
  const std::string dir = e2e::MakeTempDir("multi-device-cli");
  NpyArray a;
  a.shape = {6, 5};
  a.bytes = e2e::FloatBytes(e2e::RandomFloats(30, 6));
  ASSERT_TRUE(WriteNpy(dir + "/a.npy", a).ok());
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {
        e2e::BinaryPath("COALESCE_CLI_BINARY", COALESCE_CLI_BINARY),
        "--server=" + server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::RunCommand(argv, absl::Seconds(60));
  };
  const e2e::CommandResult put =
      cli({"put", dir + "/a.npy", "--device_ordinal=2"});
  ASSERT_EQ(put.exit_code, 0) << put;
  const std::string handle(absl::StripAsciiWhitespace(put.out));
  const e2e::CommandResult ls = cli({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls;
  EXPECT_NE(ls.out.find(handle), std::string::npos) << ls;
  EXPECT_NE(ls.out.find("device 2"), std::string::npos) << ls;
  EXPECT_EQ(cli({"rm", handle}).exit_code, 0);
  // An op's report names the device it ran on and why.
  const e2e::CommandResult op =
      cli({"transpose", "--input=" + dir + "/a.npy", "--report"});
  ASSERT_EQ(op.exit_code, 0) << op;
  const size_t ordinal = op.out.find(", ordinal ");
  ASSERT_NE(ordinal, std::string::npos) << op;
  EXPECT_LT(op.out[ordinal + 10] - '0', kDevices) << op;
  EXPECT_NE(op.out.find("placement:  least_outstanding"), std::string::npos)
      << op;
  const e2e::CommandResult info = cli({"info"});
  ASSERT_EQ(info.exit_code, 0) << info;
  for (int i = 0; i < kDevices; ++i) {
    EXPECT_NE(info.out.find(absl::StrCat("device ", i, ": ")),
              std::string::npos)
        << info;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// The sum of a series' values over the devices it is split by.
std::map<std::string, double> ByGpu(const std::string& metrics,
                                    const std::string& name) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    const size_t gpu = line.find("gpu=\"");
    const size_t space = line.rfind(' ');
    if (gpu == absl::string_view::npos || space == absl::string_view::npos) {
      continue;
    }
    const size_t end = line.find('"', gpu + 5);
    double value = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    out[std::string(line.substr(gpu + 5, end - gpu - 5))] += value;
  }
  return out;
}

// Concurrent inline requests keep more than one device busy, and every
// device has its own series.
TEST_F(MultiDeviceTest, InlineRequestsSpreadOverTheDevices) {
  constexpr int64_t kRows = 512, kCols = 768;
  const std::vector<float> v = e2e::RandomFloats(kRows * kCols, 5);
  const std::string expected =
      e2e::FloatBytes(e2e::Transposed(v, kRows, kCols));
  std::map<int, int> runs;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 8; ++i) {
        v1::TransposeRequest request;
        v1::Tensor* input = request.mutable_input();
        input->set_dtype(v1::DATA_TYPE_FLOAT32);
        input->add_shape(kRows);
        input->add_shape(kCols);
        input->set_raw(e2e::FloatBytes(v));
        request.mutable_options()->set_report(true);
        absl::StatusOr<v1::TransposeResponse> r = client_->Transpose(request);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->output().raw(), expected);
        EXPECT_EQ(r->report().placement(), "least_outstanding");
        absl::MutexLock lock(&mu);
        ++runs[r->report().device_ordinal()];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GE(runs.size(), 2u) << "every request ran on one device";
  absl::StatusOr<std::string> metrics =
      e2e::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::map<std::string, double> kernel =
      ByGpu(*metrics, "coalesce_device_kernel_seconds_total");
  EXPECT_EQ(kernel.size(), static_cast<size_t>(kDevices)) << *metrics;
  int busy_devices = 0;
  for (const auto& [gpu, seconds] : kernel) busy_devices += seconds > 0;
  EXPECT_GE(busy_devices, 2);
  // A queue per device.
  EXPECT_EQ(ByGpu(*metrics, "coalesce_device_max_in_flight_requests"),
            (std::map<std::string, double>{{"0", 6}, {"1", 6}, {"2", 6}}));
  const std::map<std::string, double> healthy =
      ByGpu(*metrics, "coalesce_device_healthy");
  EXPECT_EQ(healthy,
            (std::map<std::string, double>{{"0", 1}, {"1", 1}, {"2", 1}}));
}

}  // namespace
}  // namespace coalesce
