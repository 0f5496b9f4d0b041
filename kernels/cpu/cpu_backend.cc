#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/const_init.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

extern "C" void openblas_set_num_threads(int);

namespace coalesce {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(
            absl::string_view(line).substr(colon + 1)));
      }
    }
  }
  return "cpu";
}

// Bytes read + written per second of a parallel memcpy of 128 MiB (far
// above any L3), best of five: the CPU's copy peak, which every bandwidth
// figure of this backend is divided by, as the GPU's is.
double MeasureCopyBandwidth(int threads) {
  constexpr size_t kBytes = size_t{128} << 20;
  std::unique_ptr<char[]> src(new char[kBytes]);
  std::unique_ptr<char[]> dst(new char[kBytes]);
  std::memset(src.get(), 0x3c, kBytes);
  std::memset(dst.get(), 0, kBytes);  // fault the pages in before timing
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const size_t lo = kBytes * t / threads, hi = kBytes * (t + 1) / threads;
      std::memcpy(dst.get() + lo, src.get() + lo, hi - lo);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    best = std::max(best, 2.0 * kBytes / s);
  }
  return best;
}

// MeasureCopyBandwidth once per process and thread count: the simulated
// devices of one server share the CPU, and each measurement costs about
// 200 ms of start-up.
double CopyBandwidth(int threads) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* measured = new std::map<int, double>();  // guarded by mu
  absl::MutexLock lock(&mu);
  auto [it, fresh] = measured->try_emplace(threads, 0.0);
  if (fresh) it->second = MeasureCopyBandwidth(threads);
  return it->second;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, int index, bool simulated)
      : device_(CpuDeviceInfo(threads)) {
    device_.ordinal = index;
    device_.simulated = simulated;
    omp_set_num_threads(device_.multiprocessors);
    // Requests run on gRPC threads; keep one level of parallelism.
    omp_set_max_active_levels(1);
    openblas_set_num_threads(device_.multiprocessors);
    device_.measured_copy_bandwidth = CopyBandwidth(device_.multiprocessors);
    RegisterCpuVariants(registry_);
  }
  BackendKind kind() const override { return BackendKind::kCpu; }
  const DeviceInfo& device() const override { return device_; }
  const VariantRegistry& registry() const override { return registry_; }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    // The thread count is a per-thread OpenMP setting: request threads do
    // not inherit the one the constructor set on its own thread.
    omp_set_num_threads(device_.multiprocessors);
    ExecContext ctx;
    ctx.device = &device_;
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = v.Run(p, host, ctx);
    const auto end = std::chrono::steady_clock::now();
    if (result != nullptr) {
      const auto seconds = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(t.time_since_epoch()).count();
      };
      result->kernel_seconds =
          std::chrono::duration<double>(end - start).count();
      result->kernel_begin = seconds(start);
      result->kernel_end = seconds(end);
      result->launch = ctx.launch;
    }
    return s;
  }

 private:
  DeviceInfo device_;
  VariantRegistry registry_;
};

}  // namespace

DeviceInfo CpuDeviceInfo(int threads) {
  DeviceInfo d;
  d.backend = BackendKind::kCpu;
  d.name = CpuModelName();
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  d.multiprocessors = threads > 0 ? threads : (hw > 0 ? hw : 1);
  // Nominal figures for the roofline heuristic only (not measured): about
  // 10 GB/s of copy bandwidth per core and 32 FP32 FLOP/cycle at 3 GHz.
  d.theoretical_bandwidth = 10e9 * d.multiprocessors;
  d.peak_fp32_flops = 96e9 * d.multiprocessors;
  return d;
}

std::unique_ptr<Backend> CreateCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(threads, 0, false);
}

std::unique_ptr<Backend> CreateSimulatedCpuDevice(int threads, int index) {
  return std::make_unique<CpuBackend>(threads, index, true);
}

}  // namespace coalesce
