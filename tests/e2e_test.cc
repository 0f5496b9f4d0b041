// End to end: the real coalesce-server (CPU backend, port 0) driven by the
// real `coalesce` CLI, with .npy files in and out, checked against
// references computed here.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/dtype.h"
#include "client/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kServerBinary[] = COALESCE_SERVER_BINARY;
constexpr char kCliBinary[] = COALESCE_CLI_BINARY;
constexpr auto kServerStartTimeout = std::chrono::seconds(60);
constexpr auto kServerStopTimeout = std::chrono::seconds(10);
constexpr auto kCliTimeout = std::chrono::seconds(120);

// ---- Child processes (fork + exec with pipes; no shell).

struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
};

Pipe MakePipe() {
  int fds[2];
  // Close-on-exec, so that no other child keeps a pipe open past its owner.
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    std::abort();
  }
  return {fds[0], fds[1]};
}

// Starts argv[0] with stdout (and stderr unless stderr_fd < 0) redirected.
// The child is killed if the test process dies, so a crashed test leaves no
// server behind.
pid_t Spawn(const std::vector<std::string>& args, int stdout_fd,
            int stderr_fd) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(stdout_fd, STDOUT_FILENO);
    if (stderr_fd >= 0) dup2(stderr_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

struct CliResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const CliResult& r) {
  return os << "exit " << r.exit_code << "\n--- stdout:\n"
            << r.out << "--- stderr:\n"
            << r.err;
}

// Runs argv (argv[0] a path) with both outputs captured; killed past
// kCliTimeout.
CliResult RunBinary(const std::vector<std::string>& argv) {
  Pipe out = MakePipe(), err = MakePipe();
  const pid_t pid = Spawn(argv, out.write_fd, err.write_fd);
  close(out.write_fd);
  close(err.write_fd);
  CliResult result;
  const auto deadline = std::chrono::steady_clock::now() + kCliTimeout;
  pollfd fds[2] = {{out.read_fd, POLLIN, 0}, {err.read_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      kill(pid, SIGKILL);  // a hung CLI: its pipes close when it dies
      killed = true;
    }
    if (poll(fds, 2, killed ? 1000 : static_cast<int>(left.count())) < 0 &&
        errno != EINTR) {
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, n);
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CliResult RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kCliBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunBinary(argv);
}

// The server binary, from start (reading its port from stdout) to SIGTERM.
class ServerProcess {
 public:
  // Empty `error` on success.
  static std::unique_ptr<ServerProcess> Start(
      std::string* error, const std::vector<std::string>& extra_args = {}) {
    Pipe out = MakePipe();
    std::vector<std::string> args = {kServerBinary, "--listen=127.0.0.1:0",
                                     "--metrics_listen=127.0.0.1:0",
                                     "--device=cpu"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const pid_t pid = Spawn(args, out.write_fd, /*stderr_fd=*/-1);
    close(out.write_fd);
    auto server = std::unique_ptr<ServerProcess>(new ServerProcess(pid));
    // The server announces exactly
    //   coalesce-server listening on HOST:PORT (backend cpu)
    const std::regex listening("listening on [^ ]*:(\\d+)");
    const auto deadline =
        std::chrono::steady_clock::now() + kServerStartTimeout;
    std::string pending, seen;
    while (server->port_ == 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd fd = {out.read_fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&fd, 1, left.count()) == 0) {
        *error =
            absl::StrCat("no 'listening on' line within ",
                         kServerStartTimeout.count(), " s; stdout:\n", seen);
        close(out.read_fd);
        return nullptr;
      }
      char buffer[4096];
      const ssize_t n = read(out.read_fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        server->pid_ = -1;
        *error = absl::StrCat("server exited (", DescribeWaitStatus(status),
                              ") before listening; stdout:\n", seen);
        close(out.read_fd);
        return nullptr;
      }
      pending.append(buffer, n);
      seen.append(buffer, n);
      size_t newline;
      while ((newline = pending.find('\n')) != std::string::npos) {
        const std::string line = pending.substr(0, newline);
        pending.erase(0, newline + 1);
        std::fprintf(stderr, "[server stdout] %s\n", line.c_str());
        std::smatch match;
        if (server->port_ == 0 && std::regex_search(line, match, listening)) {
          server->port_ = std::stoi(match[1]);
        }
      }
    }
    // Keep draining stdout so that a chatty server never blocks on a full
    // pipe; the thread ends at EOF, when the server exits.
    server->drain_ = std::thread([fd = out.read_fd] {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) != 0) {
        if (n < 0 && errno != EINTR) break;
        if (n > 0) std::fwrite(buffer, 1, n, stderr);
      }
      close(fd);
    });
    return server;
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      const int status = Stop();
      std::fprintf(stderr, "server stopped: %s\n",
                   DescribeWaitStatus(status).c_str());
    }
    if (drain_.joinable()) drain_.join();
  }

  int port() const { return port_; }

  // SIGTERM, then SIGKILL if it has not exited in time. Returns the wait
  // status.
  int Stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + kServerStopTimeout;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "server ignored SIGTERM for %lld s; SIGKILL\n",
                     static_cast<long long>(kServerStopTimeout.count()));
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return status;
  }

 private:
  explicit ServerProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_;
  int port_ = 0;
  std::thread drain_;
};

// ---- Data and references.

// Values uniform in [-1, 1], rounded to dtype (so references see exactly
// what the server sees), stored as dtype.
NpyArray RandomArray(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  int64_t n = 1;
  for (const int64_t d : a.shape) n *= d;
  a.bytes.resize(n * ElementSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    StoreFromFloat(a.bytes.data(), dtype, i, uniform(rng));
  }
  return a;
}

std::vector<double> Values(const NpyArray& a) {
  std::vector<double> v(a.bytes.size() / ElementSize(a.dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = LoadAsFloat(a.bytes.data(), a.dtype, i);
  }
  return v;
}

// out.shape[i] = in.shape[perm[i]], moving raw elements (bit-exact).
NpyArray Permute(const NpyArray& in, const std::vector<int>& perm) {
  const size_t rank = in.shape.size();
  NpyArray out;
  out.dtype = in.dtype;
  for (const int p : perm) out.shape.push_back(in.shape[p]);
  out.bytes.resize(in.bytes.size());
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    in_strides[d - 1] = in_strides[d] * in.shape[d];
  }
  const size_t size = ElementSize(in.dtype);
  const int64_t n = static_cast<int64_t>(in.bytes.size() / size);
  std::vector<int64_t> index(rank, 0);  // output index, row-major
  for (int64_t o = 0; o < n; ++o) {
    int64_t i = 0;
    for (size_t d = 0; d < rank; ++d) i += index[d] * in_strides[perm[d]];
    std::copy_n(&in.bytes[i * size], size, &out.bytes[o * size]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// |got - want| <= tolerance * max(1, |want|) everywhere; names the first
// few offenders.
void ExpectClose(const std::vector<double>& got,
                 const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = tolerance * std::max(1.0, std::abs(want[i]));
    if (!(std::abs(got[i] - want[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want "
                    << want[i] << " (tolerance " << bound << ")";
    }
  }
}

// Per-dtype tolerance for results rounded to dtype, accumulated in float32.
double Tolerance(DType dtype) {
  return dtype == DType::kFloat32 ? 1e-4 : 4 * UnitRoundoff(dtype);
}

// ---- One server for the whole run.

class ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { server_ = ServerProcess::Start(&error_); }
  void TearDown() override { server_.reset(); }

  static ServerProcess* server() { return server_.get(); }
  static const std::string& error() { return error_; }

 private:
  static std::unique_ptr<ServerProcess> server_;
  static std::string error_;
};

std::unique_ptr<ServerProcess> ServerEnvironment::server_;
std::string ServerEnvironment::error_;

// gtest_main provides main(); registering from a static initializer is the
// documented alternative.
::testing::Environment* const kServerEnvironment =
    ::testing::AddGlobalTestEnvironment(new ServerEnvironment);

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = ServerEnvironment::server();
    ASSERT_NE(server_, nullptr)
        << "server did not start: " << ServerEnvironment::error();
    std::string pattern = ::testing::TempDir() + "coalesce_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    // Inputs and outputs are kept for a failed test, to look at with NumPy.
    if (HasFailure()) {
      std::fprintf(stderr, "inputs and outputs kept in %s\n", dir_.c_str());
    } else {
      std::filesystem::remove_all(dir_);
    }
  }

  // The CLI against the test server.
  CliResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(),
                absl::StrCat("--server=127.0.0.1:", server_->port()));
    return RunCli(args);
  }

  std::string Path(absl::string_view name) {
    return absl::StrCat(dir_, "/", name);
  }

  std::string WriteInput(absl::string_view name, const NpyArray& array) {
    const std::string path = Path(name);
    const absl::Status status = WriteNpy(path, array);
    EXPECT_TRUE(status.ok()) << status;
    return path;
  }

  NpyArray ReadOutput(absl::string_view name, DType dtype) {
    absl::StatusOr<NpyArray> array = ReadNpy(Path(name), dtype);
    EXPECT_TRUE(array.ok()) << array.status();
    return array.ok() ? *std::move(array) : NpyArray();
  }

  ServerProcess* server_ = nullptr;
  std::string dir_;
};

TEST_F(E2eTest, HealthIsServing) {
  const CliResult r = Cli({"health"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "SERVING\n") << r;
}

TEST_F(E2eTest, InfoListsVariantsByOp) {
  const CliResult r = Cli({"info"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("backend: cpu")) << r;
  EXPECT_THAT(r.out, HasSubstr("variants:")) << r;
  EXPECT_THAT(r.out, HasSubstr("transpose")) << r;
  EXPECT_THAT(r.out, HasSubstr("gemm")) << r;
}

TEST_F(E2eTest, ExplainNamesTheChoiceAndTuneWritesATable) {
  const CliResult e = Cli({"explain", "transpose", "--shape=512,384"});
  ASSERT_EQ(e.exit_code, 0) << e;
  EXPECT_THAT(e.out, HasSubstr("transpose.cpu.blocked")) << e;
  EXPECT_THAT(e.out, HasSubstr("transpose.cpu.naive")) << e;
  EXPECT_THAT(e.out, HasSubstr("chosen: transpose.cpu.")) << e;
  EXPECT_THAT(e.out, HasSubstr("source: heuristic")) << e;
  EXPECT_THAT(e.out, Not(HasSubstr("measured on the server"))) << e;

  // --measure times every eligible variant on the server and changes no
  // choice: the explanation after it still comes from the heuristic.
  const CliResult m =
      Cli({"explain", "transpose", "--shape=512,384", "--measure"});
  ASSERT_EQ(m.exit_code, 0) << m;
  EXPECT_THAT(m.out, HasSubstr("measured on the server")) << m;
  EXPECT_THAT(m.out, Not(HasSubstr(" -  "))) << m;
  EXPECT_EQ(Cli({"explain", "transpose", "--shape=512,384"}).out, e.out);

  const std::string table = Path("table.txt");
  const std::string shapes = Path("shapes.tsv");
  const CliResult t =
      Cli({"tune", "transpose", "--shapes=512,384;33,1000", "--random_shapes=2",
           "--max_shape_bytes=1048576", absl::StrCat("--out=", table),
           absl::StrCat("--shapes_out=", shapes)});
  ASSERT_EQ(t.exit_code, 0) << t;
  EXPECT_THAT(t.out, HasSubstr("wrote 4 entries")) << t;
  EXPECT_THAT(t.out, HasSubstr("within 10% of the fastest")) << t;
  // Every shape, in order: shape, key, the automatic choice and its source,
  // and the measured variants, that choice among them.
  {
    std::ifstream s(shapes);
    std::string line;
    std::vector<std::vector<std::string>> rows;
    while (std::getline(s, line)) {
      if (line.empty() || line[0] == '#') continue;
      rows.push_back(absl::StrSplit(line, '\t'));
    }
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0][0], "512,384");
    EXPECT_EQ(rows[1][0], "33,1000");
    for (const std::vector<std::string>& r : rows) {
      ASSERT_EQ(r.size(), 5u) << absl::StrJoin(r, "|");
      EXPECT_THAT(r[1], HasSubstr("transpose|")) << r[1];
      EXPECT_THAT(r[4], HasSubstr(absl::StrCat(r[2], "="))) << r[4];
    }
  }
  std::ifstream in(table);
  std::string first, build, device, variants;
  std::getline(in, first);
  EXPECT_EQ(first, "coalesce-tuning 1");
  std::getline(in, build);
  std::getline(in, device);
  std::getline(in, variants);
  // The ops the table holds, each with its own variant set version.
  EXPECT_THAT(variants,
              testing::MatchesRegex("variants transpose=v[0-9a-f]{8}"))
      << variants;
  EXPECT_EQ(Cli({"tune", "transpose", "--shapes=8,8"}).exit_code, 2)
      << "--out is required";
}

// Every shape of a tune sweep, in order, each line's columns.
std::vector<std::vector<std::string>> ReadTunedShapes(const std::string& path) {
  std::ifstream s(path);
  std::string line;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(s, line)) {
    if (line.empty() || line[0] == '#') continue;
    rows.push_back(absl::StrSplit(line, '\t'));
  }
  return rows;
}

// A tune shape's op flags reach the request (the key's transposes, batch
// and permutation follow the label), and a shape without any falls back to
// the command line's flags, not to the shape before it.
TEST_F(E2eTest, TuneShapesCarryTheirOpFlags) {
  const std::string shapes = Path("class-shapes.tsv");
  CliResult t =
      Cli({"tune", "gemm", "--random_shapes=3", "--shape_class=transposed",
           "--dtype=bfloat16", "--max_shape_bytes=1048576",
           absl::StrCat("--out=", Path("class-table.txt")),
           absl::StrCat("--shapes_out=", shapes)});
  ASSERT_EQ(t.exit_code, 0) << t;
  std::vector<std::vector<std::string>> rows = ReadTunedShapes(shapes);
  ASSERT_EQ(rows.size(), 3u);
  for (const std::vector<std::string>& r : rows) {
    ASSERT_EQ(r.size(), 5u);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r[0], m,
                                  std::regex(" trans_a=([01]) trans_b=([01])")))
        << r[0];
    EXPECT_THAT(r[1],
                HasSubstr(absl::StrCat("|t", m[1].str(), m[2].str(), "|")))
        << r[0] << " " << r[1];
    EXPECT_THAT(r[1], testing::StartsWith("gemm|bfloat16|")) << r[1];
  }
  t = Cli({"tune", "layout",
           "--shapes=2,3,4 perm=2,0,1;2,3,4,5;"
           "2,3 direction=soa_to_aos",
           absl::StrCat("--out=", Path("class-table.txt")),
           absl::StrCat("--shapes_out=", shapes)});
  ASSERT_EQ(t.exit_code, 0) << t;
  rows = ReadTunedShapes(shapes);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_THAT(rows[0][1], HasSubstr("|p1.0|")) << rows[0][1];    // [2,3x4]
  EXPECT_THAT(rows[1][1], HasSubstr("|p0.2.1|")) << rows[1][1];  // NCHW->NHWC
  EXPECT_THAT(rows[2][1], HasSubstr("|p1.0|")) << rows[2][1];
  EXPECT_EQ(Cli({"tune", "transpose", "--shapes=4,5 perm=1,0",
                 absl::StrCat("--out=", Path("class-table.txt"))})
                .exit_code,
            2)
      << "transpose takes no perm";
  EXPECT_EQ(Cli({"tune", "gemm", "--random_shapes=1", "--shape_class=2d",
                 absl::StrCat("--out=", Path("class-table.txt"))})
                .exit_code,
            2)
      << "2d is no gemm class";
}

TEST_F(E2eTest, PutListGetRemoveAServerSideTensor) {
  NpyArray in;
  in.dtype = DType::kFloat32;
  in.shape = {3, 5};
  in.bytes.resize(15 * 4);
  for (int i = 0; i < 15; ++i) {
    const float v = 0.5f * i - 3;
    std::memcpy(&in.bytes[4 * i], &v, 4);
  }
  ASSERT_TRUE(WriteNpy(Path("put.npy"), in).ok());
  const CliResult put = Cli({"put", Path("put.npy"), "--name=e2e-tensor"});
  ASSERT_EQ(put.exit_code, 0) << put;
  EXPECT_THAT(put.out, HasSubstr("e2e-tensor")) << put;
  const CliResult ls = Cli({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls;
  EXPECT_THAT(ls.out, HasSubstr("e2e-tensor")) << ls;
  EXPECT_THAT(ls.out, HasSubstr("[3,5]")) << ls;
  const CliResult get =
      Cli({"get", "e2e-tensor", absl::StrCat("--output=", Path("got.npy"))});
  ASSERT_EQ(get.exit_code, 0) << get;
  absl::StatusOr<NpyArray> got = ReadNpy(Path("got.npy"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->shape, in.shape);
  EXPECT_EQ(got->bytes, in.bytes);
  const CliResult rm = Cli({"rm", "e2e-tensor"});
  ASSERT_EQ(rm.exit_code, 0) << rm;
  EXPECT_THAT(rm.out, HasSubstr("60 bytes freed")) << rm;
  const CliResult again = Cli({"rm", "e2e-tensor"});
  EXPECT_EQ(again.exit_code, 1) << again;
  EXPECT_THAT(again.err, HasSubstr("NOT_FOUND")) << again;
  // Several in one call: all, or none when one is missing.
  for (const char* name : {"--name=e2e-a", "--name=e2e-b"}) {
    ASSERT_EQ(Cli({"put", Path("put.npy"), name}).exit_code, 0);
  }
  const CliResult some = Cli({"rm", "e2e-a", "e2e-missing", "e2e-b"});
  EXPECT_EQ(some.exit_code, 1) << some;
  EXPECT_THAT(some.err, HasSubstr("handles[1]")) << some;
  const CliResult both = Cli({"rm", "e2e-a", "e2e-b"});
  ASSERT_EQ(both.exit_code, 0) << both;
  EXPECT_THAT(both.out, HasSubstr("120 bytes freed")) << both;
}

class E2eDTypeTest : public E2eTest,
                     public ::testing::WithParamInterface<DType> {
 protected:
  std::string DTypeFlag() {
    return absl::StrCat("--dtype=", DTypeName(GetParam()));
  }
};

TEST_P(E2eDTypeTest, TransposeIsBitExact) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{33, 17}, {1, 64}, {3, 5, 7}}) {
    SCOPED_TRACE(absl::StrJoin(shape, ","));
    const NpyArray in = RandomArray(GetParam(), shape, 1);
    const CliResult r =
        Cli({"transpose", DTypeFlag(), "--input=" + WriteInput("in.npy", in),
             "--output=" + Path("out.npy")});
    ASSERT_EQ(r.exit_code, 0) << r;
    const NpyArray out = ReadOutput("out.npy", GetParam());
    const NpyArray want =
        Permute(in, shape.size() == 2 ? std::vector<int>{1, 0}
                                      : std::vector<int>{0, 2, 1});
    EXPECT_EQ(out.shape, want.shape);
    EXPECT_TRUE(out.bytes == want.bytes) << "transposed bytes differ";
  }
}

TEST_P(E2eDTypeTest, ConvertLayoutIsBitExact) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<std::string> flags;
    std::vector<int> perm;
  };
  const Case cases[] = {
      {{2, 3, 4, 5}, {"--from=NCHW", "--to=NHWC"}, {0, 2, 3, 1}},
      {{2, 4, 5, 3}, {"--from=NHWC", "--to=NCHW"}, {0, 3, 1, 2}},
      {{3, 4, 5}, {"--perm=2,0,1"}, {2, 0, 1}},
      {{10, 3}, {"--aos_fields=3", "--direction=aos_to_soa"}, {1, 0}},
      {{3, 10}, {"--direction=soa_to_aos"}, {1, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.flags, " "));
    const NpyArray in = RandomArray(GetParam(), c.shape, 2);
    std::vector<std::string> args = {"layout", DTypeFlag(),
                                     "--input=" + WriteInput("in.npy", in),
                                     "--output=" + Path("out.npy")};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const CliResult r = Cli(args);
    ASSERT_EQ(r.exit_code, 0) << r;
    const NpyArray out = ReadOutput("out.npy", GetParam());
    const NpyArray want = Permute(in, c.perm);
    EXPECT_EQ(out.shape, want.shape);
    EXPECT_TRUE(out.bytes == want.bytes) << "converted bytes differ";
  }
}

TEST_P(E2eDTypeTest, GemmMatchesReference) {
  struct Case {
    int64_t batch, m, n, k;
    bool trans_a, trans_b, with_c;
    float alpha, beta;
  };
  const Case cases[] = {
      {0, 17, 19, 23, false, false, false, 1.0f, 0.0f},
      {0, 16, 8, 33, true, true, true, 0.5f, -2.0f},
      {3, 5, 7, 9, false, true, true, 1.0f, 1.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(
        absl::StrCat("batch ", c.batch, " m ", c.m, " n ", c.n, " k ", c.k));
    auto shape = [&](int64_t rows, int64_t cols) {
      std::vector<int64_t> s;
      if (c.batch > 0) s.push_back(c.batch);
      s.push_back(rows);
      s.push_back(cols);
      return s;
    };
    // float32 files: the CLI converts them to --dtype. The references use
    // the rounded values.
    const NpyArray a32 = RandomArray(
        DType::kFloat32, c.trans_a ? shape(c.k, c.m) : shape(c.m, c.k), 3);
    const NpyArray b32 = RandomArray(
        DType::kFloat32, c.trans_b ? shape(c.n, c.k) : shape(c.k, c.n), 4);
    const NpyArray c32 = RandomArray(DType::kFloat32, shape(c.m, c.n), 5);
    std::vector<std::string> args = {"gemm",
                                     DTypeFlag(),
                                     "--input=" + WriteInput("a.npy", a32),
                                     "--input=" + WriteInput("b.npy", b32),
                                     absl::StrCat("--alpha=", c.alpha),
                                     absl::StrCat("--beta=", c.beta),
                                     "--output=" + Path("d.npy")};
    if (c.with_c) args.push_back("--input=" + WriteInput("c.npy", c32));
    if (c.trans_a) args.push_back("--trans_a");
    if (c.trans_b) args.push_back("--trans_b");
    const CliResult r = Cli(args);
    ASSERT_EQ(r.exit_code, 0) << r;
    const NpyArray d = ReadOutput("d.npy", GetParam());
    EXPECT_EQ(d.shape, shape(c.m, c.n));

    auto rounded = [&](const NpyArray& x) {
      std::vector<double> v = Values(x);
      for (double& e : v) {
        uint8_t bytes[4];
        StoreFromFloat(bytes, GetParam(), 0, static_cast<float>(e));
        e = LoadAsFloat(bytes, GetParam(), 0);
      }
      return v;
    };
    const std::vector<double> a = rounded(a32), b = rounded(b32),
                              cm = rounded(c32);
    const int64_t batches = std::max<int64_t>(c.batch, 1);
    std::vector<double> want(batches * c.m * c.n);
    for (int64_t p = 0; p < batches; ++p) {
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            const double av = c.trans_a ? a[(p * c.k + l) * c.m + i]
                                        : a[(p * c.m + i) * c.k + l];
            const double bv = c.trans_b ? b[(p * c.n + j) * c.k + l]
                                        : b[(p * c.k + l) * c.n + j];
            sum += av * bv;
          }
          const int64_t o = (p * c.m + i) * c.n + j;
          want[o] = c.alpha * sum + (c.with_c ? c.beta * cm[o] : 0.0);
        }
      }
    }
    ExpectClose(Values(d), want, Tolerance(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, E2eDTypeTest,
                         ::testing::ValuesIn(kAllDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// h = gelu(x + bias) + residual; y = LayerNorm(h) * gamma + beta, in double.
void GeluLayerNormReference(const std::vector<double>& x,
                            const std::vector<double>& bias,
                            const std::vector<double>& residual,
                            const std::vector<double>& gamma,
                            const std::vector<double>& beta, int64_t hidden,
                            bool tanh_approx, double eps,
                            std::vector<double>* y, std::vector<double>* h) {
  const int64_t rows = static_cast<int64_t>(x.size()) / hidden;
  y->resize(x.size());
  h->resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const int64_t i = r * hidden + c;
      const double v = x[i] + (bias.empty() ? 0.0 : bias[c]);
      const double g = tanh_approx
                           ? 0.5 * v *
                                 (1 + std::tanh(std::sqrt(2 / M_PI) *
                                                (v + 0.044715 * v * v * v)))
                           : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      (*h)[i] = g + (residual.empty() ? 0.0 : residual[i]);
      mean += (*h)[i];
    }
    mean /= hidden;
    double var = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const double d = (*h)[r * hidden + c] - mean;
      var += d * d;
    }
    var /= hidden;
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < hidden; ++c) {
      const int64_t i = r * hidden + c;
      (*y)[i] = ((*h)[i] - mean) * inv * (gamma.empty() ? 1.0 : gamma[c]) +
                (beta.empty() ? 0.0 : beta[c]);
    }
  }
}

TEST_F(E2eTest, GeluLayerNormMatchesReference) {
  constexpr int64_t kRows = 7, kHidden = 96;
  const NpyArray x = RandomArray(DType::kFloat32, {kRows, kHidden}, 6);
  const NpyArray bias = RandomArray(DType::kFloat32, {kHidden}, 7);
  const NpyArray residual = RandomArray(DType::kFloat32, {kRows, kHidden}, 8);
  const NpyArray gamma = RandomArray(DType::kFloat32, {kHidden}, 9);
  const NpyArray beta = RandomArray(DType::kFloat32, {kHidden}, 10);
  for (const bool tanh_approx : {false, true}) {
    SCOPED_TRACE(tanh_approx ? "tanh" : "erf");
    std::vector<std::string> args = {
        "gelu-ln",
        "--input=" + WriteInput("x.npy", x),
        "--input=" + WriteInput("bias.npy", bias),
        "--input=" + WriteInput("residual.npy", residual),
        "--input=" + WriteInput("gamma.npy", gamma),
        "--input=" + WriteInput("beta.npy", beta),
        "--eps=0.001",
        "--return_pre_norm",
        "--output=" + Path("y.npy")};
    if (tanh_approx) args.push_back("--approx=tanh");
    const CliResult r = Cli(args);
    ASSERT_EQ(r.exit_code, 0) << r;
    std::vector<double> y, h;
    GeluLayerNormReference(Values(x), Values(bias), Values(residual),
                           Values(gamma), Values(beta), kHidden, tanh_approx,
                           1e-3, &y, &h);
    const NpyArray got_y = ReadOutput("y.npy", DType::kFloat32);
    const NpyArray got_h = ReadOutput("y.h.npy", DType::kFloat32);
    EXPECT_EQ(got_y.shape, x.shape);
    EXPECT_EQ(got_h.shape, x.shape);
    ExpectClose(Values(got_y), y, 1e-4);
    ExpectClose(Values(got_h), h, 1e-4);
  }
}

TEST_F(E2eTest, GeluLayerNormWithOnlyX) {
  // --no_bias --no_residual and one file: x alone; bias and residual zero,
  // gamma one, beta zero.
  const NpyArray x = RandomArray(DType::kFloat32, {4, 33}, 11);
  const CliResult r =
      Cli({"gelu-ln", "--no_bias", "--no_residual",
           "--input=" + WriteInput("x.npy", x), "--output=" + Path("y.npy")});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<double> y, h;
  GeluLayerNormReference(Values(x), {}, {}, {}, {}, 33, false, 1e-5, &y, &h);
  const NpyArray got = ReadOutput("y.npy", DType::kFloat32);
  EXPECT_EQ(got.shape, x.shape);
  ExpectClose(Values(got), y, 1e-4);
}

TEST_F(E2eTest, RandomInputsPrintSummaryAndReport) {
  const CliResult r =
      Cli({"gemm", "--m=8", "--n=16", "--k=32", "--seed=7", "--report"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("d: shape=[8,16] dtype=float32 sum=")) << r;
  EXPECT_THAT(r.out, HasSubstr("variant:")) << r;
  EXPECT_THAT(r.out, HasSubstr("GFLOP/s")) << r;
  // Same seed, same inputs, same checksum line.
  const CliResult again =
      Cli({"gemm", "--m=8", "--n=16", "--k=32", "--seed=7"});
  ASSERT_EQ(again.exit_code, 0) << again;
  EXPECT_EQ(again.out.substr(0, again.out.find('\n')),
            r.out.substr(0, r.out.find('\n')));
}

TEST_F(E2eTest, MessagesBeyondGrpcsDefault4MiBPass) {
  // 6 MiB each way: the client and server both raise gRPC's 4 MiB limit.
  const CliResult r = Cli({"transpose", "--shape=1024,1536"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("output: shape=[1536,1024]")) << r;
}

TEST_F(E2eTest, MaxMessageBytesIsEnforcedByTheClient) {
  const CliResult r =
      Cli({"transpose", "--shape=1024,1536", "--max_message_bytes=1000000"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("error: RESOURCE_EXHAUSTED")) << r;
}

TEST_F(E2eTest, ZeroDimensionIsInvalidArgument) {
  const CliResult r = Cli({"transpose", "--shape=0,5"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT")) << r;
}

// Over TCP a 64 KiB variant name echoed whole would overflow gRPC's
// trailers (RESOURCE_EXHAUSTED); quoted bounded, it is the field's error.
TEST_F(E2eTest, AHugeVariantNameIsInvalidArgument) {
  const CliResult r =
      Cli({"transpose", "--shape=4,5", "--variant=" + std::string(65536, 'v')});
  EXPECT_EQ(r.exit_code, 1) << r.exit_code;
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT"))
      << r.err.substr(0, 400);
  EXPECT_THAT(r.err, HasSubstr("(65536 bytes)")) << r.err.substr(0, 400);
  EXPECT_LT(r.err.size(), 2048u);
}

TEST_F(E2eTest, MismatchedGemmInputsAreInvalidArgument) {
  const CliResult r =
      Cli({"gemm",
           "--input=" +
               WriteInput("a.npy", RandomArray(DType::kFloat32, {4, 5}, 12)),
           "--input=" +
               WriteInput("b.npy", RandomArray(DType::kFloat32, {6, 3}, 13))});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT")) << r;
}

// SIGTERM with a long call in flight (ExplainSelection timing a 4096^3
// GEMM, seconds a run on the CPU) and an idle client connected: the
// process exits within the grace plus 1 s, and the call ends with an error
// rather than a result.
TEST(E2eShutdownTest, SigtermWithALongMeasureInFlightExitsWithinTheGrace) {
  std::string error;
  std::unique_ptr<ServerProcess> server =
      ServerProcess::Start(&error, {"--shutdown_grace_s=1"});
  ASSERT_NE(server, nullptr) << error;
  const int idle = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  CliResult measured;
  std::thread call([&] {
    measured =
        RunCli({absl::StrCat("--server=127.0.0.1:", server->port()), "explain",
                "gemm", "--m=4096", "--n=4096", "--k=4096", "--measure"});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto start = std::chrono::steady_clock::now();
  const int status = server->Stop();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  call.join();
  close(idle);
  std::fprintf(stderr, "exited %.2f s after SIGTERM (%s)\n", took,
               DescribeWaitStatus(status).c_str());
  EXPECT_LT(took, 2.0);
  EXPECT_TRUE(WIFEXITED(status)) << DescribeWaitStatus(status);
  EXPECT_NE(measured.exit_code, 0) << measured;
}

TEST_F(E2eTest, UsageErrorsExit2) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"transpose"},
                                             {"frobnicate"},
                                             {"gemm", "--m=x"},
                                             {"info", "--no_such_flag"},
                                             {}}) {
    const CliResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT")) << r;
  }
}

TEST(E2eServerFlagsTest, BadValuesExitWithUsageNamingTheFlag) {
  for (const auto& [flag, named] :
       std::vector<std::pair<std::string, std::string>>{
           {"--device=tpu", "--device must be auto, cpu or cuda, not 'tpu'"},
           {"--log_format=xml", "--log_format must be text or json"}}) {
    const CliResult r =
        RunBinary({kServerBinary, "--listen=127.0.0.1:0", flag});
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr(named)) << r;
  }
}

TEST_F(E2eTest, UnreachableServerIsUnavailable) {
  // Nothing listens on loopback port 1 (privileged): connection refused.
  const CliResult r = RunCli({"--server=127.0.0.1:1", "health"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("error: UNAVAILABLE")) << r;
}

}  // namespace
}  // namespace coalesce
