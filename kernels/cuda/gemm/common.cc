#include "kernels/cuda/gemm/common.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace coalesce::cuda {
namespace {

bool Multiple(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// The output tiles of a tile_m x tile_n tiled GEMM, every batch.
int64_t OutputTiles(const GemmProblem& p, int tile_m, int tile_n) {
  return p.batch * ((p.m + tile_m - 1) / tile_m) *
         ((p.n + tile_n - 1) / tile_n);
}

}  // namespace

absl::Status CheckGemmCommon(absl::string_view variant, const GemmProblem& p,
                             int tile_m, int tile_n) {
  if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 1) {
    return absl::UnimplementedError(absl::StrCat(
        variant, ": batch, m, n and k must be >= 1 (got batch=", p.batch,
        " m=", p.m, " n=", p.n, " k=", p.k, ")"));
  }
  if (p.m > kGemmMaxDim || p.n > kGemmMaxDim || p.k > kGemmMaxDim) {
    return absl::UnimplementedError(
        absl::StrCat(variant, ": m, n and k must be <= ", kGemmMaxDim,
                     " (32-bit row and column indices)"));
  }
  if (p.batch > 1 &&
      (p.stride_a < 0 || p.stride_b < 0 || (p.has_c && p.stride_c < 0))) {
    return absl::UnimplementedError(
        absl::StrCat(variant, ": batch strides must be >= 0"));
  }
  if (tile_m == 0) return absl::OkStatus();
  const int64_t tiles =
      ((p.m + tile_m - 1) / tile_m) * ((p.n + tile_n - 1) / tile_n);
  if (tiles > kMaxGridX) {
    return absl::UnimplementedError(
        absl::StrCat(variant, ": ", tiles, " output tiles of ", tile_m, "x",
                     tile_n, " exceed the grid's ", kMaxGridX));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmVectorLayout(absl::string_view variant,
                                   const GemmProblem& p, int vec_elems,
                                   absl::string_view purpose) {
  const struct {
    const char* what;
    int64_t elems;
  } rows[] = {
      {p.trans_a ? "A^T's rows (m, A is [k,m])" : "A's rows (k, A is [m,k])",
       p.trans_a ? p.m : p.k},
      {p.trans_b ? "B^T's rows (k, B is [n,k])" : "B's rows (n, B is [k,n])",
       p.trans_b ? p.k : p.n},
  };
  for (const auto& r : rows) {
    if (r.elems % vec_elems != 0) {
      return absl::UnimplementedError(absl::StrCat(
          variant, ": ", r.what, " hold ", r.elems,
          " elements, not a multiple of ", vec_elems, " (", purpose, ")"));
    }
  }
  if (p.batch > 1) {
    const struct {
      const char* what;
      int64_t stride;
    } strides[] = {{"stride_a", p.stride_a}, {"stride_b", p.stride_b}};
    for (const auto& s : strides) {
      if (s.stride % vec_elems != 0) {
        return absl::UnimplementedError(absl::StrCat(
            variant, ": ", s.what, " = ", s.stride, " is not a multiple of ",
            vec_elems, " elements (", purpose, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGemmPointers(absl::string_view variant, const Operands& ops,
                               int bytes, bool check_cd) {
  const bool ok = Multiple(ops.inputs[kGemmA], bytes) &&
                  Multiple(ops.inputs[kGemmB], bytes) &&
                  (!check_cd || (Multiple(ops.inputs[kGemmC], bytes) &&
                                 Multiple(ops.outputs[kGemmD], bytes)));
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      variant, ": operand base pointers must be ", bytes,
      "-byte aligned (the CUDA backend's allocations are 256-byte aligned)"));
}

bool GemmPointersAligned(const Operands& ops, int bytes) {
  return Multiple(ops.inputs[kGemmA], bytes) &&
         Multiple(ops.inputs[kGemmB], bytes) &&
         Multiple(ops.inputs[kGemmC], bytes) &&
         Multiple(ops.outputs[kGemmD], bytes);
}

double SimtEfficiency(const GemmProblem& p, const DeviceInfo& dev,
                      double fraction_of_fp32_peak) {
  const bool tensor_peak = p.dtype != DType::kFloat32 || p.allow_tf32;
  if (tensor_peak && dev.peak_tensor_flops > 0 && dev.peak_fp32_flops > 0) {
    return fraction_of_fp32_peak * dev.peak_fp32_flops / dev.peak_tensor_flops;
  }
  return fraction_of_fp32_peak;
}

bool GemmOperandsFromHbm(const GemmProblem& p, const DeviceInfo& dev) {
  return dev.l2_cache_bytes > 0 && static_cast<double>(MinBytesMoved(p)) * 100 >
                                       static_cast<double>(dev.l2_cache_bytes);
}

double SimtGemmSeconds(const GemmProblem& p, const DeviceInfo& dev,
                       const SimtGemmCost& c) {
  auto up = [](int64_t x, int64_t to) { return (x + to - 1) / to; };
  const double batch = static_cast<double>(p.batch);
  const double steps = static_cast<double>(up(p.k, c.k_step));
  // With B transposed, a row of tile_n outputs loads from min(N, tile_n)
  // rows of B.
  const double trans_b =
      p.trans_b
          ? c.trans_b_step_seconds *
                static_cast<double>(std::min<int64_t>(p.n, c.tile_n)) / c.tile_n
          : 0;
  const double step = c.step_seconds +
                      (GemmOperandsFromHbm(p, dev) ? c.hbm_step_seconds : 0) +
                      trans_b;
  const double padded_flops = 2.0 * batch *
                              static_cast<double>(c.pad_m * up(p.m, c.pad_m)) *
                              static_cast<double>(c.pad_n * up(p.n, c.pad_n)) *
                              static_cast<double>(p.k);
  const double t_math =
      dev.peak_fp32_flops > 0
          ? padded_flops /
                (std::clamp(c.efficiency, 1e-3, 1.0) * dev.peak_fp32_flops)
          : 0;
  const double blocks = static_cast<double>(OutputTiles(p, c.tile_m, c.tile_n));
  const double blocks_per_sm = blocks / std::max(dev.multiprocessors, 1);
  const double d_bytes = batch * static_cast<double>(p.m) *
                         static_cast<double>(p.n) *
                         static_cast<double>(ElementSize(p.dtype));
  const double store = p.n % 4 == 0 ? c.vector_store_seconds_per_byte
                                    : c.scalar_store_seconds_per_byte;
  return kGpuLaunchSeconds + c.extra_seconds + steps * step + t_math +
         blocks_per_sm * c.block_seconds + d_bytes * store;
}

double TiledGemmFill(const GemmProblem& p, const DeviceInfo& dev, int tile_m,
                     int tile_n, int ctas_per_sm) {
  const double utilization = TileUtilization(p.m, p.n, tile_m, tile_n);
  if (dev.multiprocessors <= 0 || ctas_per_sm <= 0) return utilization;
  const int64_t tiles = OutputTiles(p, tile_m, tile_n);
  const int64_t slots = int64_t{dev.multiprocessors} * ctas_per_sm;
  const int64_t waves = (tiles + slots - 1) / slots;
  return utilization * static_cast<double>(tiles) /
         static_cast<double>(waves * slots);
}

double TensorWavesSeconds(const GemmProblem& p, const DeviceInfo& dev,
                          int tile_m, int tile_n, double wave_seconds,
                          double peak_fraction) {
  if (dev.multiprocessors <= 0 || dev.peak_tensor_flops <= 0 ||
      peak_fraction <= 0) {
    return 0;
  }
  const int64_t tiles = OutputTiles(p, tile_m, tile_n);
  const double waves = static_cast<double>((tiles + dev.multiprocessors - 1) /
                                           dev.multiprocessors);
  const double sm_flops =
      peak_fraction * dev.peak_tensor_flops / dev.multiprocessors;
  const double per_k = 2.0 * tile_m * tile_n / sm_flops;
  return kGpuLaunchSeconds +
         waves * (wave_seconds + static_cast<double>(p.k) * per_k);
}

double TensorEfficiency(const GemmProblem& p, double fraction_of_16bit_peak) {
  return p.dtype == DType::kFloat32 ? fraction_of_16bit_peak / 2
                                    : fraction_of_16bit_peak;
}

}  // namespace coalesce::cuda
