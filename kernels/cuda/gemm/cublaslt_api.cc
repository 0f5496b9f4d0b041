#include "kernels/cuda/gemm/cublaslt_api.h"

#include <string>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cuda/runtime/dynamic_library.h"

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
    absl::StatusOr<void*> lib =
        OpenFirstLibrary("cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so"});
    if (!lib.ok()) {
      loaded->status = lib.status();
      return;
    }
    SymbolBinder binder(*lib);
    auto bind = [&binder](auto& fn, const char* symbol) {
      binder.Bind(fn, symbol);
    };
    CublasLt& a = loaded->api;
    bind(a.Create, "cublasLtCreate");
    bind(a.Destroy, "cublasLtDestroy");
    bind(a.GetStatusName, "cublasLtGetStatusName");
    bind(a.GetStatusString, "cublasLtGetStatusString");
    bind(a.Matmul, "cublasLtMatmul");
    bind(a.MatmulAlgoConfigGetAttribute,
         "cublasLtMatmulAlgoConfigGetAttribute");
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
    if (!binder.missing().empty()) {
      loaded->status = absl::UnimplementedError(absl::StrCat(
          "cuBLASLt lacks: ", absl::StrJoin(binder.missing(), ", ")));
    }
  });
  return *loaded;
}

}  // namespace

absl::Status CublasLtAvailable() { return Load().status; }

const CublasLt& Lt() { return Load().api; }

}  // namespace coalesce::cuda
