// The server's logs end to end: the real coalesce-server with
// --log_format=json --access_log=stderr --log_level=debug, driven over gRPC
// with a client's x-request-id, a W3C traceparent, neither, and a request
// that fails. Every stderr line must be one JSON object; each call's
// access-log line must carry the id the client sent or was sent back, and
// the response metadata must echo it.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_support.h"

namespace coalesce {
namespace {

using json = nlohmann::json;

constexpr char kTraceparent[] =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";

// The x-request-id values the server sent: initial, then trailing.
std::vector<std::string> EchoedIds(const grpc::ClientContext& context) {
  std::vector<std::string> ids;
  for (const auto* metadata : {&context.GetServerInitialMetadata(),
                               &context.GetServerTrailingMetadata()}) {
    const auto it = metadata->find("x-request-id");
    ids.push_back(it == metadata->end()
                      ? "(none)"
                      : std::string(it->second.data(), it->second.size()));
  }
  return ids;
}

void Prepare(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
}

TEST(LoggingE2eTest, JsonLinesAndRequestIds) {
  absl::StatusOr<std::unique_ptr<e2e::ServerUnderTest>> server =
      e2e::ServerUnderTest::Start(
          {"--log_format=json", "--access_log=stderr", "--log_level=debug"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorOps::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));

  // The client's own id.
  {
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("x-request-id", "e2e-echo-1");
    v1::EchoRequest request;
    request.set_payload("hello");
    v1::EchoResponse response;
    ASSERT_TRUE(stub->Echo(&context, request, &response).ok());
    EXPECT_EQ(EchoedIds(context),
              (std::vector<std::string>{"e2e-echo-1", "e2e-echo-1"}));
  }
  // A traceparent's trace-id.
  {
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("traceparent", kTraceparent);
    v1::GetServerInfoResponse response;
    ASSERT_TRUE(stub->GetServerInfo(&context, {}, &response).ok());
    EXPECT_EQ(EchoedIds(context),
              (std::vector<std::string>{kTraceId, kTraceId}));
  }
  // Neither: a made-up id, sent back; the call runs a kernel.
  std::string generated;
  {
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("x-request-id", "has a space");
    v1::TransposeRequest request;
    v1::Tensor* input = request.mutable_input();
    input->set_dtype(v1::DATA_TYPE_FLOAT32);
    input->add_shape(8);
    input->add_shape(4);
    input->set_raw(e2e::FloatBytes(e2e::RandomFloats(32, 1)));
    v1::TransposeResponse response;
    ASSERT_TRUE(stub->Transpose(&context, request, &response).ok());
    const std::vector<std::string> ids = EchoedIds(context);
    generated = ids[0];
    EXPECT_EQ(generated.size(), 32u);
    EXPECT_EQ(ids[1], generated);
  }
  // A failing call: its id still comes back, in the trailers.
  {
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("x-request-id", "e2e-bad");
    v1::TransposeRequest request;  // no input
    v1::TransposeResponse response;
    const grpc::Status status = stub->Transpose(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(EchoedIds(context)[1], "e2e-bad");
  }

  // SIGTERM: the access log is flushed on the way out.
  EXPECT_TRUE((*server)->Terminate(absl::Seconds(20)).exited);
  const std::string log = (*server)->LogTail(size_t{16} << 20);
  std::map<std::string, json> access;  // by request id
  std::vector<json> others;            // the server log's own lines
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    ++lines;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not one JSON object: " << line;
    for (const char* field : {"ts", "level", "logger", "msg"}) {
      EXPECT_TRUE(j.contains(field)) << field << " missing: " << line;
    }
    if (j.value("logger", "") == "access") {
      access[j.value("request_id", "")] = j;
    } else {
      others.push_back(j);
    }
  }
  EXPECT_GT(lines, 4);

  ASSERT_TRUE(access.count("e2e-echo-1")) << log;
  const json& echo = access["e2e-echo-1"];
  EXPECT_EQ(echo["method"], "/coalesce.v1.TensorOps/Echo");
  EXPECT_EQ(echo["code"], "OK");
  EXPECT_EQ(echo["request_bytes"], 7);  // field tag, length, "hello"
  EXPECT_EQ(echo["response_bytes"], 7);
  EXPECT_FALSE(echo["identity"].get<std::string>().empty());
  EXPECT_GE(echo["duration_ms"].get<double>(), 0);
  EXPECT_FALSE(echo.contains("kernel_ms"));

  ASSERT_TRUE(access.count(kTraceId)) << log;
  EXPECT_EQ(access[kTraceId]["method"], "/coalesce.v1.TensorOps/GetServerInfo");

  ASSERT_TRUE(access.count(generated)) << log;
  const json& transpose = access[generated];
  EXPECT_EQ(transpose["method"], "/coalesce.v1.TensorOps/Transpose");
  EXPECT_EQ(transpose["code"], "OK");
  EXPECT_GT(transpose["kernel_ms"].get<double>(), 0);
  EXPECT_GE(transpose["queue_ms"].get<double>(), 0);
  EXPECT_GE(transpose["duration_ms"].get<double>(),
            transpose["kernel_ms"].get<double>());

  ASSERT_TRUE(access.count("e2e-bad")) << log;
  EXPECT_EQ(access["e2e-bad"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(access["e2e-bad"]["response_bytes"], 0);
  // --log_level=debug: the outcome of the failed call, under its id.
  bool outcome_logged = false;
  for (const json& j : others) {
    outcome_logged |= j.value("request_id", "") == "e2e-bad" &&
                      j["level"] == "debug" &&
                      j["msg"].get<std::string>().find("INVALID_ARGUMENT") !=
                          std::string::npos;
  }
  EXPECT_TRUE(outcome_logged) << log;
}

// logrotate's way: move the access log, send SIGHUP, and the server writes
// on into a new file at the path, the moved one keeping what came before.
TEST(LoggingE2eTest, SighupReopensTheAccessLog) {
  char dir_template[] = "/tmp/coalesce-access-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/access.log";
  const std::string moved = path + ".1";
  absl::StatusOr<std::unique_ptr<e2e::ServerUnderTest>> server =
      e2e::ServerUnderTest::Start(
          {"--log_format=json", "--access_log=" + path});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::TensorOps::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  auto echo = [&](const std::string& id) {
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("x-request-id", id);
    v1::EchoRequest request;
    request.set_payload("hello");
    v1::EchoResponse response;
    return stub->Echo(&context, request, &response).ok();
  };
  auto ids = [](const std::string& file) {
    std::vector<std::string> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      out.push_back(json::parse(line).value("request_id", ""));
    }
    return out;
  };
  ASSERT_TRUE(echo("before-rotation"));
  // A call's line is written after its answer is sent, by the log's own
  // thread: the rotation starts once it is in the file.
  const absl::Time written_by = absl::Now() + absl::Seconds(20);
  while (ids(path).empty() && absl::Now() < written_by) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(ids(path), std::vector<std::string>{"before-rotation"});
  ASSERT_EQ(std::rename(path.c_str(), moved.c_str()), 0);
  ASSERT_EQ(kill((*server)->pid(), SIGHUP), 0);
  // The server opens the path again: a new, empty file appears.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (access(path.c_str(), F_OK) != 0 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(access(path.c_str(), F_OK), 0) << (*server)->LogTail();
  ASSERT_TRUE(echo("after-rotation"));
  EXPECT_TRUE((*server)->Terminate(absl::Seconds(20)).exited);

  EXPECT_EQ(ids(moved), std::vector<std::string>{"before-rotation"});
  EXPECT_EQ(ids(path), std::vector<std::string>{"after-rotation"});
  EXPECT_NE((*server)->LogTail().find("access log " + path + " reopened"),
            std::string::npos)
      << (*server)->LogTail();
  std::remove(path.c_str());
  std::remove(moved.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace coalesce
