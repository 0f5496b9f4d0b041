// The metrics port over real loopback TCP on port 0: /metrics, the health
// paths, 404 and 405, slow clients, and an address that cannot be bound.
#include "server/metrics/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/registry.h"

namespace coalesce::metrics {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends one HTTP/1.0 request to 127.0.0.1:port and returns the whole answer
// (the server closes the connection after it; civetweb answers in the
// request's HTTP version).
// A TCP connection to 127.0.0.1:port, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Fetch(int port, const std::string& method,
                  const std::string& path) {
  const int fd = Connect(port);
  if (fd < 0) return "connect failed";
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "write failed";
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

// One server for the suite: civetweb's mg_stop waits out its listener's
// poll period (about 2 s).
class HttpServerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    registry_ = new std::shared_ptr<Registry>(std::make_shared<Registry>());
    (*registry_)
        ->AddCounter("test_requests_total", "Requests.")
        .Add({{"op", "gemm"}})
        .Increment(7);
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1:0", *registry_, [] {
          return ready_.load()
                     ? absl::OkStatus()
                     : absl::UnavailableError("draining: shutting down");
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_GT(server_->port(), 0);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete registry_;
  }

  static std::shared_ptr<Registry>* registry_;
  static HttpServer* server_;
  static inline std::atomic<bool> ready_{true};
};

std::shared_ptr<Registry>* HttpServerTest::registry_ = nullptr;
HttpServer* HttpServerTest::server_ = nullptr;

TEST_F(HttpServerTest, GetServesTheExposition) {
  const std::string response = Fetch(server_->port(), "GET", "/metrics");
  // The Exposer answers in HTTP/1.1 whatever the request's version.
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain"));
  EXPECT_THAT(response, HasSubstr("\ntest_requests_total{op=\"gemm\"} 7\n"));
  // The Exposer's own scrape counters come with it.
  EXPECT_THAT(response, HasSubstr("\nexposer_scrapes_total "));
}

TEST_F(HttpServerTest, HealthzIsLiveAndReadyzFollowsReadiness) {
  EXPECT_THAT(
      Fetch(server_->port(), "GET", "/healthz"),
      AllOf(StartsWith("HTTP/1.0 200 OK\r\n"), EndsWith("\r\n\r\nok\n")));
  EXPECT_THAT(
      Fetch(server_->port(), "GET", "/readyz"),
      AllOf(StartsWith("HTTP/1.0 200 OK\r\n"), EndsWith("\r\n\r\nready\n")));
  ready_.store(false);
  const std::string draining = Fetch(server_->port(), "GET", "/readyz");
  ready_.store(true);
  EXPECT_THAT(draining, StartsWith("HTTP/1.0 503"));
  EXPECT_THAT(draining,
              EndsWith("\r\n\r\nnot ready: draining: shutting down\n"));
  // Still live while not ready.
  EXPECT_THAT(Fetch(server_->port(), "HEAD", "/healthz"),
              AllOf(StartsWith("HTTP/1.0 200 OK\r\n"), EndsWith("\r\n\r\n")));
  EXPECT_THAT(Fetch(server_->port(), "POST", "/readyz"),
              StartsWith("HTTP/1.0 405"));
  EXPECT_THAT(Fetch(server_->port(), "GET", "/readyz/x"),
              StartsWith("HTTP/1.0 404"));
}

TEST_F(HttpServerTest, OtherPathsAndMethodsAreRefused) {
  EXPECT_THAT(Fetch(server_->port(), "GET", "/"), StartsWith("HTTP/1.0 404"));
  EXPECT_THAT(Fetch(server_->port(), "GET", "/metrics/extra"),
              StartsWith("HTTP/1.0 404"));
  EXPECT_THAT(Fetch(server_->port(), "POST", "/metrics"),
              StartsWith("HTTP/1.0 405"));
  EXPECT_THAT(Fetch(server_->port(), "HEAD", "/metrics"),
              StartsWith("HTTP/1.0 405"));
}

// Clients that open a request and never finish it must not keep a scrape
// waiting: each holds a worker until its request times out (5 s). The
// bound asserted is loose against a loaded machine; a server without
// enough workers takes the whole timeout.
TEST_F(HttpServerTest, AnswersWhileSixteenClientsHoldHalfOpenRequests) {
  std::vector<int> slow;
  const std::string partial = "GET /metrics HTTP/1.1\r\nHost: slow\r\n";
  for (int i = 0; i < 16; ++i) {
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, partial.data(), partial.size()),
              static_cast<ssize_t>(partial.size()));
    slow.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));  // accepted and waiting
  const absl::Time start = absl::Now();
  const std::string response = Fetch(server_->port(), "GET", "/metrics");
  const absl::Duration took = absl::Now() - start;
  for (int fd : slow) close(fd);
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_LT(took, absl::Seconds(3)) << took;
  std::printf("scrape with 16 half-open requests held: %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
}

TEST_F(HttpServerTest, PortInUseIsUnavailable) {
  absl::StatusOr<std::unique_ptr<HttpServer>> second = HttpServer::Start(
      absl::StrCat("127.0.0.1:", server_->port()), *registry_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
}

TEST(HttpServerStartTest, MalformedAddressIsUnavailable) {
  auto registry = std::make_shared<Registry>();
  for (const char* address : {"not an address", "1.2.3.4:80", "[::1]:0"}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(address, registry);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable)
        << address;
    EXPECT_THAT(server.status().message(), HasSubstr(address));
  }
}

}  // namespace
}  // namespace coalesce::metrics
