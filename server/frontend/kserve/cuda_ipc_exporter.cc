// The other process of cuda_shm_gpu_test: exports device memory the way a
// Triton client's CUDA shared-memory utilities do, and reads it back.
//
//   cuda_ipc_exporter BYTES SEED
//
// Allocates BYTES on the current device, fills them with random floats from
// SEED (so that an output never written is caught), and prints
// "handle HEX" (cudaIpcGetMemHandle's 64 bytes). Then, one command per
// line on stdin: "get OFFSET COUNT" prints "data HEX" of those bytes, read
// back from the device; "quit" frees the memory and exits 0. Errors go to
// stderr with exit status 1.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

int Fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "cuda_ipc_exporter: %s: %s\n", what,
               cudaGetErrorString(e));
  return 1;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cuda_ipc_exporter BYTES SEED\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  std::mt19937 rng(static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)));
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> host(bytes / sizeof(float));
  for (float& v : host) v = dist(rng);
  void* device = nullptr;
  if (cudaError_t e = cudaMalloc(&device, bytes); e != cudaSuccess) {
    return Fail("cudaMalloc", e);
  }
  if (cudaError_t e =
          cudaMemcpy(device, host.data(), host.size() * sizeof(float),
                     cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return Fail("cudaMemcpy", e);
  }
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, device); e != cudaSuccess) {
    return Fail("cudaIpcGetMemHandle", e);
  }
  std::cout << "handle "
            << Hex(reinterpret_cast<const unsigned char*>(&handle),
                   sizeof(handle))
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    size_t offset = 0, count = 0;
    if (command != "get" || !(in >> offset >> count) || offset > bytes ||
        count > bytes - offset) {
      std::fprintf(stderr, "cuda_ipc_exporter: bad command '%s'\n",
                   line.c_str());
      return 1;
    }
    std::vector<unsigned char> out(count);
    if (cudaError_t e =
            cudaMemcpy(out.data(), static_cast<char*>(device) + offset, count,
                       cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return Fail("cudaMemcpy back", e);
    }
    std::cout << "data " << Hex(out.data(), out.size()) << std::endl;
  }
  cudaFree(device);
  return 0;
}
