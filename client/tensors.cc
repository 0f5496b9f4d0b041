#include "client/tensors.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/shape.h"
#include "base/status_macros.h"

namespace coalesce {

v1::Tensor ToTensor(NpyArray array) {
  v1::Tensor tensor;
  tensor.set_dtype(ToProtoDType(array.dtype));
  for (const int64_t d : array.shape) tensor.add_shape(d);
  tensor.set_raw(std::move(array.bytes));
  return tensor;
}

absl::StatusOr<NpyArray> FromTensor(v1::Tensor tensor) {
  if (tensor.data_case() != v1::Tensor::kRaw) {
    return absl::InvalidArgumentError(
        "tensor is not inline (no raw bytes in the response)");
  }
  NpyArray array;
  COALESCE_ASSIGN_OR_RETURN(array.dtype, FromProtoDType(tensor.dtype()));
  array.shape.assign(tensor.shape().begin(), tensor.shape().end());
  COALESCE_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(array.shape));
  if (tensor.raw().size() !=
      static_cast<size_t>(n) * ElementSize(array.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of ", n, " ", DTypeName(array.dtype),
                     " elements has ", tensor.raw().size(), " bytes"));
  }
  array.bytes = std::move(*tensor.mutable_raw());
  return array;
}

absl::StatusOr<NpyArray> RandomArray(DType dtype,
                                     const std::vector<int64_t>& shape,
                                     std::mt19937_64& rng) {
  COALESCE_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape));
  NpyArray array;
  array.dtype = dtype;
  array.shape = shape;
  array.bytes.resize(static_cast<size_t>(n) * ElementSize(dtype));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    StoreFromFloat(array.bytes.data(), dtype, i, uniform(rng));
    if (LoadAsFloat(array.bytes.data(), dtype, i) == 0.0f) {
      StoreFromFloat(array.bytes.data(), dtype, i, 0.5f);
    }
  }
  return array;
}

double Checksum(const NpyArray& array) {
  const int64_t n =
      static_cast<int64_t>(array.bytes.size() / ElementSize(array.dtype));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += LoadAsFloat(array.bytes.data(), array.dtype, i);
  }
  return sum;
}

std::string Summarize(const NpyArray& array, int max_values) {
  const int64_t n =
      static_cast<int64_t>(array.bytes.size() / ElementSize(array.dtype));
  std::vector<std::string> first;
  for (int64_t i = 0; i < n && i < max_values; ++i) {
    first.push_back(absl::StrFormat(
        "%.6g", LoadAsFloat(array.bytes.data(), array.dtype, i)));
  }
  if (n > max_values) first.push_back("...");
  return absl::StrFormat("shape=[%s] dtype=%s sum=%.9g first=[%s]",
                         absl::StrJoin(array.shape, ","),
                         DTypeName(array.dtype), Checksum(array),
                         absl::StrJoin(first, ", "));
}

}  // namespace coalesce
