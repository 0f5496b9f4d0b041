#include "server/frontend/native/codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/quote.h"
#include "base/shape.h"
#include "base/status_macros.h"
#include "kernels/core/permute.h"
#include "server/store/shared_memory.h"
#include "server/store/tensor_store.h"

namespace coalesce {
namespace {

absl::StatusOr<DType> DecodeDType(v1::DataType dtype, absl::string_view field) {
  if (dtype == v1::DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ".dtype: must be set (DATA_TYPE_FLOAT32, "
                     "DATA_TYPE_FLOAT16 or DATA_TYPE_BFLOAT16)"));
  }
  absl::StatusOr<DType> t = FromProtoDType(dtype);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".dtype: unknown data type ", static_cast<int>(dtype)));
  }
  return t;
}

std::string RankRange(int min_rank, int max_rank) {
  if (min_rank == max_rank) return absl::StrCat(min_rank);
  if (max_rank == min_rank + 1) return absl::StrCat(min_rank, " or ", max_rank);
  return absl::StrCat("between ", min_rank, " and ", max_rank);
}

// Byte size of a tensor of dtype and shape dims, checked against overflow and
// max_tensor_bytes; field names the tensor (an input or an output).
absl::StatusOr<int64_t> CheckedTensorBytes(absl::string_view field, DType dtype,
                                           absl::Span<const int64_t> dims,
                                           int64_t max_tensor_bytes) {
  int64_t elements = 0;
  if (!CheckedProduct(dims, &elements)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: element count of ", ShapeString(dims),
                     " overflows int64"));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<int64_t>(ElementSize(dtype)),
                             &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: byte size of ", ShapeString(dims), " ",
                     DTypeName(dtype), " overflows int64"));
  }
  if (bytes > max_tensor_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        field, ": ", ShapeString(dims), " ", DTypeName(dtype), " is ", bytes,
        " bytes, over the server's max_tensor_bytes of ", max_tensor_bytes));
  }
  return bytes;
}

// A validated inline input tensor.
struct InputTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  const void* data = nullptr;
};

// What handles and shared-memory references resolved to.
struct Resolved {
  // Held until the request is done (DecodedRequest::keep_alive).
  std::vector<std::shared_ptr<const void>> keep_alive;
  std::vector<std::shared_ptr<const SharedMemoryRegion>> shared_memory;
  // Input pointers into stored tensors and CUDA regions: the backend's
  // resident memory, which the host may not be able to read (device
  // memory).
  std::vector<const void*> resident;
  // Output pointers into CUDA regions (device memory).
  std::vector<const void*> device_outputs;
};

// How much of a tensor to check: shape_only (ExplainSelection) accepts a
// tensor without data, since only its dtype and shape matter there. plane
// resolves handles and shared memory into resolved.
struct TensorChecks {
  int64_t max_tensor_bytes;
  bool shape_only;
  const DataPlane& plane;
  Resolved* resolved;
};

// Resolves [ref.offset, ref.offset + bytes) of a registered region: the
// reference's byte_size must equal bytes (inputs) or be at least bytes
// (outputs), the range must lie in the region, and the region's object
// must still cover it.
absl::StatusOr<char*> ResolveSharedMemory(const v1::SharedMemoryRef& ref,
                                          absl::string_view field,
                                          int64_t bytes, bool is_output,
                                          const TensorChecks& o) {
  if (o.plane.shared_memory == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        field, ": shared-memory tensors are not served by this server"));
  }
  if (ref.region().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".region: required"));
  }
  const uint64_t want = static_cast<uint64_t>(bytes);
  if (is_output ? ref.byte_size() < want : ref.byte_size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".byte_size: ", ref.byte_size(), ", but the tensor needs ",
        is_output ? "at least " : "exactly ", bytes, " bytes"));
  }
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> region =
      o.plane.shared_memory->Find(o.plane.owner, ref.region());
  if (!region.ok()) {
    return absl::Status(
        region.status().code(),
        absl::StrCat(field, ".region: ", region.status().message()));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(ref.offset(), ref.byte_size(), &end) ||
      end > (*region)->byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the range offset ", ref.offset(), " + byte_size ",
        ref.byte_size(), " lies outside region ", Quoted(ref.region()), " of ",
        (*region)->byte_size(), " bytes"));
  }
  const absl::Status alive = (*region)->CheckAlive();
  if (!alive.ok()) {
    return absl::Status(alive.code(),
                        absl::StrCat(field, ": ", alive.message()));
  }
  char* data = (*region)->data() + ref.offset();
  if ((*region)->on_device()) {
    // A CUDA region: device memory, used in place like a stored tensor's.
    (is_output ? o.resolved->device_outputs : o.resolved->resident)
        .push_back(data);
  }
  o.resolved->shared_memory.push_back(*region);
  o.resolved->keep_alive.push_back(std::move(*region));
  return data;
}

// Checks a handle's stored tensor against the dtype and shape the request
// states (either may be unset) and returns it.
absl::StatusOr<std::shared_ptr<const StoredTensor>> ResolveHandle(
    const v1::Tensor& t, absl::string_view field, const TensorChecks& o) {
  if (o.plane.tensors == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        field, ".handle: server-side tensor handles are not served here"));
  }
  absl::StatusOr<std::shared_ptr<const StoredTensor>> stored =
      o.plane.tensors->Find(o.plane.owner, t.handle());
  if (!stored.ok()) {
    return absl::Status(
        stored.status().code(),
        absl::StrCat(field, ".handle: ", stored.status().message()));
  }
  const StoredTensor& s = **stored;
  if (t.dtype() != v1::DATA_TYPE_UNSPECIFIED &&
      t.dtype() != ToProtoDType(s.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".dtype: ", v1::DataType_Name(t.dtype()), " does not match ",
        DTypeName(s.dtype), " of the stored tensor ", Quoted(t.handle())));
  }
  if (t.shape_size() > 0 && !std::equal(t.shape().begin(), t.shape().end(),
                                        s.shape.begin(), s.shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: ", ShapeString(t.shape()), " does not match ",
        ShapeString(s.shape), " of the stored tensor ", Quoted(t.handle())));
  }
  return stored;
}

// An existing tensor of the caller's that output i is written into: its
// dtype and shape must be the output's exactly.
absl::StatusOr<std::shared_ptr<const StoredTensor>> ResolveOutputHandle(
    const std::string& handle, size_t i, DType dtype, const Shape& shape,
    const TensorChecks& o) {
  const std::string field = absl::StrCat("options.outputs[", i, "].handle");
  absl::StatusOr<std::shared_ptr<const StoredTensor>> stored =
      o.plane.tensors->Find(o.plane.owner, handle);
  if (!stored.ok()) {
    return absl::Status(stored.status().code(),
                        absl::StrCat(field, ": ", stored.status().message()));
  }
  const StoredTensor& s = **stored;
  if (s.dtype != dtype || s.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the stored tensor ", Quoted(handle), " is ",
        DTypeName(s.dtype), " ", ShapeString(s.shape), ", the output is ",
        DTypeName(dtype), " ", ShapeString(shape)));
  }
  o.resolved->keep_alive.push_back(*stored);
  return stored;
}

// Rank and dimension checks shared by every tensor: rank in [min_rank,
// max_rank] (never 0), every dim >= 1.
absl::Status CheckShape(absl::Span<const int64_t> shape,
                        absl::string_view field, int min_rank, int max_rank) {
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: is empty; the rank must be ",
                     RankRange(min_rank, max_rank)));
  }
  if (rank < min_rank || rank > max_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: rank must be ", RankRange(min_rank, max_rank), ", got ",
        rank, " (", ShapeString(shape), ")"));
  }
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "]: must be >= 1, got ", shape[i]));
    }
  }
  return absl::OkStatus();
}

// Checks one input: data present (inline, a handle or shared memory),
// dtype, rank in [min_rank, max_rank], every dim >= 1, size without overflow
// and within max_tensor_bytes, and the data matching the shape.
absl::StatusOr<InputTensor> DecodeInput(const v1::Tensor& t,
                                        absl::string_view field, int min_rank,
                                        int max_rank, const TensorChecks& o) {
  const bool no_data =
      o.shape_only && t.data_case() == v1::Tensor::DATA_NOT_SET;
  if (!no_data && t.data_case() == v1::Tensor::DATA_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".raw: no tensor data (set raw, handle or shared_memory)"));
  }
  InputTensor in;
  if (t.data_case() == v1::Tensor::kHandle) {
    COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<const StoredTensor> stored,
                              ResolveHandle(t, field, o));
    COALESCE_RETURN_IF_ERROR(
        CheckShape(stored->shape, field, min_rank, max_rank));
    COALESCE_RETURN_IF_ERROR(CheckedTensorBytes(field, stored->dtype,
                                                stored->shape,
                                                o.max_tensor_bytes)
                                 .status());
    in.dtype = stored->dtype;
    in.shape = stored->shape;
    in.data = stored->data.get();
    o.resolved->resident.push_back(in.data);
    o.resolved->keep_alive.push_back(std::move(stored));
    return in;
  }
  COALESCE_ASSIGN_OR_RETURN(in.dtype, DecodeDType(t.dtype(), field));
  COALESCE_RETURN_IF_ERROR(CheckShape(t.shape(), field, min_rank, max_rank));
  in.shape.assign(t.shape().begin(), t.shape().end());
  COALESCE_ASSIGN_OR_RETURN(
      const int64_t bytes,
      CheckedTensorBytes(field, in.dtype, in.shape, o.max_tensor_bytes));
  if (no_data) return in;
  if (t.data_case() == v1::Tensor::kSharedMemory) {
    COALESCE_ASSIGN_OR_RETURN(
        in.data,
        ResolveSharedMemory(t.shared_memory(),
                            absl::StrCat(field, ".shared_memory"), bytes,
                            /*is_output=*/false, o));
    return in;
  }
  if (static_cast<int64_t>(t.raw().size()) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".raw: has ", t.raw().size(), " bytes, but ",
        ShapeString(in.shape), " ", DTypeName(in.dtype), " needs ", bytes));
  }
  in.data = t.raw().data();
  return in;
}

absl::Status CheckSameDType(const InputTensor& t, absl::string_view field,
                            DType want, absl::string_view want_field) {
  if (t.dtype == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ".dtype: must match ", want_field, ".dtype (",
                   DTypeName(want), "), got ", DTypeName(t.dtype)));
}

// Checks options against an op with num_outputs outputs and copies what the
// service needs into d; shared-memory outputs are resolved by FinishDecoded,
// once the output sizes are known.
absl::Status DecodeOptions(const v1::ExecutionOptions& options, int num_outputs,
                           const TensorChecks& o, DecodedRequest* d) {
  if (options.outputs_size() > num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.outputs: has ", options.outputs_size(),
                     " entries, but this op has ", num_outputs, " output(s)"));
  }
  d->output_targets.assign(num_outputs, OutputTarget());
  for (int i = 0; i < options.outputs_size(); ++i) {
    const v1::OutputPlacement placement = options.outputs(i).placement();
    const std::string field =
        absl::StrCat("options.outputs[", i, "].placement");
    switch (placement) {
      case v1::OUTPUT_PLACEMENT_INLINE:
        break;
      case v1::OUTPUT_PLACEMENT_SERVER_HANDLE:
        if (o.plane.tensors == nullptr) {
          return absl::UnimplementedError(absl::StrCat(
              field, ": OUTPUT_PLACEMENT_SERVER_HANDLE is not served here"));
        }
        d->output_targets[i].handle = options.outputs(i).handle();
        break;
      case v1::OUTPUT_PLACEMENT_SHARED_MEMORY:
        if (!options.outputs(i).has_shared_memory()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "options.outputs[", i,
              "].shared_memory: required for OUTPUT_PLACEMENT_SHARED_MEMORY"));
        }
        d->output_targets[i].shared_memory = options.outputs(i).shared_memory();
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": unknown placement ", placement));
    }
    if (placement != v1::OUTPUT_PLACEMENT_SERVER_HANDLE &&
        !options.outputs(i).handle().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.outputs[", i,
                       "].handle: only with OUTPUT_PLACEMENT_SERVER_HANDLE"));
    }
    d->output_targets[i].placement = placement;
  }
  d->forced_variant = options.variant();
  d->report = options.report();
  return absl::OkStatus();
}

// Whether [a, a + na) and [b, b + nb) share a byte; never for a null
// pointer or an empty range.
bool Overlap(const void* a, int64_t na, const void* b, int64_t nb) {
  if (a == nullptr || b == nullptr || na <= 0 || nb <= 0) return false;
  const uintptr_t x = reinterpret_cast<uintptr_t>(a);
  const uintptr_t y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(nb) &&
         y < x + static_cast<uintptr_t>(na);
}

// An output in shared memory may not share a byte with an input or with
// another output: kernels read their inputs while they write, so an alias
// gives a silently wrong result. Only shared-memory outputs have bytes at
// this point (inline and handle outputs are allocated later, distinct).
absl::Status CheckNoOutputAlias(const DecodedRequest& d) {
  const Operands& ops = d.operands;
  for (size_t i = 0; i < d.output_targets.size(); ++i) {
    const int64_t bytes = d.sizes.outputs[i];
    std::string other;
    for (size_t j = 0; j < ops.inputs.size() && other.empty(); ++j) {
      if (Overlap(ops.outputs[i], bytes, ops.inputs[j], d.sizes.inputs[j])) {
        other = absl::StrCat("input operand ", j);
      }
    }
    for (size_t j = 0; j < i && other.empty(); ++j) {
      if (Overlap(ops.outputs[i], bytes, ops.outputs[j], d.sizes.outputs[j])) {
        other = absl::StrCat("output ", j);
      }
    }
    if (!other.empty() && d.output_targets[i].stored != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.outputs[", i,
          "].handle: ", Quoted(d.output_targets[i].handle), " is also ", other,
          "; an output may not alias what the kernel reads or writes"));
    }
    if (!other.empty()) {
      const v1::SharedMemoryRef& ref = d.output_targets[i].shared_memory;
      return absl::InvalidArgumentError(absl::StrCat(
          "options.outputs[", i, "].shared_memory: bytes ", ref.offset(),
          " to ", ref.offset() + ref.byte_size(), " of region ",
          Quoted(ref.region()), " overlap ", other,
          "; an output may not alias what the kernel reads or writes"));
    }
  }
  return absl::OkStatus();
}

// Fills the parts of d that follow from its problem: operand sizes, one
// output pointer per output (null but for shared-memory outputs, resolved
// here), the inputs' memory spaces and the references the operands need
// kept alive.
absl::Status FinishDecoded(const TensorChecks& o, DecodedRequest* d) {
  d->sizes = OperandBytes(d->problem);
  d->operands.outputs.assign(d->sizes.outputs.size(), nullptr);
  for (size_t i = 0; i < d->output_targets.size(); ++i) {
    OutputTarget& target = d->output_targets[i];
    if (target.placement == v1::OUTPUT_PLACEMENT_INLINE) continue;
    if (d->output_shapes[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.outputs[", i, "].placement: output ", i,
                       " is not produced by this request; leave it "
                       "OUTPUT_PLACEMENT_INLINE"));
    }
    if (o.shape_only) continue;
    if (target.placement == v1::OUTPUT_PLACEMENT_SERVER_HANDLE) {
      if (target.handle.empty()) continue;
      COALESCE_ASSIGN_OR_RETURN(
          target.stored,
          ResolveOutputHandle(target.handle, i, DTypeOf(d->problem),
                              d->output_shapes[i], o));
      d->operands.outputs[i] = target.stored->data.get();
      continue;
    }
    if (target.placement != v1::OUTPUT_PLACEMENT_SHARED_MEMORY) continue;
    const int64_t bytes = d->sizes.outputs[i];
    COALESCE_ASSIGN_OR_RETURN(
        char* data, ResolveSharedMemory(
                        target.shared_memory,
                        absl::StrCat("options.outputs[", i, "].shared_memory"),
                        bytes, /*is_output=*/true, o));
    target.shared_memory.set_byte_size(static_cast<uint64_t>(bytes));
    target.on_device = absl::c_linear_search(o.resolved->device_outputs,
                                             static_cast<const void*>(data));
    d->operands.outputs[i] = data;
  }
  COALESCE_RETURN_IF_ERROR(CheckNoOutputAlias(*d));
  // Stored tensors are distinct allocations of at least one byte, so a
  // pointer into one is never also a request's or a mapping's.
  d->operands.input_spaces.assign(d->operands.inputs.size(),
                                  MemorySpace::kHost);
  for (size_t i = 0; i < d->operands.inputs.size(); ++i) {
    if (d->operands.inputs[i] != nullptr &&
        std::find(o.resolved->resident.begin(), o.resolved->resident.end(),
                  d->operands.inputs[i]) != o.resolved->resident.end()) {
      d->operands.input_spaces[i] = MemorySpace::kResident;
    }
  }
  d->keep_alive = std::move(o.resolved->keep_alive);
  d->shared_memory = std::move(o.resolved->shared_memory);
  return absl::OkStatus();
}

absl::Status RequireTensor(bool present, absl::string_view field) {
  if (present) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
}

// convert_layout's three forms, each giving a permutation: named image
// layouts, an explicit permutation and AoS <-> SoA.
absl::Status CheckImageLayout(v1::Layout layout, absl::string_view field) {
  if (layout == v1::LAYOUT_NCHW || layout == v1::LAYOUT_NHWC) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": must be LAYOUT_NCHW or LAYOUT_NHWC, got ",
      v1::Layout_IsValid(layout) ? v1::Layout_Name(layout)
                                 : absl::StrCat(static_cast<int>(layout))));
}

absl::StatusOr<Perm> DecodeNamedLayouts(const v1::LayoutPair& layouts,
                                        LayoutKind* kind) {
  COALESCE_RETURN_IF_ERROR(CheckImageLayout(layouts.from(), "layouts.from"));
  COALESCE_RETURN_IF_ERROR(CheckImageLayout(layouts.to(), "layouts.to"));
  if (layouts.from() == layouts.to()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layouts.to: must differ from layouts.from (both ",
                     v1::Layout_Name(layouts.from()), ")"));
  }
  if (layouts.from() == v1::LAYOUT_NCHW) {
    *kind = LayoutKind::kNchwToNhwc;
    return Perm{0, 2, 3, 1};
  }
  *kind = LayoutKind::kNhwcToNchw;
  return Perm{0, 3, 1, 2};
}

absl::StatusOr<Perm> DecodePermutation(const v1::Permutation& permutation,
                                       int rank) {
  if (permutation.perm_size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("permutation.perm: has ", permutation.perm_size(),
                     " entries, but the input has rank ", rank));
  }
  Perm perm;
  bool seen[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    const int p = permutation.perm(i);
    if (p < 0 || p >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("permutation.perm[", i, "]: ", p,
                       " is out of range [0, ", rank, ")"));
    }
    if (seen[p]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "permutation.perm[", i, "]: ", p,
          " appears twice; perm must be a permutation of 0..", rank - 1));
    }
    seen[p] = true;
    perm.push_back(p);
  }
  return perm;
}

absl::StatusOr<Perm> DecodeAosSoa(const v1::AosSoa& aos_soa,
                                  const Shape& in_shape, LayoutKind* kind) {
  int fields_dim = 0;
  switch (aos_soa.direction()) {
    case v1::AosSoa::DIRECTION_AOS_TO_SOA:  // [N,F] -> [F,N]
      *kind = LayoutKind::kAosToSoa;
      fields_dim = 1;
      break;
    case v1::AosSoa::DIRECTION_SOA_TO_AOS:  // [F,N] -> [N,F]
      *kind = LayoutKind::kSoaToAos;
      fields_dim = 0;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("aos_soa.direction: must be DIRECTION_AOS_TO_SOA or "
                       "DIRECTION_SOA_TO_AOS, got ",
                       static_cast<int>(aos_soa.direction())));
  }
  if (aos_soa.fields() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aos_soa.fields: must be >= 0 (0 takes it from the input shape), got ",
        aos_soa.fields()));
  }
  if (aos_soa.fields() != 0 && aos_soa.fields() != in_shape[fields_dim]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aos_soa.fields: ", aos_soa.fields(), " does not match input.shape[",
        fields_dim, "] = ", in_shape[fields_dim]));
  }
  return Perm{1, 0};
}

// bias, gamma and beta of GeluLayerNorm: [hidden] vectors of x's dtype.
absl::StatusOr<const void*> DecodeHiddenVector(const v1::Tensor& t,
                                               absl::string_view field,
                                               DType dtype, int64_t hidden,
                                               const TensorChecks& o) {
  const auto wrong_shape = [&](absl::Span<const int64_t> shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: must be [", hidden,
        "] to match x's last dimension, got ", ShapeString(shape)));
  };
  // A handle's shape is the stored tensor's, checked once it is resolved.
  if (t.data_case() != v1::Tensor::kHandle &&
      (t.shape_size() != 1 || t.shape(0) != hidden)) {
    return wrong_shape(t.shape());
  }
  COALESCE_ASSIGN_OR_RETURN(const InputTensor v,
                            DecodeInput(t, field, 1, kMaxRank, o));
  if (v.shape.size() != 1 || v.shape[0] != hidden) return wrong_shape(v.shape);
  COALESCE_RETURN_IF_ERROR(CheckSameDType(v, field, dtype, "x"));
  return v.data;
}

}  // namespace

absl::StatusOr<DecodedRequest> DecodeTranspose(
    const v1::TransposeRequest& request, int64_t max_tensor_bytes,
    bool shape_only, const DataPlane& plane) {
  Resolved resolved;
  const TensorChecks o{max_tensor_bytes, shape_only, plane, &resolved};
  COALESCE_RETURN_IF_ERROR(RequireTensor(request.has_input(), "input"));
  COALESCE_ASSIGN_OR_RETURN(InputTensor in,
                            DecodeInput(request.input(), "input", 2, 3, o));
  const int rank = static_cast<int>(in.shape.size());
  TransposeProblem p;
  p.dtype = in.dtype;
  p.batch = rank == 3 ? in.shape[0] : 1;
  p.rows = in.shape[rank - 2];
  p.cols = in.shape[rank - 1];

  DecodedRequest d;
  COALESCE_RETURN_IF_ERROR(DecodeOptions(request.options(), 1, o, &d));
  Shape out_shape = in.shape;
  std::swap(out_shape[rank - 2], out_shape[rank - 1]);
  d.output_shapes = {std::move(out_shape)};
  d.problem = p;
  d.operands.inputs = {in.data};
  COALESCE_RETURN_IF_ERROR(FinishDecoded(o, &d));
  return d;
}

absl::StatusOr<DecodedRequest> DecodeGemm(const v1::GemmRequest& request,
                                          int64_t max_tensor_bytes,
                                          bool shape_only,
                                          const DataPlane& plane) {
  Resolved resolved;
  const TensorChecks o{max_tensor_bytes, shape_only, plane, &resolved};
  COALESCE_RETURN_IF_ERROR(RequireTensor(request.has_a(), "a"));
  COALESCE_RETURN_IF_ERROR(RequireTensor(request.has_b(), "b"));
  COALESCE_ASSIGN_OR_RETURN(const InputTensor a,
                            DecodeInput(request.a(), "a", 2, 3, o));
  COALESCE_ASSIGN_OR_RETURN(const InputTensor b,
                            DecodeInput(request.b(), "b", 2, 3, o));
  COALESCE_RETURN_IF_ERROR(CheckSameDType(b, "b", a.dtype, "a"));

  GemmProblem p;
  p.dtype = a.dtype;
  p.trans_a = request.trans_a();
  p.trans_b = request.trans_b();
  p.allow_tf32 = request.allow_tf32();
  // op(A) is [m,k]: A's last two dims are [m,k], or [k,m] when transposed;
  // likewise op(B) is [k,n].
  const int ra = static_cast<int>(a.shape.size());
  const int rb = static_cast<int>(b.shape.size());
  p.m = a.shape[ra - (p.trans_a ? 1 : 2)];
  p.k = a.shape[ra - (p.trans_a ? 2 : 1)];
  const int kb_dim = rb - (p.trans_b ? 1 : 2);
  p.n = b.shape[rb - (p.trans_b ? 2 : 1)];
  if (b.shape[kb_dim] != p.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("b.shape[", kb_dim, "]: k mismatch: op(a) has k=", p.k,
                     ", op(b) has k=", b.shape[kb_dim]));
  }

  InputTensor c;
  p.has_c = request.has_c();
  if (p.has_c) {
    COALESCE_ASSIGN_OR_RETURN(c, DecodeInput(request.c(), "c", 2, 3, o));
    COALESCE_RETURN_IF_ERROR(CheckSameDType(c, "c", a.dtype, "a"));
    const int rc = static_cast<int>(c.shape.size());
    if (c.shape[rc - 2] != p.m || c.shape[rc - 1] != p.n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "c.shape: must be [m,n] = [", p.m, ",", p.n, "] (or [batch,", p.m,
          ",", p.n, "]) to match op(a) and op(b), got ", ShapeString(c.shape)));
    }
  }

  // The batch is the largest leading dimension; every rank-3 operand must
  // have exactly it, a rank-2 operand is broadcast over it (stride 0).
  struct Batched {
    absl::string_view field;
    const InputTensor* t;
  };
  absl::InlinedVector<Batched, 3> operands = {{"a", &a}, {"b", &b}};
  if (p.has_c) operands.push_back({"c", &c});
  bool batched = false;
  for (const Batched& o : operands) {
    if (o.t->shape.size() == 3) {
      batched = true;
      p.batch = std::max(p.batch, o.t->shape[0]);
    }
  }
  for (const Batched& o : operands) {
    if (o.t->shape.size() == 3 && o.t->shape[0] != p.batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.field, ".shape[0]: batch mismatch: ", o.field, " has batch ",
          o.t->shape[0], ", another operand has ", p.batch,
          "; batched operands must agree (a rank-2 operand is broadcast)"));
    }
  }
  // Each product is at most an input's element count: no overflow.
  p.stride_a = ra == 3 ? p.m * p.k : 0;
  p.stride_b = rb == 3 ? p.k * p.n : 0;
  p.stride_c = p.has_c && c.shape.size() == 3 ? p.m * p.n : 0;

  p.alpha = request.has_alpha() ? request.alpha() : 1.0f;
  p.beta = request.has_beta() ? request.beta() : (p.has_c ? 1.0f : 0.0f);
  if (p.beta != 0.0f && !p.has_c) {
    return absl::InvalidArgumentError(absl::StrCat(
        "beta: ", p.beta, " requires c (beta scales c, which is absent)"));
  }

  Shape d_shape;
  if (batched) d_shape.push_back(p.batch);
  d_shape.push_back(p.m);
  d_shape.push_back(p.n);
  COALESCE_RETURN_IF_ERROR(
      CheckedTensorBytes("d", p.dtype, d_shape, max_tensor_bytes).status());

  DecodedRequest d;
  COALESCE_RETURN_IF_ERROR(DecodeOptions(request.options(), 1, o, &d));
  d.output_shapes = {std::move(d_shape)};
  d.problem = p;
  d.operands.inputs = {a.data, b.data, p.has_c ? c.data : nullptr};
  COALESCE_RETURN_IF_ERROR(FinishDecoded(o, &d));
  return d;
}

absl::StatusOr<DecodedRequest> DecodeConvertLayout(
    const v1::ConvertLayoutRequest& request, int64_t max_tensor_bytes,
    bool shape_only, const DataPlane& plane) {
  Resolved resolved;
  const TensorChecks o{max_tensor_bytes, shape_only, plane, &resolved};
  COALESCE_RETURN_IF_ERROR(RequireTensor(request.has_input(), "input"));
  PermuteProblem p;
  InputTensor in;
  switch (request.conversion_case()) {
    case v1::ConvertLayoutRequest::kLayouts: {
      COALESCE_ASSIGN_OR_RETURN(in,
                                DecodeInput(request.input(), "input", 4, 4, o));
      COALESCE_ASSIGN_OR_RETURN(p.perm,
                                DecodeNamedLayouts(request.layouts(), &p.kind));
      break;
    }
    case v1::ConvertLayoutRequest::kPermutation: {
      COALESCE_ASSIGN_OR_RETURN(
          in, DecodeInput(request.input(), "input", 1, kMaxRank, o));
      COALESCE_ASSIGN_OR_RETURN(
          p.perm, DecodePermutation(request.permutation(),
                                    static_cast<int>(in.shape.size())));
      p.kind = LayoutKind::kPermute;
      break;
    }
    case v1::ConvertLayoutRequest::kAosSoa: {
      COALESCE_ASSIGN_OR_RETURN(in,
                                DecodeInput(request.input(), "input", 2, 2, o));
      COALESCE_ASSIGN_OR_RETURN(
          p.perm, DecodeAosSoa(request.aos_soa(), in.shape, &p.kind));
      break;
    }
    case v1::ConvertLayoutRequest::CONVERSION_NOT_SET:
      return absl::InvalidArgumentError(
          "conversion: must set one of layouts, permutation or aos_soa");
  }
  p.dtype = in.dtype;
  p.in_shape = in.shape;

  DecodedRequest d;
  COALESCE_RETURN_IF_ERROR(DecodeOptions(request.options(), 1, o, &d));
  d.output_shapes = {PermutedShape(p.in_shape, p.perm)};
  d.problem = std::move(p);
  d.operands.inputs = {in.data};
  COALESCE_RETURN_IF_ERROR(FinishDecoded(o, &d));
  return d;
}

absl::StatusOr<DecodedRequest> DecodeGeluLayerNorm(
    const v1::GeluLayerNormRequest& request, int64_t max_tensor_bytes,
    bool shape_only, const DataPlane& plane) {
  Resolved resolved;
  const TensorChecks o{max_tensor_bytes, shape_only, plane, &resolved};
  COALESCE_RETURN_IF_ERROR(RequireTensor(request.has_x(), "x"));
  COALESCE_ASSIGN_OR_RETURN(const InputTensor x,
                            DecodeInput(request.x(), "x", 1, kMaxRank, o));
  GeluLnProblem p;
  p.dtype = x.dtype;
  p.hidden = x.shape.back();
  // At most x's element count: no overflow.
  p.rows = NumElements(x.shape) / p.hidden;

  const void* bias = nullptr;
  const void* residual = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  p.has_bias = request.has_bias();
  if (p.has_bias) {
    COALESCE_ASSIGN_OR_RETURN(
        bias, DecodeHiddenVector(request.bias(), "bias", p.dtype, p.hidden, o));
  }
  p.has_residual = request.has_residual();
  if (p.has_residual) {
    COALESCE_ASSIGN_OR_RETURN(
        const InputTensor r,
        DecodeInput(request.residual(), "residual", 1, kMaxRank, o));
    COALESCE_RETURN_IF_ERROR(CheckSameDType(r, "residual", p.dtype, "x"));
    if (r.shape != x.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("residual.shape: must be ", ShapeString(x.shape),
                       " to match x, got ", ShapeString(r.shape)));
    }
    residual = r.data;
  }
  p.has_gamma = request.has_gamma();
  if (p.has_gamma) {
    COALESCE_ASSIGN_OR_RETURN(
        gamma,
        DecodeHiddenVector(request.gamma(), "gamma", p.dtype, p.hidden, o));
  }
  p.has_beta = request.has_beta();
  if (p.has_beta) {
    COALESCE_ASSIGN_OR_RETURN(
        beta, DecodeHiddenVector(request.beta(), "beta", p.dtype, p.hidden, o));
  }

  p.eps = request.has_epsilon() ? request.epsilon() : 1e-5f;
  if (!std::isfinite(p.eps) || p.eps <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon: must be finite and > 0, got ", p.eps));
  }
  switch (request.approximation()) {
    case v1::GELU_APPROXIMATION_NONE:
      p.approx = GeluApprox::kExact;
      break;
    case v1::GELU_APPROXIMATION_TANH:
      p.approx = GeluApprox::kTanh;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("approximation: unknown value ",
                       static_cast<int>(request.approximation())));
  }
  p.return_pre_norm = request.return_pre_norm();

  DecodedRequest d;
  COALESCE_RETURN_IF_ERROR(DecodeOptions(request.options(), 2, o, &d));
  // y and h have x's shape and size, already within max_tensor_bytes.
  d.output_shapes = {x.shape, p.return_pre_norm ? x.shape : Shape()};
  d.problem = p;
  d.operands.inputs = {x.data, bias, residual, gamma, beta};
  COALESCE_RETURN_IF_ERROR(FinishDecoded(o, &d));
  return d;
}

absl::StatusOr<TensorHeader> DecodePutTensorHeader(
    const v1::PutTensorHeader& header) {
  TensorHeader h;
  COALESCE_ASSIGN_OR_RETURN(h.dtype, DecodeDType(header.dtype(), "header"));
  COALESCE_RETURN_IF_ERROR(CheckShape(header.shape(), "header", 1, kMaxRank));
  h.shape.assign(header.shape().begin(), header.shape().end());
  // Handles are bounded by the store's quota and cap, not by the inline
  // limit: uploads in chunks exist for tensors past protobuf's 2 GiB.
  COALESCE_ASSIGN_OR_RETURN(
      h.bytes, CheckedTensorBytes("header", h.dtype, h.shape,
                                  std::numeric_limits<int64_t>::max()));
  return h;
}

absl::StatusOr<int64_t> DecodeChunkBytes(int64_t requested,
                                         int64_t default_bytes,
                                         int64_t max_bytes) {
  if (requested < 0 || requested > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: must be in [0, ", max_bytes, "], got ",
                     requested, " (0: the default of ", default_bytes, ")"));
  }
  return requested == 0 ? std::min(default_bytes, max_bytes) : requested;
}

}  // namespace coalesce
