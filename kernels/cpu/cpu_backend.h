// The CPU backend: the embedded default where no GPU is visible, and the
// home of the float64 references the tests use. Variants run in place on
// host memory, multithreaded with OpenMP (and OpenBLAS for GEMM).
// Thread-safe.
#pragma once

#include <memory>

#include "kernels/core/backend.h"

namespace coalesce {

// threads <= 0: all cores.
std::unique_ptr<Backend> CreateCpuBackend(int threads);
// Device `index` of `count` simulated devices on this CPU (--cpu_devices):
// each a CPU backend of its own, with the index as its ordinal, so that a
// device group of them exercises multi-device serving without a GPU.
std::unique_ptr<Backend> CreateSimulatedCpuDevice(int threads, int index);

// The one list of CPU variants (kernels/cpu/register.cc).
void RegisterCpuVariants(VariantRegistry& registry);

// A description of this host's CPU as a device.
DeviceInfo CpuDeviceInfo(int threads);

}  // namespace coalesce
