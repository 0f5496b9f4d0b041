// Factories for the CUDA variants, one per variant file; register.cc lists
// them, one line each. Variants are stateless after construction: thread-safe.
#pragma once

#include <memory>

#include "kernels/core/variant.h"

namespace coalesce::cuda {

// transpose.cuda.*: batched 2-D transposes, one file each
// (transpose/<variant>_variant.cc, the kernels in transpose/*.cu).
std::unique_ptr<KernelVariant> MakeTransposeNaiveVariant();
std::unique_ptr<KernelVariant> MakeTransposeSmemTiledVariant();
std::unique_ptr<KernelVariant> MakeTransposeSmemPaddedVariant();
std::unique_ptr<KernelVariant> MakeTransposeVec16Variant();
std::unique_ptr<KernelVariant> MakeTransposeVec16WideVariant();
std::unique_ptr<KernelVariant> MakeTransposeTmaVariant();
std::unique_ptr<KernelVariant> MakeTransposeSmallDimVariant();

// convert_layout.cuda.*, one file each (layout/<variant>_variant.cc).
// naive, tiled: any permutation.
std::unique_ptr<KernelVariant> MakeLayoutNaiveVariant();
std::unique_ptr<KernelVariant> MakeLayoutTiledVariant();
// vec16, small_dim, tma: permutations that collapse to a batched 2-D
// transpose, run by the transpose kernel of the same name.
std::unique_ptr<KernelVariant> MakeLayoutVec16Variant();
std::unique_ptr<KernelVariant> MakeLayoutSmallDimVariant();
std::unique_ptr<KernelVariant> MakeLayoutTmaVariant();

// gemm.cuda.*: batched D = alpha * op(A) * op(B) + beta * C, one file each
// (gemm/<variant>.cu, gemm/cublaslt.cc); CanImplement states each one's
// constraints.
std::unique_ptr<KernelVariant> MakeGemmNaiveVariant();
std::unique_ptr<KernelVariant> MakeGemmSmemTiledVariant();
std::unique_ptr<KernelVariant> MakeGemmRegTiledVariant();
std::unique_ptr<KernelVariant> MakeGemmTensorCoreVariant();
std::unique_ptr<KernelVariant> MakeGemmWgmmaVariant();
std::unique_ptr<KernelVariant> MakeGemmCublasLtVariant();

// gelu_layer_norm.cuda.unfused: three kernels through a float32 temporary.
std::unique_ptr<KernelVariant> MakeGeluLnUnfusedVariant();
// gelu_layer_norm.cuda.warp_per_row: fused, hidden <= 1024.
std::unique_ptr<KernelVariant> MakeGeluLnWarpPerRowVariant();
// gelu_layer_norm.cuda.block_per_row: fused, hidden <= 16384.
std::unique_ptr<KernelVariant> MakeGeluLnBlockPerRowVariant();

}  // namespace coalesce::cuda
