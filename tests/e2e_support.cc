#include "tests/e2e_support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace coalesce::e2e {
namespace {

constexpr absl::Duration kStartLimit = absl::Seconds(60);
constexpr absl::Duration kPoll = absl::Milliseconds(10);

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The child's side of SpawnTo: dies with the test process, takes its
// output files, becomes argv. Async-signal-safe calls only: the parent has
// threads.
[[noreturn]] void BecomeChild(pid_t parent, int out_fd, int err_fd,
                              char* const* argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == parent && dup2(out_fd, STDOUT_FILENO) >= 0 &&
      dup2(err_fd, STDERR_FILENO) >= 0) {
    execv(argv[0], argv);
  }
  _exit(127);
}

// fork + exec with stdout and stderr sent to the given files (opened here,
// close-on-exec, so that no other child inherits them). -1 on failure.
pid_t SpawnTo(const std::vector<std::string>& argv, const std::string& out,
              const std::string& err) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  const int out_fd = open(out.c_str(), flags, 0600);
  const int err_fd = open(err.c_str(), flags, 0600);
  std::vector<char*> args(argv.size() + 1, nullptr);
  std::transform(
      argv.begin(), argv.end(), args.begin(),
      [](const std::string& a) { return const_cast<char*>(a.c_str()); });
  const pid_t parent = getpid();
  const pid_t pid = out_fd < 0 || err_fd < 0 ? -1 : fork();
  if (pid == 0) BecomeChild(parent, out_fd, err_fd, args.data());
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  return pid;
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

}  // namespace

std::string BinaryPath(const char* variable, const char* built) {
  const char* path = std::getenv(variable);
  return path == nullptr || *path == '\0' ? built : path;
}

std::string TestDevice() {
  const char* device = std::getenv("COALESCE_TEST_DEVICE");
  return device == nullptr || *device == '\0' ? "cpu" : device;
}

absl::StatusOr<std::unique_ptr<ServerUnderTest>> ServerUnderTest::Start(
    const std::vector<std::string>& flags) {
  const std::string device = TestDevice();
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "COALESCE_TEST_DEVICE must be cpu or cuda, not '", device, "'"));
  }
  std::vector<std::string> argv = {
      BinaryPath("COALESCE_SERVER_BINARY", COALESCE_SERVER_BINARY),
      "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
      absl::StrCat("--device=", device)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string dir = MakeTempDir("server");
  const pid_t pid = SpawnTo(argv, dir + "/stdout.txt", dir + "/stderr.txt");
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(errno)));
  }
  std::unique_ptr<ServerUnderTest> server(new ServerUnderTest(pid, dir));
  // The server prints exactly
  //   coalesce-server listening on HOST:PORT (backend NAME)
  //   coalesce-server metrics on HOST:PORT
  // once it serves; nothing else goes to stdout.
  const std::regex grpc_line("listening on [^ ]*:([0-9]+) ");
  const std::regex metrics_line("metrics on [^ ]*:([0-9]+)\n");
  const absl::Time limit = absl::Now() + kStartLimit;
  while (absl::Now() < limit) {
    const std::string out = ReadWhole(dir + "/stdout.txt");
    std::smatch grpc, metrics;
    if (std::regex_search(out, grpc, grpc_line) &&
        std::regex_search(out, metrics, metrics_line)) {
      server->port_ = std::stoi(grpc[1]);
      server->metrics_port_ = std::stoi(metrics[1]);
      return server;
    }
    if (!server->Running()) {
      return absl::UnavailableError(
          absl::StrCat("the server exited before serving; stdout:\n", out,
                       "\nstderr:\n", server->LogTail()));
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no start-up lines within ", absl::FormatDuration(kStartLimit),
      "; stderr:\n", server->LogTail()));
}

ServerUnderTest::~ServerUnderTest() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string ServerUnderTest::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

bool ServerUnderTest::Running() {
  if (reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    std::fprintf(stderr, "server %d ended: %s\n", pid_,
                 DescribeWait(status).c_str());
    return false;
  }
  return true;
}

ServerUnderTest::Exit ServerUnderTest::Terminate(absl::Duration limit) {
  Exit exit;
  if (reaped_) return exit;
  const absl::Time signalled = absl::Now();
  kill(pid_, SIGTERM);
  while (waitpid(pid_, &exit.wait_status, WNOHANG) == 0) {
    if (absl::Now() - signalled > limit) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &exit.wait_status, 0);
      reaped_ = true;
      exit.seconds = absl::ToDoubleSeconds(absl::Now() - signalled);
      return exit;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  reaped_ = true;
  exit.exited = true;
  exit.seconds = absl::ToDoubleSeconds(absl::Now() - signalled);
  return exit;
}

std::string ServerUnderTest::LogTail(size_t bytes) const {
  const std::string log = ReadWhole(dir_ + "/stderr.txt");
  return log.size() <= bytes ? log : log.substr(log.size() - bytes);
}

absl::StatusOr<ProcessUsage> ReadUsage(pid_t pid) {
  ProcessUsage usage;
  const std::string proc = absl::StrCat("/proc/", pid);
  const std::string status = ReadWhole(proc + "/status");
  bool found = false;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    // "VmRSS:	   12345 kB"
    int64_t* field = nullptr;
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      field = &usage.rss_bytes;
    } else if (absl::ConsumePrefix(&line, "VmHWM:")) {
      field = &usage.peak_rss_bytes;
    } else {
      continue;
    }
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kib = 0;
    if (fields.empty() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[0]), &kib)) {
      break;
    }
    *field = kib * 1024;
    if (field == &usage.rss_bytes) found = true;
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("no VmRSS in ", proc, "/status"));
  }
  DIR* fds = opendir((proc + "/fd").c_str());
  if (fds == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", proc, "/fd: ", std::strerror(errno)));
  }
  while (const dirent* entry = readdir(fds)) {
    if (entry->d_name[0] != '.') ++usage.open_fds;
  }
  closedir(fds);
  // Fields after the command name, which is in parentheses and may hold
  // spaces: utime and stime are the 14th and 15th fields of the line.
  const std::string stat = ReadWhole(proc + "/stat");
  const size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("cannot parse ", proc, "/stat"));
  }
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close_paren + 2), ' ');
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::NotFoundError(absl::StrCat("cannot parse ", proc, "/stat"));
  }
  usage.cpu_seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  return usage;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect to port ", port, ": ", why));
  }
  timeval limit = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const std::string request =
      absl::StrCat("GET ", path,
                   " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string answer;
  char buffer[65536];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

void ExpectServing(Client& client, uint32_t seed) {
  absl::StatusOr<std::string> health = client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  constexpr int64_t kRows = 37, kCols = 53;
  const std::vector<float> values = RandomFloats(kRows * kCols, seed);
  v1::TransposeRequest request;
  v1::Tensor* input = request.mutable_input();
  input->set_dtype(v1::DATA_TYPE_FLOAT32);
  input->add_shape(kRows);
  input->add_shape(kCols);
  input->set_raw(FloatBytes(values));
  absl::StatusOr<v1::TransposeResponse> response = client.Transpose(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->output().raw(),
            FloatBytes(Transposed(values, kRows, kCols)));
}

void ExpectBounded(pid_t pid, const ProcessUsage& before, int64_t rss_allowance,
                   int fd_allowance) {
  const absl::Time limit = absl::Now() + absl::Seconds(5);
  absl::StatusOr<ProcessUsage> now;
  for (;;) {
    now = ReadUsage(pid);
    ASSERT_TRUE(now.ok()) << now.status();
    const bool within = now->rss_bytes <= before.rss_bytes + rss_allowance &&
                        now->open_fds <= before.open_fds + fd_allowance;
    if (within || absl::Now() > limit) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::fprintf(stderr,
               "server %d: VmRSS %.1f MiB (was %.1f, allowed +%.1f), "
               "%d fds (was %d, allowed +%d)\n",
               pid, now->rss_bytes / 1048576.0, before.rss_bytes / 1048576.0,
               rss_allowance / 1048576.0, now->open_fds, before.open_fds,
               fd_allowance);
  EXPECT_LE(now->rss_bytes, before.rss_bytes + rss_allowance)
      << "VmRSS grew by " << (now->rss_bytes - before.rss_bytes) << " bytes";
  EXPECT_LE(now->open_fds, before.open_fds + fd_allowance)
      << "open descriptors grew by " << (now->open_fds - before.open_fds);
}

std::ostream& operator<<(std::ostream& os, const CommandResult& r) {
  return os << "exit " << r.exit_code << "\n--- stdout:\n"
            << r.out << "--- stderr:\n"
            << r.err;
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration limit) {
  CommandResult result;
  const std::string dir = MakeTempDir("command");
  const pid_t pid = SpawnTo(argv, dir + "/out", dir + "/err");
  if (pid < 0) {
    result.err = absl::StrCat("cannot start ", argv[0]);
    return result;
  }
  const absl::Time deadline = absl::Now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadWhole(dir + "/out");
  result.err = ReadWhole(dir + "/err");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

std::string FindOnPath(absl::string_view name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string MakeTempDir(absl::string_view prefix) {
  std::string pattern =
      absl::StrCat(::testing::TempDir(), "coalesce-", prefix, "-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  return pattern;
}

bool WriteFile(const std::string& path, absl::string_view contents) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  return done == contents.size();
}

std::string RandomHex(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  size_t filled = 0;
  while (filled < raw.size()) {
    const ssize_t n = getrandom(raw.data() + filled, raw.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::perror("getrandom");
      std::abort();
    }
    filled += static_cast<size_t>(n);
  }
  std::string hex;
  for (const char c : raw) {
    absl::StrAppendFormat(&hex, "%02x", static_cast<unsigned char>(c));
  }
  return hex;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) {
    do {
      v = uniform(rng);
    } while (v == 0.0f);
  }
  return values;
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

std::vector<float> Transposed(const std::vector<float>& in, int64_t rows,
                              int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
  }
  return out;
}

}  // namespace coalesce::e2e
