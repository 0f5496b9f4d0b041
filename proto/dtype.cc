#include "proto/dtype.h"

#include "absl/strings/str_cat.h"

namespace coalesce {

v1::DataType ToProtoDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::DATA_TYPE_FLOAT32;
    case DType::kFloat16:
      return v1::DATA_TYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DATA_TYPE_BFLOAT16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

absl::StatusOr<DType> FromProtoDType(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DATA_TYPE_FLOAT16:
      return DType::kFloat16;
    case v1::DATA_TYPE_BFLOAT16:
      return DType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported tensor dtype ", v1::DataType_Name(dtype)));
  }
}

}  // namespace coalesce
