#include "kernels/cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

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

absl::Status EncodeTensorMap3d(CUtensorMap* map, CUtensorMapDataType type,
                               const void* base, std::array<int64_t, 3> dims,
                               std::array<int64_t, 2> strides,
                               std::array<int, 3> box,
                               CUtensorMapSwizzle swizzle,
                               absl::string_view who) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiledFn();
  if (encode == nullptr) {
    return absl::InternalError(
        absl::StrCat(who, ": the driver has no cuTensorMapEncodeTiled"));
  }
  const cuuint64_t d[3] = {static_cast<cuuint64_t>(dims[0]),
                           static_cast<cuuint64_t>(dims[1]),
                           static_cast<cuuint64_t>(dims[2])};
  const cuuint64_t s[2] = {static_cast<cuuint64_t>(strides[0]),
                           static_cast<cuuint64_t>(strides[1])};
  const cuuint32_t b[3] = {static_cast<cuuint32_t>(box[0]),
                           static_cast<cuuint32_t>(box[1]),
                           static_cast<cuuint32_t>(box[2])};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), d, s, b,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(
        absl::StrCat(who, ": cuTensorMapEncodeTiled failed (CUresult ", r,
                     ") for dims ", dims[0], "x", dims[1], "x", dims[2],
                     ", box ", box[0], "x", box[1], "x", box[2]));
  }
  return absl::OkStatus();
}

}  // namespace coalesce::cuda
