#include "kernels/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"

namespace coalesce::cuda {
namespace {

struct Loaded {
  CublasLt api{};
  absl::Status status;
};

Loaded& Load() {
  static absl::once_flag once;
  static Loaded* loaded = new Loaded();
  absl::call_once(once, [] {
    void* lib = nullptr;
    std::string errors;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", dlerror());
    }
    if (lib == nullptr) {
      loaded->status = absl::UnimplementedError(
          absl::StrCat("cuBLASLt is not available: ", errors));
      return;
    }
    std::string missing;
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, symbol));
      if (fn == nullptr) absl::StrAppend(&missing, " ", symbol);
    };
    CublasLt& a = loaded->api;
    bind(a.Create, "cublasLtCreate");
    bind(a.Destroy, "cublasLtDestroy");
    bind(a.GetStatusName, "cublasLtGetStatusName");
    bind(a.GetStatusString, "cublasLtGetStatusString");
    bind(a.Matmul, "cublasLtMatmul");
    bind(a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(a.MatmulDescCreate, "cublasLtMatmulDescCreate");
    bind(a.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
    bind(a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
    bind(a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
    bind(a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
    bind(a.MatmulPreferenceSetAttribute,
         "cublasLtMatmulPreferenceSetAttribute");
    bind(a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
    bind(a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
    bind(a.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
    if (!missing.empty()) {
      loaded->status =
          absl::UnimplementedError(absl::StrCat("cuBLASLt lacks:", missing));
    }
  });
  return *loaded;
}

}  // namespace

absl::Status CublasLtAvailable() { return Load().status; }

const CublasLt& Lt() { return Load().api; }

}  // namespace coalesce::cuda
