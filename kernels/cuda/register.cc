// The one list of CUDA variants. A new variant is one line here.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/variants.h"

namespace coalesce {

void RegisterCudaVariants(VariantRegistry& r) {
  r.Add(cuda::MakeTransposeNaiveVariant());
  r.Add(cuda::MakeTransposeSmemTiledVariant());
  r.Add(cuda::MakeTransposeSmemPaddedVariant());
  r.Add(cuda::MakeTransposeVec16Variant());
  r.Add(cuda::MakeTransposeVec16WideVariant());
  r.Add(cuda::MakeTransposeTmaVariant());
  r.Add(cuda::MakeTransposeSmallDimVariant());
  r.Add(cuda::MakeLayoutNaiveVariant());
  r.Add(cuda::MakeLayoutTiledVariant());
  r.Add(cuda::MakeLayoutVec16Variant());
  r.Add(cuda::MakeLayoutSmallDimVariant());
  r.Add(cuda::MakeLayoutTmaVariant());
  r.Add(cuda::MakeGemmNaiveVariant());
  r.Add(cuda::MakeGemmSmemTiledVariant());
  r.Add(cuda::MakeGemmRegTiledVariant());
  r.Add(cuda::MakeGemmTensorCoreVariant());
  r.Add(cuda::MakeGemmWgmmaVariant());
  r.Add(cuda::MakeGemmCublasLtVariant());
  r.Add(cuda::MakeGeluLnUnfusedVariant());
  r.Add(cuda::MakeGeluLnWarpPerRowVariant());
  r.Add(cuda::MakeGeluLnBlockPerRowVariant());
}

}  // namespace coalesce
