// The op subcommands: transpose, gemm, layout and gelu-ln, each a request
// built from its flags (or --input files), sent, and its outputs written or
// summarized. explain and tune run the same builders with a request hook,
// and point the shape flags at each shape they sweep.
// Reads and sets process-wide flags: call from the CLI's one thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cli/op_common.h"
#include "client/client.h"

namespace coalesce::cli {

using OpRunner = absl::Status (*)(Client&, OpFlags);

// The subcommand of an op name (transpose, gemm, layout, gelu-ln); null for
// any other name.
OpRunner RunnerFor(absl::string_view op);

// The op flags a tune shape can set (client/cli/tune_shapes.h).
struct TuneFlags {
  int64_t batch = 0;
  bool trans_a = false;
  bool trans_b = false;
  std::string from, to, perm, direction;
  int32_t aos_fields = 0;
};

// Their values now: the command line's, before tune sets any.
TuneFlags CurrentTuneFlags();

// Points the op flags at one tune shape ("DIMS[ flag=value]...", DIMS what
// --shape takes, or M,N,K for gemm): `base` with the shape's settings
// applied (gemm: trans_a, trans_b, batch; layout: from, to, perm,
// direction, aos_fields, which replace base's conversion).
absl::Status SetTuneShape(absl::string_view op, const std::string& shape,
                          const TuneFlags& base);

// layout without --from/--to, --perm, --aos_fields or --direction: NCHW to
// NHWC, the conversion tune sweeps by default.
void SetDefaultLayoutConversion();

}  // namespace coalesce::cli
