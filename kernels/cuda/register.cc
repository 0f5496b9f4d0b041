// The one list of CUDA variants. A new variant is one line here.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/variants.h"

namespace coalesce {

void RegisterCudaVariants(VariantRegistry& r) {
  using cuda::PermuteKernel;
  using cuda::TransposeKernel;
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kNaive));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kSmemTiled));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kSmemPadded));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kVec16));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kVec16Wide));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kTma));
  r.Add(cuda::MakeTransposeVariant(TransposeKernel::kSmallDim));
  r.Add(cuda::MakePermuteVariant(PermuteKernel::kNaive));
  r.Add(cuda::MakePermuteVariant(PermuteKernel::kTiled));
  r.Add(cuda::MakeLayoutTransposeVariant(TransposeKernel::kVec16));
  r.Add(cuda::MakeLayoutTransposeVariant(TransposeKernel::kSmallDim));
  r.Add(cuda::MakeLayoutTransposeVariant(TransposeKernel::kTma));
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
