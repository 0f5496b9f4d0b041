// The transpose kernels, internal to kernels/cuda: batched 2-D transposes
// [batch, rows, cols] -> [batch, cols, rows] that move raw element bits (2
// or 4 bytes), so one kernel serves float32 and the 16-bit types. The
// transpose op's variants (transpose/*_variant.cc) and the layout
// conversions that collapse to a batched transpose (layout/*_variant.cc)
// both run them. Each kernel's file defines its TransposeKernel beside the
// kernel: what the kernel can run, the share of the copy roofline it
// reaches, and its launcher. Pointers are device pointers; launches go on
// ctx's stream and are recorded in ctx.launch. Constants and pure functions
// (launches aside); thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

struct TransposeShape {
  int elem_bytes = 4;
  int64_t batch = 1, rows = 0, cols = 0;
};

// One kernel's answers for a shape.
struct TransposeKernel {
  // OK when the kernel can run s, else UNIMPLEMENTED naming the constraint.
  absl::Status (*supports)(const TransposeShape& s);
  // Fraction of the copy roofline the kernel is expected to reach on s: the
  // selection heuristic's input.
  double (*efficiency)(const TransposeShape& s);
  absl::Status (*launch)(const TransposeShape& s, const void* in, void* out,
                         ExecContext& ctx);
};

// OK for the element sizes every kernel here moves: 2 and 4 bytes.
inline absl::Status CheckTransposeElementBytes(const TransposeShape& s) {
  if (s.elem_bytes != 4 && s.elem_bytes != 2) {
    return absl::UnimplementedError("element size must be 2 or 4 bytes");
  }
  return absl::OkStatus();
}

// basic.cu, the references the faster kernels are measured against:
// one thread per element, coalesced reads and strided writes;
extern const TransposeKernel kNaiveTranspose;
// a 32x32 shared-memory tile without padding (32-way bank conflicts on the
// column read);
extern const TransposeKernel kSmemTiledTranspose;
// the 32x33 tile: conflict-free.
extern const TransposeKernel kSmemPaddedTranspose;

// vec16.cu: 16-byte loads and stores, tiles of 64 word-rows x 32 columns;
extern const TransposeKernel kVec16Transpose;
// the same with 64 columns: 128-byte row segments for 16-bit types, twice
// the bytes in flight.
extern const TransposeKernel kVec16WideTranspose;
// The divisibility 16-byte vectors need (vec16, vec16_wide, tma): float32
// rows and columns in multiples of 4; 16-bit ones in multiples of 8 (rows
// pair up into words, and 4 words make a 16-byte store). Checks the
// element size first.
absl::Status CheckVec16Divisible(const TransposeShape& s);

// tma.cu: 256-byte tiles read by the tensor memory accelerator, several in
// flight per persistent block (sm_90).
extern const TransposeKernel kTmaTranspose;
// What a tma call costs beyond naive's (transpose_variant.h's CallSeconds),
// in the transpose op and in the layouts it runs: its persistent blocks
// start by fetching the tensor maps and filling their pipelines. With it,
// 16-bit layouts of 0.2-3 MB stop going to tma where vec16 is 1.1-1.6x
// faster (kernels/cuda/testdata/layout_classes_seed7.txt).
inline constexpr double kTmaCallSeconds = 0.96e-6;
// Whether tma's early start prefetches every stage's tile, not only the
// first: inputs past 1.5x ctx's L2.
bool TmaPrefetchesEveryStage(const TransposeShape& s, const ExecContext& ctx);

// small_dim.cu: one side <= 16, both sides coalesced through registers or
// a shared-memory gather, no wasted tile columns.
extern const TransposeKernel kSmallDimTranspose;
// What small_dim's block count leaves of its efficiency on a device of
// `multiprocessors` SMs: 1 on its register path or where the count of SMs
// is unknown, else the share of the eight blocks per SM that its
// shared-memory path needs resident, at most 1.
double SmallDimBlockFactor(const TransposeShape& s, int multiprocessors);
// Whether small_dim runs s on its register path (a short side of 2 or
// more, the long side whole 16-byte vectors) rather than shared memory.
bool SmallDimInRegisters(const TransposeShape& s);

}  // namespace coalesce::cuda
