// The request codec: every check a request must pass before it reaches a
// kernel, in one place, so that selection, the backends and the reports can
// trust a decoded problem. Decoding copies no tensor bytes: the decoded input
// pointers point into the request (inline), into a stored tensor (handle: the
// backend's resident memory, marked so) or into a mapped shared-memory
// region; the request must outlive the
// DecodedRequest, which holds references that keep the other two alive.
// Shared-memory outputs are resolved and bounds-checked here too.
// Nothing sized by the request is allocated before validation passes.
// Errors name the offending field (e.g. "input.shape[1]: must be >= 1, got
// 0"): INVALID_ARGUMENT for malformed requests, RESOURCE_EXHAUSTED over
// max_tensor_bytes, NOT_FOUND for unknown handles and regions,
// FAILED_PRECONDITION for a region whose object shrank or was unlinked,
// UNIMPLEMENTED for transports the caller serves no DataPlane for.
// Thread-safe; side effects only on the DataPlane (a handle lookup marks the
// tensor used).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"
#include "proto/dtype.h"

namespace coalesce {

class TensorStore;
struct StoredTensor;
class SharedMemoryRegion;
class SharedMemoryRegistry;

// Where handles and shared-memory references are looked up, and whose: a
// request reaches only its caller's objects (another identity's read as
// missing). A null member makes that transport UNIMPLEMENTED.
struct DataPlane {
  TensorStore* tensors = nullptr;
  const SharedMemoryRegistry* shared_memory = nullptr;
  std::string owner;
};

// Where one output goes (options.outputs, validated).
struct OutputTarget {
  v1::OutputPlacement placement = v1::OUTPUT_PLACEMENT_INLINE;
  // For OUTPUT_PLACEMENT_SHARED_MEMORY: the reference, byte_size set to the
  // output's size (what the response reports), and whether its region is a
  // CUDA one (device memory).
  v1::SharedMemoryRef shared_memory;
  bool on_device = false;
  // For OUTPUT_PLACEMENT_SERVER_HANDLE with OutputSpec.handle: the caller's
  // tensor to overwrite, its dtype and shape the output's (resolved unless
  // shape_only; operands.outputs points at its bytes, in resident memory).
  // Empty handle: a new tensor, which the caller creates.
  std::string handle;
  std::shared_ptr<const StoredTensor> stored;
};

struct DecodedRequest {
  Problem problem;
  // Inputs point into the request's raw bytes, a mapped shared-memory
  // region (host memory) or a stored tensor (the backend's resident memory;
  // input_spaces says which); null for absent optional inputs. Outputs has
  // one null entry per output of the op, for the caller to point at the
  // memory it allocates and to set output_spaces.
  Operands operands;
  OperandSizes sizes;  // OperandBytes(problem)
  // Shape of each output in operand order; empty for an output not asked for
  // (GeluLayerNorm's h without return_pre_norm).
  absl::InlinedVector<Shape, 2> output_shapes;
  // One per output. operands.outputs already points into the region for
  // shared-memory outputs; the caller allocates inline and handle outputs.
  absl::InlinedVector<OutputTarget, 2> output_targets;
  std::string forced_variant;  // options.variant
  bool report = false;         // options.report
  // Stored tensors and shared-memory regions the operand pointers point
  // into, held until the request is done.
  std::vector<std::shared_ptr<const void>> keep_alive;
  // The shared-memory regions among them, checked again after the kernel
  // (SharedMemoryRegion::CheckAlive: a client may shrink one meanwhile).
  std::vector<std::shared_ptr<const SharedMemoryRegion>> shared_memory;
};

// A validated PutTensor header.
struct TensorHeader {
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t bytes = 0;
};

absl::StatusOr<DecodedRequest> DecodeTranspose(
    const v1::TransposeRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false, const DataPlane& plane = DataPlane());
absl::StatusOr<DecodedRequest> DecodeGemm(const v1::GemmRequest& request,
                                          int64_t max_tensor_bytes,
                                          bool shape_only = false,
                                          const DataPlane& plane = DataPlane());
absl::StatusOr<DecodedRequest> DecodeConvertLayout(
    const v1::ConvertLayoutRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false, const DataPlane& plane = DataPlane());
absl::StatusOr<DecodedRequest> DecodeGeluLayerNorm(
    const v1::GeluLayerNormRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false, const DataPlane& plane = DataPlane());

// shape_only: tensors may come without data (ExplainSelection needs only
// dtypes and shapes); everything else is checked as for execution. The
// decoded input pointers are then null.

// PutTensor's first message: dtype, a rank of 1..kMaxRank, every dimension
// >= 1, a byte size without overflow (quota and cap are the store's).
absl::StatusOr<TensorHeader> DecodePutTensorHeader(
    const v1::PutTensorHeader& header);

// GetTensor's chunk size: requested (0: default_bytes), at most
// max_bytes; INVALID_ARGUMENT when negative or larger.
absl::StatusOr<int64_t> DecodeChunkBytes(int64_t requested,
                                         int64_t default_bytes,
                                         int64_t max_bytes);

}  // namespace coalesce
