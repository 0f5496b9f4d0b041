// The transpose op's CUDA variants: one class over the kernels of
// transpose_kernels.h; each kernel is a named, selectable variant.
#include "absl/strings/str_cat.h"
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

constexpr double kSmallDimCallSeconds = 0.3e-6;

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
    // small_dim's launch and index set-up cost more than naive's: on the
    // H200 sweep's transposes of a few KB (bench/results/h200/
    // selection-sweep) it ran a median 0.2-0.4 us slower, up to 1.5x, where
    // byte counts cannot tell them apart.
    return KernelVariant::EstimateSeconds(p, dev) +
           (kernel_ == TransposeKernel::kSmallDim ? kSmallDimCallSeconds : 0);
  }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem& p,
                                 const DeviceInfo&) const override {
    return TransposeSupports(kernel_, ShapeOf(p));
  }
  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    return TransposeEfficiency(kernel_, ShapeOf(std::get<TransposeProblem>(p)));
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
