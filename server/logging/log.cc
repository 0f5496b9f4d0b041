#include "server/logging/log.h"

#include <grpc/support/log.h>

#include <string>
#include <utility>

#include "server/logging/json_escape.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

thread_local absl::string_view current_request_id;

void Append(absl::string_view text, spdlog::memory_buf_t& dest) {
  dest.append(text.data(), text.data() + text.size());
}

// %J: the message, JSON-escaped.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string escaped;
    AppendJsonEscaped(absl::string_view(msg.payload.data(), msg.payload.size()),
                      &escaped);
    Append(escaped, dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %Q: the thread's request id, when it has one: ,"request_id":"ID" (JSON)
// or [ID] and a space (text).
class RequestIdFlag final : public spdlog::custom_flag_formatter {
 public:
  explicit RequestIdFlag(LogFormat format) : format_(format) {}
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const absl::string_view id = CurrentRequestId();
    if (id.empty()) return;
    if (format_ == LogFormat::kJson) {
      std::string field = ",\"request_id\":";
      field += JsonString(id);
      Append(field, dest);
    } else {
      Append("[", dest);
      Append(id, dest);
      Append("] ", dest);
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RequestIdFlag>(format_);
  }

 private:
  const LogFormat format_;
};

// gRPC's log lines (GRPC_VERBOSITY picks which) at the matching level.
void LogGrpc(gpr_log_func_args* args) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (logger == nullptr) return;  // after spdlog::shutdown at exit
  spdlog::level::level_enum level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  logger->log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

bool ParseLogFormat(absl::string_view text, LogFormat* format) {
  if (text == "text") {
    *format = LogFormat::kText;
  } else if (text == "json") {
    *format = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

bool ParseLogLevel(absl::string_view text, spdlog::level::level_enum* level) {
  for (const auto& [name, value] :
       {std::pair<absl::string_view, spdlog::level::level_enum>{
            "trace", spdlog::level::trace},
        {"debug", spdlog::level::debug},
        {"info", spdlog::level::info},
        {"warn", spdlog::level::warn},
        {"error", spdlog::level::err},
        {"critical", spdlog::level::critical},
        {"off", spdlog::level::off}}) {
    if (text == name) {
      *level = value;
      return true;
    }
  }
  return false;
}

std::unique_ptr<spdlog::formatter> NewLogFormatter(LogFormat format,
                                                   LogPayload payload) {
  if (format == LogFormat::kText) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<RequestIdFlag>('Q', format);
    formatter->set_pattern(payload == LogPayload::kMessage
                               ? "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %Q%v"
                               : "[%Y-%m-%d %H:%M:%S.%e] [%n] %v");
    return formatter;
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>(
      spdlog::pattern_time_type::utc);
  formatter->add_flag<JsonMessageFlag>('J');
  formatter->add_flag<RequestIdFlag>('Q', format);
  constexpr char kHead[] =
      R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n",)";
  formatter->set_pattern(payload == LogPayload::kMessage
                             ? std::string(kHead) + R"("msg":"%J"%Q})"
                             : std::string(kHead) + "%v}");
  return formatter;
}

void ConfigureLogging(spdlog::level::level_enum level, LogFormat format) {
  // JSON lines are for machines: no colour codes.
  std::shared_ptr<spdlog::logger> logger =
      format == LogFormat::kJson ? spdlog::stderr_logger_mt("coalesce")
                                 : spdlog::stderr_color_mt("coalesce");
  logger->set_formatter(NewLogFormatter(format, LogPayload::kMessage));
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
  gpr_set_log_function(&LogGrpc);
}

RequestLogScope::RequestLogScope(absl::string_view request_id)
    : previous_(current_request_id) {
  current_request_id = request_id;
}

RequestLogScope::~RequestLogScope() { current_request_id = previous_; }

absl::string_view CurrentRequestId() { return current_request_id; }

}  // namespace coalesce
