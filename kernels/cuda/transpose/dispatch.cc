#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/transpose/internal.h"

namespace coalesce::cuda {
namespace {

// Elements per 16-byte vector, and the divisibility kVec16 needs: float32
// rows and columns in multiples of 4; 16-bit ones in multiples of 8 (rows
// pair up into words, and 4 words make a 16-byte store).
int64_t Vec16Multiple(int elem_bytes) { return elem_bytes == 4 ? 4 : 8; }

}  // namespace

absl::Status TransposeSupports(TransposeKernel k, const TransposeShape& s) {
  if (s.elem_bytes != 4 && s.elem_bytes != 2) {
    return absl::UnimplementedError("element size must be 2 or 4 bytes");
  }
  switch (k) {
    case TransposeKernel::kVec16:
    case TransposeKernel::kVec16Wide:
    case TransposeKernel::kTma: {
      const int64_t m = Vec16Multiple(s.elem_bytes);
      if (s.rows % m != 0 || s.cols % m != 0) {
        return absl::UnimplementedError(
            absl::StrCat("16-byte vectors need rows and cols divisible by ", m,
                         " for ", s.elem_bytes, "-byte elements"));
      }
      return absl::OkStatus();
    }
    case TransposeKernel::kSmallDim:
      if (std::min(s.rows, s.cols) > kSmallDimMax) {
        return absl::UnimplementedError(
            absl::StrCat("needs rows or cols <= ", kSmallDimMax));
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

double TransposeEfficiency(TransposeKernel k, const TransposeShape& s) {
  // Measured on the H200 (bench/results/h200, 8192^2 and 16384^2, fraction
  // of the copy peak): naive 0.13 fp32 / 0.07 16-bit (one element per
  // 32-byte sector written); unpadded tile 0.45 / 0.40 (32-way conflicts);
  // padded 0.80 / 0.42; vec16 and vec16_wide 0.90-0.93 / 0.84-0.90;
  // small_dim on 2^26-record AoS: 0.87-1.00 on its register path, 0.64-0.88
  // on its shared-memory path (lengths that are not whole 16-byte vectors).
  switch (k) {
    case TransposeKernel::kNaive:
      return s.elem_bytes == 4 ? 0.13 : 0.07;
    case TransposeKernel::kSmemTiled:
      return 0.42 * TileUtilization(s.rows, s.cols, 32, 32);
    case TransposeKernel::kSmemPadded:
      return (s.elem_bytes == 4 ? 0.8 : 0.42) *
             TileUtilization(s.rows, s.cols, 32, 32);
    case TransposeKernel::kVec16:
    case TransposeKernel::kVec16Wide: {
      const bool wide = k == TransposeKernel::kVec16Wide;
      const Vec16Tile t = Vec16TileOf(s, wide);
      return (wide ? 0.88 : 0.89) *
             TileUtilization(s.rows, s.cols, t.rows, t.cols);
    }
    case TransposeKernel::kTma: {
      // bench/results/h200/session6/tma-v3, back to back: 16-bit 0.85-0.93
      // (ahead of vec16_wide by 1-8%), float32 0.91-0.94 (behind it by up
      // to 2%, but at 4096^2).
      const Vec16Tile t = TmaTileOf(s);
      return (s.elem_bytes == 4 ? 0.87 : 0.91) *
             TileUtilization(s.rows, s.cols, t.rows, t.cols);
    }
    case TransposeKernel::kSmallDim:
      return SmallDimInRegisters(s) ? 0.95 : 0.8;
  }
  return 0.1;
}

absl::Status LaunchTranspose(TransposeKernel k, const TransposeShape& s,
                             const void* in, void* out, ExecContext& ctx) {
  switch (k) {
    case TransposeKernel::kVec16:
      return LaunchTransposeVec16(s, /*wide=*/false, in, out, ctx);
    case TransposeKernel::kVec16Wide:
      return LaunchTransposeVec16(s, /*wide=*/true, in, out, ctx);
    case TransposeKernel::kTma:
      return LaunchTransposeTma(s, in, out, ctx);
    case TransposeKernel::kSmallDim:
      return LaunchTransposeSmallDim(s, in, out, ctx);
    default:
      return LaunchTransposeBasic(k, s, in, out, ctx);
  }
}

}  // namespace coalesce::cuda
