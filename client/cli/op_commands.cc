#include "client/cli/op_commands.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "client/cli/cli_common.h"
#include "client/cli/tune_shapes.h"
#include "client/tensors.h"

ABSL_FLAG(std::string, shape, "",
          "transpose, layout, gelu-ln: the input's shape, e.g. 64,128.");
// gemm.
ABSL_FLAG(int64_t, m, -1, "gemm: rows of op(A) and D.");
ABSL_FLAG(int64_t, n, -1, "gemm: columns of op(B) and D.");
ABSL_FLAG(int64_t, k, -1, "gemm: the reduction dimension.");
ABSL_FLAG(int64_t, batch, 0,
          "gemm: batch count; 0 leaves out the batch dimension.");
ABSL_FLAG(bool, trans_a, false, "gemm: A is stored [K,M].");
ABSL_FLAG(bool, trans_b, false, "gemm: B is stored [N,K].");
ABSL_FLAG(std::optional<float>, alpha, std::nullopt,
          "gemm: alpha (server default 1).");
ABSL_FLAG(std::optional<float>, beta, std::nullopt,
          "gemm: beta (server default 1 with C, else 0).");
ABSL_FLAG(bool, with_c, false, "gemm: add a random C [.., M, N].");
ABSL_FLAG(bool, allow_tf32, false, "gemm: allow TF32 tensor cores (GPU).");
// layout.
ABSL_FLAG(std::string, from, "", "layout: source layout, NCHW or NHWC.");
ABSL_FLAG(std::string, to, "", "layout: target layout, NCHW or NHWC.");
ABSL_FLAG(std::string, perm, "",
          "layout: a permutation, output dim i = input dim perm[i].");
ABSL_FLAG(int32_t, aos_fields, 0,
          "layout: fields F of an AoS<->SoA conversion (0: from the shape).");
ABSL_FLAG(std::string, direction, "",
          "layout: aos_to_soa ([N,F] -> [F,N], the default with "
          "--aos_fields) or soa_to_aos ([F,N] -> [N,F]).");
// gelu-ln.
ABSL_FLAG(std::string, approx, "none",
          "gelu-ln: GELU form, none (exact erf) or tanh.");
ABSL_FLAG(bool, return_pre_norm, false,
          "gelu-ln: also return h = gelu(x + bias) + residual.");
ABSL_FLAG(std::optional<float>, eps, std::nullopt,
          "gelu-ln: LayerNorm epsilon (server default 1e-5).");
ABSL_FLAG(bool, no_bias, false, "gelu-ln: no bias.");
ABSL_FLAG(bool, no_residual, false, "gelu-ln: no residual.");

namespace coalesce::cli {
namespace {

// A required --shape. Zero dimensions go to the server, which owns
// validation; negative ones cannot be allocated here.
absl::StatusOr<std::vector<int64_t>> ShapeFlag() {
  const std::string text = absl::GetFlag(FLAGS_shape);
  if (text.empty()) return UsageError("--shape (or --input) is required");
  COALESCE_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            ParseInts("shape", text));
  for (const int64_t d : shape) {
    if (d < 0) return UsageError("--shape dimensions must be >= 0");
  }
  return shape;
}

// The one input of transpose and layout: an --input file or a random array
// of --shape.
absl::StatusOr<NpyArray> SingleOperand(OpFlags& f) {
  COALESCE_ASSIGN_OR_RETURN(
      std::vector<NpyArray> in,
      MakeOperands(f, 1, 1, !absl::GetFlag(FLAGS_shape).empty(),
                   []() -> absl::StatusOr<Shapes> {
                     COALESCE_ASSIGN_OR_RETURN(auto shape, ShapeFlag());
                     return Shapes{shape};
                   }));
  return std::move(in[0]);
}

absl::Status RunTranspose(Client& client, OpFlags f) {
  COALESCE_ASSIGN_OR_RETURN(NpyArray in, SingleOperand(f));
  v1::TransposeRequest request;
  *request.mutable_input() = ToTensor(std::move(in));
  *request.mutable_options() = f.options;
  if (f.request_hook) return f.request_hook(client, request);
  COALESCE_ASSIGN_OR_RETURN(v1::TransposeResponse response,
                            client.Transpose(request));
  return EmitOutputs({{"output", response.mutable_output(), f.output}},
                     response.has_report() ? &response.report() : nullptr);
}

absl::Status RunGemm(Client& client, OpFlags f) {
  const int64_t m = absl::GetFlag(FLAGS_m), n = absl::GetFlag(FLAGS_n),
                k = absl::GetFlag(FLAGS_k), batch = absl::GetFlag(FLAGS_batch);
  const bool trans_a = absl::GetFlag(FLAGS_trans_a);
  const bool trans_b = absl::GetFlag(FLAGS_trans_b);
  const bool with_c = absl::GetFlag(FLAGS_with_c);
  if (with_c && f.inputs.size() == 2) {
    return UsageError("--with_c with --input needs a third file for C");
  }
  COALESCE_ASSIGN_OR_RETURN(
      std::vector<NpyArray> in,
      MakeOperands(f, 2, 3, m >= 0 || n >= 0 || k >= 0 || batch != 0,
                   [&]() -> absl::StatusOr<Shapes> {
                     if (m < 0 || n < 0 || k < 0) {
                       return UsageError(
                           "--m, --n and --k (or --input) are "
                           "required, each >= 0");
                     }
                     if (batch < 0) return UsageError("--batch must be >= 0");
                     std::vector<int64_t> prefix;
                     if (batch > 0) prefix.push_back(batch);
                     auto with_prefix = [&](int64_t rows, int64_t cols) {
                       std::vector<int64_t> s = prefix;
                       s.push_back(rows);
                       s.push_back(cols);
                       return s;
                     };
                     Shapes shapes = {
                         trans_a ? with_prefix(k, m) : with_prefix(m, k),
                         trans_b ? with_prefix(n, k) : with_prefix(k, n)};
                     if (with_c) shapes.push_back(with_prefix(m, n));
                     return shapes;
                   }));
  v1::GemmRequest request;
  *request.mutable_a() = ToTensor(std::move(in[0]));
  *request.mutable_b() = ToTensor(std::move(in[1]));
  if (in.size() == 3) *request.mutable_c() = ToTensor(std::move(in[2]));
  request.set_trans_a(trans_a);
  request.set_trans_b(trans_b);
  if (const auto alpha = absl::GetFlag(FLAGS_alpha)) request.set_alpha(*alpha);
  if (const auto beta = absl::GetFlag(FLAGS_beta)) request.set_beta(*beta);
  request.set_allow_tf32(absl::GetFlag(FLAGS_allow_tf32));
  *request.mutable_options() = f.options;
  if (f.request_hook) return f.request_hook(client, request);
  COALESCE_ASSIGN_OR_RETURN(v1::GemmResponse response, client.Gemm(request));
  return EmitOutputs({{"d", response.mutable_d(), f.output}},
                     response.has_report() ? &response.report() : nullptr);
}

absl::StatusOr<v1::Layout> ParseLayout(absl::string_view flag,
                                       absl::string_view text) {
  const std::string upper = absl::AsciiStrToUpper(text);
  if (upper == "NCHW") return v1::LAYOUT_NCHW;
  if (upper == "NHWC") return v1::LAYOUT_NHWC;
  return UsageError(
      absl::StrCat("--", flag, "=", text, ": expected NCHW or NHWC"));
}

// Fills the request's conversion from exactly one of --from/--to, --perm
// and --aos_fields/--direction.
absl::Status SetConversion(v1::ConvertLayoutRequest& request) {
  const std::string from = absl::GetFlag(FLAGS_from);
  const std::string to = absl::GetFlag(FLAGS_to);
  const std::string perm = absl::GetFlag(FLAGS_perm);
  const int32_t fields = absl::GetFlag(FLAGS_aos_fields);
  const std::string direction = absl::GetFlag(FLAGS_direction);
  const bool layouts = !from.empty() || !to.empty();
  const bool aos = fields != 0 || !direction.empty();
  if (layouts + !perm.empty() + aos != 1) {
    return UsageError(
        "layout needs exactly one of --from/--to, --perm, or "
        "--aos_fields/--direction");
  }
  if (layouts) {
    if (from.empty() || to.empty()) {
      return UsageError("--from and --to go together");
    }
    v1::LayoutPair* pair = request.mutable_layouts();
    COALESCE_ASSIGN_OR_RETURN(const v1::Layout f, ParseLayout("from", from));
    COALESCE_ASSIGN_OR_RETURN(const v1::Layout t, ParseLayout("to", to));
    pair->set_from(f);
    pair->set_to(t);
  } else if (!perm.empty()) {
    COALESCE_ASSIGN_OR_RETURN(const std::vector<int64_t> axes,
                              ParseInts("perm", perm));
    v1::Permutation* p = request.mutable_permutation();
    for (const int64_t axis : axes) {
      if (axis < INT32_MIN || axis > INT32_MAX) {
        return UsageError("--perm entries must fit in int32");
      }
      p->add_perm(static_cast<int32_t>(axis));
    }
  } else {
    v1::AosSoa* a = request.mutable_aos_soa();
    a->set_fields(fields);
    if (direction.empty() || direction == "aos_to_soa") {
      a->set_direction(v1::AosSoa::DIRECTION_AOS_TO_SOA);
    } else if (direction == "soa_to_aos") {
      a->set_direction(v1::AosSoa::DIRECTION_SOA_TO_AOS);
    } else {
      return UsageError(absl::StrCat("--direction=", direction,
                                     ": expected aos_to_soa or soa_to_aos"));
    }
  }
  return absl::OkStatus();
}

absl::Status RunLayout(Client& client, OpFlags f) {
  v1::ConvertLayoutRequest request;
  COALESCE_RETURN_IF_ERROR(SetConversion(request));
  COALESCE_ASSIGN_OR_RETURN(NpyArray in, SingleOperand(f));
  *request.mutable_input() = ToTensor(std::move(in));
  *request.mutable_options() = f.options;
  if (f.request_hook) return f.request_hook(client, request);
  COALESCE_ASSIGN_OR_RETURN(v1::ConvertLayoutResponse response,
                            client.ConvertLayout(request));
  return EmitOutputs({{"output", response.mutable_output(), f.output}},
                     response.has_report() ? &response.report() : nullptr);
}

// FILE.npy -> FILE.h.npy, where gelu-ln writes h.
std::string PreNormPath(absl::string_view output) {
  absl::ConsumeSuffix(&output, ".npy");
  return absl::StrCat(output, ".h.npy");
}

absl::Status RunGeluLayerNorm(Client& client, OpFlags f) {
  v1::GeluLayerNormRequest request;
  const std::string approx = absl::GetFlag(FLAGS_approx);
  if (approx == "tanh") {
    request.set_approximation(v1::GELU_APPROXIMATION_TANH);
  } else if (approx != "none") {
    return UsageError(
        absl::StrCat("--approx=", approx, ": expected none or tanh"));
  }
  // The operand slots in --input order; slots without an operand stay
  // absent, which the server reads as zero bias/residual, unit gamma and
  // zero beta.
  using Slot = v1::Tensor* (v1::GeluLayerNormRequest::*)();
  const bool bias = !absl::GetFlag(FLAGS_no_bias);
  const bool residual = !absl::GetFlag(FLAGS_no_residual);
  std::vector<Slot> slots = {&v1::GeluLayerNormRequest::mutable_x};
  if (bias) slots.push_back(&v1::GeluLayerNormRequest::mutable_bias);
  if (residual) slots.push_back(&v1::GeluLayerNormRequest::mutable_residual);
  slots.push_back(&v1::GeluLayerNormRequest::mutable_gamma);
  slots.push_back(&v1::GeluLayerNormRequest::mutable_beta);
  COALESCE_ASSIGN_OR_RETURN(
      std::vector<NpyArray> in,
      MakeOperands(f, 1, slots.size(), !absl::GetFlag(FLAGS_shape).empty(),
                   [&]() -> absl::StatusOr<Shapes> {
                     COALESCE_ASSIGN_OR_RETURN(auto shape, ShapeFlag());
                     const std::vector<int64_t> hidden = {
                         shape.empty() ? 0 : shape.back()};
                     Shapes shapes = {shape};
                     if (bias) shapes.push_back(hidden);
                     if (residual) shapes.push_back(shape);
                     shapes.push_back(hidden);  // gamma
                     shapes.push_back(hidden);  // beta
                     return shapes;
                   }));
  for (size_t i = 0; i < in.size(); ++i) {
    *(request.*slots[i])() = ToTensor(std::move(in[i]));
  }
  if (const auto eps = absl::GetFlag(FLAGS_eps)) request.set_epsilon(*eps);
  request.set_return_pre_norm(absl::GetFlag(FLAGS_return_pre_norm));
  *request.mutable_options() = f.options;
  if (f.request_hook) return f.request_hook(client, request);
  COALESCE_ASSIGN_OR_RETURN(v1::GeluLayerNormResponse response,
                            client.GeluLayerNorm(request));
  std::vector<Output> outputs = {{"y", response.mutable_y(), f.output}};
  if (request.return_pre_norm()) {
    outputs.push_back({"h", response.mutable_h(),
                       f.output.empty() ? "" : PreNormPath(f.output)});
  }
  return EmitOutputs(outputs,
                     response.has_report() ? &response.report() : nullptr);
}

}  // namespace

OpRunner RunnerFor(absl::string_view op) {
  const std::pair<absl::string_view, OpRunner> kOps[] = {
      {"transpose", &RunTranspose},
      {"gemm", &RunGemm},
      {"layout", &RunLayout},
      {"gelu-ln", &RunGeluLayerNorm},
  };
  for (const auto& [name, runner] : kOps) {
    if (op == name) return runner;
  }
  return nullptr;
}

TuneFlags CurrentTuneFlags() {
  TuneFlags f;
  f.batch = absl::GetFlag(FLAGS_batch);
  f.trans_a = absl::GetFlag(FLAGS_trans_a);
  f.trans_b = absl::GetFlag(FLAGS_trans_b);
  f.from = absl::GetFlag(FLAGS_from);
  f.to = absl::GetFlag(FLAGS_to);
  f.perm = absl::GetFlag(FLAGS_perm);
  f.direction = absl::GetFlag(FLAGS_direction);
  f.aos_fields = absl::GetFlag(FLAGS_aos_fields);
  return f;
}

namespace {

void SetTuneFlags(const TuneFlags& f) {
  absl::SetFlag(&FLAGS_batch, f.batch);
  absl::SetFlag(&FLAGS_trans_a, f.trans_a);
  absl::SetFlag(&FLAGS_trans_b, f.trans_b);
  absl::SetFlag(&FLAGS_from, f.from);
  absl::SetFlag(&FLAGS_to, f.to);
  absl::SetFlag(&FLAGS_perm, f.perm);
  absl::SetFlag(&FLAGS_direction, f.direction);
  absl::SetFlag(&FLAGS_aos_fields, f.aos_fields);
}

absl::StatusOr<bool> ParseBit(absl::string_view shape, absl::string_view flag,
                              absl::string_view value) {
  if (value == "1") return true;
  if (value == "0") return false;
  return UsageError(absl::StrCat("tune shape '", shape, "': ", flag, "=", value,
                                 ": expected 0 or 1"));
}

}  // namespace

absl::Status SetTuneShape(absl::string_view op, const std::string& shape,
                          const TuneFlags& base) {
  absl::StatusOr<TuneShape> parsed = ParseTuneShape(shape);
  if (!parsed.ok()) return UsageError(parsed.status().message());
  // Each shape starts from the command line's flags, so that one shape's
  // settings never leak into the next.
  TuneFlags f = base;
  bool conversion_cleared = false;
  for (const auto& [flag, value] : parsed->settings) {
    if (op == "gemm" && (flag == "trans_a" || flag == "trans_b")) {
      COALESCE_ASSIGN_OR_RETURN(const bool bit, ParseBit(shape, flag, value));
      (flag == "trans_a" ? f.trans_a : f.trans_b) = bit;
    } else if (op == "gemm" && flag == "batch") {
      if (!absl::SimpleAtoi(value, &f.batch)) {
        return UsageError(
            absl::StrCat("tune shape '", shape, "': batch=", value));
      }
    } else if (op == "layout" &&
               (flag == "from" || flag == "to" || flag == "perm" ||
                flag == "direction" || flag == "aos_fields")) {
      // A shape's conversion replaces the command line's whole.
      if (!conversion_cleared) {
        f.from = f.to = f.perm = f.direction = "";
        f.aos_fields = 0;
        conversion_cleared = true;
      }
      if (flag == "from") f.from = value;
      if (flag == "to") f.to = value;
      if (flag == "perm") f.perm = value;
      if (flag == "direction") f.direction = value;
      if (flag == "aos_fields" && !absl::SimpleAtoi(value, &f.aos_fields)) {
        return UsageError(
            absl::StrCat("tune shape '", shape, "': aos_fields=", value));
      }
    } else {
      return UsageError(absl::StrCat("tune shape '", shape, "': ", op,
                                     " takes no ", flag, "="));
    }
  }
  SetTuneFlags(f);
  if (op != "gemm") {
    absl::SetFlag(&FLAGS_shape, absl::StrJoin(parsed->dims, ","));
    return absl::OkStatus();
  }
  if (parsed->dims.size() != 3) {
    return UsageError(
        absl::StrCat("gemm tune shape '", shape, "': want M,N,K"));
  }
  absl::SetFlag(&FLAGS_m, parsed->dims[0]);
  absl::SetFlag(&FLAGS_n, parsed->dims[1]);
  absl::SetFlag(&FLAGS_k, parsed->dims[2]);
  return absl::OkStatus();
}

void SetDefaultLayoutConversion() {
  if (absl::GetFlag(FLAGS_from).empty() && absl::GetFlag(FLAGS_perm).empty() &&
      absl::GetFlag(FLAGS_aos_fields) == 0 &&
      absl::GetFlag(FLAGS_direction).empty()) {
    absl::SetFlag(&FLAGS_from, "NCHW");
    absl::SetFlag(&FLAGS_to, "NHWC");
  }
}

}  // namespace coalesce::cli
