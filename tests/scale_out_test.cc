// Scale-out from the client side: two real servers on loopback behind one
// client target ("ipv4:A,B"). With load_balancing=round_robin every call
// goes to the next server, so both answer about half; with gRPC's default
// (pick_first) one answers all. Each server's own /metrics
// (coalesce_requests_total of op transpose) says how many it answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/e2e_support.h"

namespace coalesce {
namespace {

using e2e::ServerUnderTest;

// The body of GET /metrics on 127.0.0.1:port; empty on any failure.
std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof buffer)) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// Transposes a server answered with OK, from its /metrics; -1 when the
// scrape fails.
int64_t TransposesAnswered(const ServerUnderTest& server) {
  const std::string metrics = ScrapeMetrics(server.metrics_port());
  if (metrics.empty()) return -1;
  std::istringstream lines(metrics);
  std::string line;
  double total = 0;
  while (std::getline(lines, line)) {
    if (!absl::StartsWith(line, "coalesce_requests_total{") ||
        !absl::StrContains(line, "op=\"transpose\"") ||
        !absl::StrContains(line, "code=\"OK\"")) {
      continue;
    }
    double value = 0;
    const size_t space = line.rfind(' ');
    if (space != std::string::npos &&
        absl::SimpleAtod(absl::string_view(line).substr(space + 1), &value)) {
      total += value;
    }
  }
  return static_cast<int64_t>(total);
}

class ScaleOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* server : {&a_, &b_}) {
      absl::StatusOr<std::unique_ptr<ServerUnderTest>> started =
          ServerUnderTest::Start({});
      ASSERT_TRUE(started.ok()) << started.status();
      *server = std::move(*started);
    }
    target_ = absl::StrCat("ipv4:", a_->address(), ",", b_->address());
  }

  // Sends calls transposes through one client of target_.
  void SendTransposes(const std::string& load_balancing, int calls) {
    ClientOptions options;
    options.server = target_;
    options.load_balancing = load_balancing;
    options.own_connection = true;
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    v1::TransposeRequest request;
    request.mutable_input()->set_dtype(v1::DATA_TYPE_FLOAT32);
    request.mutable_input()->add_shape(4);
    request.mutable_input()->add_shape(6);
    request.mutable_input()->set_raw(e2e::FloatBytes(e2e::RandomFloats(24, 1)));
    for (int i = 0; i < calls; ++i) {
      absl::StatusOr<v1::TransposeResponse> response =
          (*client)->Transpose(request);
      ASSERT_TRUE(response.ok()) << response.status();
    }
  }

  std::unique_ptr<ServerUnderTest> a_, b_;
  std::string target_;
};

TEST_F(ScaleOutTest, RoundRobinSpreadsCallsOverEveryServer) {
  constexpr int kCalls = 40;
  SendTransposes("round_robin", kCalls);
  const int64_t on_a = TransposesAnswered(*a_);
  const int64_t on_b = TransposesAnswered(*b_);
  std::printf("round_robin: %lld calls on a, %lld on b\n",
              static_cast<long long>(on_a), static_cast<long long>(on_b));
  EXPECT_EQ(on_a + on_b, kCalls) << "a " << on_a << ", b " << on_b;
  // round_robin starts on whichever connection is ready first, then
  // alternates: about half each, not exactly.
  EXPECT_GE(on_a, kCalls / 4) << "a " << on_a << ", b " << on_b;
  EXPECT_GE(on_b, kCalls / 4) << "a " << on_a << ", b " << on_b;
}

TEST_F(ScaleOutTest, PickFirstSendsEveryCallToOneServer) {
  constexpr int kCalls = 20;
  SendTransposes("", kCalls);
  const int64_t on_a = TransposesAnswered(*a_);
  const int64_t on_b = TransposesAnswered(*b_);
  EXPECT_EQ(on_a + on_b, kCalls) << "a " << on_a << ", b " << on_b;
  EXPECT_TRUE(on_a == 0 || on_b == 0) << "a " << on_a << ", b " << on_b;
}

TEST(ScaleOutOptionsTest, AnUnknownPolicyIsRefused) {
  ClientOptions options;
  options.load_balancing = "random";
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coalesce
