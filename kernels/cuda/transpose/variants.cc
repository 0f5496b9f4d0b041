// The transpose op's CUDA variants: one class over the kernels of
// transpose_kernels.h; each kernel is a named, selectable variant.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/transpose/internal.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

struct KernelDoc {
  const char* suffix;
  const char* description;
};

KernelDoc DocOf(TransposeKernel k) {
  switch (k) {
    case TransposeKernel::kNaive:
      return {"naive",
              "one thread per element: coalesced reads, strided writes (the "
              "seeds' anti-pattern, kept as the baseline)"};
    case TransposeKernel::kSmemTiled:
      return {"smem_tiled",
              "32x32 shared-memory tile without padding: coalesced both ways, "
              "32-way bank conflicts on the column read"};
    case TransposeKernel::kSmemPadded:
      return {"smem_padded", "32x33 shared-memory tile: no bank conflicts"};
    case TransposeKernel::kVec16:
      return {"vec16",
              "16-byte loads and stores, 16-bit types paired into words, "
              "64-word-row conflict-free tile"};
    case TransposeKernel::kVec16Wide:
      return {"vec16_wide",
              "vec16 with 64-column tiles: 128-byte row segments for 16-bit "
              "types, twice the bytes in flight per thread"};
    case TransposeKernel::kTma:
      return {"tma",
              "256-byte tiles read by the tensor memory accelerator (swizzled "
              "4-D boxes), 64 KB in flight per persistent block, 16-byte "
              "stores"};
    case TransposeKernel::kSmallDim:
      return {"small_dim",
              "one side <= 16: a contiguous run on one side, short runs on "
              "the other, gathered in shared memory; 16-byte accesses"};
  }
  return {"unknown", ""};
}

// What a call costs on top of naive's, where the bytes take no time. The
// H200 sweep of the fourteenth session (bench/results/h200/session14/
// transpose-tune; kernels/cuda/testdata/transpose_selection_seed7.txt, its
// training shapes): the median difference from naive over the shapes under
// 1 MB. The variants launched with an early start (vec16, vec16_wide, tma)
// pay 0.3-1 us for it there, where they were picked for shapes that
// smem_padded or naive ran 10-25% faster. small_dim's median is 0: the 0.3
// us it was charged since the fourth session stood for what the block count
// below (Efficiency) now models. With both, the heuristic alone picks
// within 10% of the fastest for 146 of the 148 seed-7 shapes (135 before)
// and 156 of the 159 held-out seed-8 shapes (143 before):
// selection_estimate_test.
double CallSeconds(TransposeKernel k) {
  switch (k) {
    case TransposeKernel::kNaive:
      return 0;
    case TransposeKernel::kSmemTiled:
      return 0.35e-6;
    case TransposeKernel::kSmemPadded:
      return 0.13e-6;
    case TransposeKernel::kVec16:
      return 0.39e-6;
    case TransposeKernel::kVec16Wide:
      return 0.29e-6;
    case TransposeKernel::kTma:
      return 0.96e-6;
    case TransposeKernel::kSmallDim:
      return 0;
  }
  return 0;
}

TransposeShape ShapeOf(const TransposeProblem& p) {
  return {static_cast<int>(ElementSize(p.dtype)), p.batch, p.rows, p.cols};
}

class TransposeVariant final
    : public TypedVariant<TransposeProblem, OpKind::kTranspose,
                          BackendKind::kCuda> {
 public:
  explicit TransposeVariant(TransposeKernel k)
      : kernel_(k), name_(absl::StrCat("transpose.cuda.", DocOf(k).suffix)) {}
  absl::string_view name() const override { return name_; }
  absl::string_view description() const override {
    return DocOf(kernel_).description;
  }
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    return KernelVariant::EstimateSeconds(p, dev) + CallSeconds(kernel_);
  }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem& p,
                                 const DeviceInfo&) const override {
    return TransposeSupports(kernel_, ShapeOf(p));
  }
  double Efficiency(const Problem& p, const DeviceInfo& dev) const override {
    const TransposeShape s = ShapeOf(std::get<TransposeProblem>(p));
    double eff = TransposeEfficiency(kernel_, s);
    // small_dim's shared-memory path runs a block per chunk of about 8 KB
    // and needs eight resident per SM to keep 64 KB in flight (its file
    // comment): with fewer, as on skinny shapes of a few hundred KB (8655x7:
    // 31 blocks), it runs latency-bound, 1.2-1.35x naive's time on the
    // H200 sweep of the fourteenth session.
    if (kernel_ == TransposeKernel::kSmallDim && !SmallDimInRegisters(s) &&
        dev.multiprocessors > 0) {
      eff *= std::min(1.0, static_cast<double>(SmallDimSharedBlocks(s)) /
                               (8.0 * dev.multiprocessors));
    }
    return eff;
  }
  absl::Status RunTyped(const TransposeProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    return LaunchTranspose(kernel_, ShapeOf(p), ops.inputs[0], ops.outputs[0],
                           ctx);
  }

 private:
  TransposeKernel kernel_;
  std::string name_;
};

}  // namespace

std::unique_ptr<KernelVariant> MakeTransposeVariant(TransposeKernel k) {
  return std::make_unique<TransposeVariant>(k);
}

}  // namespace coalesce::cuda
