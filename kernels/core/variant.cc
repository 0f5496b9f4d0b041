#include "kernels/core/variant.h"

#include <algorithm>

namespace coalesce {

namespace {
// Fixed per-call cost that dominates tiny problems on the CPU: a thread-team
// start.
constexpr double kCpuCallSeconds = 2e-6;
}  // namespace

double RooflineBandwidth(const DeviceInfo& dev) {
  return dev.measured_copy_bandwidth > 0 ? dev.measured_copy_bandwidth
                                         : dev.theoretical_bandwidth;
}

double RooflineFlops(const Problem& p, const DeviceInfo& dev) {
  if (const auto* g = std::get_if<GemmProblem>(&p)) {
    if ((g->dtype != DType::kFloat32 || g->allow_tf32) &&
        dev.peak_tensor_flops > 0) {
      return dev.peak_tensor_flops;
    }
  }
  return dev.peak_fp32_flops;
}

double TileUtilization(int64_t rows, int64_t cols, int64_t tile_rows,
                       int64_t tile_cols) {
  auto padded = [](int64_t x, int64_t tile) {
    return (x + tile - 1) / tile * tile;
  };
  return static_cast<double>(rows * cols) /
         static_cast<double>(padded(rows, tile_rows) * padded(cols, tile_cols));
}

RooflineSeconds Roofline(const Problem& p, const DeviceInfo& dev) {
  const double bw = RooflineBandwidth(dev);
  const double peak = RooflineFlops(p, dev);
  RooflineSeconds r;
  r.memory = bw > 0 ? static_cast<double>(MinBytesMoved(p)) / bw : 0;
  r.math = peak > 0 ? Flops(p) / peak : 0;
  return r;
}

double KernelVariant::EstimateSeconds(const Problem& p,
                                      const DeviceInfo& dev) const {
  const double eff = std::clamp(Efficiency(p, dev), 1e-3, 1.0);
  const RooflineSeconds r = Roofline(p, dev);
  const double fixed =
      dev.backend == BackendKind::kCuda ? kGpuLaunchSeconds : kCpuCallSeconds;
  return std::max(r.memory, r.math) / eff + fixed;
}

}  // namespace coalesce
