#include "server/logging/call_log.h"

#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/logging/log.h"
#include "server/logging/request_id.h"
#include "spdlog/spdlog.h"

namespace coalesce {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::experimental::InterceptionHookPoints;

class CallContext final : public grpc::CallbackServerContext {
 public:
  // The call's interceptor's; it lives as long as the call.
  CallRecord* record = nullptr;
};

class CallContextAllocator final : public grpc::ContextAllocator {
 public:
  grpc::CallbackServerContext* NewCallbackServerContext() override {
    return new CallContext;
  }
  void Release(grpc::CallbackServerContext* context) override {
    delete context;
  }
};

absl::string_view Value(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    absl::string_view key) {
  const auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

class CallLogInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallLogInterceptor(grpc::experimental::ServerRpcInfo* info,
                     AccessLog* access_log)
      : info_(info),
        method_(info->method()),
        access_log_(access_log),
        start_(Clock::now()) {
    if (auto* context = dynamic_cast<CallContext*>(info->server_context())) {
      context->record = &record_;
    }
  }

  // A call that ended without sending a status (cancelled first) still
  // gets its line.
  ~CallLogInterceptor() override {
    if (!written_) Write(grpc::StatusCode::CANCELLED, Clock::now());
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      const auto& metadata = *methods->GetRecvInitialMetadata();
      record_.request_id = ResolveRequestId(Value(metadata, kRequestIdKey),
                                            Value(metadata, kTraceparentKey));
      peer_ = info_->server_context()->peer();
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kRequestIdKey, RequestId());
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->GetSendTrailingMetadata()->emplace(kRequestIdKey, RequestId());
      const grpc::Status status = methods->GetSendStatus();
      LogOutcome(status);
      Write(status.error_code(), Clock::now());
    }
    methods->Proceed();
  }

 private:
  // Resolved when the metadata arrived; one is made for a call that
  // answers before it (none does today).
  const std::string& RequestId() {
    if (record_.request_id.empty()) record_.request_id = NewRequestId();
    return record_.request_id;
  }

  void LogOutcome(const grpc::Status& status) {
    RequestLogScope scope(RequestId());
    const grpc::StatusCode code = status.error_code();
    // The server's own faults need an operator; the rest is the caller's.
    const bool fault = code == grpc::StatusCode::INTERNAL ||
                       code == grpc::StatusCode::UNKNOWN ||
                       code == grpc::StatusCode::DATA_LOSS;
    spdlog::log(fault ? spdlog::level::err : spdlog::level::debug, "{} {}{}{}",
                method_, CodeName(code), status.ok() ? "" : ": ",
                status.error_message());
  }

  void Write(grpc::StatusCode code, Clock::time_point end) {
    written_ = true;
    if (access_log_ == nullptr) return;
    AccessRecord line;
    line.request_id = RequestId();
    line.method = method_;
    line.code = CodeName(code);
    line.identity = record_.identity;
    line.peer = peer_;
    line.request_bytes = record_.request_bytes;
    line.response_bytes = record_.response_bytes;
    if (record_.ran_kernel) {
      line.queue_seconds = record_.queue_seconds;
      line.kernel_seconds = record_.kernel_seconds;
    }
    line.duration_seconds = std::chrono::duration<double>(end - start_).count();
    access_log_->Write(line);
  }

  static std::string CodeName(grpc::StatusCode code) {
    return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  }

  // Used only while intercepting: the destructor may run while the
  // call's context is being destroyed.
  grpc::experimental::ServerRpcInfo* const info_;
  const char* const method_;  // the registered method's, static
  std::string peer_;
  AccessLog* const access_log_;
  const Clock::time_point start_;
  CallRecord record_;
  bool written_ = false;
};

class CallLogInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallLogInterceptorFactory(AccessLog* access_log)
      : access_log_(access_log) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallLogInterceptor(info, access_log_);
  }

 private:
  AccessLog* const access_log_;
};

}  // namespace

CallRecord* CallRecordOf(const grpc::ServerContextBase& context) {
  const auto* call = dynamic_cast<const CallContext*>(&context);
  return call == nullptr ? nullptr : call->record;
}

void InstallCallLogging(grpc::ServerBuilder& builder, AccessLog* access_log) {
  builder.SetContextAllocator(std::make_unique<CallContextAllocator>());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(std::make_unique<CallLogInterceptorFactory>(access_log));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

}  // namespace coalesce
