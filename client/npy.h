// Reading and writing NumPy .npy files (format versions 1.0 and 2.0), so the
// CLI and the tests can exchange tensors with NumPy. Only little-endian,
// C-order arrays of float32 ('<f4'), float16 ('<f2') and bfloat16 are
// supported. NumPy has no bfloat16 dtype: bfloat16 arrays are written as
// '<u2' holding the raw bit patterns, and '<u2' is read back as bfloat16.
// Pure functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"

namespace coalesce {

// A dense, row-major, little-endian array: product(shape) elements of dtype
// in `bytes`. An empty shape is a scalar (one element).
struct NpyArray {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The .npy bytes of `array`: the header is padded with spaces so that the
// data starts at a multiple of 64 bytes; version 2.0 only when the header
// does not fit version 1.0's 16-bit length. INVALID_ARGUMENT if `bytes` does
// not hold exactly product(shape) elements.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array);

// Parses .npy bytes. `want` chooses the dtype of the result: '<f4' and '<f2'
// files convert to it (rounding to nearest even), '<u2' is accepted only as
// bfloat16 bits. Without `want` a file keeps its own dtype ('<u2' is
// bfloat16). INVALID_ARGUMENT for anything else: bad magic or header,
// fortran_order True, big-endian or other dtypes, wrong data length.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view contents,
                                  std::optional<DType> want = std::nullopt);

// File wrappers; I/O failures are NOT_FOUND or INTERNAL with the path, and
// parse errors carry the path too.
absl::Status WriteNpy(const std::string& path, const NpyArray& array);
absl::StatusOr<NpyArray> ReadNpy(const std::string& path,
                                 std::optional<DType> want = std::nullopt);

}  // namespace coalesce
