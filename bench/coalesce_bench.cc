// coalesce-bench: checks and times kernel variants on the device (kernels
// mode), or drives a running server end to end (service mode,
// service_bench.cc).
//
//   coalesce-bench kernels [--ops=transpose,convert_layout]
//       [--dtypes=float32,bfloat16] [--preset=targets|quick]
//       [--device=auto|cpu|cuda] [--reps=30] [--warmup=5]
//       [--check_max_elements=N] [--json=FILE]
//
// For every (op, dtype, shape) of the preset and every variant that can run
// it: a correctness check against the float64 CPU reference (shapes up to
// --check_max_elements), then device-side timing (CUDA events, warm-up,
// buffer sets rotated past the L2): the median of --reps per-launch times and
// the mean of --reps runs back to back; beside it, once per case, a plain
// copy of the same bytes timed the same two ways (Backend::BenchmarkCopy,
// where the backend has one). Prints a table and writes JSON that
// bench/report.py turns into docs/PERFORMANCE.md rows.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/service_bench.h"
#include "kernels/backends.h"
#include "kernels/core/permute.h"
#include "kernels/testing/conformance.h"

ABSL_FLAG(std::string, ops, "transpose,convert_layout",
          "comma-separated ops to run");
ABSL_FLAG(std::string, dtypes, "float32,bfloat16",
          "comma-separated dtypes (float32, float16, bfloat16)");
ABSL_FLAG(std::string, preset, "targets",
          "shape list: 'targets' (the headline GPU shapes), 'quick' (small), "
          "or 'cpu' (one large size per op, for the CPU backend)");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(std::string, variants, "",
          "only variants whose name contains one of these (comma-separated; "
          "a trailing $ asks for that exact name)");
ABSL_FLAG(std::string, shape, "",
          "kernels mode: only cases of these shapes, as printed, separated "
          "by ':' (e.g. 1,8192,8192:32,3,224,224), or a shape alone where "
          "the op's preset lacks it (transpose B,M,N; gemm B,M,N,K; "
          "gelu_layer_norm ROWS,H); service "
          "mode: the input tensor's shape (e.g. 4096,4096), overriding the "
          "one derived from --bytes");
ABSL_FLAG(int, reps, 30, "timed repetitions (median reported)");
ABSL_FLAG(int, warmup, 5, "untimed warm-up runs");
ABSL_FLAG(int64_t, check_max_elements, int64_t{1} << 27,
          "check correctness against the CPU reference for problems up to "
          "this many elements (0: never)");
ABSL_FLAG(double, check_max_flops, 1e10,
          "skip the correctness check above this many FLOPs (the float64 CPU "
          "reference of a 4096^3 GEMM would take minutes)");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");
ABSL_FLAG(bool, same_size_copy, true,
          "time a copy of each case's bytes beside it (false: the variants "
          "alone, so that device-wide counters read during the run see only "
          "them)");
ABSL_FLAG(std::string, gelu_operands, "bias,residual,gamma,beta",
          "GELU-LayerNorm cases: the optional operands beside x "
          "(comma-separated subset of bias, residual, gamma, beta; empty: x "
          "alone, as the service bench's requests)");

namespace coalesce {
namespace {

struct Case {
  std::string label;  // what a reader recognizes, e.g. "nchw_to_nhwc"
  Problem problem;
};

Case TransposeCase(DType t, int64_t b, int64_t m, int64_t n) {
  TransposeProblem p;
  p.dtype = t;
  p.batch = b;
  p.rows = m;
  p.cols = n;
  return {"transpose", p};
}

Case PermuteCase(DType t, Shape shape, Perm perm, LayoutKind kind) {
  PermuteProblem p;
  p.dtype = t;
  p.in_shape = std::move(shape);
  p.perm = std::move(perm);
  p.kind = kind;
  return {std::string(LayoutKindName(kind)), p};
}

Case GemmCase(DType t, int64_t b, int64_t m, int64_t n, int64_t k) {
  return {"gemm", Gemm(t, b, m, n, k, /*trans_a=*/false, /*trans_b=*/false)};
}

Case GeluLnCase(DType t, int64_t rows, int64_t hidden) {
  GeluLnProblem p;
  p.dtype = t;
  p.rows = rows;
  p.hidden = hidden;
  for (absl::string_view op : absl::StrSplit(absl::GetFlag(FLAGS_gelu_operands),
                                             ',', absl::SkipEmpty())) {
    p.has_bias |= op == "bias";
    p.has_residual |= op == "residual";
    p.has_gamma |= op == "gamma";
    p.has_beta |= op == "beta";
  }
  return {"gelu_layer_norm", p};
}

// A --shape outside the preset, as the table prints it: transpose
// "B,M,N", GEMM "B,M,N,K", GELU-LayerNorm "ROWS,H" (layout conversions
// need a permutation: presets only). nullopt when it does not parse.
std::optional<Case> CaseOfShape(OpKind op, DType t, const std::string& shape) {
  std::vector<int64_t> d;
  for (absl::string_view part : absl::StrSplit(shape, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) return std::nullopt;
    d.push_back(v);
  }
  if (op == OpKind::kTranspose && d.size() == 3) {
    return TransposeCase(t, d[0], d[1], d[2]);
  }
  if (op == OpKind::kGemm && d.size() == 4) {
    return GemmCase(t, d[0], d[1], d[2], d[3]);
  }
  if (op == OpKind::kGeluLayerNorm && d.size() == 2) {
    return GeluLnCase(t, d[0], d[1]);
  }
  return std::nullopt;
}

std::vector<Case> Cases(OpKind op, DType t, const std::string& preset) {
  std::vector<Case> out;
  const bool quick = preset == "quick";
  if (preset == "cpu") {
    switch (op) {
      case OpKind::kTranspose:
        return {TransposeCase(t, 1, 4096, 4096)};
      case OpKind::kGemm:
        return {GemmCase(t, 1, 1024, 1024, 1024)};
      case OpKind::kConvertLayout:
        return {PermuteCase(t, {8, 64, 56, 56}, {0, 2, 3, 1},
                            LayoutKind::kNchwToNhwc)};
      case OpKind::kGeluLayerNorm:
        return {GeluLnCase(t, 4096, 1024)};
    }
  }
  if (op == OpKind::kGemm) {
    if (quick) return {GemmCase(t, 1, 256, 256, 256)};
    return {GemmCase(t, 1, 4096, 4096, 4096), GemmCase(t, 1, 8192, 8192, 8192),
            GemmCase(t, 1, 1000, 1000, 1000), GemmCase(t, 8, 1024, 1024, 1024)};
  }
  if (op == OpKind::kGeluLayerNorm) {
    if (quick) return {GeluLnCase(t, 128, 768)};
    return {GeluLnCase(t, 16384, 768),  GeluLnCase(t, 8192, 1024),
            GeluLnCase(t, 32768, 2048), GeluLnCase(t, 8192, 4096),
            GeluLnCase(t, 4096, 8192),  GeluLnCase(t, 128, 768)};
  }
  if (op == OpKind::kTranspose) {
    if (quick) {
      out.push_back(TransposeCase(t, 1, 1024, 1024));
      out.push_back(TransposeCase(t, 4, 1000, 777));
      return out;
    }
    for (int64_t n : {4096, 8192, 16384})
      out.push_back(TransposeCase(t, 1, n, n));
    out.push_back(TransposeCase(t, 1, 4096, 12288));
    out.push_back(TransposeCase(t, 1, 1024, 1024));
    out.push_back(TransposeCase(t, 32, 1024, 1024));
    return out;
  }
  if (op == OpKind::kConvertLayout) {
    std::vector<Shape> images = {{64, 256, 56, 56},
                                 {128, 64, 112, 112},
                                 {8, 512, 28, 28},
                                 {32, 3, 224, 224}};
    if (quick) images = {{2, 3, 33, 31}, {4, 64, 28, 28}};
    for (const Shape& s : images) {
      out.push_back(PermuteCase(t, s, {0, 2, 3, 1}, LayoutKind::kNchwToNhwc));
      // The same tensor held as NHWC [N, H, W, C] back to NCHW.
      out.push_back(PermuteCase(t, {s[0], s[2], s[3], s[1]}, {0, 3, 1, 2},
                                LayoutKind::kNhwcToNchw));
    }
    const int64_t records = quick ? (int64_t{1} << 16) : (int64_t{1} << 26);
    for (int64_t f : {3, 4, 8}) {
      out.push_back(
          PermuteCase(t, {records, f}, {1, 0}, LayoutKind::kAosToSoa));
      out.push_back(
          PermuteCase(t, {f, records}, {1, 0}, LayoutKind::kSoaToAos));
    }
    if (!quick) {
      // A general rank-5 permutation that keeps no dim innermost.
      out.push_back(PermuteCase(t, {16, 32, 24, 40, 36}, {4, 1, 3, 0, 2},
                                LayoutKind::kPermute));
    }
    return out;
  }
  return out;
}

Shape ShapeOf(const Problem& p) {
  if (const auto* t = std::get_if<TransposeProblem>(&p)) {
    return {t->batch, t->rows, t->cols};
  }
  if (const auto* q = std::get_if<PermuteProblem>(&p)) return q->in_shape;
  if (const auto* g = std::get_if<GemmProblem>(&p)) {
    return {g->batch, g->m, g->n, g->k};
  }
  const auto& l = std::get<GeluLnProblem>(p);
  return {l.rows, l.hidden};
}

std::string JsonEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coalesce-bench kernels [flags]: check and time every kernel variant "
      "over a shape preset; prints a table, writes --json.\n"
      "coalesce-bench service --server=HOST:PORT [flags]: drive a running "
      "server (ops x transports, each against Echo); prints a table, writes "
      "--json.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() == 2 && std::string(args[1]) == "service") {
    return RunServiceBench();
  }
  if (args.size() != 2 || std::string(args[1]) != "kernels") {
    std::fprintf(stderr,
                 "usage: coalesce-bench kernels|service [flags] (--help for "
                 "flags)\n");
    return 2;
  }
  BackendOptions bo;
  bo.device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<BackendChoice> choice = CreateBackend(bo);
  if (!choice.ok()) {
    std::fprintf(stderr, "error: %s\n", choice.status().ToString().c_str());
    return 1;
  }
  Backend& backend = *choice->backend;
  const DeviceInfo& dev = backend.device();
  const double peak = dev.measured_copy_bandwidth;
  std::fprintf(stderr, "device: %s (%s), measured copy peak %.1f GB/s\n",
               dev.name.c_str(), std::string(BackendName(dev.backend)).c_str(),
               peak / 1e9);

  std::vector<OpKind> ops;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
    bool found = false;
    for (OpKind op : kAllOps) {
      if (OpName(op) == name) {
        ops.push_back(op);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "unknown op: %s\n", std::string(name).c_str());
      return 2;
    }
  }
  for (absl::string_view op : absl::StrSplit(absl::GetFlag(FLAGS_gelu_operands),
                                             ',', absl::SkipEmpty())) {
    if (op != "bias" && op != "residual" && op != "gamma" && op != "beta") {
      std::fprintf(stderr,
                   "--gelu_operands: unknown operand '%s' (bias, residual, "
                   "gamma, beta)\n",
                   std::string(op).c_str());
      return 2;
    }
  }
  std::vector<DType> dtypes;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',', absl::SkipEmpty())) {
    DType t;
    if (!ParseDType(name, &t)) {
      std::fprintf(stderr, "unknown dtype: %s\n", std::string(name).c_str());
      return 2;
    }
    dtypes.push_back(t);
  }
  const std::vector<std::string> filters =
      absl::StrSplit(absl::GetFlag(FLAGS_variants), ',', absl::SkipEmpty());

  struct Job {
    Case c;
    const KernelVariant* v;
  };
  std::vector<Job> jobs;
  // --shape: shapes separated by ':'; each picks the preset's cases of that
  // shape, or is a case of its own for an op whose preset lacks it.
  const std::vector<std::string> only =
      absl::StrSplit(absl::GetFlag(FLAGS_shape), ':', absl::SkipEmpty());
  std::vector<bool> shape_used(only.size(), false);
  for (OpKind op : ops) {
    for (DType t : dtypes) {
      std::vector<Case> cases;
      std::vector<bool> in_preset(only.size(), false);
      for (Case& c : Cases(op, t, absl::GetFlag(FLAGS_preset))) {
        const auto it = std::find(only.begin(), only.end(),
                                  absl::StrJoin(ShapeOf(c.problem), ","));
        if (it != only.end()) in_preset[it - only.begin()] = true;
        if (only.empty() || it != only.end()) cases.push_back(std::move(c));
      }
      for (size_t k = 0; k < only.size(); ++k) {
        if (in_preset[k]) {
          shape_used[k] = true;
        } else if (std::optional<Case> c = CaseOfShape(op, t, only[k])) {
          cases.push_back(*std::move(c));
          shape_used[k] = true;
        }
      }
      for (Case& c : cases) {
        for (const KernelVariant* v : backend.registry().ForOp(op)) {
          if (!v->CanImplement(c.problem, dev).ok()) continue;
          bool keep = filters.empty();
          for (const std::string& f : filters) {
            // "name$" matches one variant exactly, a plain word any name
            // containing it.
            const bool exact = absl::EndsWith(f, "$");
            if (exact
                    ? v->name() == absl::string_view(f).substr(0, f.size() - 1)
                    : absl::StrContains(v->name(), f)) {
              keep = true;
            }
          }
          if (keep) jobs.push_back({c, v});
        }
      }
    }
  }

  for (size_t k = 0; k < only.size(); ++k) {
    if (!shape_used[k]) {
      std::fprintf(stderr,
                   "--shape: '%s' is no case of --ops=%s (preset %s; "
                   "transpose B,M,N, gemm B,M,N,K, gelu_layer_norm ROWS,H)\n",
                   only[k].c_str(), absl::GetFlag(FLAGS_ops).c_str(),
                   absl::GetFlag(FLAGS_preset).c_str());
      return 2;
    }
  }

  BenchmarkOptions opts;
  opts.reps = absl::GetFlag(FLAGS_reps);
  opts.warmup = absl::GetFlag(FLAGS_warmup);
  const int64_t check_max = absl::GetFlag(FLAGS_check_max_elements);
  std::vector<std::string> json_rows;
  std::string table = absl::StrFormat(
      "%-15s %-8s %-24s %-34s %10s %10s %9s %6s %6s %9s %5s %5s %7s %s\n", "op",
      "dtype", "shape", "variant", "us", "us b2b", "GB/s", "xpeak", "xcopy",
      "GFLOP/s", "occ", "regs", "smem", "check");
  // The same-size copy of each case, by op, dtype and shape: timed once,
  // before the case's first variant; nullopt where the backend has none.
  std::map<std::string, std::optional<BenchmarkResult>> copies;
  bool said_no_copy = false;
  int failures = 0;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const Problem& p = j.c.problem;
    const std::string shape =
        absl::StrCat("[", absl::StrJoin(ShapeOf(p), ","), "]");
    std::fprintf(stderr, "\r[%zu/%zu %.0fs] %-14s %-8s %-22s %-34s", i + 1,
                 jobs.size(), absl::ToDoubleSeconds(absl::Now() - start),
                 j.c.label.c_str(), std::string(DTypeName(DTypeOf(p))).c_str(),
                 shape.c_str(), std::string(j.v->name()).c_str());
    std::fflush(stderr);
    int64_t elements = 0;
    for (int64_t b : OperandBytes(p).inputs) elements += b;
    elements /= static_cast<int64_t>(ElementSize(DTypeOf(p)));
    std::string check = "skipped";
    if (elements <= check_max &&
        Flops(p) <= absl::GetFlag(FLAGS_check_max_flops)) {
      absl::Status s = CheckVariant(backend, *j.v, p, 1000 + i);
      check = s.ok() ? "ok" : absl::StrCat("FAIL: ", s.message());
      if (!s.ok()) ++failures;
    }
    // Half the bytes a case moves, read and written once: its copy.
    const int64_t copy_bytes = MinBytesMoved(p) / 2;
    auto [same_size, fresh] = copies.try_emplace(
        absl::StrCat(OpName(OpOf(p)), " ", DTypeName(DTypeOf(p)), " ", shape));
    if (fresh && copy_bytes > 0 && absl::GetFlag(FLAGS_same_size_copy)) {
      absl::StatusOr<BenchmarkResult> c =
          backend.BenchmarkCopy(copy_bytes, opts);
      if (c.ok()) {
        same_size->second = *c;
      } else if (!absl::IsUnimplemented(c.status())) {
        ++failures;
        std::fprintf(stderr, "\nsame-size copy of %s: %s\n", shape.c_str(),
                     c.status().ToString().c_str());
      } else if (!said_no_copy) {
        said_no_copy = true;
        std::fprintf(stderr, "\nno same-size copies: %s\n",
                     c.status().ToString().c_str());
      }
    }
    absl::StatusOr<BenchmarkResult> r = backend.Benchmark(*j.v, p, opts);
    if (!r.ok()) {
      ++failures;
      std::fprintf(stderr, "\n%s: %s\n", std::string(j.v->name()).c_str(),
                   r.status().ToString().c_str());
      continue;
    }
    const double bytes = static_cast<double>(MinBytesMoved(p));
    const double gbps = bytes / r->median_seconds / 1e9;
    const double frac = peak > 0 ? bytes / r->median_seconds / peak : 0;
    const double b2b_gbps = bytes / r->back_to_back_seconds / 1e9;
    const double b2b_frac =
        peak > 0 ? bytes / r->back_to_back_seconds / peak : 0;
    const double flops = Flops(p);
    std::string xcopy = "-";
    std::string copy_json;
    if (const std::optional<BenchmarkResult>& c = same_size->second) {
      const double copy_b2b_gbps =
          2.0 * static_cast<double>(copy_bytes) / c->back_to_back_seconds / 1e9;
      xcopy = absl::StrFormat("%.3f", b2b_gbps / copy_b2b_gbps);
      copy_json = absl::StrFormat(
          ",\"copy_us\":%.3f,\"copy_b2b_us\":%.3f,\"copy_b2b_GBps\":%.2f",
          c->median_seconds * 1e6, c->back_to_back_seconds * 1e6,
          copy_b2b_gbps);
    }
    absl::StrAppendFormat(
        &table,
        "%-15s %-8s %-24s %-34s %10.2f %10.2f %9.1f %6.3f "
        "%6s %9.1f %5.2f %5d %7d %s\n",
        j.c.label, DTypeName(DTypeOf(p)), shape, j.v->name(),
        r->median_seconds * 1e6, r->back_to_back_seconds * 1e6, gbps, frac,
        xcopy, flops / r->median_seconds / 1e9, r->launch.theoretical_occupancy,
        r->launch.registers_per_thread,
        static_cast<int>(r->launch.shared_memory_bytes),
        check.size() > 40 ? check.substr(0, 40) : check);
    json_rows.push_back(absl::StrFormat(
        "{\"op\":\"%s\",\"case\":\"%s\",\"dtype\":\"%s\",\"shape\":%s,"
        "\"variant\":\"%s\",\"median_us\":%.3f,\"min_us\":%.3f,"
        "\"max_us\":%.3f,\"bytes\":%.0f,\"flops\":%.0f,\"GBps\":%.2f,"
        "\"frac_copy_peak\":%.4f,\"b2b_us\":%.3f,\"b2b_GBps\":%.2f,"
        "\"b2b_frac_copy_peak\":%.4f,\"theoretical_occupancy\":%.4f,"
        "\"waves\":%.2f,\"registers\":%d,\"smem_bytes\":%d,"
        "\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"buffer_sets\":%d,"
        "\"reps\":%d,\"check\":\"%s\"%s}",
        OpName(OpOf(p)), j.c.label, DTypeName(DTypeOf(p)), shape, j.v->name(),
        r->median_seconds * 1e6, r->min_seconds * 1e6, r->max_seconds * 1e6,
        bytes, flops, gbps, frac, r->back_to_back_seconds * 1e6, b2b_gbps,
        b2b_frac, r->launch.theoretical_occupancy, r->launch.waves,
        r->launch.registers_per_thread,
        static_cast<int>(r->launch.shared_memory_bytes),
        static_cast<int>(r->launch.grid[0]),
        static_cast<int>(r->launch.grid[1]),
        static_cast<int>(r->launch.grid[2]),
        static_cast<int>(r->launch.block[0]),
        static_cast<int>(r->launch.block[1]),
        static_cast<int>(r->launch.block[2]), r->buffer_sets, r->reps,
        JsonEscape(check), copy_json));
  }
  std::fprintf(stderr, "\n");
  std::fputs(table.c_str(), stdout);
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    std::ofstream f(path);
    f << absl::StrFormat(
        "{\"device\":\"%s\",\"backend\":\"%s\",\"copy_peak_GBps\":%.2f,"
        "\"theoretical_GBps\":%.2f,\"rows\":[\n%s\n]}\n",
        JsonEscape(dev.name), BackendName(dev.backend), peak / 1e9,
        dev.theoretical_bandwidth / 1e9, absl::StrJoin(json_rows, ",\n"));
  }
  std::printf("%zu runs, %d failures\n", jobs.size(), failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace coalesce

int main(int argc, char** argv) { return coalesce::Main(argc, argv); }
