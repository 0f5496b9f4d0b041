// Abuse end to end: the real coalesce-server, attacked the ways a hostile
// or careless tenant can reach it: another identity's objects, missing and
// forged credentials, shared memory it may not map or that shrinks under an
// op, quota games with uploads, cancellation storms, SIGTERM during long
// work, slow HTTP clients and oversized names. Every case asserts the exact
// status code and the part of the message that names the field; after each
// test the server still answers health checks SERVING and runs an op, and
// its resident memory and open descriptors stay within a stated bound.
//
// COALESCE_TEST_DEVICE=cuda runs the same cases against --device=cuda: the
// handles then live in device memory and ops copy regions to the device.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "coalesce/v1/tensor_ops.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e_support.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using e2e::kSanitizedBuild;
using e2e::ProcessUsage;
using e2e::RandomFloats;
using e2e::RandomHex;
using e2e::ServerUnderTest;

constexpr int64_t kMiB = int64_t{1} << 20;

// The tenant server's limits: small, so that a test reaches them with a few
// MiB; the cap above the quota, so that two identities reach it together
// while neither is over its own quota.
constexpr int64_t kQuotaBytes = 64 * kMiB;
constexpr int64_t kCapBytes = 96 * kMiB;
constexpr int kMaxUploads = 4;

// The limits server: more regions than 1,024, registered by several
// identities, so that the mapping guard must cover more than one table of
// that size.
constexpr int kMaxRegions = 1100;
constexpr int kMaxRegionsPerClient = 300;
constexpr int kMaxTensorsPerClient = 40;
constexpr int kMaxTensors = 100;

// Default allowances of a test's RSS and descriptor growth. 48 MiB: what a
// test moves at once (a few MiB of tensors here) plus what glibc keeps
// cached for reuse in the per-thread arenas of the gRPC threads that served
// it; a leak of what the abuse repeats (uploads, regions, calls) exceeds it
// many times over. 24 descriptors: the test's connections (a socket each on
// the server's side) and those gRPC and civetweb close a moment after
// their peer does. Twice that in a sanitizer build: its shadow memory
// grows with every heap page the traffic touches (a region flood under
// TSan: +54 MiB), and the unsanitized run keeps the tight bound.
constexpr int64_t kRssAllowance = (kSanitizedBuild ? 96 : 48) * kMiB;
constexpr int kFdAllowance = 24;

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// ---- Shared servers, started on first use, checked and stopped at the end.

struct Tenant {
  std::string identity;
  std::string token;
};

struct SharedServer {
  std::unique_ptr<ServerUnderTest> process;
  std::string error;   // why it did not start
  std::string dir;     // its token file and local socket
  std::string socket;  // the local socket's path
};

v1::Tensor Inline(std::vector<int64_t> shape, uint32_t seed);

class Servers : public ::testing::Environment {
 public:
  // Tokens, the local socket, client shared memory, the small quotas above.
  static SharedServer& Tenants() {
    static SharedServer* server = Start(
        [](const std::string& dir) {
          const std::string tokens = dir + "/tokens";
          const bool written = e2e::WriteFile(
              tokens, absl::StrCat("# abuse suite tenants\n", a().token, " ",
                                   a().identity, " user\n", b().token, " ",
                                   b().identity, " user\n", admin().token, " ",
                                   admin().identity, " admin\n"));
          EXPECT_TRUE(written) << tokens;
          return std::vector<std::string>{
              "--auth_tokens=" + tokens,
              "--allow_client_shm",
              absl::StrCat("--tensor_quota_bytes=", kQuotaBytes),
              absl::StrCat("--tensor_cap_bytes=", kCapBytes),
              absl::StrCat("--max_uploads_per_client=", kMaxUploads),
              "--measure_budget_s=600"};
        },
        a().token);
    return *server;
  }

  // No authentication (identities from x-coalesce-client), the local
  // socket, region limits past 1,024, uploads ended after 1 s idle, small
  // tensor counts.
  static SharedServer& Limits() {
    static SharedServer* server = Start(
        [](const std::string&) {
          return std::vector<std::string>{
              "--allow_client_shm",
              absl::StrCat("--max_shm_regions=", kMaxRegions),
              absl::StrCat("--max_shm_regions_per_client=",
                           kMaxRegionsPerClient),
              "--upload_idle_timeout_s=1",
              absl::StrCat("--max_tensors_per_client=", kMaxTensorsPerClient),
              absl::StrCat("--max_tensors=", kMaxTensors),
              absl::StrCat("--tensor_quota_bytes=", 1024 * kMiB),
              absl::StrCat("--tensor_cap_bytes=", 2048 * kMiB)};
        },
        "");
    return *server;
  }

  static const Tenant& a() {
    static const Tenant* t = new Tenant{"tenant-a", RandomHex(16)};
    return *t;
  }
  static const Tenant& b() {
    static const Tenant* t = new Tenant{"tenant-b", RandomHex(16)};
    return *t;
  }
  static const Tenant& admin() {
    static const Tenant* t = new Tenant{"ops", RandomHex(16)};
    return *t;
  }

  // A server that crashed during the run shows here, after its tests.
  void TearDown() override {
    for (SharedServer* s : started()) {
      if (s->process == nullptr) continue;
      EXPECT_TRUE(s->process->Running()) << "a shared server died; its log:\n"
                                         << s->process->LogTail();
      const ServerUnderTest::Exit exit =
          s->process->Terminate(absl::Seconds(15));
      EXPECT_TRUE(exit.exited) << "SIGTERM ignored for 15 s";
      s->process.reset();
      std::error_code ignored;
      std::filesystem::remove_all(s->dir, ignored);
    }
  }

 private:
  static std::vector<SharedServer*>& started() {
    static auto* list = new std::vector<SharedServer*>;
    return *list;
  }

  // token: one the server takes (empty without authentication).
  static SharedServer* Start(
      const std::function<std::vector<std::string>(const std::string&)>&
          flags_in,
      const std::string& token) {
    auto* s = new SharedServer;
    s->dir = e2e::MakeTempDir("abuse");
    s->socket = s->dir + "/coalesce.sock";
    std::vector<std::string> flags = flags_in(s->dir);
    flags.push_back("--unix_socket=" + s->socket);
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> p =
        ServerUnderTest::Start(flags);
    if (p.ok()) {
      s->process = *std::move(p);
      WarmUp(s->process->address(), token);
    } else {
      s->error = p.status().ToString();
    }
    started().push_back(s);
    return s;
  }

  // What a server does once, on its first calls (thread pools, the
  // allocator's arenas, gRPC's buffers for large messages), done before
  // any test reads the usage it is judged against.
  static void WarmUp(const std::string& address, const std::string& token) {
    ClientOptions options;
    options.server = address;
    options.token = token;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    const std::vector<float> values = RandomFloats(2 * kMiB, 0x3a);
    std::vector<std::thread> ops;
    for (int i = 0; i < 4; ++i) {
      ops.emplace_back([&] { e2e::ExpectServing(**client, 0x3b); });
    }
    for (std::thread& t : ops) t.join();
    absl::StatusOr<v1::TensorInfo> put = (*client)->PutTensor(
        v1::DATA_TYPE_FLOAT32, {2 * kMiB}, e2e::FloatBytes(values));
    ASSERT_TRUE(put.ok()) << put.status();
    ASSERT_TRUE((*client)->GetTensor(put->handle()).ok());
    ASSERT_TRUE((*client)->DeleteTensor(put->handle()).ok());
    // Every op once: a GPU server loads each op's kernels (and the GEMM
    // library's) on first use; GEMMs at the two sizes the tests use, which
    // a GPU serves with different variants.
    for (const int64_t side : {16, 1024}) {
      v1::GemmRequest gemm;
      *gemm.mutable_a() = Inline({side, side}, 0x3c);
      *gemm.mutable_b() = Inline({side, side}, 0x3d);
      *gemm.mutable_c() = Inline({side, side}, 0x3e);
      ASSERT_TRUE((*client)->Gemm(gemm).ok());
    }
    v1::ConvertLayoutRequest layout;
    *layout.mutable_input() = Inline({16, 16}, 0x3f);
    layout.mutable_permutation()->add_perm(1);
    layout.mutable_permutation()->add_perm(0);
    ASSERT_TRUE((*client)->ConvertLayout(layout).ok());
    v1::GeluLayerNormRequest gelu;
    *gelu.mutable_x() = Inline({16, 16}, 0x40);
    *gelu.mutable_residual() = Inline({16, 16}, 0x41);
    *gelu.mutable_bias() = Inline({16}, 0x42);
    ASSERT_TRUE((*client)->GeluLayerNorm(gelu).ok());
  }
};

::testing::Environment* const kServers =
    ::testing::AddGlobalTestEnvironment(new Servers);

// ---- Clients.

std::unique_ptr<Client> Connect(const std::string& target,
                                const std::string& token,
                                const std::string& client_id = "") {
  ClientOptions options;
  options.server = target;
  options.token = token;
  options.client_id = client_id;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::unique_ptr<v1::TensorOps::Stub> RawStub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return v1::TensorOps::NewStub(grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args));
}

void Prepare(grpc::ClientContext* context, const std::string& token,
             absl::Duration timeout = absl::Seconds(60)) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
}

// ---- Tensors.

v1::Tensor Inline(std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  t.mutable_shape()->Add(shape.begin(), shape.end());
  t.set_raw(e2e::FloatBytes(RandomFloats(static_cast<size_t>(n), seed)));
  return t;
}

v1::Tensor Handle(const std::string& handle) {
  v1::Tensor t;
  t.set_handle(handle);
  return t;
}

v1::Tensor Region(const std::string& region, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  t.mutable_shape()->Add(shape.begin(), shape.end());
  v1::SharedMemoryRef* ref = t.mutable_shared_memory();
  ref->set_region(region);
  ref->set_byte_size(static_cast<uint64_t>(n) * sizeof(float));
  return t;
}

// The message with every occurrence of name replaced, so that the answers
// about two names compare equal when they say the same thing.
std::string WithoutName(absl::string_view message, absl::string_view name) {
  return absl::StrReplaceAll(message, {{name, "<NAME>"}});
}

// A name no identity has: the same form as a server-picked handle, so that
// its answer has the same length as one about a real handle.
std::string MissingName() { return absl::StrCat("t-", RandomHex(16)); }

// A POSIX shared-memory object under the server's key prefix, owned by the
// test, filled with the given bytes; unlinked when destroyed.
class ShmObject {
 public:
  static std::unique_ptr<ShmObject> Create(absl::string_view tag,
                                           absl::string_view bytes) {
    const std::string key =
        absl::StrCat("/coalesce-abuse-", getpid(), "-", tag, "-", RandomHex(4));
    const int fd =
        shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      ADD_FAILURE() << "shm_open(" << key << "): " << std::strerror(errno);
      return nullptr;
    }
    auto object = std::unique_ptr<ShmObject>(new ShmObject(key, fd));
    if (ftruncate(fd, static_cast<off_t>(bytes.size())) != 0 ||
        !object->Write(bytes)) {
      ADD_FAILURE() << "cannot fill " << key << ": " << std::strerror(errno);
      return nullptr;
    }
    return object;
  }

  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }

  const std::string& key() const { return key_; }
  // Where glibc keeps it.
  std::string path() const { return absl::StrCat("/dev/shm", key_); }
  int fd() const { return fd_; }

  bool Write(absl::string_view bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = pwrite(fd_, bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  std::string Read(size_t size) const {
    std::string bytes(size, '\0');
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pread(fd_, bytes.data() + done, size - done,
                              static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
    return bytes;
  }

 private:
  ShmObject(std::string key, int fd) : key_(std::move(key)), fd_(fd) {}

  const std::string key_;
  const int fd_;
};

// ---- /metrics over plain sockets.

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0)
      << std::strerror(errno);
  return fd;
}

// A whole scrape of /metrics (status line, headers and body), and how long
// it took.
std::string Scrape(int port, double* seconds) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> answer = e2e::HttpGet(port, "/metrics");
  EXPECT_TRUE(answer.ok()) << answer.status();
  *seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return answer.ok() ? *answer : std::string();
}

// The sum of family's samples whose labels include label (`name="value"`).
double SumOf(absl::string_view metrics, absl::string_view family,
             absl::string_view label) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, absl::StrCat(family, "{")) ||
        !absl::StrContains(line.substr(0, line.rfind('}')), label)) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) {
      sum += value;
    }
  }
  return sum;
}

// ---- Fixtures.

// A test on a shared server: clients for its identities, the server's
// usage when the test began, and at its end the clean-up and the checks
// that the server still serves within its bounds.
class SharedServerTest : public ::testing::Test {
 protected:
  void StartOn(SharedServer& server) {
    shared_ = &server;
    ASSERT_NE(server.process, nullptr)
        << "the server did not start: " << server.error;
    ASSERT_TRUE(server.process->Running()) << server.process->LogTail();
    absl::StatusOr<ProcessUsage> usage = e2e::ReadUsage(pid());
    ASSERT_TRUE(usage.ok()) << usage.status();
    before_ = *usage;
  }

  void TearDown() override {
    if (shared_ == nullptr || shared_->process == nullptr) return;
    ASSERT_TRUE(shared_->process->Running()) << "the server died; its log:\n"
                                             << shared_->process->LogTail();
    CleanUp();
    ASSERT_NE(checker_, nullptr);
    e2e::ExpectServing(*checker_, 0x5e4e);
    e2e::ExpectBounded(pid(), before_, rss_allowance_, fd_allowance_);
    if (HasFailure()) {
      std::fprintf(stderr, "--- server log (tail):\n%s\n",
                   shared_->process->LogTail().c_str());
    }
  }

  // Deletes what the test's identities left on the server.
  virtual void CleanUp() = 0;

  pid_t pid() const { return shared_->process->pid(); }
  ServerUnderTest& process() { return *shared_->process; }
  std::string tcp() const { return shared_->process->address(); }
  std::string local() const { return "unix:" + shared_->socket; }

  SharedServer* shared_ = nullptr;
  ProcessUsage before_;
  // The client that checks, at the end, that the server still serves.
  Client* checker_ = nullptr;
  int64_t rss_allowance_ = kRssAllowance;
  int fd_allowance_ = kFdAllowance;
};

void DeleteEverything(Client& client) {
  absl::StatusOr<v1::ListTensorsResponse> list = client.ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  for (const v1::TensorInfo& t : list->tensors()) {
    EXPECT_TRUE(client.DeleteTensor(t.handle()).ok()) << t.handle();
  }
  absl::StatusOr<v1::ListSharedMemoryResponse> regions =
      client.ListSharedMemory();
  ASSERT_TRUE(regions.ok()) << regions.status();
  for (const v1::SharedMemoryRegion& r : regions->regions()) {
    EXPECT_TRUE(client.UnregisterSharedMemory(r.name()).ok()) << r.name();
  }
}

// Bytes charged to the client's identity.
int64_t UsedBytes(Client& client) {
  absl::StatusOr<v1::ListTensorsResponse> list = client.ListTensors();
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? list->used_bytes() : -1;
}

// Waits up to limit for the identity's charged bytes to equal want.
bool UsedBytesBecome(Client& client, int64_t want,
                     absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (UsedBytes(client) != want) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// On the tenant server, as tenant-a, tenant-b and the admin, over TCP and
// over the local socket.
class TenantTest : public SharedServerTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartOn(Servers::Tenants()));
    a_ = Connect(tcp(), Servers::a().token);
    b_ = Connect(tcp(), Servers::b().token);
    admin_ = Connect(tcp(), Servers::admin().token);
    a_local_ = Connect(local(), Servers::a().token);
    b_local_ = Connect(local(), Servers::b().token);
    ASSERT_TRUE(a_ && b_ && admin_ && a_local_ && b_local_);
    checker_ = a_.get();
  }

  void CleanUp() override {
    DeleteEverything(*a_local_);
    DeleteEverything(*b_local_);
    DeleteEverything(*admin_);
  }

  std::unique_ptr<Client> a_, b_, admin_, a_local_, b_local_;
};

// ---- 1. Identities: tokens, isolation, roles.

class AuthTest : public TenantTest {};

// One call of each RPC with a valid request, on a raw stub so that the
// metadata is exactly what the test sets.
struct RawRpc {
  std::string name;
  std::function<grpc::Status(v1::TensorOps::Stub&, grpc::ClientContext*)> call;
};

using Stub = v1::TensorOps::Stub;

// A unary RPC with a fixed request.
template <typename Request, typename Response>
RawRpc Unary(std::string name,
             grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                          Response*),
             Request request) {
  return {std::move(name),
          [method, request](Stub& stub, grpc::ClientContext* context) {
            Response response;
            return (stub.*method)(context, request, &response);
          }};
}

std::vector<RawRpc> EveryRpc() {
  v1::TransposeRequest transpose;
  *transpose.mutable_input() = Inline({5, 7}, 1);
  v1::GemmRequest gemm;
  *gemm.mutable_a() = Inline({4, 6}, 2);
  *gemm.mutable_b() = Inline({6, 3}, 3);
  v1::ConvertLayoutRequest layout;
  *layout.mutable_input() = Inline({2, 3, 4, 5}, 4);
  layout.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
  layout.mutable_layouts()->set_to(v1::LAYOUT_NHWC);
  v1::GeluLayerNormRequest gelu;
  *gelu.mutable_x() = Inline({3, 8}, 5);
  v1::ExplainSelectionRequest explain;
  *explain.mutable_transpose()->mutable_input() = Inline({64, 48}, 6);
  v1::EchoRequest echo;
  echo.set_payload(RandomHex(32));
  v1::DeleteTensorRequest remove;
  remove.set_handle(MissingName());
  v1::RegisterSharedMemoryRequest attach;
  attach.set_name("r");
  attach.set_key("/coalesce-abuse-none");
  attach.set_byte_size(64);
  v1::UnregisterSharedMemoryRequest detach;
  detach.set_name("r");
  std::vector<RawRpc> rpcs = {
      Unary("Transpose", &Stub::Transpose, transpose),
      Unary("Gemm", &Stub::Gemm, gemm),
      Unary("ConvertLayout", &Stub::ConvertLayout, layout),
      Unary("GeluLayerNorm", &Stub::GeluLayerNorm, gelu),
      Unary("GetServerInfo", &Stub::GetServerInfo, v1::GetServerInfoRequest()),
      Unary("ExplainSelection", &Stub::ExplainSelection, explain),
      Unary("Echo", &Stub::Echo, echo),
      Unary("DeleteTensor", &Stub::DeleteTensor, remove),
      Unary("ListTensors", &Stub::ListTensors, v1::ListTensorsRequest()),
      Unary("RegisterSharedMemory", &Stub::RegisterSharedMemory, attach),
      Unary("UnregisterSharedMemory", &Stub::UnregisterSharedMemory, detach),
      Unary("ListSharedMemory", &Stub::ListSharedMemory,
            v1::ListSharedMemoryRequest()),
  };
  // The two streams.
  rpcs.push_back({"PutTensor", [](Stub& stub, grpc::ClientContext* context) {
                    v1::PutTensorResponse response;
                    auto writer = stub.PutTensor(context, &response);
                    v1::PutTensorRequest m;
                    m.mutable_header()->set_dtype(v1::DATA_TYPE_FLOAT32);
                    m.mutable_header()->add_shape(8);
                    if (writer->Write(m)) {
                      m.set_chunk(e2e::FloatBytes(RandomFloats(8, 7)));
                      if (writer->Write(m)) writer->WritesDone();
                    }
                    return writer->Finish();
                  }});
  rpcs.push_back({"GetTensor", [](Stub& stub, grpc::ClientContext* context) {
                    v1::GetTensorRequest request;
                    request.set_handle(MissingName());
                    auto reader = stub.GetTensor(context, request);
                    v1::GetTensorResponse m;
                    while (reader->Read(&m)) {
                    }
                    return reader->Finish();
                  }});
  return rpcs;
}

TEST_F(AuthTest, MissingWrongOrMalformedCredentialsAreUnauthenticated) {
  const std::string valid = Servers::a().token;
  const std::string wrong = RandomHex(16);
  struct Case {
    std::string what;
    std::string key;  // metadata key; empty: none sent
    std::string value;
    std::string presented;  // the secret that must not come back
    std::string message;    // distinctive part of the answer
  };
  const std::vector<Case> cases = {
      {"no authorization", "", "", "",
       "this server requires a bearer token (authorization: Bearer TOKEN)"},
      {"wrong token", "authorization", "Bearer " + wrong, wrong,
       "authorization metadata: the bearer token is not valid"},
      {"valid token plus a character", "authorization", "Bearer " + valid + "0",
       valid, "authorization metadata: the bearer token is not valid"},
      {"valid token cut short", "authorization",
       "Bearer " + valid.substr(0, valid.size() - 1), valid.substr(0, 31),
       "authorization metadata: the bearer token is not valid"},
      {"empty bearer", "authorization", "Bearer ", "",
       "authorization metadata: the bearer token is not valid"},
      {"valid token, Basic scheme", "authorization", "Basic " + valid, valid,
       "authorization metadata: expected 'Bearer TOKEN'"},
      {"valid token, no scheme", "authorization", valid, valid,
       "authorization metadata: expected 'Bearer TOKEN'"},
      {"scheme only", "authorization", "Bearer", "",
       "authorization metadata: expected 'Bearer TOKEN'"},
      {"valid token as x-coalesce-client", "x-coalesce-client", valid, valid,
       "this server requires a bearer token"},
      {"forged identity, no token", "x-coalesce-client", Servers::a().identity,
       "", "this server requires a bearer token"},
  };
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  for (const RawRpc& rpc : EveryRpc()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(rpc.name, ": ", c.what));
      grpc::ClientContext context;
      Prepare(&context, "");
      if (!c.key.empty()) context.AddMetadata(c.key, c.value);
      const grpc::Status status = rpc.call(*stub, &context);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << status.error_message();
      EXPECT_THAT(status.error_message(), HasSubstr(c.message));
      if (!c.presented.empty()) {
        EXPECT_THAT(status.error_message(), Not(HasSubstr(c.presented)));
      }
      EXPECT_THAT(status.error_message(), Not(HasSubstr(valid)));
    }
  }
  // The neighbour that works: RFC 6750's scheme is case-insensitive.
  for (const std::string& scheme : {"bearer ", "BEARER ", "Bearer "}) {
    grpc::ClientContext context;
    Prepare(&context, "");
    context.AddMetadata("authorization", scheme + valid);
    v1::ListTensorsResponse out;
    EXPECT_TRUE(stub->ListTensors(&context, {}, &out).ok()) << scheme;
  }
}

TEST_F(AuthTest, AForgedClientIdIsIgnored) {
  // tenant-b's token, claiming to be tenant-a.
  std::unique_ptr<Client> forger =
      Connect(tcp(), Servers::b().token, Servers::a().identity);
  const std::vector<float> values = RandomFloats(24, 11);
  absl::StatusOr<v1::TensorInfo> put = forger->PutTensor(
      v1::DATA_TYPE_FLOAT32, {4, 6}, e2e::FloatBytes(values), "forged");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->owner(), Servers::b().identity);
  absl::StatusOr<v1::ListTensorsResponse> listed = forger->ListTensors();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->tensors_size(), 1);
  EXPECT_EQ(listed->tensors(0).owner(), Servers::b().identity);
  EXPECT_EQ(listed->used_bytes(), 96);
  // It is tenant-b's and nobody else's.
  absl::StatusOr<v1::ListTensorsResponse> of_a = a_->ListTensors();
  ASSERT_TRUE(of_a.ok()) << of_a.status();
  EXPECT_THAT(of_a->tensors(), IsEmpty());
  EXPECT_EQ(of_a->used_bytes(), 0);
  absl::StatusOr<FetchedTensor> got = b_->GetTensor("forged");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, e2e::FloatBytes(values));
  EXPECT_EQ(a_->GetTensor("forged").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(AuthTest, MeasureNeedsTheAdminRole) {
  v1::ExplainSelectionRequest request;
  v1::Tensor* in = request.mutable_transpose()->mutable_input();
  in->set_dtype(v1::DATA_TYPE_FLOAT32);
  in->add_shape(96);
  in->add_shape(80);
  // Without measure a user may ask.
  absl::StatusOr<v1::ExplainSelectionResponse> plain =
      a_->ExplainSelection(request);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->chosen_variant().empty());

  request.set_measure(true);
  for (Client* user : {a_.get(), b_.get(), b_local_.get()}) {
    absl::StatusOr<v1::ExplainSelectionResponse> denied =
        user->ExplainSelection(request);
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied)
        << denied.status();
    EXPECT_THAT(denied.status().message(),
                HasSubstr("ExplainSelection.measure needs the admin role"));
    EXPECT_THAT(denied.status().message(), HasSubstr("has the user role"));
  }
  absl::StatusOr<v1::ExplainSelectionResponse> measured =
      admin_->ExplainSelection(request);
  ASSERT_TRUE(measured.ok()) << measured.status();
  int timed = 0;
  for (const v1::VariantCandidate& c : measured->candidates()) {
    if (c.eligible()) {
      EXPECT_GT(c.measured_seconds(), 0) << c.variant();
      ++timed;
    }
  }
  EXPECT_GT(timed, 0);
}

TEST_F(AuthTest, HealthChecksNeedNoToken) {
  for (const std::string& target : {tcp(), local()}) {
    std::unique_ptr<Client> anonymous = Connect(target, "");
    for (const std::string& service : {"", "coalesce.v1.TensorOps"}) {
      absl::StatusOr<std::string> health = anonymous->Health(service);
      ASSERT_TRUE(health.ok()) << target << " " << health.status();
      EXPECT_EQ(*health, "SERVING") << target << " '" << service << "'";
    }
    // The service itself does need one, on either listener.
    const absl::Status info = anonymous->GetServerInfo().status();
    EXPECT_EQ(info.code(), absl::StatusCode::kUnauthenticated) << info;
  }
}

class CrossIdentityTest : public TenantTest {};

// One way to name a stored tensor in a call: every read, use as an op input
// and delete. Each call's other operands are valid and fit the tensor, so
// that a visible tensor would make it succeed.
struct HandleUse {
  std::string what;
  std::string field;  // what the message must name
  std::function<absl::Status(Client&, const std::string&)> call;
};

std::vector<HandleUse> MatrixUses() {  // for a [16,16] float32 tensor
  std::vector<HandleUse> uses;
  uses.push_back({"GetTensor", "handle", [](Client& c, const std::string& h) {
                    return c.GetTensor(h).status();
                  }});
  uses.push_back(
      {"Transpose", "input.handle", [](Client& c, const std::string& h) {
         v1::TransposeRequest r;
         *r.mutable_input() = Handle(h);
         return c.Transpose(r).status();
       }});
  for (const char* operand : {"a", "b", "c"}) {
    uses.push_back(
        {absl::StrCat("Gemm ", operand), absl::StrCat(operand, ".handle"),
         [operand = std::string(operand)](Client& c, const std::string& h) {
           v1::GemmRequest r;
           *r.mutable_a() = operand == "a" ? Handle(h) : Inline({16, 16}, 21);
           *r.mutable_b() = operand == "b" ? Handle(h) : Inline({16, 16}, 22);
           *r.mutable_c() = operand == "c" ? Handle(h) : Inline({16, 16}, 23);
           return c.Gemm(r).status();
         }});
  }
  uses.push_back(
      {"ConvertLayout", "input.handle", [](Client& c, const std::string& h) {
         v1::ConvertLayoutRequest r;
         *r.mutable_input() = Handle(h);
         r.mutable_permutation()->add_perm(1);
         r.mutable_permutation()->add_perm(0);
         return c.ConvertLayout(r).status();
       }});
  for (const char* operand : {"x", "residual"}) {
    uses.push_back(
        {absl::StrCat("GeluLayerNorm ", operand),
         absl::StrCat(operand, ".handle"),
         [operand = std::string(operand)](Client& c, const std::string& h) {
           v1::GeluLayerNormRequest r;
           *r.mutable_x() = operand == "x" ? Handle(h) : Inline({16, 16}, 24);
           *r.mutable_residual() =
               operand == "residual" ? Handle(h) : Inline({16, 16}, 25);
           *r.mutable_bias() = Inline({16}, 26);
           return c.GeluLayerNorm(r).status();
         }});
  }
  return uses;
}

std::vector<HandleUse> VectorUses() {  // for a [16] float32 tensor
  std::vector<HandleUse> uses;
  uses.push_back({"GetTensor", "handle", [](Client& c, const std::string& h) {
                    return c.GetTensor(h).status();
                  }});
  for (const char* operand : {"bias", "gamma", "beta"}) {
    uses.push_back(
        {absl::StrCat("GeluLayerNorm ", operand),
         absl::StrCat(operand, ".handle"),
         [operand = std::string(operand)](Client& c, const std::string& h) {
           v1::GeluLayerNormRequest r;
           *r.mutable_x() = Inline({5, 16}, 27);
           *r.mutable_bias() = operand == "bias" ? Handle(h) : Inline({16}, 28);
           *r.mutable_gamma() =
               operand == "gamma" ? Handle(h) : Inline({16}, 29);
           *r.mutable_beta() = operand == "beta" ? Handle(h) : Inline({16}, 30);
           return c.GeluLayerNorm(r).status();
         }});
  }
  return uses;
}

// intruder's answer about owner's handle is NOT_FOUND, names the field,
// and is the answer about a name nobody has, but for the name.
void ExpectAbsentFor(Client& intruder, Client& owner, const std::string& handle,
                     const std::vector<HandleUse>& uses) {
  const std::string missing = MissingName();
  for (const HandleUse& use : uses) {
    SCOPED_TRACE(absl::StrCat(use.what, " of '", handle, "'"));
    // The owner may: the call itself is sound.
    const absl::Status own = use.call(owner, handle);
    EXPECT_TRUE(own.ok()) << own;
    const absl::Status theirs = use.call(intruder, handle);
    const absl::Status nobodys = use.call(intruder, missing);
    EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound) << theirs;
    EXPECT_EQ(nobodys.code(), absl::StatusCode::kNotFound) << nobodys;
    EXPECT_THAT(theirs.message(), HasSubstr(use.field + ": "));
    EXPECT_EQ(WithoutName(theirs.message(), handle),
              WithoutName(nobodys.message(), missing));
  }
  // Delete last: the owner's tensor survives the intruder's attempt.
  const absl::Status deleted = intruder.DeleteTensor(handle).status();
  const absl::Status deleted_nothing = intruder.DeleteTensor(missing).status();
  EXPECT_EQ(deleted.code(), absl::StatusCode::kNotFound) << deleted;
  EXPECT_THAT(deleted.message(), HasSubstr("handle: "));
  EXPECT_EQ(WithoutName(deleted.message(), handle),
            WithoutName(deleted_nothing.message(), missing));
  EXPECT_TRUE(owner.GetTensor(handle).ok()) << handle << " is gone";
}

TEST_F(CrossIdentityTest, AnotherIdentitysTensorsAnswerLikeMissingOnes) {
  // tenant-a's objects of every kind: a named upload, a server-picked
  // upload, an op output kept on the server, and a vector.
  const std::vector<float> w = RandomFloats(256, 31);
  ASSERT_TRUE(
      a_->PutTensor(v1::DATA_TYPE_FLOAT32, {16, 16}, e2e::FloatBytes(w), "w")
          .ok());
  absl::StatusOr<v1::TensorInfo> picked = a_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {16, 16}, e2e::FloatBytes(RandomFloats(256, 32)));
  ASSERT_TRUE(picked.ok()) << picked.status();
  v1::TransposeRequest keep;
  *keep.mutable_input() = Handle("w");
  keep.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  absl::StatusOr<v1::TransposeResponse> output = a_->Transpose(keep);
  ASSERT_TRUE(output.ok()) << output.status();
  const std::string output_handle = output->output().handle();
  ASSERT_FALSE(output_handle.empty());
  ASSERT_TRUE(a_->PutTensor(v1::DATA_TYPE_FLOAT32, {16},
                            e2e::FloatBytes(RandomFloats(16, 33)), "vec")
                  .ok());

  for (Client* intruder : {b_.get(), b_local_.get(), admin_.get()}) {
    SCOPED_TRACE(intruder == admin_.get() ? "admin" : "tenant-b");
    for (const std::string& handle :
         {std::string("w"), picked->handle(), output_handle}) {
      ExpectAbsentFor(*intruder, *a_, handle, MatrixUses());
    }
    ExpectAbsentFor(*intruder, *a_, "vec", VectorUses());
    // Lists show only the caller's.
    absl::StatusOr<v1::ListTensorsResponse> listed = intruder->ListTensors();
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_THAT(listed->tensors(), IsEmpty());
    EXPECT_EQ(listed->used_bytes(), 0);
  }
  absl::StatusOr<v1::ListTensorsResponse> mine = a_->ListTensors();
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->tensors_size(), 4);
  for (const v1::TensorInfo& t : mine->tensors()) {
    EXPECT_EQ(t.owner(), Servers::a().identity) << t.handle();
  }
  EXPECT_EQ(mine->used_bytes(), 3 * 1024 + 64);
  absl::StatusOr<FetchedTensor> still = a_->GetTensor("w");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->bytes, e2e::FloatBytes(w));
}

TEST_F(CrossIdentityTest, NamesArePerIdentity) {
  const std::vector<float> mine = RandomFloats(64, 41);
  const std::vector<float> theirs = RandomFloats(64, 42);
  absl::StatusOr<v1::TensorInfo> put_a =
      a_->PutTensor(v1::DATA_TYPE_FLOAT32, {8, 8}, e2e::FloatBytes(mine), "w");
  absl::StatusOr<v1::TensorInfo> put_b = b_->PutTensor(
      v1::DATA_TYPE_FLOAT32, {8, 8}, e2e::FloatBytes(theirs), "w");
  ASSERT_TRUE(put_a.ok()) << put_a.status();
  ASSERT_TRUE(put_b.ok()) << put_b.status();
  EXPECT_EQ(put_a->owner(), Servers::a().identity);
  EXPECT_EQ(put_b->owner(), Servers::b().identity);
  // Taken within an identity.
  const absl::Status again =
      a_->PutTensor(v1::DATA_TYPE_FLOAT32, {8, 8}, e2e::FloatBytes(mine), "w")
          .status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_THAT(again.message(), HasSubstr("name: a tensor named 'w'"));
  // Each reads its own.
  absl::StatusOr<FetchedTensor> got_a = a_->GetTensor("w");
  absl::StatusOr<FetchedTensor> got_b = b_->GetTensor("w");
  ASSERT_TRUE(got_a.ok() && got_b.ok());
  EXPECT_EQ(got_a->bytes, e2e::FloatBytes(mine));
  EXPECT_EQ(got_b->bytes, e2e::FloatBytes(theirs));
  // An op on "w" reads the caller's.
  v1::TransposeRequest t;
  *t.mutable_input() = Handle("w");
  absl::StatusOr<v1::TransposeResponse> out_b = b_->Transpose(t);
  ASSERT_TRUE(out_b.ok()) << out_b.status();
  EXPECT_EQ(out_b->output().raw(),
            e2e::FloatBytes(e2e::Transposed(theirs, 8, 8)));
  // Deleting one leaves the other.
  absl::StatusOr<int64_t> freed = a_->DeleteTensor("w");
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, 256);
  got_b = b_->GetTensor("w");
  ASSERT_TRUE(got_b.ok()) << got_b.status();
  EXPECT_EQ(got_b->bytes, e2e::FloatBytes(theirs));
  EXPECT_EQ(a_->GetTensor("w").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CrossIdentityTest, AnotherIdentitysRegionAnswersLikeAMissingOne) {
  const std::vector<float> values = RandomFloats(16 * 16, 51);
  std::unique_ptr<ShmObject> object =
      ShmObject::Create("cross", e2e::FloatBytes(values));
  ASSERT_NE(object, nullptr);
  // Names that no message has in its own words.
  const std::string name = "q" + RandomHex(4);
  const std::string missing = "q" + RandomHex(4);
  ASSERT_TRUE(
      a_local_->RegisterSharedMemory(name, object->key(), 0, 1024).ok());

  for (Client* intruder : {b_local_.get(), b_.get()}) {
    SCOPED_TRACE(intruder == b_.get() ? "over TCP" : "over the local socket");
    // Read it as an input.
    auto read = [&](const std::string& name) {
      v1::TransposeRequest r;
      *r.mutable_input() = Region(name, {16, 16});
      return intruder->Transpose(r).status();
    };
    // Write an output into it.
    auto write = [&](const std::string& name) {
      v1::TransposeRequest r;
      *r.mutable_input() = Inline({16, 16}, 52);
      v1::OutputSpec* out = r.mutable_options()->add_outputs();
      out->set_placement(v1::OUTPUT_PLACEMENT_SHARED_MEMORY);
      out->mutable_shared_memory()->set_region(name);
      out->mutable_shared_memory()->set_byte_size(1024);
      return intruder->Transpose(r).status();
    };
    auto unregister = [&](const std::string& name) {
      return intruder->UnregisterSharedMemory(name);
    };
    struct Use {
      std::string what, field;
      std::function<absl::Status(const std::string&)> call;
    };
    for (const Use& use :
         {Use{"read", "input.shared_memory.region: ", read},
          Use{"write", "options.outputs[0].shared_memory.region: ", write},
          Use{"unregister", "name: ", unregister}}) {
      SCOPED_TRACE(use.what);
      const absl::Status theirs = use.call(name);
      const absl::Status nobodys = use.call(missing);
      EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound) << theirs;
      EXPECT_THAT(theirs.message(), HasSubstr(use.field));
      EXPECT_EQ(WithoutName(theirs.message(), name),
                WithoutName(nobodys.message(), missing));
    }
    absl::StatusOr<v1::ListSharedMemoryResponse> listed =
        intruder->ListSharedMemory();
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_THAT(listed->regions(), IsEmpty());
  }
  // The owner's region is intact: its bytes unchanged, still registered and
  // readable.
  EXPECT_EQ(object->Read(1024), e2e::FloatBytes(values));
  v1::TransposeRequest r;
  *r.mutable_input() = Region(name, {16, 16});
  absl::StatusOr<v1::TransposeResponse> own = a_->Transpose(r);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->output().raw(),
            e2e::FloatBytes(e2e::Transposed(values, 16, 16)));
  // Names are per identity: tenant-b registers its own under that name.
  std::unique_ptr<ShmObject> other =
      ShmObject::Create("cross-b", e2e::FloatBytes(RandomFloats(256, 53)));
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(b_local_->RegisterSharedMemory(name, other->key(), 0, 1024).ok());
  absl::StatusOr<v1::ListSharedMemoryResponse> of_b =
      b_local_->ListSharedMemory();
  ASSERT_TRUE(of_b.ok());
  ASSERT_EQ(of_b->regions_size(), 1);
  EXPECT_EQ(of_b->regions(0).key(), other->key());
  absl::StatusOr<v1::ListSharedMemoryResponse> of_a =
      a_local_->ListSharedMemory();
  ASSERT_TRUE(of_a.ok());
  ASSERT_EQ(of_a->regions_size(), 1);
  EXPECT_EQ(of_a->regions(0).key(), object->key());
}

// ---- 2. Shared memory.

class SharedMemoryTest : public TenantTest {};

TEST_F(SharedMemoryTest, RegistrationOverTcpIsPermissionDenied) {
  std::unique_ptr<ShmObject> object =
      ShmObject::Create("tcp", e2e::FloatBytes(RandomFloats(64, 61)));
  ASSERT_NE(object, nullptr);
  for (Client* over_tcp : {a_.get(), admin_.get()}) {
    const absl::Status status =
        over_tcp->RegisterSharedMemory("r", object->key(), 0, 256);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("registered only over the server's local socket"));
    absl::StatusOr<v1::ListSharedMemoryResponse> listed =
        over_tcp->ListSharedMemory();
    ASSERT_TRUE(listed.ok());
    EXPECT_THAT(listed->regions(), IsEmpty());
  }
  // The same registration over the local socket is fine.
  EXPECT_TRUE(a_local_->RegisterSharedMemory("r", object->key(), 0, 256).ok());
}

TEST_F(SharedMemoryTest, KeysOutsideThePrefixAreInvalidArgument) {
  // A live object, so that a key reaching it by a detour would work if the
  // server followed the detour.
  std::unique_ptr<ShmObject> object =
      ShmObject::Create("prefix", e2e::FloatBytes(RandomFloats(64, 62)));
  ASSERT_NE(object, nullptr);
  const std::string name = object->key().substr(1);  // without the '/'
  for (const std::string& key :
       {std::string("/coalesce/../x"), std::string("/coalesce/a/b"),
        std::string("/dev/shm/x"), std::string("coalesce-x"),
        "/coalesce/../" + name, "/dev/shm/" + name, name, "/" + name + "/",
        "//" + name, std::string("/coalesce"), std::string("/coalesc"),
        std::string("/other-x")}) {
    SCOPED_TRACE(key);
    const absl::Status status =
        a_local_->RegisterSharedMemory("r", key, 0, 256);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("key: "));
    EXPECT_THAT(status.message(), HasSubstr("--client_shm_key_prefix"));
  }
  const absl::Status empty = a_local_->RegisterSharedMemory("r", "", 0, 256);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_THAT(empty.message(), HasSubstr("key: required"));
  absl::StatusOr<v1::ListSharedMemoryResponse> listed =
      a_local_->ListSharedMemory();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(listed->regions(), IsEmpty());
  // Neighbours: a well-formed key of no object, and the object itself.
  const absl::Status absent = a_local_->RegisterSharedMemory(
      "r", "/coalesce-abuse-absent-" + RandomHex(4), 0, 256);
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound) << absent;
  EXPECT_THAT(absent.message(), HasSubstr("key: shm_open("));
  EXPECT_TRUE(a_local_->RegisterSharedMemory("r", object->key(), 0, 256).ok());
}

TEST_F(SharedMemoryTest, AnotherUidsObjectIsPermissionDenied) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: an object of another uid is made with "
                    "fchown, which only root may do";
  }
  std::unique_ptr<ShmObject> object =
      ShmObject::Create("uid", e2e::FloatBytes(RandomFloats(64, 63)));
  ASSERT_NE(object, nullptr);
  // nobody:nogroup.
  ASSERT_EQ(fchown(object->fd(), 65534, 65534), 0) << std::strerror(errno);
  const absl::Status status =
      a_local_->RegisterSharedMemory("r", object->key(), 0, 256);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("does not belong to the caller's uid"));
  // Nothing of the object (its size) is revealed; the key, which the caller
  // sent, is random hex and may hold "256" itself.
  const std::string message =
      absl::StrReplaceAll(status.message(), {{object->key(), "KEY"}});
  EXPECT_THAT(message, Not(HasSubstr("256")));
  // Handed back to the caller's uid, it registers.
  ASSERT_EQ(fchown(object->fd(), geteuid(), getegid()), 0);
  EXPECT_TRUE(a_local_->RegisterSharedMemory("r", object->key(), 0, 256).ok());
}

TEST_F(SharedMemoryTest, ASymlinkUnderThePrefixIsRefused) {
  std::unique_ptr<ShmObject> target =
      ShmObject::Create("target", e2e::FloatBytes(RandomFloats(64, 64)));
  ASSERT_NE(target, nullptr);
  for (const std::string& points_to :
       {target->path(), std::string("/etc/passwd")}) {
    SCOPED_TRACE(points_to);
    const std::string key =
        absl::StrCat("/coalesce-abuse-", getpid(), "-link-", RandomHex(4));
    const std::string link = "/dev/shm" + key;
    ASSERT_EQ(symlink(points_to.c_str(), link.c_str()), 0)
        << std::strerror(errno);
    const absl::Status status =
        a_local_->RegisterSharedMemory("linked", key, 0, 256);
    unlink(link.c_str());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("key: shm_open("));
    EXPECT_THAT(status.message(), HasSubstr("symbolic links"));
  }
  // The target by its own key is fine.
  EXPECT_TRUE(
      a_local_->RegisterSharedMemory("linked", target->key(), 0, 256).ok());
}

// On the limits server, as several identities on the local socket.
class SharedMemoryLimitsTest : public SharedServerTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartOn(Servers::Limits()));
    for (int i = 0; i < 5; ++i) {
      clients_.push_back(Connect(local(), "", absl::StrCat("flood-", i)));
      ASSERT_NE(clients_.back(), nullptr);
    }
    checker_ = clients_[0].get();
  }

  void CleanUp() override {
    for (const auto& c : clients_) DeleteEverything(*c);
  }

  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(SharedMemoryLimitsTest, RegionFloodIsResourceExhaustedWithFdsBounded) {
  std::unique_ptr<ShmObject> object =
      ShmObject::Create("flood", e2e::FloatBytes(RandomFloats(1024, 71)));
  ASSERT_NE(object, nullptr);
  auto fds = [&] {
    absl::StatusOr<ProcessUsage> u = e2e::ReadUsage(pid());
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? u->open_fds : -1;
  };
  // Each region holds one descriptor, and a refused one none.
  auto expect_fds = [&](int regions) {
    EXPECT_GE(fds(), before_.open_fds + regions - kFdAllowance);
    EXPECT_LE(fds(), before_.open_fds + regions + kFdAllowance);
  };
  int registered = 0;
  for (int c = 0; c < 4; ++c) {
    Client& client = *clients_[c];
    const int quota =
        c < 3 ? kMaxRegionsPerClient : kMaxRegions - 3 * kMaxRegionsPerClient;
    for (int i = 0; i < quota; ++i) {
      const absl::Status s = client.RegisterSharedMemory(
          absl::StrCat("r", i), object->key(), 0, 4096);
      ASSERT_TRUE(s.ok()) << "flood-" << c << " r" << i << ": " << s;
      ++registered;
    }
  }
  ASSERT_EQ(registered, kMaxRegions);
  expect_fds(registered);
  // 50 more from client: each refused, saying which limit.
  auto flood = [&](Client& client, absl::string_view limit) {
    for (int i = 0; i < 50; ++i) {
      const absl::Status s = client.RegisterSharedMemory(
          absl::StrCat("more", i), object->key(), 0, 4096);
      ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_THAT(s.message(), HasSubstr(limit));
    }
  };
  // flood-0 holds its 300, and the server its 1,100, which is checked
  // first.
  flood(*clients_[0],
        "1100 regions are registered, the server's limit (--max_shm_regions)");
  // One of flood-3's freed: flood-0 is still at its own limit.
  ASSERT_TRUE(clients_[3]->UnregisterSharedMemory("r0").ok());
  flood(*clients_[0],
        "client 'flood-0' holds 300 regions, its limit "
        "(--max_shm_regions_per_client)");
  // flood-4 takes the place, and the server is full again.
  ASSERT_TRUE(
      clients_[4]->RegisterSharedMemory("r0", object->key(), 0, 4096).ok());
  flood(*clients_[4], "the server's limit (--max_shm_regions)");
  expect_fds(kMaxRegions);
  // Unregistered, their descriptors go.
  for (const auto& c : clients_) DeleteEverything(*c);
  expect_fds(0);
}

TEST_F(SharedMemoryLimitsTest,
       OverA1024RegionsATruncatedOneFailsItsOpNotTheServer) {
  // Large enough that the truncation lands while the op reads it: the CPU
  // transposes 64 MiB in a few hundred milliseconds; the GPU copies the
  // region to the device, tens of milliseconds for 1 GiB (the largest
  // tensor the server takes).
  const int64_t side = e2e::TestDevice() == "cuda" ? 16384 : 4096;
  const int64_t bytes = side * side * 4;
  const std::vector<float> values =
      RandomFloats(static_cast<size_t>(side * side), 81);
  std::unique_ptr<ShmObject> small =
      ShmObject::Create("small", e2e::FloatBytes(RandomFloats(1024, 82)));
  ASSERT_NE(small, nullptr);
  // 1,099 small regions over four identities, then the large one: the last
  // guarded mapping lies past the first 1,024.
  constexpr int kPerIdentity = kMaxRegions / 4;
  int registered = 0;
  for (int c = 0; c < 4 && registered < kMaxRegions - 1; ++c) {
    for (int i = 0; i < kPerIdentity && registered < kMaxRegions - 1; ++i) {
      const absl::Status s = clients_[c]->RegisterSharedMemory(
          absl::StrCat("r", i), small->key(), 0, 4096);
      ASSERT_TRUE(s.ok()) << s;
      ++registered;
    }
  }
  Client& owner = *clients_[3];
  Client& other = *clients_[0];
  auto transpose = [&](const std::string& region) {
    v1::TransposeRequest r;
    *r.mutable_input() = Region(region, {side, side});
    r.mutable_options()->add_outputs()->set_placement(
        v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
    return owner.Transpose(r);
  };

  // Each attempt maps a fresh object: a region that faulted stays failed.
  const std::string data = e2e::FloatBytes(values);
  const std::string want = e2e::FloatBytes(e2e::Transposed(values, side, side));
  // The output kept as handle is the op's exactly.
  auto expect_exact = [&](const std::string& handle) {
    absl::StatusOr<FetchedTensor> got = owner.GetTensor(handle);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes == want) << "the transposed bytes differ";
    ASSERT_TRUE(owner.DeleteTensor(handle).ok());
  };
  double op_seconds = 0;
  int during = 0;
  for (int attempt = 0; attempt < 6 && during == 0; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    std::unique_ptr<ShmObject> large = ShmObject::Create("large", data);
    ASSERT_NE(large, nullptr);
    const std::string name = absl::StrCat("large", attempt);
    ASSERT_TRUE(owner.RegisterSharedMemory(name, large->key(), 0, bytes).ok());
    if (attempt == 0) {
      // The total is past 1,024; another identity cannot name it.
      absl::StatusOr<v1::ListSharedMemoryResponse> mine =
          owner.ListSharedMemory();
      ASSERT_TRUE(mine.ok());
      EXPECT_EQ(mine->regions_size(), kPerIdentity);
      v1::TransposeRequest r;
      *r.mutable_input() = Region(name, {side, side});
      const absl::Status theirs = other.Transpose(r).status();
      *r.mutable_input() = Region("large-missing", {side, side});
      const absl::Status nobodys = other.Transpose(r).status();
      EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound) << theirs;
      EXPECT_EQ(WithoutName(theirs.message(), name),
                WithoutName(nobodys.message(), "large-missing"));
      // Untouched, the op reads it right; its time sets when to truncate.
      const absl::Time start = absl::Now();
      absl::StatusOr<v1::TransposeResponse> whole = transpose(name);
      op_seconds = absl::ToDoubleSeconds(absl::Now() - start);
      ASSERT_TRUE(whole.ok()) << whole.status();
      expect_exact(whole->output().handle());
      std::fprintf(stderr, "transpose of %lld MiB from a region: %.3f s\n",
                   static_cast<long long>(bytes / kMiB), op_seconds);
    }
    // Truncate a third into the op (earlier on each retry).
    const absl::Duration delay = absl::Seconds(op_seconds / (3.0 + attempt));
    std::thread truncate([&] {
      absl::SleepFor(delay);
      EXPECT_EQ(ftruncate(large->fd(), 0), 0) << std::strerror(errno);
    });
    const absl::StatusOr<v1::TransposeResponse> result = transpose(name);
    const absl::Status status = result.status();
    truncate.join();
    ASSERT_TRUE(process().Running()) << "the server died of the truncation:\n"
                                     << process().LogTail();
    if (result.ok()) {
      // Truncated after the op was done with the region: its result must be
      // whole. Try again, earlier.
      std::fprintf(stderr, "truncated after %s: too late\n",
                   absl::FormatDuration(delay).c_str());
      expect_exact(result->output().handle());
      ASSERT_TRUE(owner.UnregisterSharedMemory(name).ok());
      continue;
    }
    // Truncated before the op looked, or while it ran: either way the op
    // fails and names the region; never a result from lost pages.
    ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", name, "'")));
    if (absl::StrContains(status.message(), "shrank while a request used it")) {
      ++during;
    } else {
      EXPECT_THAT(status.message(), HasSubstr("shrank to 0 bytes"));
    }
    std::fprintf(stderr, "truncated after %s: %s\n",
                 absl::FormatDuration(delay).c_str(),
                 std::string(status.message()).c_str());
    EXPECT_TRUE(UsedBytesBecome(owner, 0)) << "a failed op's output is kept";
    ASSERT_TRUE(owner.UnregisterSharedMemory(name).ok());
  }
  EXPECT_EQ(during, 1) << "no truncation landed while the op read the region";
  for (const auto& c : clients_) DeleteEverything(*c);
}

// ---- 3. Quota games.

class QuotaTest : public TenantTest {};

// A PutTensor stream driven by hand.
class RawUpload {
 public:
  RawUpload(v1::TensorOps::Stub& stub, const std::string& token,
            absl::Duration timeout = absl::Seconds(60)) {
    Prepare(&context_, token, timeout);
    writer_ = stub.PutTensor(&context_, &response_);
  }

  bool Header(std::vector<int64_t> shape, const std::string& name = "") {
    v1::PutTensorRequest m;
    m.mutable_header()->set_dtype(v1::DATA_TYPE_FLOAT32);
    m.mutable_header()->mutable_shape()->Add(shape.begin(), shape.end());
    m.mutable_header()->set_name(name);
    return writer_->Write(m);
  }
  bool Chunk(std::string bytes) {
    v1::PutTensorRequest m;
    m.set_chunk(std::move(bytes));
    return writer_->Write(m);
  }
  // The server's answer, without closing the stream first: for an answer
  // that comes before the client is done.
  absl::Status Finish() { return FromGrpc(writer_->Finish()); }
  absl::Status Close() {
    writer_->WritesDone();
    return Finish();
  }
  void Cancel() { context_.TryCancel(); }
  const v1::PutTensorResponse& response() const { return response_; }

 private:
  grpc::ClientContext context_;
  v1::PutTensorResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer_;
};

TEST_F(QuotaTest, DeletingYourUploadMidStreamEndsTheStream) {
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  constexpr int64_t kChunk = kMiB;
  const std::string chunk = e2e::FloatBytes(RandomFloats(kChunk / 4, 91));
  // Three rounds: each deletes its upload after the header and streams on,
  // so a server that kept what arrived would hold three quotas.
  rss_allowance_ = kQuotaBytes + kRssAllowance;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::string name = "doomed-" + RandomHex(4);
    RawUpload upload(*stub, Servers::a().token);
    ASSERT_TRUE(upload.Header({kQuotaBytes / 4}, name));
    ASSERT_TRUE(upload.Chunk(chunk));
    // The whole quota is reserved at the header.
    ASSERT_TRUE(UsedBytesBecome(*a_, kQuotaBytes));
    absl::StatusOr<int64_t> freed = a_->DeleteTensor(name);
    ASSERT_TRUE(freed.ok()) << freed.status();
    EXPECT_EQ(*freed, kQuotaBytes);
    int64_t sent = kChunk;
    while (sent < kQuotaBytes && upload.Chunk(chunk)) sent += kChunk;
    const absl::Status status = upload.Finish();
    // The server ends the stream (gRPC's words for a cancellation from the
    // server's side); its own ABORTED reason does not reach the client.
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
    EXPECT_THAT(status.message(), HasSubstr("Cancelled on the server side"));
    std::fprintf(stderr, "streamed %lld MiB after the delete; %s\n",
                 static_cast<long long>(sent / kMiB),
                 status.ToString().c_str());
    // Charged until the handler let go of the memory, then free.
    EXPECT_TRUE(UsedBytesBecome(*a_, 0));
    EXPECT_EQ(a_->GetTensor(name).status().code(), absl::StatusCode::kNotFound);
  }
  // The quota is whole again.
  absl::StatusOr<v1::TensorInfo> full =
      a_->PutTensor(v1::DATA_TYPE_FLOAT32, {kQuotaBytes / 4},
                    e2e::FloatBytes(RandomFloats(kQuotaBytes / 4, 92)));
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(a_->DeleteTensor(full->handle()).ok());
}

TEST_F(QuotaTest, HeadersOverTheQuotaOrCapAreRefusedAtTheHeader) {
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  struct Case {
    std::vector<int64_t> shape;
    absl::StatusCode code;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{kQuotaBytes / 4 + 1},
            absl::StatusCode::kResourceExhausted,
            "would exceed its quota of 67108864 bytes (--tensor_quota_bytes)"},
           {{int64_t{1} << 40, 1024},
            absl::StatusCode::kResourceExhausted,
            "(--tensor_quota_bytes)"},
           {{int64_t{1} << 61, 2},
            absl::StatusCode::kInvalidArgument,
            "header.shape: byte size of [2305843009213693952,2] float32 "
            "overflows int64"},
       }) {
    SCOPED_TRACE(c.message);
    RawUpload upload(*stub, Servers::a().token, absl::Seconds(20));
    const absl::Time start = absl::Now();
    ASSERT_TRUE(upload.Header(c.shape, "big"));
    // No chunk, no end of stream: the answer comes on the header alone.
    const absl::Status status = upload.Finish();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(UsedBytes(*a_), 0);
  }
  // The cap: 40 MiB reserved by each of two identities (uploads in
  // progress count), then 20 MiB more is within tenant-b's quota but not
  // the server's cap.
  RawUpload from_a(*stub, Servers::a().token);
  RawUpload from_b(*stub, Servers::b().token);
  ASSERT_TRUE(from_a.Header({10 * kMiB}, "held"));
  ASSERT_TRUE(from_b.Header({10 * kMiB}, "held"));
  ASSERT_TRUE(UsedBytesBecome(*a_, 40 * kMiB));
  ASSERT_TRUE(UsedBytesBecome(*b_, 40 * kMiB));
  RawUpload over_cap(*stub, Servers::b().token, absl::Seconds(20));
  ASSERT_TRUE(over_cap.Header({5 * kMiB}, "more"));
  const absl::Status capped = over_cap.Finish();
  EXPECT_EQ(capped.code(), absl::StatusCode::kResourceExhausted) << capped;
  EXPECT_THAT(capped.message(),
              HasSubstr("the server holds 83886080 bytes in tensors; 20971520 "
                        "more would exceed its cap of 100663296 bytes "
                        "(--tensor_cap_bytes)"));
  // With tenant-a's upload abandoned, the same header fits.
  from_a.Cancel();
  EXPECT_EQ(from_a.Finish().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(UsedBytesBecome(*a_, 0));
  absl::StatusOr<v1::TensorInfo> fits =
      b_->PutTensor(v1::DATA_TYPE_FLOAT32, {5 * kMiB},
                    e2e::FloatBytes(RandomFloats(5 * kMiB, 93)), "more");
  EXPECT_TRUE(fits.ok()) << fits.status();
  from_b.Cancel();
  EXPECT_EQ(from_b.Finish().code(), absl::StatusCode::kCancelled);
  rss_allowance_ = 20 * kMiB + kRssAllowance;
}

TEST_F(QuotaTest, MoreConcurrentUploadsThanTheLimitAreResourceExhausted) {
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  constexpr int64_t kFloats = 64 * 1024;  // 256 KiB each
  std::vector<std::unique_ptr<RawUpload>> open;
  for (int i = 0; i < kMaxUploads; ++i) {
    open.push_back(std::make_unique<RawUpload>(*stub, Servers::a().token));
    ASSERT_TRUE(open.back()->Header({kFloats}, absl::StrCat("up", i)));
  }
  ASSERT_TRUE(UsedBytesBecome(*a_, kMaxUploads * kFloats * 4));
  RawUpload fifth(*stub, Servers::a().token, absl::Seconds(20));
  ASSERT_TRUE(fifth.Header({kFloats}, "up-fifth"));
  const absl::Status refused = fifth.Finish();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("uploads: client 'tenant-a' has 4 uploads in progress, "
                        "its limit of 4 (--max_uploads_per_client)"));
  // Per identity: tenant-b uploads meanwhile.
  const std::vector<float> values = RandomFloats(kFloats, 94);
  EXPECT_TRUE(
      b_->PutTensor(v1::DATA_TYPE_FLOAT32, {kFloats}, e2e::FloatBytes(values))
          .ok());
  // The four complete, and then a fifth is welcome.
  for (int i = 0; i < kMaxUploads; ++i) {
    ASSERT_TRUE(open[i]->Chunk(e2e::FloatBytes(values)));
    const absl::Status done = open[i]->Close();
    EXPECT_TRUE(done.ok()) << done;
    EXPECT_EQ(open[i]->response().tensor().handle(), absl::StrCat("up", i));
  }
  EXPECT_TRUE(a_->PutTensor(v1::DATA_TYPE_FLOAT32, {kFloats},
                            e2e::FloatBytes(values), "up-fifth")
                  .ok());
  absl::StatusOr<FetchedTensor> got = a_->GetTensor("up2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, e2e::FloatBytes(values));
}

TEST_F(QuotaTest, AbandonedUploadsFreeTheirBytes) {
  // The tensors' 8 MiB go back to the system when freed; gRPC's 4 MiB
  // receive buffers of the chunks stay in malloc's per-thread arenas for
  // reuse (measured up to +56 MiB on a loaded 2-core machine), bounded by
  // the threads, not by the uploads.
  rss_allowance_ = 2 * kRssAllowance;
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  const std::string half = e2e::FloatBytes(RandomFloats(kMiB, 95));  // 4 MiB
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(absl::StrCat("upload ", i));
    RawUpload upload(*stub, Servers::a().token);
    ASSERT_TRUE(upload.Header({2 * kMiB}, i % 2 == 0 ? "" : "abandoned"));
    ASSERT_TRUE(upload.Chunk(half));
    if (i % 4 == 0) ASSERT_TRUE(UsedBytesBecome(*a_, 8 * kMiB));
    upload.Cancel();
    EXPECT_EQ(upload.Finish().code(), absl::StatusCode::kCancelled);
    ASSERT_TRUE(UsedBytesBecome(*a_, 0));
  }
  absl::StatusOr<v1::ListTensorsResponse> listed = a_->ListTensors();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(listed->tensors(), IsEmpty());
  EXPECT_EQ(listed->total_used_bytes(), 0);
}

// On the limits server, whose uploads end after 1 s without a chunk.
class UploadIdleTimeoutTest : public SharedMemoryLimitsTest {};

TEST_F(UploadIdleTimeoutTest, AStalledUploadIsEndedAndItsBytesFreed) {
  Client& staller = *clients_[1];
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(local());
  RawUpload stalled(*stub, "", absl::Seconds(30));
  ASSERT_TRUE(stalled.Header({2 * kMiB}, "stalled"));
  ASSERT_TRUE(stalled.Chunk(e2e::FloatBytes(RandomFloats(kMiB / 4, 96))));
  const absl::Time last_chunk = absl::Now();
  // The stub sends no x-coalesce-client: its identity is its uid.
  std::unique_ptr<Client> as_uid = Connect(local(), "");
  ASSERT_TRUE(UsedBytesBecome(*as_uid, 8 * kMiB));
  EXPECT_EQ(UsedBytes(staller), 0);
  const absl::Status status = stalled.Finish();
  const double after = absl::ToDoubleSeconds(absl::Now() - last_chunk);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("Cancelled on the server side"));
  // --upload_idle_timeout_s=1, swept every 100 ms.
  EXPECT_GE(after, 0.9);
  EXPECT_LT(after, 3.0);
  std::fprintf(stderr, "stalled upload ended %.2f s after its last chunk\n",
               after);
  EXPECT_TRUE(UsedBytesBecome(*as_uid, 0));

  // The neighbour: an upload that sends a chunk every 300 ms lives past
  // the timeout and completes.
  const std::vector<float> values = RandomFloats(10 * 1024, 97);
  RawUpload slow(*stub, "");
  ASSERT_TRUE(slow.Header({10 * 1024}, "slow"));
  for (int i = 0; i < 10; ++i) {
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(slow.Chunk(std::string(
        reinterpret_cast<const char*>(values.data() + i * 1024), 4096)))
        << "ended after " << i << " chunks";
  }
  const absl::Status done = slow.Close();
  EXPECT_TRUE(done.ok()) << done;
  absl::StatusOr<FetchedTensor> got = as_uid->GetTensor("slow");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, e2e::FloatBytes(values));
  ASSERT_TRUE(as_uid->DeleteTensor("slow").ok());
}

// On the limits server, whose identities anyone may claim: the count of
// all tensors is what bounds a flood, the per-identity count what keeps
// one caller from taking it all.
class TensorCountTest : public SharedMemoryLimitsTest {};

TEST_F(TensorCountTest, TinyTensorFloodsStopAtTheCounts) {
  const std::string one = e2e::FloatBytes(RandomFloats(1, 101));
  auto put = [&](Client& c) {
    return c.PutTensor(v1::DATA_TYPE_FLOAT32, {1}, one).status();
  };
  for (int i = 0; i < kMaxTensorsPerClient; ++i) {
    ASSERT_TRUE(put(*clients_[0]).ok()) << "tensor " << i;
  }
  absl::Status over = put(*clients_[0]);
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(over.message(),
              HasSubstr(absl::StrCat(
                  "holds ", kMaxTensorsPerClient, " tensors, its limit of ",
                  kMaxTensorsPerClient, " (--max_tensors_per_client)")));
  // An op's output kept as a handle is a tensor too; inline it still runs.
  v1::TransposeRequest keep;
  *keep.mutable_input() = Inline({2, 3}, 102);
  keep.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  over = clients_[0]->Transpose(keep).status();
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(over.message(), HasSubstr("--max_tensors_per_client"));
  v1::TransposeRequest inline_out;
  *inline_out.mutable_input() = Inline({2, 3}, 102);
  EXPECT_TRUE(clients_[0]->Transpose(inline_out).ok());
  // The other identities fill what is left of the server's count.
  int others = 0;
  for (size_t c = 1; c < clients_.size(); ++c) {
    for (int i = 0; i < kMaxTensorsPerClient; ++i) {
      const absl::Status s = put(*clients_[c]);
      if (!s.ok()) {
        ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
        EXPECT_THAT(s.message(),
                    HasSubstr(absl::StrCat("the server holds ", kMaxTensors,
                                           " tensors, its limit "
                                           "(--max_tensors)")));
        break;
      }
      ++others;
    }
  }
  EXPECT_EQ(others, kMaxTensors - kMaxTensorsPerClient);
  // A deleted tensor gives its place back.
  absl::StatusOr<v1::ListTensorsResponse> listed = clients_[0]->ListTensors();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->tensors_size(), kMaxTensorsPerClient);
  ASSERT_TRUE(clients_[0]->DeleteTensor(listed->tensors(0).handle()).ok());
  EXPECT_TRUE(put(*clients_[4]).ok());
  EXPECT_EQ(put(*clients_[4]).code(), absl::StatusCode::kResourceExhausted);
}

// ---- 4. Cancellation storm.

class CancellationStormTest : public TenantTest {};

TEST_F(CancellationStormTest, TwoHundredCancelledCallsLeaveTheServerAsItWas) {
  // Two stored 1024 x 1024 operands: a GEMM request naming them is a few
  // bytes, its work (2 GFLOP) and its answer (4 MiB) are not. And a 32 MiB
  // tensor to download in 64 KiB chunks: a client that reads none of them
  // holds the server's handler in its write (HTTP/2 flow control), so the
  // call is in the server's hands when it is cancelled, on any device.
  constexpr int64_t kSide = 1024;
  constexpr int64_t kBig = 8 * kMiB;  // floats
  ASSERT_TRUE(a_->PutTensor(v1::DATA_TYPE_FLOAT32, {kSide, kSide},
                            e2e::FloatBytes(RandomFloats(kSide * kSide, 101)),
                            "sa")
                  .ok());
  ASSERT_TRUE(a_->PutTensor(v1::DATA_TYPE_FLOAT32, {kSide, kSide},
                            e2e::FloatBytes(RandomFloats(kSide * kSide, 102)),
                            "sb")
                  .ok());
  ASSERT_TRUE(a_->PutTensor(v1::DATA_TYPE_FLOAT32, {kBig},
                            e2e::FloatBytes(RandomFloats(kBig, 103)), "big")
                  .ok());
  v1::GemmRequest inline_out;
  *inline_out.mutable_a() = Handle("sa");
  *inline_out.mutable_b() = Handle("sb");
  v1::GemmRequest kept = inline_out;
  kept.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  const auto gemms = [](absl::string_view metrics) {
    return SumOf(metrics, "coalesce_requests_total", R"(op="gemm")");
  };
  const auto downloads = [](absl::string_view metrics) {
    return SumOf(metrics, "coalesce_requests_total", R"(op="get_tensor")");
  };
  double scrape_seconds = 0;
  const std::string metrics_before =
      Scrape(process().metrics_port(), &scrape_seconds);

  // 50 of each kind, all at once: GEMMs with 0.1 to 1 ms deadlines (shorter
  // than moving a 4 MiB answer anywhere), GEMMs cancelled right after they
  // start, downloads cancelled after their first chunk, and downloads whose
  // 300 to 800 ms deadline passes while the server waits to write.
  enum Kind { kTinyDeadline, kCancelledAtOnce, kCancelledMidStream, kStalled };
  constexpr int kEach = 50;
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(tcp());
  grpc::CompletionQueue queue;
  struct Unary {
    grpc::ClientContext context;
    v1::GemmResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GemmResponse>> rpc;
  };
  std::vector<std::unique_ptr<Unary>> unary;
  std::vector<grpc::Status> streamed(2 * kEach);
  std::atomic<int> first_chunks{0};
  std::vector<std::thread> streams;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kEach; ++i) {
    for (const Kind kind : {kTinyDeadline, kCancelledAtOnce}) {
      auto call = std::make_unique<Unary>();
      call->context.AddMetadata("authorization",
                                "Bearer " + Servers::a().token);
      if (kind == kTinyDeadline) {
        call->context.set_deadline(absl::ToChronoTime(
            absl::Now() + absl::Microseconds(100 + (i * 37) % 900)));
      }
      call->rpc = stub->AsyncGemm(
          &call->context, kind == kTinyDeadline ? inline_out : kept, &queue);
      call->rpc->Finish(&call->response, &call->status,
                        reinterpret_cast<void*>(unary.size()));
      if (kind == kCancelledAtOnce) call->context.TryCancel();
      unary.push_back(std::move(call));
    }
    for (const Kind kind : {kCancelledMidStream, kStalled}) {
      const int slot = 2 * i + (kind == kStalled);
      streams.emplace_back([&, kind, slot, i] {
        grpc::ClientContext context;
        Prepare(&context, Servers::a().token,
                kind == kStalled ? absl::Milliseconds(300 + (i * 53) % 500)
                                 : absl::Seconds(60));
        v1::GetTensorRequest request;
        request.set_handle("big");
        request.set_chunk_bytes(64 * 1024);
        std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader =
            stub->GetTensor(&context, request);
        v1::GetTensorResponse first;
        if (reader->Read(&first)) ++first_chunks;
        if (kind == kCancelledMidStream) context.TryCancel();
        streamed[slot] = reader->Finish();
      });
    }
  }
  for (size_t done = 0; done < unary.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_EQ(
        queue.AsyncNext(&tag, &ok,
                        absl::ToChronoTime(absl::Now() + absl::Seconds(60))),
        grpc::CompletionQueue::GOT_EVENT);
    const size_t i = reinterpret_cast<size_t>(tag);
    EXPECT_EQ(unary[i]->status.error_code(),
              i % 2 == 0 ? grpc::StatusCode::DEADLINE_EXCEEDED
                         : grpc::StatusCode::CANCELLED)
        << "GEMM " << i << ": " << unary[i]->status.error_message();
  }
  for (std::thread& t : streams) t.join();
  for (int slot = 0; slot < 2 * kEach; ++slot) {
    EXPECT_EQ(streamed[slot].error_code(),
              slot % 2 == 0 ? grpc::StatusCode::CANCELLED
                            : grpc::StatusCode::DEADLINE_EXCEEDED)
        << "download " << slot << ": " << streamed[slot].error_message();
  }
  queue.Shutdown();
  // Every download that got a chunk reached its handler, and every handler
  // ends once its call is cut short (the metric counts answered calls). A
  // download whose deadline passed before gRPC handed it to the service
  // (a loaded machine) never reaches a handler, nor costs one.
  const absl::Time ended = absl::Now() + absl::Seconds(10);
  std::string metrics_after;
  do {
    metrics_after = Scrape(process().metrics_port(), &scrape_seconds);
  } while (downloads(metrics_after) - downloads(metrics_before) <
               first_chunks.load() &&
           absl::Now() < ended);
  std::fprintf(stderr,
               "storm of %d calls over in %.2f s; %d downloads got a first "
               "chunk; the server's handlers saw %.0f GEMMs and %.0f "
               "downloads\n",
               4 * kEach, absl::ToDoubleSeconds(absl::Now() - start),
               first_chunks.load(),
               gemms(metrics_after) - gemms(metrics_before),
               downloads(metrics_after) - downloads(metrics_before));
  const double handled = downloads(metrics_after) - downloads(metrics_before);
  EXPECT_GE(handled, first_chunks.load());
  EXPECT_LE(handled, 2 * kEach);

  // What the server still holds for tenant-a is exactly what it lists: the
  // operands, and any output whose op finished before its cancellation
  // arrived. An abandoned output is not charged.
  const absl::Time settle = absl::Now() + absl::Seconds(30);
  absl::StatusOr<v1::ListTensorsResponse> listed;
  int64_t listed_bytes = 0;
  do {
    absl::SleepFor(absl::Milliseconds(100));
    listed = a_->ListTensors();
    ASSERT_TRUE(listed.ok()) << listed.status();
    listed_bytes = 0;
    for (const v1::TensorInfo& t : listed->tensors()) {
      listed_bytes += t.byte_size();
    }
  } while (listed->used_bytes() != listed_bytes && absl::Now() < settle);
  EXPECT_EQ(listed->used_bytes(), listed_bytes);
  EXPECT_GE(listed->tensors_size(), 3);
  // The operands and kept outputs, and the allocator's cache of the
  // answers and chunks that were in flight.
  rss_allowance_ = listed_bytes + 64 * kMiB + kRssAllowance;
}

// ---- 5. SIGTERM and deadlines during long work.

// A server of its own, which the test stops.
class LongWorkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = e2e::MakeTempDir("longwork");
    const std::string tokens = dir_ + "/tokens";
    ASSERT_TRUE(e2e::WriteFile(
        tokens, absl::StrCat(Servers::admin().token, " ops admin\n",
                             Servers::b().token, " tenant-b user\n")));
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> server =
        ServerUnderTest::Start({"--auth_tokens=" + tokens,
                                "--shutdown_grace_s=1",
                                "--measure_budget_s=600"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    admin_ = Connect(server_->address(), Servers::admin().token);
    ASSERT_NE(admin_, nullptr);
  }

  void TearDown() override {
    if (HasFailure() && server_ != nullptr) {
      std::fprintf(stderr, "--- server log (tail):\n%s\n",
                   server_->LogTail().c_str());
    }
    server_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static v1::ExplainSelectionRequest MeasureGemm(int64_t side) {
    v1::ExplainSelectionRequest request;
    request.set_measure(true);
    v1::GemmRequest* gemm = request.mutable_gemm();
    for (v1::Tensor* t : {gemm->mutable_a(), gemm->mutable_b()}) {
      t->set_dtype(v1::DATA_TYPE_FLOAT32);
      t->add_shape(side);
      t->add_shape(side);
    }
    return request;
  }

  double CpuSeconds() const {
    const absl::StatusOr<ProcessUsage> usage = e2e::ReadUsage(server_->pid());
    EXPECT_TRUE(usage.ok()) << usage.status();
    return usage.ok() ? usage->cpu_seconds : 0;
  }

  // Seconds until the server spends a half second with under 0.05 s of CPU
  // time (-1 when it does not within limit); *used: its CPU seconds then.
  double SecondsUntilIdle(absl::Duration limit, double* used) {
    const absl::Time start = absl::Now();
    double before = CpuSeconds();
    while (absl::Now() - start < limit) {
      absl::SleepFor(absl::Milliseconds(500));
      *used = CpuSeconds();
      if (*used - before < 0.05) {
        return absl::ToDoubleSeconds(absl::Now() - start) - 0.5;
      }
      before = *used;
    }
    return -1;
  }

  std::string dir_;
  std::unique_ptr<ServerUnderTest> server_;
  std::unique_ptr<Client> admin_;
};

TEST_F(LongWorkTest, SigtermWithAMeasureInFlightExitsWithinTheGrace) {
  // 4096^3 runs for seconds per variant on the CPU; on a GPU that takes
  // milliseconds, so there the problem is 16384^3.
  const int64_t side = e2e::TestDevice() == "cuda" ? 16384 : 4096;
  // An idle client: connected, authenticated once, then silent.
  std::unique_ptr<Client> idle =
      Connect(server_->address(), Servers::b().token);
  ASSERT_TRUE(idle->ListTensors().ok());
  const int raw = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server_->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      connect(raw, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);

  std::atomic<bool> returned{false};
  absl::Status measured;
  std::thread call([&] {
    measured = admin_->ExplainSelection(MeasureGemm(side)).status();
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(1500));
  ASSERT_FALSE(returned.load())
      << "the measure ended before the signal: " << measured;
  const ServerUnderTest::Exit exit = server_->Terminate(absl::Seconds(30));
  call.join();
  close(raw);
  std::fprintf(stderr, "exited %.3f s after SIGTERM; the measure: %s\n",
               exit.seconds, measured.ToString().c_str());
  EXPECT_TRUE(exit.exited);
  // --shutdown_grace_s=1, plus at most 1 s.
  EXPECT_LT(exit.seconds, 2.0);
  EXPECT_TRUE(WIFEXITED(exit.wait_status) && WEXITSTATUS(exit.wait_status) == 0)
      << "wait status " << exit.wait_status;
  // The call ends with the server: at the end of the grace gRPC cancels
  // what still runs, as draining (UNAVAILABLE).
  EXPECT_EQ(measured.code(), absl::StatusCode::kUnavailable) << measured;
  EXPECT_EQ(idle->ListTensors().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(LongWorkTest, AMeasurePastItsOneSecondDeadlineStops) {
  const absl::StatusOr<ProcessUsage> idle = e2e::ReadUsage(server_->pid());
  ASSERT_TRUE(idle.ok()) << idle.status();
  ClientOptions options;
  options.server = server_->address();
  options.token = Servers::admin().token;
  options.timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<Client>> hasty = Client::Connect(options);
  ASSERT_TRUE(hasty.ok()) << hasty.status();
  // A GPU measures 4096^3 in well under a second: 16384^3 there.
  const bool cuda = e2e::TestDevice() == "cuda";
  const absl::Status status =
      (*hasty)->ExplainSelection(MeasureGemm(cuda ? 16384 : 4096)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // The whole measure is tens of runs of seconds each on the CPU; stopped,
  // the process idles: a half second with (almost) no CPU time, within the
  // 10 s that one run and the buffers' set-up take here at most.
  double used = 0;
  const double stopped = SecondsUntilIdle(absl::Seconds(10), &used);
  std::fprintf(stderr,
               "idle %.2f s after the deadline, having used %.2f CPU "
               "seconds on the call\n",
               stopped, used - idle->cpu_seconds);
  // On the CPU the set-up and the runs are CPU time; a GPU's host thread
  // may sleep through its runs.
  if (!cuda) {
    EXPECT_GT(used - idle->cpu_seconds, 0.3) << "the measure never started";
  }
  EXPECT_GE(stopped, 0) << "still busy 10 s after the deadline";
  e2e::ExpectServing(*admin_, 0x10);
  EXPECT_TRUE(server_->Terminate(absl::Seconds(30)).exited);
}

TEST_F(LongWorkTest, AMeasureCancelledMidRunStopsUsingTheCpuWithinOneRun) {
  // Long enough to be cancelled mid-run: 8192^3 on a GPU; 2048^3 on the
  // CPU, whose runs (a fraction of a second each, more on a loaded machine)
  // cannot be interrupted.
  const int64_t side = e2e::TestDevice() == "cuda" ? 8192 : 2048;
  const absl::StatusOr<ProcessUsage> idle = e2e::ReadUsage(server_->pid());
  ASSERT_TRUE(idle.ok()) << idle.status();
  std::unique_ptr<v1::TensorOps::Stub> stub = RawStub(server_->address());
  grpc::ClientContext context;
  Prepare(&context, Servers::admin().token);
  std::atomic<bool> returned{false};
  grpc::Status status;
  std::thread call([&] {
    v1::ExplainSelectionResponse response;
    status = stub->ExplainSelection(&context, MeasureGemm(side), &response);
    returned = true;
  });
  // Past the buffers' set-up (about half a CPU second of filling 128 MiB)
  // and into the runs; on the GPU, whose runs may leave the CPU idle, 3 s
  // into the call.
  const absl::Time wait_end =
      absl::Now() + absl::Seconds(e2e::TestDevice() == "cuda" ? 3 : 10);
  while (CpuSeconds() < idle->cpu_seconds + 1.0 && absl::Now() < wait_end &&
         !returned) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(returned.load()) << "the measure ended before the cancel";
  context.TryCancel();
  const absl::Time cancelled = absl::Now();
  call.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
      << status.error_message();
  // The CPU backend is asked between runs, and a run cannot be stopped:
  // idle once the run under way ends (2 s leaves room for a loaded
  // machine). A GPU's host thread polls while the device runs and returns
  // at once: idle a second after.
  // Sanitizer builds run the server and the tests several times slower,
  // and a TSan run of OpenBLAS shares the cores with the whole suite.
  const absl::Duration settle = absl::Seconds(
      e2e::TestDevice() == "cuda" ? 1 : (kSanitizedBuild ? 6 : 2));
  absl::SleepFor(cancelled + settle - absl::Now());
  const double later = CpuSeconds();
  absl::SleepFor(absl::Seconds(1));
  const double latest = CpuSeconds();
  std::fprintf(stderr,
               "CPU seconds on the call: %.2f %.0f s after the cancel, "
               "%.2f a second after that\n",
               later - idle->cpu_seconds, absl::ToDoubleSeconds(settle),
               latest - idle->cpu_seconds);
  EXPECT_LT(latest - later, 0.1)
      << "the server still works on a call cancelled "
      << absl::ToDoubleSeconds(settle) << " s ago";
  e2e::ExpectServing(*admin_, 0x11);
  EXPECT_TRUE(server_->Terminate(absl::Seconds(30)).exited);
}

// ---- 6. Slow HTTP clients on /metrics.

class SlowHttpClientTest : public TenantTest {};

TEST_F(SlowHttpClientTest,
       MetricsAnswerWhileSixteenClientsHoldHalfOpenRequests) {
  struct Hold {
    std::string what;
    std::string sent;  // what each slow client sends, then holds
  };
  for (const Hold& hold : {Hold{"a partial request line", "GET /metr"},
                           Hold{"headers without their end",
                                "GET /metrics HTTP/1.1\r\nHost: x\r\n"},
                           Hold{"nothing", ""}}) {
    SCOPED_TRACE(hold.what);
    std::vector<int> slow;
    for (int i = 0; i < 16; ++i) {
      slow.push_back(ConnectTo(process().metrics_port()));
      if (!hold.sent.empty()) {
        EXPECT_EQ(
            send(slow.back(), hold.sent.data(), hold.sent.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hold.sent.size()));
      }
    }
    absl::SleepFor(absl::Milliseconds(200));  // all of them accepted
    double seconds = 0;
    const std::string answer = Scrape(process().metrics_port(), &seconds);
    std::fprintf(stderr, "scrape with 16 clients holding %s: %.3f s\n",
                 hold.what.c_str(), seconds);
    EXPECT_LT(seconds, 1.0);
    EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
    EXPECT_THAT(answer, HasSubstr("# TYPE coalesce_requests_total counter"));
    for (const int fd : slow) close(fd);
  }
}

// ---- 7. Bounded echo of client strings.

class BoundedEchoTest : public TenantTest {};

TEST_F(BoundedEchoTest, A64KiBNameIsItsFieldsErrorInUnder1KiB) {
  const std::string huge = RandomHex(32 * 1024);  // 65536 characters
  struct Case {
    std::string what;
    absl::StatusCode code;
    std::string field;
    std::function<absl::Status()> call;
  };
  const std::vector<Case> cases = {
      {"variant", absl::StatusCode::kInvalidArgument, "options.variant: ",
       [&] {
         v1::TransposeRequest r;
         *r.mutable_input() = Inline({4, 5}, 111);
         r.mutable_options()->set_variant(huge);
         return a_->Transpose(r).status();
       }},
      {"gemm variant", absl::StatusCode::kInvalidArgument, "options.variant: ",
       [&] {
         v1::GemmRequest r;
         *r.mutable_a() = Inline({4, 5}, 112);
         *r.mutable_b() = Inline({5, 3}, 113);
         r.mutable_options()->set_variant(huge);
         return a_->Gemm(r).status();
       }},
      {"handle", absl::StatusCode::kNotFound,
       "handle: ", [&] { return a_->GetTensor(huge).status(); }},
      {"input handle", absl::StatusCode::kNotFound, "input.handle: ",
       [&] {
         v1::TransposeRequest r;
         *r.mutable_input() = Handle(huge);
         return a_->Transpose(r).status();
       }},
      {"tensor name", absl::StatusCode::kInvalidArgument, "name: ",
       [&] {
         return a_
             ->PutTensor(v1::DATA_TYPE_FLOAT32, {4},
                         e2e::FloatBytes(RandomFloats(4, 114)), huge)
             .status();
       }},
      {"region", absl::StatusCode::kNotFound, "input.shared_memory.region: ",
       [&] {
         v1::TransposeRequest r;
         *r.mutable_input() = Region(huge, {4, 5});
         return a_->Transpose(r).status();
       }},
      {"region name", absl::StatusCode::kNotFound,
       "name: ", [&] { return a_local_->UnregisterSharedMemory(huge); }},
      {"shared-memory key", absl::StatusCode::kInvalidArgument, "key: ",
       [&] {
         return a_local_->RegisterSharedMemory("r", "/" + huge.substr(1), 0,
                                               64);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const absl::Status status = c.call();
    EXPECT_EQ(status.code(), c.code) << status.ToString().substr(0, 300);
    EXPECT_THAT(status.message(), HasSubstr(c.field));
    EXPECT_THAT(status.message(), HasSubstr("(65536 bytes)"));
    EXPECT_LT(status.message().size(), 1024u);
  }
}

// ---- 8. Floods of large messages.

// What a flood of 48 concurrent 16 MiB Echo calls (three each) makes the
// server hold at its peak, and how the calls ended: gRPC receives a whole
// message before any handler sees it, so only its memory quota
// (--grpc_memory_bytes) bounds what such a flood takes.
struct Flood {
  int64_t peak_rss_bytes = 0;
  std::map<absl::StatusCode, int> codes;
};

Flood FloodWithEchoes(const std::vector<std::string>& flags) {
  Flood flood;
  absl::StatusOr<std::unique_ptr<e2e::ServerUnderTest>> server =
      e2e::ServerUnderTest::Start(flags);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return flood;
  constexpr int kCalls = 48;
  const std::string payload = RandomHex(8 << 20);  // 16 MiB of text
  absl::Mutex mu;
  std::vector<std::thread> callers;
  std::shared_ptr<v1::TensorOps::Stub> stub = RawStub((*server)->address());
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&] {
      for (int round = 0; round < 3; ++round) {
        grpc::ClientContext context;
        Prepare(&context, "", absl::Seconds(120));
        v1::EchoRequest request;
        request.set_payload(payload);
        v1::EchoResponse response;
        const absl::Status s =
            FromGrpc(stub->Echo(&context, request, &response));
        EXPECT_TRUE(!s.ok() || response.payload() == payload);
        absl::MutexLock lock(&mu);
        ++flood.codes[s.code()];
      }
    });
  }
  for (std::thread& t : callers) t.join();
  absl::StatusOr<ProcessUsage> usage = e2e::ReadUsage((*server)->pid());
  EXPECT_TRUE(usage.ok()) << usage.status();
  if (usage.ok()) flood.peak_rss_bytes = usage->peak_rss_bytes;
  // Still serving: a small call on a fresh connection.
  std::unique_ptr<v1::TensorOps::Stub> fresh = RawStub((*server)->address());
  grpc::ClientContext context;
  Prepare(&context, "");
  v1::EchoRequest small;
  small.set_payload("after the flood");
  v1::EchoResponse echoed;
  EXPECT_TRUE(fresh->Echo(&context, small, &echoed).ok());
  EXPECT_TRUE((*server)->Terminate(absl::Seconds(20)).exited)
      << (*server)->LogTail();
  return flood;
}

TEST(MessageFloodTest, GrpcMemoryQuotaBoundsWhatAFloodTakes) {
  const Flood unbounded = FloodWithEchoes({"--grpc_memory_bytes=0"});
  const Flood bounded =
      FloodWithEchoes({absl::StrCat("--grpc_memory_bytes=", 128 * kMiB)});
  for (const auto& [name, flood] :
       {std::pair<const char*, const Flood&>{"unbounded", unbounded},
        {"128 MiB quota", bounded}}) {
    std::string codes;
    for (const auto& [code, n] : flood.codes) {
      absl::StrAppend(&codes, " ", absl::StatusCodeToString(code), "=", n);
    }
    std::fprintf(stderr, "%s: server peak RSS %.0f MiB;%s\n", name,
                 static_cast<double>(flood.peak_rss_bytes) / kMiB,
                 codes.c_str());
  }
  // Without the quota every call is received whole (and answered).
  EXPECT_EQ(unbounded.codes.size(), 1u);
  EXPECT_EQ(unbounded.codes.count(absl::StatusCode::kOk), 1u);
  // With it, gRPC pushes back: calls are refused or their connection closed,
  // never failed otherwise, and the peak is far below the flood's.
  for (const auto& [code, n] : bounded.codes) {
    EXPECT_THAT(code, ::testing::AnyOf(absl::StatusCode::kOk,
                                       absl::StatusCode::kResourceExhausted,
                                       absl::StatusCode::kUnavailable))
        << n << " calls";
  }
  // A sanitizer's shadow of every page ever touched stays resident, so
  // there the peaks say little about the quota.
  if (!e2e::kSanitizedBuild) {
    EXPECT_LT(bounded.peak_rss_bytes, unbounded.peak_rss_bytes * 3 / 4);
  }
}

}  // namespace
}  // namespace coalesce
