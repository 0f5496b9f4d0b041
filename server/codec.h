// The request codec: every check a request must pass before it reaches a
// kernel, in one place, so that selection, the backends and the reports can
// trust a decoded problem. Decoding copies no tensor bytes: the decoded input
// pointers point into the request, which must outlive the DecodedRequest.
// Nothing sized by the request is allocated before validation passes.
// Errors name the offending field (e.g. "input.shape[1]: must be >= 1, got
// 0"): INVALID_ARGUMENT for malformed requests, RESOURCE_EXHAUSTED over
// max_tensor_bytes, UNIMPLEMENTED for transports not served yet.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce {

struct DecodedRequest {
  Problem problem;
  // Inputs point into the request's raw bytes (null for absent optional
  // inputs). Outputs has one null entry per output of the op, for the caller
  // to point at the memory it allocates.
  Operands host;
  OperandSizes sizes;  // OperandBytes(problem)
  // Shape of each output in operand order; empty for an output not asked for
  // (GeluLayerNorm's h without return_pre_norm).
  absl::InlinedVector<Shape, 2> output_shapes;
  std::string forced_variant;  // options.variant
  bool report = false;         // options.report
};

absl::StatusOr<DecodedRequest> DecodeTranspose(
    const v1::TransposeRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false);
absl::StatusOr<DecodedRequest> DecodeGemm(const v1::GemmRequest& request,
                                          int64_t max_tensor_bytes,
                                          bool shape_only = false);
absl::StatusOr<DecodedRequest> DecodeConvertLayout(
    const v1::ConvertLayoutRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false);
absl::StatusOr<DecodedRequest> DecodeGeluLayerNorm(
    const v1::GeluLayerNormRequest& request, int64_t max_tensor_bytes,
    bool shape_only = false);

// shape_only: tensors may come without data (ExplainSelection needs only
// dtypes and shapes); everything else is checked as for execution. The
// decoded input pointers are then null.

// The proto enum value of t.
v1::DataType ToProto(DType t);

}  // namespace coalesce
