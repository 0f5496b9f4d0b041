#include "server/logging/access_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/logging/log.h"
#include "spdlog/details/log_msg.h"

namespace coalesce {
namespace {

using json = nlohmann::json;

AccessRecord KernelCall() {
  AccessRecord r;
  r.request_id = "req-1";
  r.method = "/coalesce.v1.TensorOps/Transpose";
  r.code = "OK";
  r.identity = "alice";
  r.peer = "ipv4:127.0.0.1:50000";
  r.request_bytes = 1040;
  r.response_bytes = 1032;
  r.queue_seconds = 0.000250;
  r.kernel_seconds = 0.0000125;
  r.duration_seconds = 0.0015;
  return r;
}

json Parse(const std::string& fields) {
  return json::parse("{" + fields + "}");
}

TEST(AccessLogFormatTest, JsonFields) {
  const json j = Parse(FormatAccessFields(KernelCall(), LogFormat::kJson));
  EXPECT_EQ(j["msg"], "/coalesce.v1.TensorOps/Transpose OK");
  EXPECT_EQ(j["request_id"], "req-1");
  EXPECT_EQ(j["method"], "/coalesce.v1.TensorOps/Transpose");
  EXPECT_EQ(j["code"], "OK");
  EXPECT_EQ(j["identity"], "alice");
  EXPECT_EQ(j["peer"], "ipv4:127.0.0.1:50000");
  EXPECT_EQ(j["request_bytes"], 1040);
  EXPECT_EQ(j["response_bytes"], 1032);
  EXPECT_DOUBLE_EQ(j["queue_ms"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["kernel_ms"].get<double>(), 0.013);  // 3 decimals
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 1.5);
  EXPECT_FALSE(j.contains("http_status"));
}

TEST(AccessLogFormatTest, UnknownFiguresLeftOut) {
  AccessRecord r;
  r.request_id = "x";
  r.method = "GET /v2/nothing";
  r.code = "NOT_FOUND";
  r.http_status = 404;
  const json j = Parse(FormatAccessFields(r, LogFormat::kJson));
  EXPECT_EQ(j["http_status"], 404);
  EXPECT_EQ(j["identity"], "");
  for (const char* absent :
       {"request_bytes", "response_bytes", "queue_ms", "kernel_ms"}) {
    EXPECT_FALSE(j.contains(absent)) << absent;
  }
}

TEST(AccessLogFormatTest, ClientTextEscaped) {
  AccessRecord r = KernelCall();
  r.identity = "eve\"\n\\\x01 x=y";
  const std::string fields = FormatAccessFields(r, LogFormat::kJson);
  EXPECT_EQ(fields.find('\n'), std::string::npos);
  EXPECT_EQ(Parse(fields)["identity"], r.identity);
  const std::string text = FormatAccessFields(r, LogFormat::kText);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_NE(text.find(R"(identity="eve\"\n\\\u0001 x=y")"), std::string::npos)
      << text;
}

TEST(AccessLogFormatTest, TextLine) {
  AccessRecord r = KernelCall();
  r.method = "POST /v2/models/transpose/infer";
  r.identity = "";
  r.http_status = 200;
  EXPECT_EQ(FormatAccessFields(r, LogFormat::kText),
            "request_id=req-1 method=\"POST /v2/models/transpose/infer\" "
            "code=OK http_status=200 identity=- peer=ipv4:127.0.0.1:50000 "
            "request_bytes=1040 response_bytes=1032 queue_ms=0.250 "
            "kernel_ms=0.013 duration_ms=1.500");
}

std::string Formatted(LogFormat format, LogPayload payload,
                      const std::string& message) {
  spdlog::details::log_msg msg("coalesce", spdlog::level::warn, message);
  spdlog::memory_buf_t out;
  NewLogFormatter(format, payload)->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(LogFormatterTest, JsonLine) {
  const std::string line =
      Formatted(LogFormat::kJson, LogPayload::kMessage, "a \"b\"\n\\c\t");
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const json j = json::parse(line);
  EXPECT_EQ(j["msg"], "a \"b\"\n\\c\t");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["logger"], "coalesce");
  EXPECT_TRUE(
      std::regex_match(j["ts"].get<std::string>(),
                       std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << j["ts"];
  EXPECT_FALSE(j.contains("request_id"));
}

TEST(LogFormatterTest, RequestIdOfTheScope) {
  {
    RequestLogScope scope("req-7");
    EXPECT_EQ(json::parse(Formatted(LogFormat::kJson, LogPayload::kMessage,
                                    "m"))["request_id"],
              "req-7");
    const std::string text =
        Formatted(LogFormat::kText, LogPayload::kMessage, "m");
    EXPECT_NE(text.find("[warning] [req-7] m"), std::string::npos) << text;
    {
      RequestLogScope none("");
      EXPECT_FALSE(
          json::parse(Formatted(LogFormat::kJson, LogPayload::kMessage, "m"))
              .contains("request_id"));
    }
    EXPECT_EQ(CurrentRequestId(), "req-7");
  }
  EXPECT_EQ(CurrentRequestId(), "");
}

TEST(LogFormatterTest, AccessPayloadIsTheFields) {
  const json j = json::parse(
      Formatted(LogFormat::kJson, LogPayload::kFields,
                FormatAccessFields(KernelCall(), LogFormat::kJson)));
  EXPECT_EQ(j["logger"], "coalesce");
  EXPECT_EQ(j["request_id"], "req-1");
  EXPECT_EQ(j["kernel_ms"], 0.013);
  EXPECT_TRUE(j.contains("ts"));
}

TEST(ParseFlagsTest, LevelsAndFormats) {
  spdlog::level::level_enum level;
  EXPECT_TRUE(ParseLogLevel("warn", &level));
  EXPECT_EQ(level, spdlog::level::warn);
  EXPECT_TRUE(ParseLogLevel("off", &level));
  EXPECT_EQ(level, spdlog::level::off);
  EXPECT_FALSE(ParseLogLevel("warning", &level));
  EXPECT_FALSE(ParseLogLevel("INFO", &level));
  LogFormat format;
  EXPECT_TRUE(ParseLogFormat("json", &format));
  EXPECT_EQ(format, LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml", &format));
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", getpid());
}

// Writes n lines of a kernel call, their request ids prefix0 .. prefix<n-1>.
void WriteIds(AccessLog& log, const std::string& prefix, int n) {
  AccessRecord r = KernelCall();
  for (int i = 0; i < n; ++i) {
    r.request_id = absl::StrCat(prefix, i);
    log.Write(r);
  }
}

TEST(AccessLogTest, WritesEveryLineToTheFile) {
  const std::string path = TempPath("access_all");
  std::remove(path.c_str());
  auto log = AccessLog::Open(path, LogFormat::kJson);
  ASSERT_TRUE(log.ok()) << log.status();
  WriteIds(**log, "req-", 100);
  (*log)->Close();
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const json j = json::parse(lines[i]);
    EXPECT_EQ(j["logger"], "access");
    EXPECT_EQ(j["request_id"], absl::StrCat("req-", i));
  }
  EXPECT_EQ((*log)->dropped(), 0u);
  std::remove(path.c_str());
}

TEST(AccessLogTest, LinesReachTheFileWithinSecondsWithoutClose) {
  const std::string path = TempPath("access_flushed");
  std::remove(path.c_str());
  auto log = AccessLog::Open(path, LogFormat::kJson);
  ASSERT_TRUE(log.ok()) << log.status();
  WriteIds(**log, "quiet-", 3);
  // Three lines fill no buffer: only the periodic flush writes them out.
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (Lines(path).size() < 3 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Lines(path).size(), 3u);
  (*log)->Close();
  std::remove(path.c_str());
}

TEST(AccessLogTest, FullQueueDropsAndCounts) {
  const std::string path = TempPath("access_drops");
  std::remove(path.c_str());
  // A queue of two lines cannot keep up with a tight loop: some lines are
  // dropped, and every line is either written or counted.
  auto log = AccessLog::Open(path, LogFormat::kText, /*queue_lines=*/2);
  ASSERT_TRUE(log.ok()) << log.status();
  constexpr int kLines = 20000;
  for (int i = 0; i < kLines; ++i) (*log)->Write(KernelCall());
  (*log)->Close();
  const size_t written = Lines(path).size();
  EXPECT_GT((*log)->dropped(), 0u);
  EXPECT_EQ(written + (*log)->dropped(), static_cast<size_t>(kLines));
  // After Close, lines are not written.
  (*log)->Write(KernelCall());
  EXPECT_EQ(Lines(path).size(), written);
  std::remove(path.c_str());
}

// A rotation moves the file away; Reopen makes a new one at the path. Lines
// written before the Reopen land in the moved file or the new one, each
// exactly once; lines written after it land in the new one.
TEST(AccessLogTest, ReopenAfterTheFileWasMoved) {
  const std::string path = TempPath("access_rotated");
  const std::string moved = path + ".1";
  std::remove(path.c_str());
  std::remove(moved.c_str());
  auto log = AccessLog::Open(path, LogFormat::kJson);
  ASSERT_TRUE(log.ok()) << log.status();
  WriteIds(**log, "before-", 50);
  ASSERT_EQ(std::rename(path.c_str(), moved.c_str()), 0);
  ASSERT_TRUE((*log)->Reopen().ok());
  WriteIds(**log, "after-", 50);
  (*log)->Close();
  std::set<std::string> before, after;
  for (const std::string& file : {moved, path}) {
    for (const std::string& line : Lines(file)) {
      const std::string id = json::parse(line)["request_id"];
      if (id.rfind("after-", 0) == 0) {
        EXPECT_EQ(file, path) << id << " went to the moved file";
        EXPECT_TRUE(after.insert(id).second) << id << " twice";
      } else {
        EXPECT_TRUE(before.insert(id).second) << id << " twice";
      }
    }
  }
  EXPECT_EQ(before.size(), 50u);
  EXPECT_EQ(after.size(), 50u);
  std::remove(path.c_str());
  std::remove(moved.c_str());
}

TEST(AccessLogTest, ReopenFailureNamesThePath) {
  const std::string dir = TempPath("access_dir");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string path = dir + "/access.log";
  auto log = AccessLog::Open(path, LogFormat::kText);
  ASSERT_TRUE(log.ok()) << log.status();
  // A file where the folder was: the path cannot be opened again.
  ASSERT_EQ(std::remove(path.c_str()), 0);
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  std::ofstream(dir) << "in the way\n";
  const absl::Status reopened = (*log)->Reopen();
  EXPECT_EQ(reopened.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(reopened.message().find(path), std::string::npos) << reopened;
  (*log)->Close();
  std::remove(dir.c_str());
}

TEST(AccessLogTest, UnwritableFileRefused) {
  const auto log = AccessLog::Open("/dev/null/access.log", LogFormat::kText);
  EXPECT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("--access_log"), std::string::npos);
}

}  // namespace
}  // namespace coalesce
