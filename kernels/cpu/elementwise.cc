#include "kernels/cpu/elementwise.h"

#include "kernels/cpu/parallel.h"

namespace coalesce::cpu {

namespace {

int64_t ConvertBytes(DType t, int64_t n) {
  return n * static_cast<int64_t>(ElementSize(t) + sizeof(float));
}

}  // namespace

void ToFloat(const void* src, DType t, int64_t n, float* dst) {
  DispatchDType(t, [&](auto tag) {
    using Tag = decltype(tag);
    const auto* s = static_cast<const typename Tag::Storage*>(src);
#pragma omp parallel for schedule(static) if (ConvertBytes(t, n) >= \
                                              kParallelMinBytes)
    for (int64_t i = 0; i < n; ++i) dst[i] = Tag::Load(s[i]);
  });
}

void FromFloat(const float* src, DType t, int64_t n, void* dst) {
  DispatchDType(t, [&](auto tag) {
    using Tag = decltype(tag);
    auto* d = static_cast<typename Tag::Storage*>(dst);
#pragma omp parallel for schedule(static) if (ConvertBytes(t, n) >= \
                                              kParallelMinBytes)
    for (int64_t i = 0; i < n; ++i) d[i] = Tag::Store(src[i]);
  });
}

}  // namespace coalesce::cpu
