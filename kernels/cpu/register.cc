#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/variants.h"

namespace coalesce {

void RegisterCpuVariants(VariantRegistry& registry) {
  registry.Add(cpu::NewTransposeBlocked());
  registry.Add(cpu::NewTransposeNaive());
  registry.Add(cpu::NewGemmOpenBlas());
  registry.Add(cpu::NewConvertLayoutBlocked());
  registry.Add(cpu::NewGeluLayerNormFused());
}

}  // namespace coalesce
