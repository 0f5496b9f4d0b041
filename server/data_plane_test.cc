// The data path through a real server on port 0 and the client library:
// Echo, PutTensor/GetTensor in chunks (a boundary inside an element), bad
// chunk streams, handles chained between ops with no round trip, quota over
// gRPC, and shared memory (register, use, unregister, too small, vanished).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/server.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

std::string RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string out(n * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

std::string TransposeReference(const std::string& in, int64_t rows,
                               int64_t cols) {
  std::string out(in.size(), '\0');
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&out[(c * rows + r) * 4], &in[(r * cols + c) * 4], 4);
    }
  }
  return out;
}

class DataPlaneTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend(2);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.tensor_quota_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect(/*chunk_bytes=*/7);  // chunks split elements
  }

  std::unique_ptr<Client> Connect(int64_t chunk_bytes) {
    ClientOptions o;
    o.server = absl::StrCat("127.0.0.1:", server_->port);
    o.client_id = "test-client";
    o.chunk_bytes = chunk_bytes;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  // A raw stub for streams the client library would never send.
  std::unique_ptr<v1::TensorOps::Stub> Stub() {
    return v1::TensorOps::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port),
                            grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(DataPlaneTest, EchoReturnsThePayload) {
  v1::EchoRequest request;
  request.set_payload(RandomFloats(1000, 1));
  absl::StatusOr<v1::EchoResponse> r = client_->Echo(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->payload(), request.payload());
}

TEST_F(DataPlaneTest, PutGetRoundTripInOddChunks) {
  const std::string bytes = RandomFloats(3 * 11, 2);  // 132 bytes, chunks of 7
  absl::StatusOr<v1::TensorInfo> info =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {3, 11}, bytes, "my-tensor");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->handle(), "my-tensor");
  EXPECT_EQ(info->byte_size(), 132);
  EXPECT_EQ(info->owner(), "test-client");
  absl::StatusOr<FetchedTensor> got = client_->GetTensor("my-tensor");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, bytes);
  EXPECT_EQ(got->info.shape_size(), 2);

  absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->tensors_size(), 1);
  EXPECT_EQ(list->used_bytes(), 132);
  EXPECT_EQ(list->quota_bytes(), 1 << 20);
  absl::StatusOr<int64_t> freed = client_->DeleteTensor("my-tensor");
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 132);
  EXPECT_EQ(client_->GetTensor("my-tensor").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DataPlaneTest, ChunkOverrunAndUnderrunAreRejected) {
  // The client library sends exactly the bytes it is given: a short or long
  // buffer for the shape is an underrun or an overrun at the server.
  absl::Status under =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {4}, std::string(15, 'x'))
          .status();
  EXPECT_EQ(under.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(under.message(), HasSubstr("ended after 15 bytes of the "
                                         "tensor's 16"));
  absl::Status over =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {4}, std::string(17, 'x'))
          .status();
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.message(), HasSubstr("past the tensor's 16 bytes"));
  absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->used_bytes(), 0);  // nothing left behind

  // A stream that starts with a chunk.
  auto stub = Stub();
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  auto writer = stub->PutTensor(&context, &response);
  v1::PutTensorRequest chunk;
  chunk.set_chunk("abcd");
  writer->Write(chunk);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("header"));
}

TEST_F(DataPlaneTest, QuotaIsCheckedOnTheHeader) {
  absl::Status s =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {1 << 20}, std::string(16, 'x'))
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("quota of 1048576 bytes"));
}

TEST_F(DataPlaneTest, HandlesChainWithoutRoundTrip) {
  const int64_t rows = 16, hidden = 24;
  const std::string x = RandomFloats(rows * hidden, 3);
  absl::StatusOr<v1::TensorInfo> in =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {rows, hidden}, x);
  ASSERT_TRUE(in.ok()) << in.status();

  // The same op inline, for the expected values.
  v1::GeluLayerNormRequest inline_request;
  inline_request.mutable_x()->set_dtype(v1::DATA_TYPE_FLOAT32);
  inline_request.mutable_x()->add_shape(rows);
  inline_request.mutable_x()->add_shape(hidden);
  inline_request.mutable_x()->set_raw(x);
  absl::StatusOr<v1::GeluLayerNormResponse> want =
      client_->GeluLayerNorm(inline_request);
  ASSERT_TRUE(want.ok()) << want.status();

  v1::GeluLayerNormRequest ln;
  ln.mutable_x()->set_handle(in->handle());
  ln.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  absl::StatusOr<v1::GeluLayerNormResponse> y = client_->GeluLayerNorm(ln);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_FALSE(y->y().handle().empty());
  EXPECT_TRUE(y->y().raw().empty());
  EXPECT_EQ(y->y().shape_size(), 2);

  v1::TransposeRequest t;
  t.mutable_input()->set_handle(y->y().handle());
  t.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  absl::StatusOr<v1::TransposeResponse> out = client_->Transpose(t);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output().shape(0), hidden);

  absl::StatusOr<FetchedTensor> got =
      client_->GetTensor(out->output().handle());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, TransposeReference(want->y().raw(), rows, hidden));

  // A handle whose stated shape disagrees, and an unknown handle.
  t.mutable_input()->add_shape(3);
  EXPECT_EQ(client_->Transpose(t).status().code(),
            absl::StatusCode::kInvalidArgument);
  t.mutable_input()->clear_shape();
  t.mutable_input()->set_handle("no-such");
  absl::Status missing = client_->Transpose(t).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("input.handle"));
}

// A POSIX shared-memory object owned by a test.
class Shm {
 public:
  Shm(std::string key, int64_t bytes) : key_(std::move(key)), bytes_(bytes) {
    shm_unlink(key_.c_str());
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    data_ = static_cast<char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    fd_ = fd;
  }
  ~Shm() {
    munmap(data_, bytes_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  void Truncate(int64_t bytes) { EXPECT_EQ(ftruncate(fd_, bytes), 0); }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }

 private:
  std::string key_;
  int64_t bytes_;
  int fd_ = -1;
  char* data_ = nullptr;
};

v1::TransposeRequest ShmTranspose(const std::string& region, int64_t rows,
                                  int64_t cols, int64_t out_offset) {
  v1::TransposeRequest r;
  v1::Tensor* in = r.mutable_input();
  in->set_dtype(v1::DATA_TYPE_FLOAT32);
  in->add_shape(rows);
  in->add_shape(cols);
  in->mutable_shared_memory()->set_region(region);
  in->mutable_shared_memory()->set_byte_size(rows * cols * 4);
  v1::OutputSpec* out = r.mutable_options()->add_outputs();
  out->set_placement(v1::OUTPUT_PLACEMENT_SHARED_MEMORY);
  out->mutable_shared_memory()->set_region(region);
  out->mutable_shared_memory()->set_offset(out_offset);
  out->mutable_shared_memory()->set_byte_size(rows * cols * 4);
  return r;
}

TEST_F(DataPlaneTest, SharedMemoryRegisterUseUnregister) {
  const int64_t rows = 33, cols = 17, bytes = rows * cols * 4;
  Shm shm(absl::StrCat("/coalesce-test-", getpid()), 8192);
  const std::string in = RandomFloats(rows * cols, 4);
  std::memcpy(shm.data(), in.data(), bytes);
  ASSERT_TRUE(client_->RegisterSharedMemory("r", shm.key(), 0, 8192).ok());
  EXPECT_EQ(client_->RegisterSharedMemory("r", shm.key(), 0, 8192).code(),
            absl::StatusCode::kAlreadyExists);
  absl::StatusOr<v1::ListSharedMemoryResponse> list =
      client_->ListSharedMemory();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->regions_size(), 1);
  EXPECT_EQ(list->regions(0).byte_size(), 8192u);

  absl::StatusOr<v1::TransposeResponse> r =
      client_->Transpose(ShmTranspose("r", rows, cols, 4096));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output().shared_memory().offset(), 4096u);
  EXPECT_EQ(r->output().shared_memory().byte_size(),
            static_cast<uint64_t>(bytes));
  EXPECT_EQ(std::string(shm.data() + 4096, bytes),
            TransposeReference(in, rows, cols));

  ASSERT_TRUE(client_->UnregisterSharedMemory("r").ok());
  absl::Status gone =
      client_->Transpose(ShmTranspose("r", rows, cols, 4096)).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("input.shared_memory.region"));
  EXPECT_EQ(client_->UnregisterSharedMemory("r").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DataPlaneTest, SharedMemoryTooSmallOrVanished) {
  Shm shm(absl::StrCat("/coalesce-test-small-", getpid()), 8192);
  // Past the object's end at registration.
  EXPECT_EQ(client_->RegisterSharedMemory("big", shm.key(), 4096, 8192).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client_->RegisterSharedMemory("none", "/coalesce-no-such", 0, 8).code(),
      absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->RegisterSharedMemory("r", shm.key(), 0, 8192).ok());
  // The output range runs past the region.
  absl::Status outside =
      client_->Transpose(ShmTranspose("r", 32, 32, 6000)).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(),
              HasSubstr("options.outputs[0].shared_memory: the range"));
  // The input's byte_size disagrees with its shape.
  v1::TransposeRequest wrong = ShmTranspose("r", 4, 4, 4096);
  wrong.mutable_input()->mutable_shared_memory()->set_byte_size(60);
  absl::Status size = client_->Transpose(wrong).status();
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(size.message(), HasSubstr("input.shared_memory.byte_size"));
  // The object shrinks under the registration.
  shm.Truncate(1024);
  absl::Status shrunk =
      client_->Transpose(ShmTranspose("r", 4, 4, 4096)).status();
  EXPECT_EQ(shrunk.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(shrunk.message(), HasSubstr("shrank to 1024 bytes"));
  shm.Truncate(8192);
  ASSERT_TRUE(client_->Transpose(ShmTranspose("r", 4, 4, 4096)).ok());
  // The object is unlinked.
  shm_unlink(shm.key().c_str());
  absl::Status unlinked =
      client_->Transpose(ShmTranspose("r", 4, 4, 4096)).status();
  EXPECT_EQ(unlinked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unlinked.message(), HasSubstr("was unlinked"));
}

}  // namespace
}  // namespace coalesce
