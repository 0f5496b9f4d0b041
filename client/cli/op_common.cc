#include "client/cli/op_common.h"

#include <cstdio>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "client/cli/cli_common.h"
#include "client/tensors.h"

ABSL_FLAG(std::string, dtype, "",
          "Element type: float32, float16 or bfloat16. Default: float32, or "
          "the first --input file's type.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the random inputs (uniform in [-1, 1], never zero).");
// Read through ScanArgs in cli_main.cc, which keeps every --input in order
// (absl keeps only the last).
ABSL_FLAG(std::vector<std::string>, input, {},
          "An input .npy file instead of random data; repeat the flag for "
          "each of the op's inputs, in order (see above).");
ABSL_FLAG(std::string, output, "",
          "Write the main output to this .npy file instead of printing a "
          "summary (gelu-ln --return_pre_norm also writes FILE.h.npy).");
ABSL_FLAG(bool, report, false, "Print the server's kernel report.");
ABSL_FLAG(std::string, variant, "",
          "Force a kernel variant by name (see `coalesce info`).");

namespace coalesce::cli {
namespace {

void PrintReport(const v1::KernelReport& r) {
  std::printf("report:\n");
  std::printf("  variant:    %s\n", r.variant().c_str());
  std::printf("  selection:  %s%s%s\n", r.selection_source().c_str(),
              r.selection_reason().empty() ? "" : ": ",
              r.selection_reason().c_str());
  std::printf("  device:     %s (%s), ordinal %d\n", r.device().c_str(),
              r.backend().c_str(), r.device_ordinal());
  if (!r.placement().empty()) {
    std::string placement = r.placement();
    if (r.staged_bytes() > 0) {
      absl::StrAppend(&placement, ", ", FormatBytes(r.staged_bytes()),
                      " staged from other devices");
    }
    std::printf("  placement:  %s\n", placement.c_str());
  }
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

}  // namespace

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

absl::StatusOr<std::vector<NpyArray>> MakeOperands(
    OpFlags& f, size_t min_files, size_t max_files, bool shape_flags_given,
    absl::FunctionRef<absl::StatusOr<Shapes>()> random_shapes) {
  std::vector<NpyArray> arrays;
  if (f.inputs.empty()) {
    COALESCE_ASSIGN_OR_RETURN(const Shapes shapes, random_shapes());
    for (const std::vector<int64_t>& shape : shapes) {
      if (f.shape_only) {
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

}  // namespace coalesce::cli
