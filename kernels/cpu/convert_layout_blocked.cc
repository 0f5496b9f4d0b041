// convert_layout.cpu.blocked: any permutation of rank <= 6, reduced first to
// its collapsed form (kernels/core/permute.h). Three shapes of work remain:
//   - the innermost dimension stays innermost: a gather of contiguous runs,
//     copied with memcpy;
//   - a (batched) 2-D transpose (NCHW<->NHWC, AoS<->SoA): the blocked
//     transpose shared with transpose.cpu.blocked;
//   - anything else: the same tiled transpose over the two dimensions that
//     are innermost in the input and in the output, batched over the rest,
//     so both sides of every tile are read and written in 128-byte rows.
// Elements are moved as raw bits.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/core/permute.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/transpose_impl.h"
#include "kernels/cpu/variants.h"

namespace coalesce::cpu {
namespace {

// Runs longer than this are split so a rank-1 (identity) copy or a handful
// of long runs still spread over all threads.
constexpr int64_t kCopyPieceBytes = int64_t{256} << 10;

// Rough fractions of CpuDeviceInfo's nominal copy bandwidth on the dev VM
// (one thread, best of 1 s): runs of 256 bytes and more copy at memcpy
// speed, above the nominal figure; runs of 4-8 bytes pay a memcpy call each
// (0.12-0.23); batched transposes as transpose.cpu.blocked (0.55-1.1 for
// NCHW->NHWC and AoS->SoA); the general strided case pays an offset
// computation per tile, which dominates for small tiles (0.38-0.87).
constexpr double kRunCopyEfficiency = 0.9;
constexpr double kShortRunCopyEfficiency = 0.15;
constexpr int64_t kShortRunBytes = 64;
constexpr double kTransposeEfficiency = 0.8;
constexpr double kGeneralEfficiency = 0.4;

using Dims = absl::InlinedVector<int64_t, kMaxRank>;

Dims RowMajorStrides(const Shape& shape) {
  Dims s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    s[d] = s[d + 1] * shape[d + 1];
  }
  return s;
}

// Walks the input offsets of consecutive output runs: an odometer over the
// outer output dimensions.
class RunCursor {
 public:
  RunCursor(const Dims& extent, const Dims& stride, int64_t run)
      : extent_(extent), stride_(stride), index_(extent.size(), 0) {
    for (int d = static_cast<int>(extent_.size()) - 1; d >= 0; --d) {
      index_[d] = run % extent_[d];
      run /= extent_[d];
      offset_ += index_[d] * stride_[d];
    }
  }
  int64_t offset() const { return offset_; }
  void Next() {
    for (int d = static_cast<int>(extent_.size()) - 1; d >= 0; --d) {
      offset_ += stride_[d];
      if (++index_[d] < extent_[d]) return;
      offset_ -= extent_[d] * stride_[d];
      index_[d] = 0;
    }
  }

 private:
  const Dims& extent_;
  const Dims& stride_;
  Dims index_;
  int64_t offset_ = 0;
};

// The innermost input dimension stays innermost: out is the input's runs of
// that dimension, gathered in output order.
void CopyRuns(const CollapsedPermutation& c, size_t es, const char* in,
              char* out) {
  const int rank = static_cast<int>(c.perm.size());
  const Dims in_stride = RowMajorStrides(c.in_shape);
  Dims extent, stride;  // outer output dims; input strides in bytes
  for (int i = 0; i + 1 < rank; ++i) {
    extent.push_back(c.in_shape[c.perm[i]]);
    stride.push_back(in_stride[c.perm[i]] * static_cast<int64_t>(es));
  }
  const int64_t run_bytes = c.in_shape[rank - 1] * static_cast<int64_t>(es);
  int64_t runs = 1;
  for (int64_t e : extent) runs *= e;
  const int64_t pieces = (run_bytes + kCopyPieceBytes - 1) / kCopyPieceBytes;
  const int64_t items = runs * pieces;
#pragma omp parallel if (2 * runs * run_bytes >= kParallelMinBytes)
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    const int64_t begin = items * t / threads;
    const int64_t end = items * (t + 1) / threads;
    if (begin < end) {
      RunCursor cursor(extent, stride, begin / pieces);
      int64_t run = begin / pieces;
      for (int64_t item = begin; item < end; ++item) {
        for (; run < item / pieces; ++run) cursor.Next();
        const int64_t lo = (item % pieces) * kCopyPieceBytes;
        const int64_t len = std::min(kCopyPieceBytes, run_bytes - lo);
        std::memcpy(out + run * run_bytes + lo, in + cursor.offset() + lo, len);
      }
    }
  }
}

// The innermost dimensions of input and output differ: a tiled transpose of
// (input dim perm[rank-1]) x (input dim rank-1), batched over the others in
// output order.
StridedTranspose GeneralTranspose(const CollapsedPermutation& c) {
  const int rank = static_cast<int>(c.perm.size());
  const Dims in_stride = RowMajorStrides(c.in_shape);
  const Dims out_stride = RowMajorStrides(PermutedShape(c.in_shape, c.perm));
  const int a = c.perm[rank - 1];
  const int q = static_cast<int>(
      std::find(c.perm.begin(), c.perm.end(), rank - 1) - c.perm.begin());
  StridedTranspose t;
  t.rows = c.in_shape[a];
  t.in_ld = in_stride[a];
  t.cols = c.in_shape[rank - 1];
  t.out_ld = out_stride[q];
  for (int i = 0; i + 1 < rank; ++i) {
    if (i == q) continue;
    t.batch_extent.push_back(c.in_shape[c.perm[i]]);
    t.batch_in_stride.push_back(in_stride[c.perm[i]]);
    t.batch_out_stride.push_back(out_stride[i]);
  }
  return t;
}

class ConvertLayoutBlockedVariant final
    : public TypedVariant<PermuteProblem, OpKind::kConvertLayout,
                          BackendKind::kCpu> {
 public:
  absl::string_view name() const override {
    return "convert_layout.cpu.blocked";
  }
  absl::string_view description() const override {
    return "collapsed permutation: memcpy of contiguous runs, or tiled "
           "(strided, batched) transpose; OpenMP";
  }

 protected:
  absl::Status CanImplementTyped(const PermuteProblem&,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }

  absl::Status RunTyped(const PermuteProblem& p, const Operands& ops,
                        ExecContext&) const override {
    const CollapsedPermutation c = CollapsePermutation(p.in_shape, p.perm);
    const size_t es = ElementSize(p.dtype);
    const int rank = static_cast<int>(c.perm.size());
    if (c.perm[rank - 1] == rank - 1) {
      CopyRuns(c, es, static_cast<const char*>(ops.inputs[0]),
               static_cast<char*>(ops.outputs[0]));
      return absl::OkStatus();
    }
    int64_t batch, rows, cols;
    if (AsBatchedTranspose(c, &batch, &rows, &cols)) {
      TransposeBatched(batch, rows, cols, es, ops.inputs[0], ops.outputs[0]);
    } else {
      TransposeBlocked(GeneralTranspose(c), es, ops.inputs[0], ops.outputs[0]);
    }
    return absl::OkStatus();
  }

  double Efficiency(const Problem& problem, const DeviceInfo&) const override {
    const auto& p = std::get<PermuteProblem>(problem);
    const CollapsedPermutation c = CollapsePermutation(p.in_shape, p.perm);
    const int rank = static_cast<int>(c.perm.size());
    if (c.perm[rank - 1] == rank - 1) {
      return c.in_shape[rank - 1] *
                         static_cast<int64_t>(ElementSize(p.dtype)) >=
                     kShortRunBytes
                 ? kRunCopyEfficiency
                 : kShortRunCopyEfficiency;
    }
    int64_t batch, rows, cols;
    return AsBatchedTranspose(c, &batch, &rows, &cols) ? kTransposeEfficiency
                                                       : kGeneralEfficiency;
  }
};

}  // namespace

std::unique_ptr<KernelVariant> NewConvertLayoutBlocked() {
  return std::make_unique<ConvertLayoutBlockedVariant>();
}

}  // namespace coalesce::cpu
