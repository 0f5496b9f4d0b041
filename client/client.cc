#include "client/client.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace coalesce {
namespace {

// Room in a PutTensor message for everything but the chunk.
constexpr int64_t kMessageOverhead = 1024;

// Abseil's codes equal gRPC's, so the mapping is a cast.
absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// A PEM file's contents; NOT_FOUND when unreadable or empty.
absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::NotFoundError(
        absl::StrCat(what, ": cannot read '", path, "'"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const ClientOptions& options) {
  const bool cert = !options.tls_cert_path.empty();
  if (cert != !options.tls_key_path.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_path and tls_key_path: give both or neither");
  }
  if (options.tls_ca_path.empty()) {
    if (cert || !options.tls_server_name.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate or tls_server_name needs tls_ca_path (TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadPem(options.tls_ca_path, "tls_ca_path");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (cert) {
    auto chain = ReadPem(options.tls_cert_path, "tls_cert_path");
    if (!chain.ok()) return chain.status();
    auto key = ReadPem(options.tls_key_path, "tls_key_path");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(chain);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

class Client::Impl {
 public:
  Impl(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
      : timeout_(options.timeout),
        client_id_(options.client_id),
        authorization_(options.token.empty()
                           ? ""
                           : absl::StrCat("Bearer ", options.token)),
        // A chunk and its message framing must fit in one message.
        chunk_bytes_(std::max<int64_t>(
            1, std::min(options.chunk_bytes,
                        options.max_message_bytes - kMessageOverhead))),
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
    Prepare(&context);
    Response response;
    absl::Status status =
        FromGrpc((stub->*method)(&context, request, &response));
    if (!status.ok()) return status;
    return response;
  }

  // DeleteTensor: the bytes freed.
  absl::StatusOr<int64_t> Delete(const v1::DeleteTensorRequest& request) {
    absl::StatusOr<v1::DeleteTensorResponse> response =
        Call(ops(), &v1::TensorOps::Stub::DeleteTensor, request);
    if (!response.ok()) return response.status();
    return response->freed_bytes();
  }

  // Deadline and client id of one call.
  void Prepare(grpc::ClientContext* context) const {
    if (timeout_ != absl::InfiniteDuration()) {
      context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    }
    if (!client_id_.empty()) {
      context->AddMetadata("x-coalesce-client", client_id_);
    }
    if (!authorization_.empty()) {
      context->AddMetadata("authorization", authorization_);
    }
  }

  int64_t chunk_bytes() const { return chunk_bytes_; }
  v1::TensorOps::Stub* ops() { return ops_.get(); }
  grpc::health::v1::Health::Stub* health() { return health_.get(); }

 private:
  const absl::Duration timeout_;
  const std::string client_id_;
  const std::string authorization_;
  const int64_t chunk_bytes_;
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
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be >= 1, got ", options.chunk_bytes));
  }
  if (!options.load_balancing.empty() &&
      options.load_balancing != "round_robin" &&
      options.load_balancing != "pick_first") {
    return absl::InvalidArgumentError(
        absl::StrCat("load_balancing must be round_robin or pick_first, got '",
                     options.load_balancing, "'"));
  }
  grpc::ChannelArguments args;
  if (!options.load_balancing.empty()) {
    args.SetServiceConfigJSON(absl::StrCat(R"({"loadBalancingConfig": [{")",
                                           options.load_balancing,
                                           R"(": {}}]})"));
  }
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  if (options.own_connection)
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.server, *credentials, args);
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

absl::StatusOr<v1::EchoResponse> Client::Echo(const v1::EchoRequest& request) {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::Echo, request);
}

absl::StatusOr<v1::TensorInfo> Client::PutTensor(
    v1::DataType dtype, const std::vector<int64_t>& shape,
    absl::string_view bytes, const std::string& name,
    std::optional<int> device_ordinal) {
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      impl_->ops()->PutTensor(&context, &response);
  v1::PutTensorRequest message;
  v1::PutTensorHeader* header = message.mutable_header();
  header->set_dtype(dtype);
  header->mutable_shape()->Add(shape.begin(), shape.end());
  header->set_name(name);
  if (device_ordinal.has_value()) header->set_device_ordinal(*device_ordinal);
  // A failed Write means the server ended the call (e.g. over quota): its
  // status comes from Finish.
  bool open = writer->Write(message);
  for (size_t offset = 0; open && offset < bytes.size();
       offset += impl_->chunk_bytes()) {
    message.set_chunk(std::string(bytes.substr(offset, impl_->chunk_bytes())));
    open = writer->Write(message);
  }
  if (open) writer->WritesDone();
  absl::Status status = FromGrpc(writer->Finish());
  if (!status.ok()) return status;
  return response.tensor();
}

absl::StatusOr<FetchedTensor> Client::GetTensor(const std::string& handle) {
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::GetTensorRequest request;
  request.set_handle(handle);
  std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader =
      impl_->ops()->GetTensor(&context, request);
  FetchedTensor out;
  v1::GetTensorResponse message;
  bool first = true;
  while (reader->Read(&message)) {
    if (first) {
      out.info = message.tensor();
      out.bytes.reserve(static_cast<size_t>(out.info.byte_size()));
      first = false;
    }
    out.bytes.append(message.chunk());
  }
  absl::Status status = FromGrpc(reader->Finish());
  if (!status.ok()) return status;
  if (static_cast<int64_t>(out.bytes.size()) != out.info.byte_size()) {
    return absl::DataLossError(
        absl::StrCat("GetTensor(", handle, "): received ", out.bytes.size(),
                     " bytes of ", out.info.byte_size()));
  }
  return out;
}

absl::StatusOr<int64_t> Client::DeleteTensor(const std::string& handle) {
  v1::DeleteTensorRequest request;
  request.set_handle(handle);
  return impl_->Delete(request);
}

absl::StatusOr<int64_t> Client::DeleteTensors(
    const std::vector<std::string>& handles) {
  v1::DeleteTensorRequest request;
  request.mutable_handles()->Add(handles.begin(), handles.end());
  return impl_->Delete(request);
}

absl::StatusOr<v1::ListTensorsResponse> Client::ListTensors() {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::ListTensors,
                     v1::ListTensorsRequest());
}

absl::Status Client::RegisterSharedMemory(const std::string& name,
                                          const std::string& key,
                                          uint64_t offset, uint64_t byte_size) {
  v1::RegisterSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  return impl_
      ->Call(impl_->ops(), &v1::TensorOps::Stub::RegisterSharedMemory, request)
      .status();
}

absl::Status Client::UnregisterSharedMemory(const std::string& name) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  return impl_
      ->Call(impl_->ops(), &v1::TensorOps::Stub::UnregisterSharedMemory,
             request)
      .status();
}

absl::StatusOr<v1::ListSharedMemoryResponse> Client::ListSharedMemory() {
  return impl_->Call(impl_->ops(), &v1::TensorOps::Stub::ListSharedMemory,
                     v1::ListSharedMemoryRequest());
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
