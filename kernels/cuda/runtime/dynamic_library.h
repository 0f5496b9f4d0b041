// Loading an optional NVIDIA library at run time (dlopen), so that the
// server runs, and says why a feature is off, on machines and images that
// lack it: cuBLASLt (gemm/cublaslt_api.cc) and CUPTI
// (profiling/cupti_sampler.cc). Stateless; thread-safe (dlopen and dlsym
// are).
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coalesce::cuda {

// The handle of the first of names that loads (RTLD_NOW | RTLD_LOCAL);
// UNIMPLEMENTED "<what> is not available: <each dlerror>" when none does.
// The library stays loaded for the life of the process.
absl::StatusOr<void*> OpenFirstLibrary(absl::string_view what,
                                       const std::vector<std::string>& names);

// Collects a library's entry points: Bind sets fn to symbol's address, or
// records the symbol in missing() when the library lacks it.
class SymbolBinder {
 public:
  explicit SymbolBinder(void* library) : library_(library) {}
  template <typename Fn>
  void Bind(Fn& fn, const char* symbol) {
    static_assert(std::is_pointer_v<Fn>, "bind a function pointer");
    fn = reinterpret_cast<Fn>(Lookup(symbol));
  }
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  void* Lookup(const char* symbol);
  void* library_;
  std::vector<std::string> missing_;
};

}  // namespace coalesce::cuda
