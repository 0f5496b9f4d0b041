// Conformance testing for kernel variants of any backend (Highway's
// export-and-test, ggml's test-backend-ops): the edge-case problems every
// variant of an op must get right, and a checker that runs one variant on
// one problem and compares it with the float64 references of
// kernels/cpu/reference.h. The checker feeds seeded random inputs (never
// zeros), poisons the outputs with NaN bytes and surrounds them with guard
// bytes, requires the inputs to be left untouched, then demands bit-exact
// results for data movement and error-bounded results for arithmetic.
// Used by the CPU tests and by the CUDA backend's GPU tests.
//
// Thread-safety: all functions are reentrant; CheckVariant is as
// thread-safe as the backend it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/core/backend.h"
#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce {

// The problems every variant of op should run for dtype: dimensions at the
// edges (1, 7, 31, 32, 33, 64, 1000, non-square, batched), every flag
// combination, and a few large cases. Variants whose CanImplement rejects a
// problem are simply not run on it.
std::vector<Problem> ConformanceProblems(OpKind op, DType dtype);

// GEMM problem builders for tests: dense strides when batch > 1, and C
// added with the given scales.
GemmProblem Gemm(DType t, int64_t batch, int64_t m, int64_t n, int64_t k,
                 bool trans_a, bool trans_b);
GemmProblem WithC(GemmProblem g, float alpha, float beta);

// Runs v on p through backend.Execute and checks every output element.
// OK, or FAILED_PRECONDITION when v cannot implement p on the backend's
// device, or the Execute error (prefixed with the case), or INTERNAL
// naming the variant, the problem, the seed, the first bad element (index,
// got, expected) and the count of bad elements. When the environment
// variable COALESCE_CONFORMANCE_DUMP_DIR names a directory, a failing case
// also writes its raw inputs and outputs there.
absl::Status CheckVariant(Backend& backend, const KernelVariant& v,
                          const Problem& p, uint64_t seed);

// CheckVariant with every operand stored on the backend
// (Backend::AllocateResident), the call made `runs` times on the same
// addresses with the outputs poisoned before each, every run's outputs
// checked: what a client that pipelines into one output handle sends.
// *graph_replays: the runs the backend replayed as a graph
// (RunResult::graph_replayed).
absl::Status CheckVariantResident(Backend& backend, const KernelVariant& v,
                                  const Problem& p, uint64_t seed, int runs,
                                  int* graph_replays);

// n elements of type t, uniform in [lo, hi] but avoiding magnitudes below
// 1/64 of max(|lo|, |hi|) (no zeros, no cancellation-prone tiny values),
// rounded to t. Deterministic in seed, whatever the thread count.
void FillRandom(void* data, DType t, int64_t n, uint64_t seed, float lo,
                float hi);

// Fills bytes with 0xFF: a NaN in float32, float16 and bfloat16 alike, so an
// element a kernel forgets to write cannot pass a comparison.
void Poison(void* data, size_t bytes);

}  // namespace coalesce
