#include "server/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace coalesce::metrics {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The system's boot time (btime in /proc/stat), seconds since the epoch.
double BootTimeSeconds() {
  std::istringstream stat(ReadFile("/proc/stat"));
  std::string line;
  while (std::getline(stat, line)) {
    absl::string_view rest = line;
    int64_t seconds = 0;
    if (absl::ConsumePrefix(&rest, "btime ") &&
        absl::SimpleAtoi(rest, &seconds)) {
      return static_cast<double>(seconds);
    }
  }
  return -1;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor of dir itself
}

}  // namespace

double ProcessResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return static_cast<double>(resident_pages) * sysconf(_SC_PAGESIZE);
}

ProcessStats ReadProcessStats() {
  ProcessStats stats;
  // /proc/self/stat: "pid (comm) state ..." where comm may hold spaces and
  // parentheses; the fields after the last ')' are fixed (proc(5)).
  const std::string stat = ReadFile("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    const std::vector<absl::string_view> f = absl::StrSplit(
        absl::string_view(stat).substr(paren + 2), ' ', absl::SkipEmpty());
    // f[0] is field 3 (state): field N is f[N - 3].
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    int64_t utime = 0, stime = 0, threads = 0, start = 0, vsize = 0, rss = 0;
    if (f.size() > 21 && absl::SimpleAtoi(f[11], &utime) &&
        absl::SimpleAtoi(f[12], &stime) && absl::SimpleAtoi(f[17], &threads) &&
        absl::SimpleAtoi(f[19], &start) && absl::SimpleAtoi(f[20], &vsize) &&
        absl::SimpleAtoi(f[21], &rss)) {
      stats.cpu_seconds = static_cast<double>(utime + stime) / ticks;
      stats.threads = static_cast<double>(threads);
      stats.virtual_bytes = static_cast<double>(vsize);
      stats.resident_bytes = static_cast<double>(rss) * page;
      const double boot = BootTimeSeconds();
      if (boot >= 0) stats.start_time_seconds = boot + start / ticks;
    }
  }
  stats.open_fds = OpenFds();
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    stats.max_fds = limit.rlim_cur == RLIM_INFINITY
                        ? -1
                        : static_cast<double>(limit.rlim_cur);
  }
  return stats;
}

void AddProcessMetrics(Registry* registry) {
  Gauge& resident = registry
                        ->AddGauge("process_resident_memory_bytes",
                                   "Resident memory size in bytes.")
                        .Add({});
  Gauge& virtual_memory = registry
                              ->AddGauge("process_virtual_memory_bytes",
                                         "Virtual memory size in bytes.")
                              .Add({});
  Gauge& open_fds =
      registry->AddGauge("process_open_fds", "Number of open file descriptors.")
          .Add({});
  Gauge& max_fds = registry
                       ->AddGauge("process_max_fds",
                                  "Maximum number of open file descriptors.")
                       .Add({});
  Gauge& threads =
      registry->AddGauge("process_threads", "Number of OS threads.").Add({});
  Gauge& start_time =
      registry
          ->AddGauge("process_start_time_seconds",
                     "Start time of the process since the Unix epoch in "
                     "seconds.")
          .Add({});
  Counter& cpu = registry
                     ->AddCounter("process_cpu_seconds_total",
                                  "Total user and system CPU time spent in "
                                  "seconds.")
                     .Add({});
  registry->AddCollectHook([&] {
    const ProcessStats s = ReadProcessStats();
    if (s.resident_bytes >= 0) resident.Set(s.resident_bytes);
    if (s.virtual_bytes >= 0) virtual_memory.Set(s.virtual_bytes);
    if (s.open_fds >= 0) open_fds.Set(s.open_fds);
    if (s.max_fds >= 0) max_fds.Set(s.max_fds);
    if (s.threads >= 0) threads.Set(s.threads);
    if (s.start_time_seconds >= 0) start_time.Set(s.start_time_seconds);
    RaiseTo(cpu, s.cpu_seconds);
  });
}

}  // namespace coalesce::metrics
