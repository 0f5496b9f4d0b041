// What the end-to-end suites that drive the real coalesce-server binary
// share: start a server with flags on port 0 and read back its ports, watch
// the process through /proc (resident memory, open descriptors, CPU time),
// run another binary with a time limit, and make random data and secrets.
// The suites judge the server only by what a client sees and by what the
// kernel reports of the process, never by its internals.
//
// Thread-safety: a ServerUnderTest is started, stopped and destroyed from
// one thread; its accessors and the free functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace coalesce::e2e {

// The binary a test runs: $variable when set (a bundle on another
// machine), else the path it was built at.
std::string BinaryPath(const char* variable, const char* built);

// The backend the suites run the server on: COALESCE_TEST_DEVICE, "cpu"
// when unset, else "cpu" or "cuda" (anything else is a usage error that
// Start reports).
std::string TestDevice();

class ServerUnderTest {
 public:
  // Starts the server binary with --listen=127.0.0.1:0,
  // --metrics_listen=127.0.0.1:0, --device=TestDevice() and then flags, and
  // waits up to 60 s for its two start-up lines (gRPC port, metrics port).
  // stdout and stderr go to files in a directory of its own, so that its
  // logs can be shown when a test fails. The process is killed when the
  // test process dies.
  static absl::StatusOr<std::unique_ptr<ServerUnderTest>> Start(
      const std::vector<std::string>& flags);
  // SIGKILL if it still runs; removes its directory.
  ~ServerUnderTest();
  ServerUnderTest(const ServerUnderTest&) = delete;
  ServerUnderTest& operator=(const ServerUnderTest&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // 127.0.0.1:PORT.
  std::string address() const;
  // Whether the process has not exited (a zombie counts as exited).
  bool Running();

  struct Exit {
    bool exited = false;  // within the limit
    int wait_status = 0;
    double seconds = 0;  // from the signal to the exit
  };
  // SIGTERM, then waits up to limit; SIGKILL past it (exited false).
  Exit Terminate(absl::Duration limit);

  // The last bytes of the server's stderr (its log), while it lives.
  std::string LogTail(size_t bytes = 6000) const;

 private:
  ServerUnderTest(pid_t pid, std::string dir)
      : pid_(pid), dir_(std::move(dir)) {}

  pid_t pid_;
  const std::string dir_;
  int port_ = 0;
  int metrics_port_ = 0;
  bool reaped_ = false;
};

// What the kernel reports of a process.
struct ProcessUsage {
  int64_t rss_bytes = 0;       // VmRSS of /proc/PID/status
  int64_t peak_rss_bytes = 0;  // VmHWM: the most it ever held
  int open_fds = 0;            // entries of /proc/PID/fd
  double cpu_seconds = 0;      // utime + stime of /proc/PID/stat
};
absl::StatusOr<ProcessUsage> ReadUsage(pid_t pid);

// The server still does its job: health SERVING, and a transpose of random
// data (from seed) through client comes back bit-exact.
void ExpectServing(Client& client, uint32_t seed);

// Sanitizer builds keep shadow memory that grows with every heap page the
// traffic touches, so memory bounds in tests are wider there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// The process's resident memory grew by at most rss_allowance bytes and its
// open descriptors by at most fd_allowance since before. Memory and
// descriptors are released asynchronously (a tensor's last reference, a
// connection's close), so it waits up to 5 s for both to settle within the
// bounds before it fails.
void ExpectBounded(pid_t pid, const ProcessUsage& before, int64_t rss_allowance,
                   int fd_allowance);

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};
// For failure messages: the exit code and both outputs.
std::ostream& operator<<(std::ostream& os, const CommandResult& r);

// Runs argv (argv[0] a path) with stdout and stderr captured; killed past
// limit (exit code 128 + SIGKILL).
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration limit);

// The path of the executable of this name on PATH; empty when none.
std::string FindOnPath(absl::string_view name);

// A fresh directory under the test temporary directory.
std::string MakeTempDir(absl::string_view prefix);
// Writes contents to path (mode 0600); false on failure.
bool WriteFile(const std::string& path, absl::string_view contents);
// bytes random bytes from the kernel, as 2 * bytes hex digits.
std::string RandomHex(int bytes);
// n values uniform in [-1, 1], none zero, from seed.
std::vector<float> RandomFloats(size_t n, uint32_t seed);

// GET path from 127.0.0.1:port over a plain socket (HTTP/1.1, connection
// closed): the whole answer, status line and headers included; waits up to
// 5 s for each read.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);
// Their little-endian bytes (the wire format of float32 tensors).
std::string FloatBytes(const std::vector<float>& values);
// out[j][i] = in[i][j] of a rows x cols row-major matrix.
std::vector<float> Transposed(const std::vector<float>& in, int64_t rows,
                              int64_t cols);

}  // namespace coalesce::e2e
