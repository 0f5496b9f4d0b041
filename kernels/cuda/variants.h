// Factories for the CUDA variants; register.cc lists them, one line each.
#pragma once

#include <memory>

#include "kernels/core/variant.h"
#include "kernels/cuda/transpose/kernels.h"

namespace coalesce::cuda {

// transpose.cuda.{naive,smem_tiled,smem_padded,vec16,vec16_wide,tma,
// small_dim}
std::unique_ptr<KernelVariant> MakeTransposeVariant(TransposeKernel k);

// convert_layout.cuda.{naive,tiled}: any permutation.
std::unique_ptr<KernelVariant> MakePermuteVariant(PermuteKernel k);
// convert_layout.cuda.{vec16,small_dim,tma}: permutations that collapse to a
// batched 2-D transpose, run by the transpose kernel k.
std::unique_ptr<KernelVariant> MakeLayoutTransposeVariant(TransposeKernel k);

// gemm.cuda.*: batched D = alpha * op(A) * op(B) + beta * C, one file each
// (gemm_<variant>.cu, gemm_cublaslt.cc); CanImplement states each one's
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
