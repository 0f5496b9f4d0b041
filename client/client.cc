#include "client/client.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace coalesce {
namespace {

// Abseil's codes equal gRPC's, so the mapping is a cast.
absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace

class Client::Impl {
 public:
  Impl(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
      : timeout_(options.timeout),
        ops_(v1::TensorOps::NewStub(channel)),
        health_(grpc::health::v1::Health::NewStub(channel)) {}

  // One unary call with its own context and deadline.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Call(
      Stub* stub,
      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                   Response*),
      const Request& request) {
    grpc::ClientContext context;
    if (timeout_ != absl::InfiniteDuration()) {
      context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    }
    Response response;
    absl::Status status =
        FromGrpc((stub->*method)(&context, request, &response));
    if (!status.ok()) return status;
    return response;
  }

  v1::TensorOps::Stub* ops() { return ops_.get(); }
  grpc::health::v1::Health::Stub* health() { return health_.get(); }

 private:
  const absl::Duration timeout_;
  std::unique_ptr<v1::TensorOps::Stub> ops_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  if (options.server.empty()) {
    return absl::InvalidArgumentError("server address is empty");
  }
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes must be in [1, ", std::numeric_limits<int>::max(),
        "], got ", options.max_message_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.server, grpc::InsecureChannelCredentials(), args);
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(options, std::move(channel))));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<v1::TransposeResponse> Client::Transpose(
    const v1::TransposeRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::Transpose, request);
}

absl::StatusOr<v1::GemmResponse> Client::Gemm(const v1::GemmRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::Gemm, request);
}

absl::StatusOr<v1::ConvertLayoutResponse> Client::ConvertLayout(
    const v1::ConvertLayoutRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::ConvertLayout,
                     request);
}

absl::StatusOr<v1::GeluLayerNormResponse> Client::GeluLayerNorm(
    const v1::GeluLayerNormRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::GeluLayerNorm,
                     request);
}

absl::StatusOr<v1::GetServerInfoResponse> Client::GetServerInfo() {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::GetServerInfo,
                     v1::GetServerInfoRequest());
}

absl::StatusOr<v1::ExplainSelectionResponse> Client::ExplainSelection(
    const v1::ExplainSelectionRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::ExplainSelection,
                     request);
}

absl::StatusOr<std::string> Client::Health(const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  absl::StatusOr<grpc::health::v1::HealthCheckResponse> response = impl_->Call(
      impl_->health(), &grpc::health::v1::Health::Stub::Check, request);
  if (!response.ok()) return response.status();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      response->status());
}

}  // namespace coalesce
