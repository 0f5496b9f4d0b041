// Factories for the CPU kernel variants, one per variant file; register.cc
// holds the one list that adds them to the registry. Internal to kernels/cpu.
// Variants are stateless: thread-safe.
#pragma once

#include <memory>

#include "kernels/core/variant.h"

namespace coalesce::cpu {

std::unique_ptr<KernelVariant> NewTransposeBlocked();
std::unique_ptr<KernelVariant> NewTransposeNaive();
std::unique_ptr<KernelVariant> NewGemmOpenBlas();
std::unique_ptr<KernelVariant> NewConvertLayoutBlocked();
std::unique_ptr<KernelVariant> NewGeluLayerNormFused();

}  // namespace coalesce::cpu
