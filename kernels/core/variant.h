// The kernel-variant interface. A variant answers two separate questions
// (as CUTLASS's can_implement and ggml-cuda's should_use_* do): can it run
// this problem correctly (CanImplement: hard constraints, cheap, no side
// effects) and how well does it suit it (EstimateSeconds, for selection).
// Run executes on operands already in the backend's memory space. Variants
// are stateless after construction and safe to call from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/device_info.h"
#include "kernels/core/problem.h"

namespace coalesce {

// Where an operand handed to Backend::Execute lives: host memory (a
// request's bytes, a shared-memory mapping) or the backend's resident memory
// (Backend::AllocateResident: device memory on a GPU backend), which Execute
// uses in place, with no staging.
enum class MemorySpace : uint8_t { kHost, kResident };

// Pointers to operands, in the operand order of problem.h; null for absent
// optional operands. A variant's Run gets them in the backend's memory
// space. Backend::Execute gets them where the caller has them: the spaces
// say where (an empty or shorter vector means host memory); variants ignore
// the spaces.
struct Operands {
  absl::InlinedVector<const void*, 6> inputs;
  absl::InlinedVector<void*, 2> outputs;
  absl::InlinedVector<MemorySpace, 6> input_spaces;
  absl::InlinedVector<MemorySpace, 2> output_spaces;

  MemorySpace input_space(size_t i) const {
    return i < input_spaces.size() ? input_spaces[i] : MemorySpace::kHost;
  }
  MemorySpace output_space(size_t i) const {
    return i < output_spaces.size() ? output_spaces[i] : MemorySpace::kHost;
  }
};

// What a GPU variant reports about the launch it made (the largest one, when
// it launches several).
struct LaunchInfo {
  int64_t grid[3] = {0, 0, 0};
  int64_t block[3] = {0, 0, 0};
  int64_t shared_memory_bytes = 0;
  int registers_per_thread = 0;
  double theoretical_occupancy = 0;  // 0..1
  double waves = 0;
  int launches = 0;
  // The call included one-time work that is not the kernel's: a kernel's
  // first launch in the process (CUDA loads its module lazily, inside the
  // timed span) or a library plan built for a new shape. Its timing is
  // reported but kept out of the bandwidth and occupancy metrics.
  bool cold = false;
};

// Per-call execution context supplied by the backend.
struct ExecContext {
  void* stream = nullptr;  // cudaStream_t on the CUDA backend
  const DeviceInfo* device = nullptr;
  LaunchInfo launch;  // filled by GPU variants
};

// The roofline ceilings of p on dev, shared by the selection estimates and
// the kernel reports: the measured copy bandwidth (the theoretical one where
// none was measured), and the FLOP/s of the unit that runs p (tensor cores
// for 16-bit and TF32 GEMMs, FP32 otherwise).
double RooflineBandwidth(const DeviceInfo& dev);
double RooflineFlops(const Problem& p, const DeviceInfo& dev);
// p's minimum bytes at RooflineBandwidth and its FLOPs at RooflineFlops, in
// seconds (0 where the ceiling is unknown): the two bounds of a roofline
// estimate before any efficiency.
struct RooflineSeconds {
  double memory = 0;
  double math = 0;
};
RooflineSeconds Roofline(const Problem& p, const DeviceInfo& dev);

// Share of a rows x cols matrix's tile_rows x tile_cols tiles that carries
// data (an edge tile costs as much as a full one): scales a tiled variant's
// Efficiency.
double TileUtilization(int64_t rows, int64_t cols, int64_t tile_rows,
                       int64_t tile_cols);

// Fixed per-call cost that dominates tiny problems on a GPU: a kernel
// launch, about 3 us end to end on the H200 (graph-replayed kernels of a few
// KB took 3.3-4.8 us in the selection sweep).
inline constexpr double kGpuLaunchSeconds = 3e-6;

// A variant's cache of per-shape plans, for the server's metrics.
struct PlanCacheStats {
  int64_t plans = 0;       // cached now
  int64_t capacity = 0;    // the most it keeps
  uint64_t evictions = 0;  // dropped to make room, since start
};

class KernelVariant {
 public:
  virtual ~KernelVariant() = default;
  // Stable API: "op.backend.variant", e.g. "transpose.cuda.smem_padded".
  virtual absl::string_view name() const = 0;
  virtual absl::string_view description() const = 0;
  virtual OpKind op() const = 0;
  virtual BackendKind backend() const = 0;
  // Raised (by hand, in the variant's file) when a rewrite changes how fast
  // the variant runs, so that choices measured before it stop applying: a
  // revision above 0 enters its op's variant set version
  // (VariantSetVersion), which sets aside the tuned entries of that op
  // recorded under the old one and fails the shipped table's test until
  // the op is swept again. 0 hashes as before revisions existed.
  virtual int revision() const { return 0; }
  // OK when Run would compute this problem correctly on this device;
  // otherwise UNIMPLEMENTED saying which constraint fails.
  virtual absl::Status CanImplement(const Problem& p,
                                    const DeviceInfo& dev) const = 0;
  // Estimated seconds for this problem (lower is better); the default is a
  // roofline estimate scaled by Efficiency, plus a fixed per-call cost
  // (kGpuLaunchSeconds on a GPU).
  virtual double EstimateSeconds(const Problem& p, const DeviceInfo& dev) const;
  virtual absl::Status Run(const Problem& p, const Operands& ops,
                           ExecContext& ctx) const = 0;
  // Its cache of per-shape plans, where it keeps one.
  virtual std::optional<PlanCacheStats> plan_cache() const {
    return std::nullopt;
  }

 protected:
  // Fraction of the roofline this variant typically reaches on p (0..1].
  virtual double Efficiency(const Problem& p, const DeviceInfo& dev) const {
    return 0.5;
  }
};

// Base for variants of one op: dispatches on the problem type.
template <typename P, OpKind kOp, BackendKind kBackend>
class TypedVariant : public KernelVariant {
 public:
  OpKind op() const final { return kOp; }
  BackendKind backend() const final { return kBackend; }
  absl::Status CanImplement(const Problem& p,
                            const DeviceInfo& dev) const final {
    const P* typed = std::get_if<P>(&p);
    if (typed == nullptr) {
      return absl::InvalidArgumentError("problem is not of this variant's op");
    }
    return CanImplementTyped(*typed, dev);
  }
  absl::Status Run(const Problem& p, const Operands& ops,
                   ExecContext& ctx) const final {
    const P* typed = std::get_if<P>(&p);
    if (typed == nullptr) {
      return absl::InvalidArgumentError("problem is not of this variant's op");
    }
    return RunTyped(*typed, ops, ctx);
  }

 protected:
  virtual absl::Status CanImplementTyped(const P& p,
                                         const DeviceInfo& dev) const = 0;
  virtual absl::Status RunTyped(const P& p, const Operands& ops,
                                ExecContext& ctx) const = 0;
};

}  // namespace coalesce
