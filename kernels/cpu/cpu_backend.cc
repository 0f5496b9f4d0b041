#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

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

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : device_(CpuDeviceInfo(threads)) {
    omp_set_num_threads(device_.multiprocessors);
    // Requests run on gRPC threads; keep one level of parallelism.
    omp_set_max_active_levels(1);
    openblas_set_num_threads(device_.multiprocessors);
    RegisterCpuVariants(registry_);
  }
  BackendKind kind() const override { return BackendKind::kCpu; }
  const DeviceInfo& device() const override { return device_; }
  const VariantRegistry& registry() const override { return registry_; }

  absl::Status Execute(const KernelVariant& v, const Problem& p,
                       const Operands& host, RunResult* result) override {
    ExecContext ctx;
    ctx.device = &device_;
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = v.Run(p, host, ctx);
    const auto end = std::chrono::steady_clock::now();
    if (result != nullptr) {
      result->kernel_seconds =
          std::chrono::duration<double>(end - start).count();
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
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace coalesce
