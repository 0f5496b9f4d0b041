// `coalesce`: the command-line client of the Coalesce server. Flags, input
// and output files and printing only; the RPCs are in client/client.h.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/npy.h"
#include "client/selection_cli.h"
#include "client/tensors.h"
#include "base/dtype.h"
#include "base/status_macros.h"

// Connection.
ABSL_FLAG(std::string, server, "localhost:50051", "Server address, HOST:PORT.");
ABSL_FLAG(int64_t, max_message_bytes, 2147483647,
          "Largest gRPC message sent or received, in bytes.");
ABSL_FLAG(double, timeout_s, 600, "Deadline of each call, in seconds.");
// health.
ABSL_FLAG(std::string, service, "",
          "health: the service to check; empty checks the whole server.");
// Every op.
ABSL_FLAG(std::string, dtype, "",
          "Element type: float32, float16 or bfloat16. Default: float32, or "
          "the first --input file's type.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the random inputs (uniform in [-1, 1], never zero).");
ABSL_FLAG(std::vector<std::string>, input, {},
          "An input .npy file instead of random data; repeat the flag for "
          "each of the op's inputs, in order (see above).");
ABSL_FLAG(std::string, output, "",
          "Write the main output to this .npy file instead of printing a "
          "summary (gelu-ln --return_pre_norm also writes FILE.h.npy).");
ABSL_FLAG(bool, report, false, "Print the server's kernel report.");
ABSL_FLAG(std::string, variant, "",
          "Force a kernel variant by name (see `coalesce info`).");
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

ABSL_FLAG(std::string, shapes, "",
          "tune: shapes separated by ';', each as --shape takes it (gemm: "
          "M,N,K).");
ABSL_FLAG(bool, measure, false,
          "explain: also time every eligible variant on the server now.");
ABSL_FLAG(int32_t, random_shapes, 0,
          "tune: this many random shapes, tiny to large, odd and aligned.");
ABSL_FLAG(uint64_t, shapes_seed, 7, "tune: seed of --random_shapes.");
ABSL_FLAG(int64_t, max_shape_bytes, int64_t{256} << 20,
          "tune: largest tensor of a random shape, in bytes.");
ABSL_FLAG(std::string, out, "", "tune: the table file to write.");
ABSL_FLAG(std::string, shapes_out, "",
          "tune: also write every shape's automatic choice and measured "
          "times to this file (tab-separated, one shape a line), which "
          "the table keeps only one shape of per key.");
ABSL_FLAG(std::string, name, "",
          "put: the handle to create (empty: the server picks one).");

namespace coalesce {
namespace {

// What an op subcommand does with the request it built: send it (unset),
// or hand it to `explain` or `tune` instead.
std::function<absl::Status(Client&, google::protobuf::Message&)> g_request_hook;
// explain and tune send shapes only (the server ignores ExplainSelection's
// data): random operands are then made without their bytes.
bool g_shape_only = false;

constexpr char kUsage[] =
    R"(command-line client of the Coalesce tensor-ops server.

usage: coalesce [--server=HOST:PORT] SUBCOMMAND [flags]

subcommands:
  info        backend, devices, build, limits and kernel variants by op
  health      grpc.health.v1 check: prints SERVING etc.; exit 0 only if SERVING
              [--service=NAME]
  transpose   --shape=M,N | --shape=B,M,N       [B,]M,N -> [B,]N,M
  gemm        --m=M --n=N --k=K [--batch=B] [--trans_a] [--trans_b]
              [--alpha=A] [--beta=B] [--with_c] [--allow_tf32]
                                                D = alpha*op(A)*op(B) + beta*C
  layout      --shape=N,C,H,W --from=NCHW --to=NHWC
              --shape=... --perm=0,2,3,1
              --shape=N,F --aos_fields=F [--direction=aos_to_soa]
              --shape=F,N --direction=soa_to_aos
  gelu-ln     --shape=ROWS,H [--approx=tanh] [--eps=E] [--return_pre_norm]
              [--no_bias] [--no_residual]
              h = gelu(x + bias) + residual; y = LayerNorm(h) * gamma + beta
  put FILE.npy [--name=H] [--dtype=]   upload a tensor, print its handle
  get HANDLE --output=FILE.npy          download a tensor kept on the server
  rm HANDLE                             delete it (prints the bytes freed)
  ls                                    the tensors kept on the server
  explain OP [op flags] [--measure]
              which variants could run this request, their estimated and
              measured times, the one the server picks and why
  tune OP (--shapes=S;S;... | --random_shapes=N) --out=TABLE
          [--shapes_out=FILE.tsv]
              time every eligible variant of OP (transpose, gemm, layout,
              gelu-ln) for each shape through the server (S is what --shape
              takes; gemm: M,N,K), write a table for --tuning_table, and
              report how often the automatic choice was within 10% of the
              fastest; --shapes_out also writes every shape's times

flags of every op:
  --dtype=float32|float16|bfloat16   default float32 (or the first input's)
  --seed=S          seed of the random inputs, uniform in [-1, 1]
  --input=FILE.npy  repeatable: the op's inputs, in this order, instead of
                    random data; shapes then come from the files:
                      transpose, layout: input
                      gemm:    a, b[, c]           (a third file means C)
                      gelu-ln: x[, bias][, residual][, gamma[, beta]]
                               (--no_bias / --no_residual drop that slot;
                               missing trailing ones are left out)
                    '<f4' and '<f2' files convert to --dtype; bfloat16 is
                    stored as '<u2' bit patterns.
  --output=FILE.npy write the main output (gelu-ln --return_pre_norm: h goes
                    to FILE.h.npy); without it, print a one-line summary
  --report          print the kernel report (variant, why, time, GB/s, ...)
  --variant=NAME    force a kernel variant (names: coalesce info)
  --server=HOST:PORT (default localhost:50051), --max_message_bytes=N,
  --timeout_s=S

exit status: 0 success; 1 error, printed as "error: CODE: message";
2 usage error.)";

// Marks a status as a usage error (exit 2) rather than a failed operation.
constexpr absl::string_view kUsagePayload = "type.coalesce.dev/cli.usage";

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// absl flags have no repeatable flag (a second --input replaces the first)
// and exit 1 on an unknown flag or bad value; this pass over argv, before
// absl::ParseCommandLine, collects every --input in order and turns flag
// mistakes into usage errors.
absl::StatusOr<std::vector<std::string>> ScanArgs(int argc, char** argv) {
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    std::optional<absl::string_view> value;
    if (eq != absl::string_view::npos) value = arg.substr(eq + 1);
    // absl's usage flags are not in the registry; ParseCommandLine acts on
    // them.
    constexpr absl::string_view kUsageFlags[] = {
        "help",   "helpfull",  "helpshort",       "helppackage",
        "helpon", "helpmatch", "only_check_args", "version"};
    if (std::find(std::begin(kUsageFlags), std::end(kUsageFlags), name) !=
        std::end(kUsageFlags)) {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated =
          absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && !value) continue;
    }
    if (flag == nullptr) {
      return UsageError(absl::StrCat("unknown flag --", name));
    }
    if (!value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 == argc) {
        return UsageError(absl::StrCat("--", name, " needs a value"));
      }
      value = absl::string_view(argv[++i]);
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return UsageError(absl::StrCat("--", name, ": ", error));
    }
    if (name == "input") {
      for (absl::string_view path :
           absl::StrSplit(*value, ',', absl::SkipEmpty())) {
        inputs.emplace_back(path);
      }
    }
  }
  return inputs;
}

// ---- Parsing flag values.

absl::StatusOr<std::vector<int64_t>> ParseInts(absl::string_view flag,
                                               absl::string_view text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return UsageError(absl::StrCat("--", flag, "=", text,
                                     ": expected comma-separated integers"));
    }
    values.push_back(v);
  }
  return values;
}

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

// ---- What every op shares.

struct OpFlags {
  std::optional<DType> dtype;  // --dtype, when given
  std::vector<std::string> inputs;
  std::string output;
  std::mt19937_64 rng;
  v1::ExecutionOptions options;
};

absl::StatusOr<OpFlags> ParseOpFlags(std::vector<std::string> inputs) {
  OpFlags f;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (!dtype.empty()) {
    DType t;
    if (!ParseDType(dtype, &t)) {
      return UsageError(absl::StrCat(
          "--dtype=", dtype, ": expected float32, float16 or bfloat16"));
    }
    f.dtype = t;
  }
  f.inputs = std::move(inputs);
  f.output = absl::GetFlag(FLAGS_output);
  f.rng.seed(absl::GetFlag(FLAGS_seed));
  f.options.set_variant(absl::GetFlag(FLAGS_variant));
  f.options.set_report(absl::GetFlag(FLAGS_report));
  return f;
}

using Shapes = std::vector<std::vector<int64_t>>;

// The op's input arrays: the --input files (between min_files and
// max_files of them; the first fixes the dtype unless --dtype did), or
// random arrays of random_shapes(), which parses the shape flags.
absl::StatusOr<std::vector<NpyArray>> Operands(
    OpFlags& f, size_t min_files, size_t max_files, bool shape_flags_given,
    absl::FunctionRef<absl::StatusOr<Shapes>()> random_shapes) {
  std::vector<NpyArray> arrays;
  if (f.inputs.empty()) {
    COALESCE_ASSIGN_OR_RETURN(const Shapes shapes, random_shapes());
    for (const std::vector<int64_t>& shape : shapes) {
      if (g_shape_only) {
        arrays.push_back(
            NpyArray{f.dtype.value_or(DType::kFloat32), shape, ""});
        continue;
      }
      COALESCE_ASSIGN_OR_RETURN(
          NpyArray a,
          RandomArray(f.dtype.value_or(DType::kFloat32), shape, f.rng));
      arrays.push_back(std::move(a));
    }
    return arrays;
  }
  if (shape_flags_given) {
    return UsageError(
        "shape flags and --input exclude each other: with "
        "--input the shapes come from the files");
  }
  if (f.inputs.size() < min_files || f.inputs.size() > max_files) {
    return UsageError(absl::StrCat(
        "expected ", min_files == max_files ? "" : "between ", min_files,
        min_files == max_files ? "" : absl::StrCat(" and ", max_files),
        " --input files, got ", f.inputs.size()));
  }
  std::optional<DType> dtype = f.dtype;
  for (const std::string& path : f.inputs) {
    COALESCE_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path, dtype));
    dtype = a.dtype;
    arrays.push_back(std::move(a));
  }
  return arrays;
}

std::string FormatBytes(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit + 1 < 5) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat(unit == 0 ? "%.0f %s" : "%.2f %s", bytes,
                         kUnits[unit]);
}

void PrintReport(const v1::KernelReport& r) {
  std::printf("report:\n");
  std::printf("  variant:    %s\n", r.variant().c_str());
  std::printf("  selection:  %s%s%s\n", r.selection_source().c_str(),
              r.selection_reason().empty() ? "" : ": ",
              r.selection_reason().c_str());
  std::printf("  device:     %s (%s)\n", r.device().c_str(),
              r.backend().c_str());
  std::printf("  kernel:     %.3f us%s\n", r.kernel_seconds() * 1e6,
              r.cold_start() ? " (cold start: includes one-time module "
                               "loading or plan building)"
                             : "");
  std::string bandwidth =
      absl::StrFormat("%s moved, %.2f GB/s", FormatBytes(r.bytes_moved()),
                      r.achieved_bytes_per_second() / 1e9);
  if (r.peak_bandwidth_fraction() > 0) {
    absl::StrAppendFormat(&bandwidth, ", %.1f%% of peak",
                          r.peak_bandwidth_fraction() * 100);
  }
  std::printf("  memory:     %s\n", bandwidth.c_str());
  if (r.flops() > 0) {
    std::printf("  compute:    %.4g GFLOP, %.2f GFLOP/s, %.2f flop/byte%s%s\n",
                r.flops() / 1e9, r.achieved_flops_per_second() / 1e9,
                r.arithmetic_intensity(),
                r.bound().empty() ? "" : ", bound: ", r.bound().c_str());
  } else if (!r.bound().empty()) {
    std::printf("  bound:      %s\n", r.bound().c_str());
  }
  if (r.has_launch()) {
    const v1::LaunchConfig& l = r.launch();
    std::printf(
        "  launch:     grid [%s] block [%s], %lld B shared, %lld regs/thread, "
        "occupancy %.2f, %.2f waves\n",
        absl::StrJoin(l.grid(), ",").c_str(),
        absl::StrJoin(l.block(), ",").c_str(),
        static_cast<long long>(l.shared_memory_bytes()),
        static_cast<long long>(l.registers_per_thread()),
        l.theoretical_occupancy(), l.waves());
  }
}

struct Output {
  absl::string_view name;
  v1::Tensor* tensor;
  std::string path;  // empty: print a summary
};

absl::Status EmitOutputs(const std::vector<Output>& outputs,
                         const v1::KernelReport* report) {
  for (const Output& o : outputs) {
    COALESCE_ASSIGN_OR_RETURN(const NpyArray array,
                              FromTensor(std::move(*o.tensor)));
    if (o.path.empty()) {
      std::printf("%s: %s\n", std::string(o.name).c_str(),
                  Summarize(array).c_str());
    } else {
      COALESCE_RETURN_IF_ERROR(WriteNpy(o.path, array));
    }
  }
  if (report != nullptr) PrintReport(*report);
  return absl::OkStatus();
}

// ---- Subcommands.

absl::Status RunInfo(Client& client) {
  COALESCE_ASSIGN_OR_RETURN(const v1::GetServerInfoResponse info,
                            client.GetServerInfo());
  std::printf("backend: %s%s%s\n", info.backend().c_str(),
              info.backend_reason().empty() ? "" : " - ",
              info.backend_reason().c_str());
  for (int i = 0; i < info.devices_size(); ++i) {
    const v1::DeviceInfo& d = info.devices(i);
    std::string line =
        absl::StrFormat("device %d: %s [%s]", i, d.name(), d.backend());
    if (d.compute_capability_major() > 0) {
      absl::StrAppendFormat(&line, ", compute capability %d.%d",
                            d.compute_capability_major(),
                            d.compute_capability_minor());
    }
    absl::StrAppendFormat(&line, ", %d %s", d.multiprocessors(),
                          d.backend() == "cuda" ? "SMs" : "threads");
    if (d.memory_bytes() > 0) {
      absl::StrAppend(&line, ", memory ", FormatBytes(d.memory_bytes()));
    }
    if (d.l2_cache_bytes() > 0) {
      absl::StrAppend(&line, ", L2 ", FormatBytes(d.l2_cache_bytes()));
    }
    if (d.shared_memory_per_block_bytes() > 0) {
      absl::StrAppend(&line, ", shared/block ",
                      FormatBytes(d.shared_memory_per_block_bytes()));
    }
    if (d.theoretical_bandwidth_bytes_per_second() > 0) {
      absl::StrAppendFormat(&line, ", theoretical %.1f GB/s",
                            d.theoretical_bandwidth_bytes_per_second() / 1e9);
    }
    if (d.measured_copy_bytes_per_second() > 0) {
      absl::StrAppendFormat(&line, ", measured copy %.1f GB/s",
                            d.measured_copy_bytes_per_second() / 1e9);
    }
    std::printf("%s\n", line.c_str());
  }
  const v1::BuildInfo& b = info.build();
  std::printf("build: version %s, git %s, cuda %s%s%s\n", b.version().c_str(),
              b.git_sha().c_str(), b.cuda_enabled() ? "on" : "off",
              b.cuda_architectures().empty() ? "" : ", architectures ",
              b.cuda_architectures().c_str());
  const v1::Limits& l = info.limits();
  std::printf(
      "limits: max_tensor_bytes %s, max_message_bytes %s, "
      "max_rank %d\n",
      FormatBytes(l.max_tensor_bytes()).c_str(),
      FormatBytes(l.max_message_bytes()).c_str(), l.max_rank());
  // Ops in the order the server lists them.
  std::vector<std::string> ops;
  std::map<std::string, std::vector<const v1::VariantInfo*>> by_op;
  size_t width = 0;
  for (const v1::VariantInfo& v : info.variants()) {
    if (by_op.find(v.op()) == by_op.end()) ops.push_back(v.op());
    by_op[v.op()].push_back(&v);
    width = std::max(width, v.name().size());
  }
  std::printf("variants:\n");
  for (const std::string& op : ops) {
    std::printf("  %s\n", op.c_str());
    for (const v1::VariantInfo* v : by_op[op]) {
      std::printf("    %-*s  [%s] %s\n", static_cast<int>(width),
                  v->name().c_str(), v->backend().c_str(),
                  v->description().c_str());
    }
  }
  return absl::OkStatus();
}

// Prints the serving status; true only for SERVING.
absl::StatusOr<bool> RunHealth(Client& client) {
  COALESCE_ASSIGN_OR_RETURN(const std::string status,
                            client.Health(absl::GetFlag(FLAGS_service)));
  std::printf("%s\n", status.c_str());
  return status == "SERVING";
}

absl::Status RunTranspose(Client& client, OpFlags f) {
  COALESCE_ASSIGN_OR_RETURN(
      std::vector<NpyArray> in,
      Operands(f, 1, 1, !absl::GetFlag(FLAGS_shape).empty(),
               []() -> absl::StatusOr<Shapes> {
                 COALESCE_ASSIGN_OR_RETURN(auto shape, ShapeFlag());
                 return Shapes{shape};
               }));
  v1::TransposeRequest request;
  *request.mutable_input() = ToTensor(std::move(in[0]));
  *request.mutable_options() = f.options;
  if (g_request_hook) return g_request_hook(client, request);
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
      Operands(f, 2, 3, m >= 0 || n >= 0 || k >= 0 || batch != 0,
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
  if (g_request_hook) return g_request_hook(client, request);
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
  COALESCE_ASSIGN_OR_RETURN(
      std::vector<NpyArray> in,
      Operands(f, 1, 1, !absl::GetFlag(FLAGS_shape).empty(),
               []() -> absl::StatusOr<Shapes> {
                 COALESCE_ASSIGN_OR_RETURN(auto shape, ShapeFlag());
                 return Shapes{shape};
               }));
  *request.mutable_input() = ToTensor(std::move(in[0]));
  *request.mutable_options() = f.options;
  if (g_request_hook) return g_request_hook(client, request);
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
      Operands(f, 1, slots.size(), !absl::GetFlag(FLAGS_shape).empty(),
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
  if (g_request_hook) return g_request_hook(client, request);
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

absl::StatusOr<std::unique_ptr<Client>> ConnectFromFlags() {
  ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout_s > 0)) return UsageError("--timeout_s must be > 0");
  options.timeout = absl::Seconds(timeout_s);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return UsageError(client.status().message());
  return client;
}

using OpRunner = absl::Status (*)(Client&, OpFlags);

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

// Points the op flags at one tune shape ("M,N,K" for gemm).
absl::Status SetShapeFlags(absl::string_view op, const std::string& shape) {
  if (op != "gemm") {
    absl::SetFlag(&FLAGS_shape, shape);
    return absl::OkStatus();
  }
  COALESCE_ASSIGN_OR_RETURN(std::vector<int64_t> mnk,
                            ParseInts("shapes", shape));
  if (mnk.size() != 3) {
    return UsageError(
        absl::StrCat("gemm tune shape '", shape, "': want M,N,K"));
  }
  absl::SetFlag(&FLAGS_m, mnk[0]);
  absl::SetFlag(&FLAGS_n, mnk[1]);
  absl::SetFlag(&FLAGS_k, mnk[2]);
  return absl::OkStatus();
}

// `put`, `get`, `rm` and `ls`: tensors kept on the server.
absl::StatusOr<int> RunHandles(absl::string_view command,
                               const std::vector<std::string>& args) {
  const bool takes_arg = command != "ls";
  if (args.size() != (takes_arg ? 1u : 0u)) {
    return UsageError(absl::StrCat(
        command, takes_arg ? " takes one argument" : " takes no argument"));
  }
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectFromFlags());
  if (command == "put") {
    std::optional<DType> want;
    if (!absl::GetFlag(FLAGS_dtype).empty()) {
      DType t;
      if (!ParseDType(absl::GetFlag(FLAGS_dtype), &t)) {
        return UsageError(absl::StrCat("--dtype=", absl::GetFlag(FLAGS_dtype)));
      }
      want = t;
    }
    COALESCE_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(args[0], want));
    COALESCE_ASSIGN_OR_RETURN(
        v1::TensorInfo info,
        client->PutTensor(ToProtoDType(a.dtype), a.shape, a.bytes,
                          absl::GetFlag(FLAGS_name)));
    std::printf("%s\n", info.handle().c_str());
    return 0;
  }
  if (command == "get") {
    const std::string output = absl::GetFlag(FLAGS_output);
    if (output.empty()) return UsageError("get needs --output=FILE.npy");
    COALESCE_ASSIGN_OR_RETURN(FetchedTensor t, client->GetTensor(args[0]));
    NpyArray a;
    COALESCE_ASSIGN_OR_RETURN(a.dtype, FromProtoDType(t.info.dtype()));
    a.shape.assign(t.info.shape().begin(), t.info.shape().end());
    a.bytes = std::move(t.bytes);
    COALESCE_RETURN_IF_ERROR(WriteNpy(output, a));
    return 0;
  }
  if (command == "rm") {
    COALESCE_ASSIGN_OR_RETURN(int64_t freed, client->DeleteTensor(args[0]));
    std::printf("%lld bytes freed\n", static_cast<long long>(freed));
    return 0;
  }
  COALESCE_ASSIGN_OR_RETURN(v1::ListTensorsResponse list,
                            client->ListTensors());
  for (const v1::TensorInfo& t : list.tensors()) {
    std::printf("%s %s [%s] %lld bytes, owner %s, idle %.1f s\n",
                t.handle().c_str(),
                std::string(v1::DataType_Name(t.dtype())).c_str(),
                absl::StrJoin(t.shape(), ",").c_str(),
                static_cast<long long>(t.byte_size()), t.owner().c_str(),
                t.idle_seconds());
  }
  return 0;
}

// `explain OP ...` and `tune OP ...`.
absl::StatusOr<int> RunSelection(absl::string_view command,
                                 absl::string_view op,
                                 std::vector<std::string> inputs) {
  const OpRunner runner = RunnerFor(op);
  if (runner == nullptr) {
    return UsageError(absl::StrCat(command, ": unknown op '", op,
                                   "'; expected transpose, gemm, layout or "
                                   "gelu-ln"));
  }
  COALESCE_ASSIGN_OR_RETURN(OpFlags flags, ParseOpFlags(std::move(inputs)));
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectFromFlags());
  g_shape_only = true;
  if (command == "explain") {
    g_request_hook = [measure = absl::GetFlag(FLAGS_measure)](
                         Client& c, google::protobuf::Message& request) {
      return ExplainRequest(c, request, measure);
    };
    COALESCE_RETURN_IF_ERROR(runner(*client, flags));
    return 0;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return UsageError("tune needs --out=TABLE");
  std::vector<std::string> shapes =
      absl::StrSplit(absl::GetFlag(FLAGS_shapes), ';', absl::SkipEmpty());
  if (absl::GetFlag(FLAGS_random_shapes) > 0) {
    for (std::string& s :
         RandomShapes(std::string(op), absl::GetFlag(FLAGS_random_shapes),
                      absl::GetFlag(FLAGS_shapes_seed),
                      absl::GetFlag(FLAGS_max_shape_bytes))) {
      shapes.push_back(std::move(s));
    }
  }
  if (shapes.empty())
    return UsageError("tune needs --shapes or --random_shapes");
  if (op == "layout" && absl::GetFlag(FLAGS_from).empty() &&
      absl::GetFlag(FLAGS_perm).empty() &&
      absl::GetFlag(FLAGS_aos_fields) == 0 &&
      absl::GetFlag(FLAGS_direction).empty()) {
    absl::SetFlag(&FLAGS_from, "NCHW");
    absl::SetFlag(&FLAGS_to, "NHWC");
  }
  std::vector<TunedShape> results;
  const absl::Time start = absl::Now();
  int failed = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::fprintf(stderr, "\r[%zu/%zu %.0fs] %s %-24s", i + 1, shapes.size(),
                 absl::ToDoubleSeconds(absl::Now() - start),
                 std::string(op).c_str(), shapes[i].c_str());
    std::fflush(stderr);
    COALESCE_RETURN_IF_ERROR(SetShapeFlags(op, shapes[i]));
    g_request_hook = [&](Client& c, google::protobuf::Message& request) {
      COALESCE_ASSIGN_OR_RETURN(TunedShape t,
                                TuneRequest(c, request, shapes[i]));
      results.push_back(std::move(t));
      return absl::OkStatus();
    };
    absl::Status s = runner(*client, flags);
    if (!s.ok()) {
      ++failed;
      std::fprintf(stderr, "\n%s: %s\n", shapes[i].c_str(),
                   s.ToString().c_str());
    }
  }
  std::fprintf(stderr, "\n");
  COALESCE_RETURN_IF_ERROR(WriteTable(results, out));
  if (const std::string shapes_out = absl::GetFlag(FLAGS_shapes_out);
      !shapes_out.empty()) {
    COALESCE_RETURN_IF_ERROR(WriteTunedShapes(results, shapes_out));
  }
  return failed == 0 ? 0 : 1;
}

// Runs one subcommand; returns the exit status.
absl::StatusOr<int> Run(absl::string_view command,
                        std::vector<std::string> inputs) {
  if (command == "info" || command == "health") {
    if (!inputs.empty()) {
      return UsageError(absl::StrCat(command, " takes no --input"));
    }
    COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                              ConnectFromFlags());
    if (command == "info") {
      COALESCE_RETURN_IF_ERROR(RunInfo(*client));
      return 0;
    }
    COALESCE_ASSIGN_OR_RETURN(const bool serving, RunHealth(*client));
    return serving ? 0 : 1;
  }
  if (const OpRunner runner = RunnerFor(command)) {
    COALESCE_ASSIGN_OR_RETURN(OpFlags flags, ParseOpFlags(std::move(inputs)));
    COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                              ConnectFromFlags());
    COALESCE_RETURN_IF_ERROR(runner(*client, std::move(flags)));
    return 0;
  }
  return UsageError(
      absl::StrCat("unknown subcommand '", command,
                   "'; expected info, health, transpose, "
                   "gemm, layout, gelu-ln, put, get, rm, ls, explain or tune"));
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n",
               std::string(absl::StatusCodeToString(status.code())).c_str(),
               std::string(status.message()).c_str());
  if (IsUsageError(status)) {
    std::fprintf(stderr, "run 'coalesce --help' for usage\n");
    return 2;
  }
  return 1;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // --help lists this file's flags (absl matches on the program name by
  // default, and the file is not called coalesce.cc).
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "cli_main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);

  absl::StatusOr<std::vector<std::string>> inputs = ScanArgs(argc, argv);
  if (!inputs.ok()) return Fail(inputs.status());
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const absl::string_view sub =
      positional.size() >= 2 ? absl::string_view(positional[1]) : "";
  if (sub == "put" || sub == "get" || sub == "rm" || sub == "ls") {
    const std::vector<std::string> args(positional.begin() + 2,
                                        positional.end());
    absl::StatusOr<int> code = RunHandles(sub, args);
    if (!code.ok()) return Fail(code.status());
    return *code;
  }
  const bool with_op = sub == "explain" || sub == "tune";
  const size_t want = with_op ? 3 : 2;
  if (positional.size() != want) {
    return Fail(UsageError(
        positional.size() < want
            ? (with_op ? "missing op (transpose, gemm, layout or gelu-ln)"
                       : "missing subcommand")
            : absl::StrCat("unexpected argument '", positional[want], "'")));
  }
  absl::StatusOr<int> exit_code =
      with_op ? RunSelection(positional[1], positional[2], *std::move(inputs))
              : Run(positional[1], *std::move(inputs));
  if (!exit_code.ok()) return Fail(exit_code.status());
  return *exit_code;
}

}  // namespace
}  // namespace coalesce

int main(int argc, char** argv) { return coalesce::Main(argc, argv); }
