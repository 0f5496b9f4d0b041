// transpose.cpu.blocked: [B,M,N] -> [B,N,M] through L1-sized tiles, parallel
// over tiles (kernels/cpu/transpose_impl.h).
#include "kernels/cpu/transpose_impl.h"
#include "kernels/cpu/variants.h"

namespace coalesce::cpu {
namespace {

// Fraction of CpuDeviceInfo's nominal 10 GB/s per thread reached on the
// 2-core dev VM for square float32 and 16-bit transposes of 256..2048: 0.7-1
// on 2 threads (15-19 GB/s), 0.65-1 on one (best of 1 s of Execute calls).
constexpr double kBlockedEfficiency = 0.8;

class TransposeBlockedVariant final
    : public TypedVariant<TransposeProblem, OpKind::kTranspose,
                          BackendKind::kCpu> {
 public:
  absl::string_view name() const override { return "transpose.cpu.blocked"; }
  absl::string_view description() const override {
    return "cache-blocked tiles (128-byte tile rows) gathered through an L1 "
           "buffer, OpenMP over tiles";
  }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem& p,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  absl::Status RunTyped(const TransposeProblem& p, const Operands& ops,
                        ExecContext&) const override {
    TransposeBatched(p.batch, p.rows, p.cols, ElementSize(p.dtype),
                     ops.inputs[0], ops.outputs[0]);
    return absl::OkStatus();
  }
  // Scaled by the share of its tiles that carry data: a [3, 6144]
  // transpose fills 3 of each tile's 32 rows, and there naive ran 3.4x
  // faster (`coalesce tune transpose --random_shapes=200` on the 2-core VM:
  // the unscaled constant chose within 10% of the fastest for 60% of the
  // shapes, every miss a side under 32).
  double Efficiency(const Problem& problem, const DeviceInfo&) const override {
    const auto& p = std::get<TransposeProblem>(problem);
    const int64_t tile = 128 / static_cast<int64_t>(ElementSize(p.dtype));
    return kBlockedEfficiency * TileUtilization(p.rows, p.cols, tile, tile);
  }
};

}  // namespace

std::unique_ptr<KernelVariant> NewTransposeBlocked() {
  return std::make_unique<TransposeBlockedVariant>();
}

}  // namespace coalesce::cpu
