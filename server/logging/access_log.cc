#include "server/logging/access_log.h"

#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "server/logging/json_escape.h"
#include "spdlog/details/file_helper.h"
#include "spdlog/details/thread_pool.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

constexpr absl::Duration kReportPeriod = absl::Seconds(10);
// The file sink writes through a stdio buffer: without a flush a quiet
// server's last lines would wait for kilobytes more before anyone could
// read them.
constexpr absl::Duration kFlushPeriod = absl::Seconds(1);

std::string Milliseconds(double seconds) {
  return absl::StrFormat("%.3f", seconds * 1e3);
}

bool Bare(absl::string_view value) {
  for (const char c : value) {
    if (c <= 0x20 || c >= 0x7F || c == '"' || c == '=') return false;
  }
  return true;
}

void AppendTextField(absl::string_view key, absl::string_view value,
                     std::string* out) {
  if (!out->empty()) out->push_back(' ');
  absl::StrAppend(out, key, "=");
  if (value.empty()) {
    out->push_back('-');
  } else if (Bare(value)) {
    absl::StrAppend(out, value);
  } else {
    absl::StrAppend(out, JsonString(value));
  }
}

}  // namespace

std::string FormatAccessFields(const AccessRecord& r, LogFormat format) {
  // (key, value, whether value is a JSON number), in line order.
  std::vector<std::tuple<absl::string_view, std::string, bool>> fields;
  fields.emplace_back("request_id", r.request_id, false);
  fields.emplace_back("method", r.method, false);
  fields.emplace_back("code", r.code, false);
  if (r.http_status != 0) {
    fields.emplace_back("http_status", absl::StrCat(r.http_status), true);
  }
  fields.emplace_back("identity", r.identity, false);
  fields.emplace_back("peer", r.peer, false);
  if (r.request_bytes >= 0) {
    fields.emplace_back("request_bytes", absl::StrCat(r.request_bytes), true);
  }
  if (r.response_bytes >= 0) {
    fields.emplace_back("response_bytes", absl::StrCat(r.response_bytes), true);
  }
  if (r.queue_seconds.has_value()) {
    fields.emplace_back("queue_ms", Milliseconds(*r.queue_seconds), true);
  }
  if (r.kernel_seconds.has_value()) {
    fields.emplace_back("kernel_ms", Milliseconds(*r.kernel_seconds), true);
  }
  fields.emplace_back("duration_ms", Milliseconds(r.duration_seconds), true);
  std::string out;
  if (format == LogFormat::kText) {
    for (const auto& [key, value, number] : fields) {
      AppendTextField(key, value, &out);
    }
    return out;
  }
  absl::StrAppend(&out,
                  "\"msg\":", JsonString(absl::StrCat(r.method, " ", r.code)));
  for (const auto& [key, value, number] : fields) {
    absl::StrAppend(&out, ",\"", key,
                    "\":", number ? value : JsonString(value));
  }
  return out;
}

// spdlog's basic file sink, which can also open its path again (Reopen):
// spdlog's own has no way to after a rotation moved the file.
class AccessLog::FileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}
  // Opens (or opens again) path for appending, with its folders.
  absl::Status Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      file_.open(path_, /*truncate=*/false);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("--access_log: cannot open '", path_, "': ", e.what()));
    }
    return absl::OkStatus();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.write(line);
  }
  void flush_() override { file_.flush(); }

 private:
  const std::string path_;
  spdlog::details::file_helper file_;
};

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(
    const std::string& target, LogFormat format, size_t queue_lines) {
  spdlog::sink_ptr sink;
  std::shared_ptr<FileSink> file;
  if (target == "stderr") {
    // The console sinks share one lock: its lines never cut into the
    // server log's.
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    file = std::make_shared<FileSink>(target);
    const absl::Status opened = file->Open();
    if (!opened.ok()) return opened;
    sink = file;
  }
  auto pool = std::make_shared<spdlog::details::thread_pool>(queue_lines,
                                                             /*threads=*/1);
  // overrun_oldest: a full queue drops (and counts) its oldest line instead
  // of blocking the request's thread.
  auto logger = std::make_shared<spdlog::async_logger>(
      "access", std::move(sink), pool,
      spdlog::async_overflow_policy::overrun_oldest);
  logger->set_formatter(NewLogFormatter(format, LogPayload::kFields));
  logger->set_level(spdlog::level::info);
  return std::unique_ptr<AccessLog>(new AccessLog(
      std::move(pool), std::move(logger), std::move(file), format));
}

AccessLog::AccessLog(std::shared_ptr<spdlog::details::thread_pool> pool,
                     std::shared_ptr<spdlog::async_logger> logger,
                     std::shared_ptr<FileSink> file, LogFormat format)
    : format_(format),
      file_(std::move(file)),
      pool_(std::move(pool)),
      logger_(std::move(logger)) {
  reporter_ = std::thread([this] {
    absl::Time report_at = absl::Now() + kReportPeriod;
    while (!stop_.WaitForNotificationWithTimeout(kFlushPeriod)) {
      // Queued behind the lines already waiting, so it flushes them too.
      logger_->flush();
      if (absl::Now() >= report_at) {
        ReportDrops();
        report_at = absl::Now() + kReportPeriod;
      }
    }
  });
}

AccessLog::~AccessLog() { Close(); }

void AccessLog::Write(const AccessRecord& record) {
  if (closed_.load(std::memory_order_relaxed)) return;
  logger_->info(FormatAccessFields(record, format_));
}

absl::Status AccessLog::Reopen() {
  if (!writes_file() || closed_.load()) return absl::OkStatus();
  return file_->Open();
}

size_t AccessLog::dropped() const {
  return closed_.load() ? reported_.load() : pool_->overrun_counter();
}

void AccessLog::ReportDrops() {
  const size_t dropped = pool_->overrun_counter();
  const size_t before = reported_.exchange(dropped);
  if (dropped > before) {
    spdlog::warn(
        "access log: {} lines dropped because its queue was full ({} since "
        "start); the log's destination is slower than the requests",
        dropped - before, dropped);
  }
}

void AccessLog::Close() {
  if (closed_.exchange(true)) return;
  stop_.Notify();
  reporter_.join();
  logger_->flush();
  ReportDrops();
  // Its thread writes what is queued (the flush last) before the pool's
  // destructor returns.
  pool_.reset();
}

}  // namespace coalesce
