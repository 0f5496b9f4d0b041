// CUDA shared memory through the KServe API on the CUDA backend: another
// process (cuda_ipc_exporter, beside this binary) exports device memory
// with cudaIpcGetMemHandle, the test registers the handle over the local
// socket, and a transpose reads its input from and writes its output into
// that memory in place, bit-exact. Also: a handle that does not open, a
// byte_size past the allocation, registration over TCP, the identity
// model, and unregistering. Skips without a CUDA device (CTest label gpu).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kernels/backends.h"
#include "server/server.h"

namespace coalesce {
namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Unhex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

// cuda_ipc_exporter, running, with its stdin and stdout.
class Exporter {
 public:
  Exporter(int64_t bytes, int seed) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return;
    self[n] = '\0';
    std::string path(self);
    path = path.substr(0, path.rfind('/') + 1) + "cuda_ipc_exporter";
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to[0], 0);
      dup2(from[1], 1);
      close(to[1]);
      close(from[0]);
      const std::string b = std::to_string(bytes), s = std::to_string(seed);
      execl(path.c_str(), path.c_str(), b.c_str(), s.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    in_ = fdopen(to[1], "w");
    out_ = fdopen(from[0], "r");
  }
  ~Exporter() {
    if (in_ != nullptr) {
      std::fputs("quit\n", in_);
      std::fclose(in_);
    }
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  // The next line's payload after its word ("handle", "data"); empty when
  // the process ended.
  std::string Read(const std::string& word) {
    std::string line;
    for (int c; out_ != nullptr && (c = std::fgetc(out_)) != EOF;) {
      if (c == '\n') break;
      line += static_cast<char>(c);
    }
    if (line.rfind(word + " ", 0) != 0) return "";
    return Unhex(line.substr(word.size() + 1));
  }
  std::string Handle() { return Read("handle"); }
  // count bytes at offset, read back from the device.
  std::string Get(int64_t offset, int64_t count) {
    std::fprintf(in_, "get %lld %lld\n", static_cast<long long>(offset),
                 static_cast<long long>(count));
    std::fflush(in_);
    return Read("data");
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

class CudaSharedMemoryTest : public testing::Test {
 protected:
  static constexpr int64_t kRows = 67, kCols = 45;
  static constexpr int64_t kTensorBytes = kRows * kCols * 4;
  static constexpr int64_t kOutOffset = 16384;  // the output's place
  static constexpr int64_t kBytes = kOutOffset + kTensorBytes;

  void SetUp() override {
    if (!CudaBackendBuilt()) GTEST_SKIP() << "built without CUDA";
    BackendOptions options;
    options.device = "cuda";
    absl::StatusOr<BackendChoice> choice = CreateBackend(options);
    if (!choice.ok()) GTEST_SKIP() << "no GPU: " << choice.status();
    backend_ = std::move(choice->backend);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    socket_ = absl::StrCat("/tmp/coalesce-cuda-shm-", getpid(), ".sock");
    config.unix_socket = socket_;
    config.shared_memory.allow = true;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    local_ = GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("unix:", socket_), grpc::InsecureChannelCredentials()));
    tcp_ = GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port),
                            grpc::InsecureChannelCredentials()));
  }

  grpc::Status Register(GRPCInferenceService::Stub* stub,
                        const std::string& name, const std::string& handle,
                        uint64_t byte_size) {
    grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_raw_handle(handle);
    request.set_device_id(backend_->device().ordinal);
    request.set_byte_size(byte_size);
    inference::CudaSharedMemoryRegisterResponse response;
    return stub->CudaSharedMemoryRegister(&context, request, &response);
  }

  // A model request with INPUT0 [kRows, kCols] FP32 at offset 0 of region
  // and OUTPUT0 at kOutOffset.
  static ModelInferRequest InRegion(const std::string& model,
                                    const std::string& region) {
    ModelInferRequest r;
    r.set_model_name(model);
    auto* in = r.add_inputs();
    in->set_name("INPUT0");
    in->set_datatype("FP32");
    in->add_shape(kRows);
    in->add_shape(kCols);
    auto& ip = *in->mutable_parameters();
    ip["shared_memory_region"].set_string_param(region);
    ip["shared_memory_byte_size"].set_int64_param(kTensorBytes);
    auto* out = r.add_outputs();
    out->set_name("OUTPUT0");
    auto& op = *out->mutable_parameters();
    op["shared_memory_region"].set_string_param(region);
    op["shared_memory_byte_size"].set_int64_param(kTensorBytes);
    op["shared_memory_offset"].set_int64_param(kOutOffset);
    return r;
  }

  std::string socket_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<GRPCInferenceService::Stub> local_, tcp_;
};

TEST_F(CudaSharedMemoryTest, TransposeReadsAndWritesAnotherProcesssMemory) {
  Exporter exporter(kBytes, 7);
  const std::string handle = exporter.Handle();
  ASSERT_EQ(handle.size(), 64u) << "cuda_ipc_exporter did not start";
  const std::string before = exporter.Get(0, kBytes);
  ASSERT_EQ(before.size(), static_cast<size_t>(kBytes));

  // Refused: over TCP (no peer credentials), a handle that does not open,
  // more bytes than were exported.
  grpc::Status s = Register(tcp_.get(), "gpu", handle, kBytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = Register(local_.get(), "gpu", std::string(64, '\x5a'), kBytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("raw_handle: "));
  s = Register(local_.get(), "gpu", handle.substr(0, 10), kBytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("raw_handle: "));
  s = Register(local_.get(), "gpu", handle, uint64_t{1} << 40);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("byte_size: "));

  ASSERT_TRUE(Register(local_.get(), "gpu", handle, kBytes).ok());
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryStatusResponse status;
    ASSERT_TRUE(local_->CudaSharedMemoryStatus(&context, {}, &status).ok());
    ASSERT_EQ(status.regions().count("gpu"), 1u);
    EXPECT_EQ(status.regions().at("gpu").byte_size(),
              static_cast<uint64_t>(kBytes));
    grpc::ClientContext system_context;
    inference::SystemSharedMemoryStatusResponse system;
    ASSERT_TRUE(
        local_->SystemSharedMemoryStatus(&system_context, {}, &system).ok());
    EXPECT_TRUE(system.regions().empty());
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse meta;
    ASSERT_TRUE(local_->ServerMetadata(&context, {}, &meta).ok());
    EXPECT_THAT(meta.extensions(), testing::Contains("cuda_shared_memory"));
  }

  ModelInferResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status infer =
        local_->ModelInfer(&context, InRegion("transpose", "gpu"), &response);
    ASSERT_TRUE(infer.ok()) << infer.error_message();
  }
  const std::string after = exporter.Get(0, kBytes);
  ASSERT_EQ(after.size(), static_cast<size_t>(kBytes));
  EXPECT_EQ(after.substr(0, kTensorBytes), before.substr(0, kTensorBytes))
      << "the input changed";
  int wrong = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      wrong += std::memcmp(&after[kOutOffset + (c * kRows + r) * 4],
                           &before[(r * kCols + c) * 4], 4) != 0;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << kRows * kCols << " output elements";
  EXPECT_EQ(after.substr(kTensorBytes, kOutOffset - kTensorBytes),
            before.substr(kTensorBytes, kOutOffset - kTensorBytes))
      << "bytes between input and output changed";

  {
    grpc::ClientContext context;
    const grpc::Status identity =
        local_->ModelInfer(&context, InRegion("identity", "gpu"), &response);
    EXPECT_EQ(identity.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(identity.error_message(), HasSubstr("CUDA shared memory"));
  }
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name("gpu");
    inference::SystemSharedMemoryUnregisterResponse unregistered;
    EXPECT_EQ(
        local_->SystemSharedMemoryUnregister(&context, request, &unregistered)
            .error_code(),
        grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterRequest request;
    request.set_name("gpu");
    inference::CudaSharedMemoryUnregisterResponse unregistered;
    EXPECT_TRUE(
        local_->CudaSharedMemoryUnregister(&context, request, &unregistered)
            .ok());
  }
  grpc::ClientContext context;
  const grpc::Status gone =
      local_->ModelInfer(&context, InRegion("transpose", "gpu"), &response);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(gone.error_message(),
              StartsWith("inputs[0].parameters.shared_memory_region"));
}

}  // namespace
}  // namespace coalesce
