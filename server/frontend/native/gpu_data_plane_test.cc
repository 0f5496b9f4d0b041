// Handles on the CUDA backend, through a real server on port 0: a tensor put
// in chunks that split elements and cross the 8 MiB staging chunks lands in
// device memory; GELU-LayerNorm -> transpose on handles with the outputs
// kept on the server (device-resident, no copy through the host) gives,
// bit-exact, what the same ops give inline; GetTensor brings it back; and
// concurrent callers batched into one launch each get their own result. Skips
// without a CUDA device (CTest label gpu).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "kernels/backends.h"
#include "server/frontend/native/data_plane_test_util.h"
#include "server/server.h"

namespace coalesce {
namespace {

class GpuDataPlaneTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBackendBuilt()) GTEST_SKIP() << "built without CUDA";
    BackendOptions options;
    options.device = "cuda";
    absl::StatusOr<BackendChoice> choice = CreateBackend(options);
    if (!choice.ok()) GTEST_SKIP() << "no GPU: " << choice.status();
    backend_ = std::move(choice->backend);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions o;
    o.server = absl::StrCat("127.0.0.1:", server_->port);
    o.client_id = "gpu-test";
    o.chunk_bytes = (int64_t{3} << 20) + 1;  // splits elements
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(GpuDataPlaneTest, HandlesChainOnTheDevice) {
  ASSERT_FALSE(backend_->resident_is_host_addressable());
  const int64_t rows = 2049, hidden = 1536;  // 12 MiB: two staging chunks
  const std::string x = RandomFloats(rows * hidden, 11);
  absl::StatusOr<v1::TensorInfo> in =
      client_->PutTensor(v1::DATA_TYPE_FLOAT32, {rows, hidden}, x);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<FetchedTensor> echoed = client_->GetTensor(in->handle());
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_TRUE(echoed->bytes == x) << "PutTensor/GetTensor round trip differs";

  // The same ops inline, with the variants the handle chain uses.
  v1::GeluLayerNormRequest inline_ln;
  SetInlineMatrix(inline_ln.mutable_x(), rows, hidden, x);
  inline_ln.mutable_options()->set_report(true);
  absl::StatusOr<v1::GeluLayerNormResponse> want_y =
      client_->GeluLayerNorm(inline_ln);
  ASSERT_TRUE(want_y.ok()) << want_y.status();

  v1::GeluLayerNormRequest ln;
  ln.mutable_x()->set_handle(in->handle());
  ln.mutable_options()->set_variant(want_y->report().variant());
  KeepOutputOnServer(ln.mutable_options());
  absl::StatusOr<v1::GeluLayerNormResponse> y = client_->GeluLayerNorm(ln);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_FALSE(y->y().handle().empty());

  v1::TransposeRequest t;
  t.mutable_input()->set_handle(y->y().handle());
  KeepOutputOnServer(t.mutable_options());
  absl::StatusOr<v1::TransposeResponse> out = client_->Transpose(t);
  ASSERT_TRUE(out.ok()) << out.status();

  absl::StatusOr<FetchedTensor> got =
      client_->GetTensor(out->output().handle());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == TransposeReference(want_y->y().raw(), rows, hidden))
      << "handle chain differs from the inline ops";

  for (const std::string& h :
       {in->handle(), y->y().handle(), out->output().handle()}) {
    EXPECT_TRUE(client_->DeleteTensor(h).ok()) << h;
  }
}

// Concurrent callers batched on the device (one request runs at a time, a
// 2 ms window to gather the rest): inputs inline or on the device, outputs
// inline or kept there, each caller's transposes exact, and batches formed.
TEST(GpuBatchingTest, BatchedCallersEachGetTheirOwnResult) {
  if (!CudaBackendBuilt()) GTEST_SKIP() << "built without CUDA";
  BackendOptions options;
  options.device = "cuda";
  absl::StatusOr<BackendChoice> choice = CreateBackend(options);
  if (!choice.ok()) GTEST_SKIP() << "no GPU: " << choice.status();
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.max_in_flight = 1;
  config.batch_ops = std::vector<OpKind>{OpKind::kTranspose};
  config.batch_max_delay_us = 2000;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, choice->backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kThreads = 8, kRequests = 40;
  constexpr int64_t kRows = 48, kCols = 40;
  std::atomic<int> wrong{0}, failed{0}, batched{0};
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
      std::mt19937 rng(500 + t);
      for (int i = 0; i < kRequests; ++i) {
        const std::string x =
            RandomFloats(kRows * kCols, static_cast<uint32_t>(rng()));
        v1::TransposeRequest request;
        std::string input_handle;
        if (rng() % 2 == 0) {
          absl::StatusOr<v1::TensorInfo> in =
              (*c)->PutTensor(v1::DATA_TYPE_FLOAT32, {kRows, kCols}, x);
          if (!in.ok()) {
            ++failed;
            continue;
          }
          input_handle = in->handle();
          request.mutable_input()->set_handle(input_handle);
        } else {
          SetInlineMatrix(request.mutable_input(), kRows, kCols, x);
        }
        const bool keep = rng() % 2 == 0;
        if (keep) KeepOutputOnServer(request.mutable_options());
        request.mutable_options()->set_report(true);
        absl::StatusOr<v1::TransposeResponse> r = (*c)->Transpose(request);
        if (!r.ok()) {
          ++failed;
          ADD_FAILURE() << r.status();
          continue;
        }
        std::string got = r->output().raw();
        if (keep) {
          absl::StatusOr<FetchedTensor> f =
              (*c)->GetTensor(r->output().handle());
          got = f.ok() ? f->bytes : "";
          (*c)->DeleteTensor(r->output().handle()).IgnoreError();
        }
        if (!input_handle.empty()) {
          (*c)->DeleteTensor(input_handle).IgnoreError();
        }
        if (got != TransposeReference(x, kRows, kCols)) ++wrong;
        if (r->report().batch_size() > 1) ++batched;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(batched.load(), 0);
  server->reset();
}

}  // namespace
}  // namespace coalesce
