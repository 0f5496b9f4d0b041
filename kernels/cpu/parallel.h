// When the CPU kernels go parallel. Constants only; thread-safe.
#pragma once

#include <cstdint>

namespace coalesce::cpu {

// Below this many bytes moved an OpenMP parallel region costs more than it
// saves. With OMP_WAIT_POLICY=passive (the scripts' and the image's setting:
// idle workers sleep instead of spinning on a shared machine) waking the
// team costs about 70 us: a 128x128 float32 transpose (128 KiB moved) took
// 80 us on two threads and 8 us on one (2-core VM, /tmp microbenchmark of
// CpuBackend::Execute). One core moves about 16 GB/s here, so a region pays
// from a few MiB on.
inline constexpr int64_t kParallelMinBytes = int64_t{2} << 20;

}  // namespace coalesce::cpu
