#include "kernels/cuda/runtime/dynamic_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace coalesce::cuda {

absl::StatusOr<void*> OpenFirstLibrary(absl::string_view what,
                                       const std::vector<std::string>& names) {
  std::string errors;
  for (const std::string& name : names) {
    if (void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* error = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ",
                    error != nullptr ? error : name);
  }
  return absl::UnimplementedError(
      absl::StrCat(what, " is not available: ", errors));
}

void* SymbolBinder::Lookup(const char* symbol) {
  void* address = dlsym(library_, symbol);
  if (address == nullptr) missing_.push_back(symbol);
  return address;
}

}  // namespace coalesce::cuda
