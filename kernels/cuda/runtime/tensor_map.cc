#include "kernels/cuda/runtime/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coalesce::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 EncodeTiledFn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                         cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky; clear it for the next check
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

absl::Status EncodeTensorMap(CUtensorMap* map, CUtensorMapDataType type,
                             const void* base, absl::Span<const int64_t> dims,
                             absl::Span<const int64_t> strides,
                             absl::Span<const int> box,
                             CUtensorMapSwizzle swizzle,
                             absl::string_view who) {
  constexpr size_t kMaxRank = 5;
  const size_t rank = dims.size();
  if (rank == 0 || rank > kMaxRank || strides.size() + 1 != rank ||
      box.size() != rank) {
    return absl::InternalError(
        absl::StrCat(who, ": tensor map of rank ", rank, " with ",
                     strides.size(), " strides and ", box.size(), " box dims"));
  }
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiledFn();
  if (encode == nullptr) {
    return absl::InternalError(
        absl::StrCat(who, ": the driver has no cuTensorMapEncodeTiled"));
  }
  cuuint64_t d[kMaxRank], s[kMaxRank];
  cuuint32_t b[kMaxRank], elem_strides[kMaxRank];
  for (size_t i = 0; i < rank; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    b[i] = static_cast<cuuint32_t>(box[i]);
    elem_strides[i] = 1;
    if (i + 1 < rank) s[i] = static_cast<cuuint64_t>(strides[i]);
  }
  const CUresult r = encode(
      map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, s,
      b, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat(
        who, ": cuTensorMapEncodeTiled failed (CUresult ", r, ") for dims ",
        absl::StrJoin(dims, "x"), ", box ", absl::StrJoin(box, "x")));
  }
  return absl::OkStatus();
}

}  // namespace coalesce::cuda
