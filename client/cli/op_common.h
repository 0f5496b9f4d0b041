// What the op subcommands (transpose, gemm, layout, gelu-ln) share: the
// flags every op takes, their operands (the --input files or seeded random
// arrays) and the printing of outputs and kernel reports. explain and tune
// reuse the same request building through OpFlags::request_hook.
// Reads process-wide flags: call from the CLI's one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "client/client.h"
#include "client/npy.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "google/protobuf/message.h"

// put reads --dtype and get --output too.
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, output);

namespace coalesce::cli {

struct OpFlags {
  std::optional<DType> dtype;  // --dtype, when given
  std::vector<std::string> inputs;
  std::string output;
  std::mt19937_64 rng;
  v1::ExecutionOptions options;
  // Set by explain and tune: the op hands the request it built here
  // instead of sending it.
  std::function<absl::Status(Client&, google::protobuf::Message&)> request_hook;
  // explain and tune send shapes only (the server ignores ExplainSelection's
  // data): random operands are then made without their bytes.
  bool shape_only = false;
};

// The flags every op takes; `inputs` are the --input files in order.
absl::StatusOr<OpFlags> ParseOpFlags(std::vector<std::string> inputs);

using Shapes = std::vector<std::vector<int64_t>>;

// The op's input arrays: the --input files (between min_files and
// max_files of them; the first fixes the dtype unless --dtype did), or
// random arrays of random_shapes(), which parses the shape flags.
absl::StatusOr<std::vector<NpyArray>> MakeOperands(
    OpFlags& f, size_t min_files, size_t max_files, bool shape_flags_given,
    absl::FunctionRef<absl::StatusOr<Shapes>()> random_shapes);

struct Output {
  absl::string_view name;
  v1::Tensor* tensor;
  std::string path;  // empty: print a summary
};

// Writes each output to its file or prints its summary, then the kernel
// report when there is one.
absl::Status EmitOutputs(const std::vector<Output>& outputs,
                         const v1::KernelReport* report);

}  // namespace coalesce::cli
