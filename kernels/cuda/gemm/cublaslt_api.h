// cuBLASLt, loaded with dlopen on first use instead of linked: the library
// carries 94 KB of thread-local storage, and linked in it joins the static
// TLS block of every thread, which then no longer fits the 100 KB stacks
// civetweb gives its /metrics threads (pthread_create fails with EINVAL).
// Loaded at run time its TLS is allocated per thread on demand, and a
// machine without cuBLAS still serves every other variant. Thread-safe.
#pragma once

#include <cublasLt.h>

#include "absl/status/status.h"

namespace coalesce::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) MatmulAlgoConfigGetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// OK once libcublasLt is loaded (the first call loads it); otherwise
// UNIMPLEMENTED saying why, every time.
absl::Status CublasLtAvailable();

// The loaded entry points; only after CublasLtAvailable() is OK.
const CublasLt& Lt();

}  // namespace coalesce::cuda
