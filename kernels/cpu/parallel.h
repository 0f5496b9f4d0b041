// When the CPU kernels go parallel. Constants only; thread-safe.
#pragma once

#include <cstdint>

namespace coalesce::cpu {

// Below this many bytes moved an OpenMP parallel region costs more than it
// saves: a team start is a few microseconds, in which one core copies about
// 64 KiB.
inline constexpr int64_t kParallelMinBytes = int64_t{64} << 10;

}  // namespace coalesce::cpu
