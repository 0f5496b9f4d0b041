// `coalesce`: the command-line client of the Coalesce server. The connection
// flags, the usage text, the argv scan and the dispatch to a subcommand
// family; each family lives in its own file beside this one, and the RPCs
// in client/client.h.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "client/cli/cli_common.h"
#include "client/cli/op_commands.h"
#include "client/cli/op_common.h"
#include "client/cli/selection_commands.h"
#include "client/cli/server_commands.h"
#include "client/cli/tensor_store_commands.h"
#include "client/client.h"

// Connection.
ABSL_FLAG(std::string, server, "localhost:50051",
          "Server address, HOST:PORT or unix:PATH.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates the server's certificate must chain to: "
          "connect over TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain (mTLS), with --tls_key.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, load_balancing, "",
          "round_robin: spread calls over every address --server resolves "
          "to; pick_first (the default): one.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the server's certificate must carry, when it is not the host "
          "in --server.");
ABSL_FLAG(std::string, token_file, "",
          "File whose first line is the bearer token to send (the "
          "COALESCE_TOKEN environment variable is used when this is unset).");
ABSL_FLAG(int64_t, max_message_bytes, 2147483647,
          "Largest gRPC message sent or received, in bytes.");
ABSL_FLAG(double, timeout_s, 600, "Deadline of each call, in seconds.");

namespace coalesce::cli {
namespace {

constexpr char kUsage[] =
    R"(command-line client of the Coalesce tensor-ops server.

usage: coalesce [--server=HOST:PORT|unix:PATH] SUBCOMMAND [flags]

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
      [--device_ordinal=N]              (kept on server device N)
  get HANDLE --output=FILE.npy          download a tensor kept on the server
  rm HANDLE...                          delete them, all or none (prints the bytes freed)
  ls                                    the tensors kept on the server
  explain OP [op flags] [--measure]
              which variants could run this request, their estimated and
              measured times, the one the server picks and why
  tune OP (--shapes=S;S;... | --random_shapes=N [--shape_class=C])
          --out=TABLE [--shapes_out=FILE.tsv]
              time every eligible variant of OP (transpose, gemm, layout,
              gelu-ln) for each shape through the server (S is what --shape
              takes; gemm: M,N,K; then optionally op flags it sets, e.g.
              '64,32,16 trans_a=1 batch=4' or '2,3,5 perm=2,0,1'), write a
              table for --tuning_table, and report how often the automatic
              choice was within 10% of the fastest; --shapes_out also
              writes every shape's times; --shape_class picks the random
              shapes: transpose 2d|batched, gemm plain|transposed|batched,
              layout nchw_nhwc|nhwc_nchw|permutation|aos_soa|soa_aos

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
  --server=HOST:PORT or unix:PATH (default localhost:50051), or several:
                    ipv4:H:P,H:P or dns:///NAME:PORT with
  --load_balancing=round_robin   (each call to the next address)
  --max_message_bytes=N, --timeout_s=S
  --tls_ca=PEM      connect over TLS (--tls_cert=PEM --tls_key=PEM: mTLS;
                    --tls_server_name=NAME when it is not the --server host)
  --token_file=F    send the bearer token on F's first line (else
                    $COALESCE_TOKEN, if set)

exit status: 0 success; 1 error, printed as "error: CODE: message";
2 usage error.)";

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

absl::StatusOr<std::unique_ptr<Client>> ConnectFromFlags() {
  ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout_s > 0)) return UsageError("--timeout_s must be > 0");
  options.timeout = absl::Seconds(timeout_s);
  options.tls_ca_path = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert_path = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_path = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.load_balancing = absl::GetFlag(FLAGS_load_balancing);
  // Never a flag value: command lines are visible to every local user.
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) {
      return UsageError(absl::StrCat("--token_file: cannot read '", path, "'"));
    }
    options.token = std::string(absl::StripAsciiWhitespace(line));
  } else if (const char* token = std::getenv("COALESCE_TOKEN")) {
    options.token = std::string(absl::StripAsciiWhitespace(token));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return UsageError(client.status().message());
  return client;
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
  // --help lists the flags of the files in client/cli/ (absl matches on
  // the program name by default, and no file is called coalesce.cc).
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/cli/");
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
    absl::StatusOr<int> code =
        RunTensorStoreCommand(sub, args, ConnectFromFlags);
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
      with_op ? RunSelectionCommand(positional[1], positional[2],
                                    *std::move(inputs), ConnectFromFlags)
              : Run(positional[1], *std::move(inputs));
  if (!exit_code.ok()) return Fail(exit_code.status());
  return *exit_code;
}

}  // namespace
}  // namespace coalesce::cli

int main(int argc, char** argv) { return coalesce::cli::Main(argc, argv); }
