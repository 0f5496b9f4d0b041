// float64 references: what every op should produce, computed in double from
// the (already dtype-rounded) host inputs with plain loops whose correctness
// is evident by reading. The conformance tests of every backend compare
// against these; speed matters only enough to keep the tests quick.
// Stateless and thread-safe (OpenMP inside).
#pragma once

#include <vector>

#include "kernels/core/problem.h"
#include "kernels/core/variant.h"

namespace coalesce {

// One vector per output of p, in problem.h's operand order, element for
// element in the output's layout. host_inputs follows problem.h's input
// order with the sizes of OperandBytes(p); its outputs are not used. An
// absent optional output (GELU-LN's h without return_pre_norm) gives an
// empty vector.
std::vector<std::vector<double>> ReferenceOutputs(const Problem& p,
                                                  const Operands& host_inputs);

}  // namespace coalesce
