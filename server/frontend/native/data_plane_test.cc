// The data path through a real server on port 0 and the client library:
// Echo, PutTensor/GetTensor in chunks (a boundary inside an element), bad
// chunk streams, handles chained between ops with no round trip, quota over
// gRPC, and shared memory (register, use, unregister, too small, vanished);
// then handles on a backend whose resident memory is not host memory: ops get
// stored tensors in place, and only PutTensor and GetTensor copy them.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "client/client.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/frontend/native/data_plane_test_util.h"
#include "server/server.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

class DataPlaneTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend(2);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    // Shared memory is registered only over the local socket, where the
    // server learns the caller's uid: every client here connects there.
    socket_path_ = absl::StrCat("/tmp/coalesce-data-plane-", getpid(), "-",
                                ++sockets_, ".sock");
    config.unix_socket = socket_path_;
    config.shared_memory.allow = true;
    config.tensor_quota_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect(/*chunk_bytes=*/7);  // chunks split elements
  }

  std::unique_ptr<Client> Connect(int64_t chunk_bytes) {
    ClientOptions o;
    o.server = absl::StrCat("unix:", socket_path_);
    o.client_id = "test-client";
    o.chunk_bytes = chunk_bytes;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  // A raw stub for streams the client library would never send.
  std::unique_ptr<v1::TensorOps::Stub> Stub() {
    return v1::TensorOps::NewStub(
        grpc::CreateChannel(absl::StrCat("unix:", socket_path_),
                            grpc::InsecureChannelCredentials()));
  }

  static inline int sockets_ = 0;
  std::string socket_path_;
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

// Several tensors in one DeleteTensor: all of them, or none with the
// field of the one that stopped it.
TEST_F(DataPlaneTest, DeleteTensorsAllOrNone) {
  std::vector<std::string> handles;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<v1::TensorInfo> info = client_->PutTensor(
        v1::DATA_TYPE_FLOAT32, {i + 1}, RandomFloats(i + 1, 10 + i));
    ASSERT_TRUE(info.ok()) << info.status();
    handles.push_back(info->handle());
  }
  ClientOptions o;
  o.server = absl::StrCat("unix:", socket_path_);
  o.client_id = "other-client";
  absl::StatusOr<std::unique_ptr<Client>> other = Client::Connect(o);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<v1::TensorInfo> theirs =
      (*other)->PutTensor(v1::DATA_TYPE_FLOAT32, {3}, RandomFloats(3, 20));
  ASSERT_TRUE(theirs.ok()) << theirs.status();

  const auto listed = [&] {
    absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
    EXPECT_TRUE(list.ok());
    return list.ok() ? list->tensors_size() : -1;
  };
  // Another client's tensor is not found for this one; nothing is deleted.
  absl::Status s =
      client_->DeleteTensors({handles[0], theirs->handle(), handles[1]})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("handles[1]: no tensor"));
  EXPECT_THAT(s.message(), HasSubstr("nothing was deleted"));
  EXPECT_EQ(listed(), 5);
  s = client_->DeleteTensors({handles[0], handles[2], handles[0]}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("handles[2]"));
  EXPECT_THAT(s.message(), HasSubstr("repeats handles[0]"));
  EXPECT_EQ(listed(), 5);
  std::vector<std::string> too_many(4097, handles[0]);
  s = client_->DeleteTensors(too_many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("handles: 4097 tensors"));

  // handle and handles together: float32 tensors of 1, 2 and 4 elements.
  auto stub = Stub();
  grpc::ClientContext context;
  context.AddMetadata("x-coalesce-client", "test-client");
  v1::DeleteTensorRequest request;
  request.set_handle(handles[0]);
  request.add_handles(handles[1]);
  request.add_handles(handles[3]);
  v1::DeleteTensorResponse response;
  grpc::Status g = stub->DeleteTensor(&context, request, &response);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(response.freed_bytes(), 4 * (1 + 2 + 4));
  EXPECT_EQ(listed(), 2);
  absl::StatusOr<int64_t> freed =
      client_->DeleteTensors({handles[2], handles[4]});
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, 4 * (3 + 5));
  EXPECT_EQ(listed(), 0);
  EXPECT_TRUE((*other)->GetTensor(theirs->handle()).ok());
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
  SetInlineMatrix(inline_request.mutable_x(), rows, hidden, x);
  absl::StatusOr<v1::GeluLayerNormResponse> want =
      client_->GeluLayerNorm(inline_request);
  ASSERT_TRUE(want.ok()) << want.status();

  v1::GeluLayerNormRequest ln;
  ln.mutable_x()->set_handle(in->handle());
  KeepOutputOnServer(ln.mutable_options());
  absl::StatusOr<v1::GeluLayerNormResponse> y = client_->GeluLayerNorm(ln);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_FALSE(y->y().handle().empty());
  EXPECT_TRUE(y->y().raw().empty());
  EXPECT_EQ(y->y().shape_size(), 2);

  v1::TransposeRequest t;
  t.mutable_input()->set_handle(y->y().handle());
  KeepOutputOnServer(t.mutable_options());
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

TEST_F(DataPlaneTest, OutputsOverwriteAnExistingHandle) {
  const int64_t rows = 12, cols = 20;
  absl::StatusOr<v1::TensorInfo> in = client_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {rows, cols}, RandomFloats(rows * cols, 11));
  ASSERT_TRUE(in.ok()) << in.status();
  // The output tensor starts with other random bytes: each request must
  // replace them all.
  absl::StatusOr<v1::TensorInfo> out = client_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {cols, rows}, RandomFloats(rows * cols, 12));
  ASSERT_TRUE(out.ok()) << out.status();
  const auto used = [&] {
    absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? std::make_pair(list->tensors_size(), list->used_bytes())
                     : std::make_pair(-1, int64_t{-1});
  };
  const auto held = used();

  v1::TransposeRequest t;
  t.mutable_input()->set_handle(in->handle());
  v1::OutputSpec* spec = t.mutable_options()->add_outputs();
  spec->set_placement(v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  spec->set_handle(out->handle());
  for (uint32_t round = 0; round < 3; ++round) {
    // A new input each round, uploaded under a new handle.
    const std::string x = RandomFloats(rows * cols, 100 + round);
    absl::StatusOr<v1::TensorInfo> xi =
        client_->PutTensor(v1::DATA_TYPE_FLOAT32, {rows, cols}, x);
    ASSERT_TRUE(xi.ok()) << xi.status();
    t.mutable_input()->set_handle(xi->handle());
    absl::StatusOr<v1::TransposeResponse> r = client_->Transpose(t);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->output().handle(), out->handle());
    absl::StatusOr<FetchedTensor> got = client_->GetTensor(out->handle());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bytes, TransposeReference(x, rows, cols)) << round;
    ASSERT_TRUE(client_->DeleteTensor(xi->handle()).ok());
  }
  // No tensor made and no byte charged by the requests themselves.
  EXPECT_EQ(used(), held);

  // The wrong shape, the wrong dtype, an unknown handle, the input itself,
  // and a handle with a placement that has none.
  t.mutable_input()->set_handle(in->handle());
  spec->set_handle(in->handle());
  absl::Status status = client_->Transpose(t).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("options.outputs[0].handle"));
  absl::StatusOr<v1::TensorInfo> square = client_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {rows, rows}, RandomFloats(rows * rows, 13));
  ASSERT_TRUE(square.ok()) << square.status();
  t.mutable_input()->set_handle(square->handle());
  spec->set_handle(square->handle());
  status = client_->Transpose(t).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("alias"));
  t.mutable_input()->set_handle(in->handle());
  absl::StatusOr<v1::TensorInfo> halves = client_->PutTensor(
      v1::DATA_TYPE_FLOAT16, {cols, rows}, RandomFloats(rows * cols / 2, 14));
  ASSERT_TRUE(halves.ok()) << halves.status();
  spec->set_handle(halves->handle());
  status = client_->Transpose(t).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("float16"));
  spec->set_handle("no-such");
  status = client_->Transpose(t).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("options.outputs[0].handle"));
  spec->set_placement(v1::OUTPUT_PLACEMENT_INLINE);
  spec->set_handle(out->handle());
  status = client_->Transpose(t).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("OUTPUT_PLACEMENT_SERVER_HANDLE"));

  // Another identity's tensor reads as missing.
  ClientOptions o;
  o.server = absl::StrCat("unix:", socket_path_);
  o.client_id = "another-client";
  absl::StatusOr<std::unique_ptr<Client>> other = Client::Connect(o);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<v1::TensorInfo> theirs = (*other)->PutTensor(
      v1::DATA_TYPE_FLOAT32, {rows, cols}, RandomFloats(rows * cols, 15));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  v1::TransposeRequest mine;
  mine.mutable_input()->set_handle(theirs->handle());
  mine.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  mine.mutable_options()->mutable_outputs(0)->set_handle(out->handle());
  status = (*other)->Transpose(mine).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
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

  // An output overlapping the input in the same region: refused, naming the
  // output's field, and the input bytes are left as they were.
  absl::Status alias =
      client_->Transpose(ShmTranspose("r", rows, cols, bytes / 2)).status();
  EXPECT_EQ(alias.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(alias.message(), HasSubstr("options.outputs[0].shared_memory"));
  EXPECT_THAT(alias.message(), HasSubstr("overlap input operand 0"));
  EXPECT_EQ(std::string(shm.data(), bytes), in);

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

// A backend whose resident memory the host must not read in place, as a
// GPU's: it lives in allocations of the backend's own and holds every byte
// XOR kScramble, so that a server path that reads or writes it as host
// memory gets wrong bytes instead of the tensor. Execute fails when an
// operand's space disagrees with where its pointer lies; it unscrambles
// resident inputs, runs the CPU backend and scrambles resident outputs. It
// counts the bytes copied in and out of resident memory.
class ScrambledResidentBackend final : public Backend {
 public:
  static constexpr char kScramble = 0x5a;

  explicit ScrambledResidentBackend(Backend* cpu) : cpu_(cpu) {}
  BackendKind kind() const override { return cpu_->kind(); }
  const DeviceInfo& device() const override { return cpu_->device(); }
  const VariantRegistry& registry() const override { return cpu_->registry(); }
  bool resident_is_host_addressable() const override { return false; }

  absl::StatusOr<std::shared_ptr<void>> AllocateResident(
      int64_t bytes) override {
    char* p = new char[std::max<int64_t>(bytes, 1)];
    absl::MutexLock lock(&mu_);
    arena_[p] = bytes;
    return std::shared_ptr<void>(p, [this](void* q) {
      absl::MutexLock lock(&mu_);
      arena_.erase(static_cast<char*>(q));
      delete[] static_cast<char*>(q);
    });
  }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& operands, RunResult* result) override {
    const OperandSizes sizes = OperandBytes(p);
    std::vector<std::unique_ptr<char[]>> copies;
    Operands host;
    {
      absl::MutexLock lock(&mu_);
      input_spaces_.clear();
      output_spaces_.clear();
    }
    for (size_t i = 0; i < sizes.inputs.size(); ++i) {
      const void* ptr = operands.inputs[i];
      const MemorySpace space = operands.input_space(i);
      {
        absl::MutexLock lock(&mu_);
        input_spaces_.push_back(space);
      }
      if (ptr == nullptr) {
        host.inputs.push_back(nullptr);
        continue;
      }
      if (InArena(ptr, sizes.inputs[i]) != (space == MemorySpace::kResident)) {
        return absl::InternalError(
            absl::StrCat("input ", i, ": space and pointer disagree"));
      }
      if (space == MemorySpace::kHost) {
        host.inputs.push_back(ptr);
        continue;
      }
      copies.emplace_back(new char[sizes.inputs[i]]);
      Unscramble(ptr, copies.back().get(), sizes.inputs[i]);
      host.inputs.push_back(copies.back().get());
    }
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      void* ptr = operands.outputs[i];
      const MemorySpace space = operands.output_space(i);
      {
        absl::MutexLock lock(&mu_);
        output_spaces_.push_back(space);
      }
      if (ptr != nullptr &&
          InArena(ptr, sizes.outputs[i]) != (space == MemorySpace::kResident)) {
        return absl::InternalError(
            absl::StrCat("output ", i, ": space and pointer disagree"));
      }
      if (space == MemorySpace::kHost || ptr == nullptr) {
        host.outputs.push_back(ptr);
        continue;
      }
      copies.emplace_back(new char[sizes.outputs[i]]);
      host.outputs.push_back(copies.back().get());
    }
    COALESCE_RETURN_IF_ERROR(cpu_->Execute(v, p, host, result));
    for (size_t i = 0; i < sizes.outputs.size(); ++i) {
      if (operands.output_space(i) == MemorySpace::kResident &&
          operands.outputs[i] != nullptr) {
        Unscramble(host.outputs[i], operands.outputs[i], sizes.outputs[i]);
      }
    }
    return absl::OkStatus();
  }

  // Its writer, as a GPU's, leaves each piece in flight: the pieces land
  // only at Finish (or in the destructor), so a server path that used a
  // tensor before finishing its writer would read unwritten bytes.
  std::unique_ptr<ResidentWriter> OpenResidentWriter(
      void* resident, int64_t resident_bytes) override {
    return std::make_unique<DeferredWriter>(this, resident, resident_bytes);
  }

  int64_t writers_finished() const { return writers_finished_; }
  int64_t bytes_to_resident() const { return to_resident_; }
  int64_t bytes_from_resident() const { return from_resident_; }
  std::vector<MemorySpace> input_spaces() const {
    absl::MutexLock lock(&mu_);
    return input_spaces_;
  }
  std::vector<MemorySpace> output_spaces() const {
    absl::MutexLock lock(&mu_);
    return output_spaces_;
  }

 protected:
  absl::Status CopyToResidentRange(void* dst, const void* src,
                                   int64_t bytes) override {
    if (!InArena(dst, bytes)) return absl::InternalError("dst not resident");
    Unscramble(src, dst, bytes);
    to_resident_ += bytes;
    return absl::OkStatus();
  }
  absl::Status CopyFromResidentRange(const void* src, void* dst,
                                     int64_t bytes) override {
    if (!InArena(src, bytes)) return absl::InternalError("src not resident");
    Unscramble(src, dst, bytes);
    from_resident_ += bytes;
    return absl::OkStatus();
  }

 private:
  class DeferredWriter final : public ResidentWriter {
   public:
    DeferredWriter(ScrambledResidentBackend* backend, void* base, int64_t size)
        : backend_(backend), base_(base), size_(size) {}
    // Lands what is left, uncounted: a writer dropped unfinished still
    // leaves the memory written before it is freed, as the CUDA writer's
    // destructor waits.
    ~DeferredWriter() override { Land().IgnoreError(); }
    absl::Status Write(int64_t offset, const void* src,
                       int64_t bytes) override {
      COALESCE_RETURN_IF_ERROR(
          CheckResidentRange("DeferredWriter", size_, offset, bytes));
      pieces_.emplace_back(offset, std::string(static_cast<const char*>(src),
                                               static_cast<size_t>(bytes)));
      return absl::OkStatus();
    }
    absl::Status Finish() override {
      COALESCE_RETURN_IF_ERROR(Land());
      ++backend_->writers_finished_;
      return absl::OkStatus();
    }

   private:
    absl::Status Land() {
      for (const auto& [offset, bytes] : pieces_) {
        COALESCE_RETURN_IF_ERROR(backend_->CopyToResident(
            base_, size_, offset, bytes.data(), bytes.size()));
      }
      pieces_.clear();
      return absl::OkStatus();
    }

    ScrambledResidentBackend* const backend_;
    void* const base_;
    const int64_t size_;
    std::vector<std::pair<int64_t, std::string>> pieces_;
  };

  // XOR is its own inverse: scrambles and unscrambles.
  static void Unscramble(const void* src, void* dst, int64_t bytes) {
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(dst);
    for (int64_t i = 0; i < bytes; ++i) d[i] = s[i] ^ kScramble;
  }
  // Whether [p, p + bytes) lies in one resident allocation.
  bool InArena(const void* p, int64_t bytes) const {
    const char* c = static_cast<const char*>(p);
    absl::MutexLock lock(&mu_);
    auto it = arena_.upper_bound(const_cast<char*>(c));
    if (it == arena_.begin()) return false;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second;
  }

  Backend* const cpu_;
  mutable absl::Mutex mu_;
  std::map<char*, int64_t> arena_ ABSL_GUARDED_BY(mu_);
  std::vector<MemorySpace> input_spaces_ ABSL_GUARDED_BY(mu_);
  std::vector<MemorySpace> output_spaces_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> to_resident_{0};
  std::atomic<int64_t> writers_finished_{0};
  std::atomic<int64_t> from_resident_{0};
};

class ResidentDataPlaneTest : public testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    // Shared memory is registered only over the local socket, where the
    // server learns the caller's uid: every client here connects there.
    socket_path_ = absl::StrCat("/tmp/coalesce-data-plane-", getpid(), "-",
                                ++sockets_, ".sock");
    config.unix_socket = socket_path_;
    config.shared_memory.allow = true;
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, &backend_, "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions o;
    o.server = absl::StrCat("unix:", socket_path_);
    o.client_id = "test-client";
    o.chunk_bytes = 7;  // chunks split elements
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  static inline int sockets_ = 0;
  std::string socket_path_;
  std::unique_ptr<Backend> cpu_ = CreateCpuBackend(2);
  ScrambledResidentBackend backend_{cpu_.get()};
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<Client> client_;
};

using ::testing::ElementsAre;
constexpr MemorySpace kHost = MemorySpace::kHost;
constexpr MemorySpace kResident = MemorySpace::kResident;

TEST_F(ResidentDataPlaneTest, HandlesStayResidentThroughAChain) {
  const int64_t rows = 13, cols = 9, bytes = rows * cols * 4;
  const std::string x = RandomFloats(rows * cols, 5);
  absl::StatusOr<v1::TensorInfo> in =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {rows, cols}, x);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(backend_.bytes_to_resident(), bytes);
  // PutTensor's chunks went through one writer, finished explicitly before
  // the handle was committed (the transposes below read what it landed).
  EXPECT_EQ(backend_.writers_finished(), 1);

  // Handle in, handle out: resident on both sides, nothing copied.
  v1::TransposeRequest t;
  t.mutable_input()->set_handle(in->handle());
  KeepOutputOnServer(t.mutable_options());
  absl::StatusOr<v1::TransposeResponse> xt = client_->Transpose(t);
  ASSERT_TRUE(xt.ok()) << xt.status();
  EXPECT_THAT(backend_.input_spaces(), ElementsAre(kResident));
  EXPECT_THAT(backend_.output_spaces(), ElementsAre(kResident));

  // Handle in, inline out: the kernel writes the response (host).
  v1::TransposeRequest back;
  back.mutable_input()->set_handle(xt->output().handle());
  absl::StatusOr<v1::TransposeResponse> xtt = client_->Transpose(back);
  ASSERT_TRUE(xtt.ok()) << xtt.status();
  EXPECT_THAT(backend_.input_spaces(), ElementsAre(kResident));
  EXPECT_THAT(backend_.output_spaces(), ElementsAre(kHost));
  EXPECT_EQ(xtt->output().raw(), x);

  // Inline in, handle out.
  v1::TransposeRequest inline_in;
  SetInlineMatrix(inline_in.mutable_input(), rows, cols, x);
  KeepOutputOnServer(inline_in.mutable_options());
  absl::StatusOr<v1::TransposeResponse> xt2 = client_->Transpose(inline_in);
  ASSERT_TRUE(xt2.ok()) << xt2.status();
  EXPECT_THAT(backend_.input_spaces(), ElementsAre(kHost));
  EXPECT_THAT(backend_.output_spaces(), ElementsAre(kResident));

  // No op copied a handle's bytes out of resident memory or into it.
  EXPECT_EQ(backend_.bytes_from_resident(), 0);
  EXPECT_EQ(backend_.bytes_to_resident(), bytes);

  // GetTensor is the one copy out, by chunks.
  const std::string want = TransposeReference(x, rows, cols);
  for (const std::string& handle :
       {xt->output().handle(), xt2->output().handle()}) {
    absl::StatusOr<FetchedTensor> got = client_->GetTensor(handle);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bytes, want);
  }
  EXPECT_EQ(backend_.bytes_from_resident(), 2 * bytes);
}

TEST_F(ResidentDataPlaneTest, MixedOperandsKeepTheirSpaces) {
  const int64_t m = 6, k = 5, n = 4;
  const std::string a = RandomFloats(m * k, 6);
  const std::string b = RandomFloats(k * n, 7);
  absl::StatusOr<v1::TensorInfo> ha =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {m, k}, a);
  ASSERT_TRUE(ha.ok()) << ha.status();

  v1::GemmRequest inline_gemm;
  SetInlineMatrix(inline_gemm.mutable_a(), m, k, a);
  SetInlineMatrix(inline_gemm.mutable_b(), k, n, b);
  absl::StatusOr<v1::GemmResponse> want = client_->Gemm(inline_gemm);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_THAT(backend_.input_spaces(), ElementsAre(kHost, kHost, kHost));

  // A by handle, B inline, C absent.
  v1::GemmRequest mixed = inline_gemm;
  mixed.mutable_a()->Clear();
  mixed.mutable_a()->set_handle(ha->handle());
  absl::StatusOr<v1::GemmResponse> got = client_->Gemm(mixed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(backend_.input_spaces(), ElementsAre(kResident, kHost, kHost));
  EXPECT_THAT(backend_.output_spaces(), ElementsAre(kHost));
  EXPECT_EQ(got->d().raw(), want->d().raw());
  EXPECT_EQ(backend_.bytes_from_resident(), 0);
}

// With batching limited to host inputs (what --batch_ops=auto does on a
// GPU), requests on stored tensors run alone while inline ones batch; all
// results exact.
TEST(DataPlaneBatchTest, HostInputsOnlyLeavesStoredInputsAlone) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(2);
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.max_in_flight = 1;
  config.batch_ops = std::vector<OpKind>{OpKind::kTranspose};
  config.batch_host_inputs_only = true;
  config.batch_max_delay_us = 2000;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kThreads = 6, kRequests = 12;
  std::atomic<int> wrong{0}, failed{0}, inline_batched{0}, stored_batched{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ClientOptions o;
      o.server = absl::StrCat("127.0.0.1:", (*server)->port);
      o.client_id = absl::StrCat("caller", t);
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
      if (!c.ok()) {
        ++failed;
        return;
      }
      for (int i = 0; i < kRequests; ++i) {
        const std::string x = RandomFloats(8 * 6, 100 * t + i);
        const bool stored = i % 2 == 0;
        v1::TransposeRequest request;
        if (stored) {
          absl::StatusOr<v1::TensorInfo> in =
              (*c)->PutTensor(v1::DATA_TYPE_FLOAT32, {8, 6}, x);
          if (!in.ok()) {
            ++failed;
            continue;
          }
          request.mutable_input()->set_handle(in->handle());
        } else {
          SetInlineMatrix(request.mutable_input(), 8, 6, x);
        }
        request.mutable_options()->set_report(true);
        absl::StatusOr<v1::TransposeResponse> r = (*c)->Transpose(request);
        if (!r.ok()) {
          ++failed;
          continue;
        }
        if (r->output().raw() != TransposeReference(x, 8, 6)) ++wrong;
        if (r->report().batch_size() > 1) {
          ++(stored ? stored_batched : inline_batched);
        }
        if (stored) {
          (*c)->DeleteTensor(request.input().handle()).IgnoreError();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(stored_batched.load(), 0);
  EXPECT_GT(inline_batched.load(), 0);
}

}  // namespace
}  // namespace coalesce
