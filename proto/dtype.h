// DType <-> coalesce.v1.DataType, shared by the server's codec and the client
// library. Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "coalesce/v1/tensor_ops.pb.h"

namespace coalesce {

v1::DataType ToProtoDType(DType dtype);
// INVALID_ARGUMENT for DATA_TYPE_UNSPECIFIED and unknown values.
absl::StatusOr<DType> FromProtoDType(v1::DataType dtype);

}  // namespace coalesce
