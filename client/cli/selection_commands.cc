#include "client/cli/selection_commands.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/dtype.h"
#include "base/status_macros.h"
#include "client/cli/op_commands.h"
#include "client/cli/op_common.h"
#include "client/cli/tune_shapes.h"
#include "client/client.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "kernels/core/problem.h"
#include "kernels/selection/selection_key.h"
#include "kernels/selection/tuning_store.h"

ABSL_FLAG(std::string, shapes, "",
          "tune: shapes separated by ';', each as --shape takes it (gemm: "
          "M,N,K), optionally followed by op flags the shape sets, e.g. "
          "'64,32,16 trans_a=1 batch=4' or '2,3,5 perm=2,0,1'.");
ABSL_FLAG(bool, measure, false,
          "explain: also time every eligible variant on the server now.");
ABSL_FLAG(int32_t, random_shapes, 0,
          "tune: this many random shapes, tiny to large, odd and aligned.");
ABSL_FLAG(uint64_t, shapes_seed, 7, "tune: seed of --random_shapes.");
ABSL_FLAG(std::string, shape_class, "",
          "tune: what --random_shapes draws. transpose: 2d (default), "
          "batched; gemm: plain (default), transposed (trans_a and/or "
          "trans_b), batched; layout: nchw_nhwc (default), nhwc_nchw, "
          "permutation (rank 3-5, some moving only size-1 axes), aos_soa, "
          "soa_aos; gelu-ln: default.");
ABSL_FLAG(int64_t, max_shape_bytes, int64_t{256} << 20,
          "tune: largest tensor of a random shape, in bytes of --dtype "
          "(gemm: A, B and D together).");
ABSL_FLAG(std::string, out, "", "tune: the table file to write.");
ABSL_FLAG(std::string, shapes_out, "",
          "tune: also write every shape's automatic choice and measured "
          "times to this file (tab-separated, one shape a line), which "
          "the table keeps only one shape of per key.");

namespace coalesce::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Clears the raw bytes of every Tensor field of an op request: the server
// explains from dtypes and shapes alone.
void StripTensorData(Message& request) {
  const google::protobuf::Reflection* r = request.GetReflection();
  const google::protobuf::Descriptor* d = request.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
        !f->is_repeated() && f->message_type() == v1::Tensor::descriptor() &&
        r->HasField(request, f)) {
      static_cast<v1::Tensor*>(r->MutableMessage(&request, f))->clear_raw();
    }
  }
}

// The ExplainSelection of an op request (the oneof member of its type),
// without its tensor data.
absl::StatusOr<v1::ExplainSelectionRequest> ToExplain(const Message& request) {
  v1::ExplainSelectionRequest e;
  const google::protobuf::OneofDescriptor* ops =
      e.GetDescriptor()->FindOneofByName("request");
  for (int i = 0; i < ops->field_count(); ++i) {
    const FieldDescriptor* f = ops->field(i);
    if (f->message_type() != request.GetDescriptor()) continue;
    Message* inner = e.GetReflection()->MutableMessage(&e, f);
    inner->CopyFrom(request);
    StripTensorData(*inner);
    return e;
  }
  return absl::InvalidArgumentError("not an op request");
}

std::string Us(double s) {
  return s < 0 ? "-" : absl::StrFormat("%.2f", s * 1e6);
}

// Sends `request` as an ExplainSelection without its tensor data and prints
// the answer; with measure the server also times every eligible variant now.
absl::Status ExplainRequest(Client& client, Message& request, bool measure) {
  COALESCE_ASSIGN_OR_RETURN(v1::ExplainSelectionRequest e, ToExplain(request));
  e.set_measure(measure);
  COALESCE_ASSIGN_OR_RETURN(v1::ExplainSelectionResponse r,
                            client.ExplainSelection(e));
  std::printf("problem: %s\nkey:     %s\n%s\n", r.problem().c_str(),
              r.key().c_str(),
              measure ? "times: measured on the server now (median, inputs "
                        "rotated past the cache)\n"
                      : "");
  std::printf("  %-36s %-8s %12s %12s  %s\n", "variant", "eligible",
              "estimate us", "measured us", "why not");
  for (const v1::VariantCandidate& c : r.candidates()) {
    std::printf("%s %-36s %-8s %12s %12s  %s\n",
                c.variant() == r.chosen_variant() ? "*" : " ",
                c.variant().c_str(), c.eligible() ? "yes" : "no",
                Us(c.estimated_seconds()).c_str(),
                Us(c.measured_seconds()).c_str(), c.why_not().c_str());
  }
  std::printf("\nchosen: %s (source: %s; %s)\n", r.chosen_variant().c_str(),
              r.source().c_str(), r.reason().c_str());
  return absl::OkStatus();
}

// One tuned shape: every eligible variant timed through the server.
struct TunedShape {
  std::string key;        // the server's selection key
  std::string label;      // the shape, as given
  std::string automatic;  // what the server chose before tuning
  std::string automatic_source;
  std::vector<std::pair<std::string, double>> measured;  // fastest first
};

// Has the server time every eligible variant of `request`'s shape on its
// scratch buffers (ExplainSelection with measure: the bench harness's
// method, device-resident, so no tensor data crosses the wire) and returns
// the times with the choice the server made before measuring.
absl::StatusOr<TunedShape> TuneRequest(Client& client, Message& request,
                                       std::string label) {
  COALESCE_ASSIGN_OR_RETURN(v1::ExplainSelectionRequest e, ToExplain(request));
  e.set_measure(true);
  COALESCE_ASSIGN_OR_RETURN(v1::ExplainSelectionResponse r,
                            client.ExplainSelection(e));
  TunedShape t;
  t.key = r.key();
  t.label = std::move(label);
  // Chosen before the measurement, which leaves the selection unchanged.
  t.automatic = r.chosen_variant();
  t.automatic_source = r.source();
  for (const v1::VariantCandidate& c : r.candidates()) {
    if (c.eligible() && c.measured_seconds() >= 0) {
      t.measured.emplace_back(c.variant(), c.measured_seconds());
    }
  }
  if (t.measured.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("no eligible variant for ", r.problem()));
  }
  std::sort(t.measured.begin(), t.measured.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return t;
}

// Writes the tuning table (the format of kernels/selection/tuning_store.h,
// build "any") and prints the quality summary: for how many shapes the
// automatic choice was within 10% of the fastest.
absl::Status WriteTable(const std::vector<TunedShape>& shapes,
                        const std::string& path) {
  if (shapes.empty()) return absl::InvalidArgumentError("no shape was tuned");
  std::string device;
  std::map<std::string, std::string> versions;  // op -> version
  for (const TunedShape& s : shapes) {
    const std::optional<OpKind> op = OpOfKey(s.key);
    const absl::string_view device_key = DeviceOfKey(s.key);
    if (!op.has_value() || device_key.empty()) {
      return absl::InternalError(
          absl::StrCat("unexpected selection key '", s.key, "'"));
    }
    device = std::string(device_key);
    versions[std::string(OpName(*op))] = std::string(VersionOfKey(s.key));
  }
  TuningStore table(
      {"any", device, absl::StrJoin(versions, ",", absl::PairFormatter("="))});
  int within = 0;
  std::vector<std::pair<double, std::string>> ratios;
  for (const TunedShape& s : shapes) {
    table.Put(s.key, {s.measured[0].first, s.measured[0].second, s.measured});
    double automatic = -1;
    for (const auto& [name, sec] : s.measured) {
      if (name == s.automatic) automatic = sec;
    }
    const double ratio =
        automatic > 0 ? automatic / s.measured[0].second : INFINITY;
    if (ratio <= 1.10) ++within;
    ratios.emplace_back(
        ratio, absl::StrFormat("%s: automatic %s (%s) %.2fx the fastest, %s",
                               s.label, s.automatic, s.automatic_source, ratio,
                               s.measured[0].first));
  }
  COALESCE_RETURN_IF_ERROR(table.Save(path));
  std::sort(ratios.rbegin(), ratios.rend());
  std::printf(
      "wrote %zu entries to %s\nautomatic choice within 10%% of the fastest "
      "for %d of %zu shapes (%.1f%%)\nworst:\n",
      table.size(), path.c_str(), within, shapes.size(),
      100.0 * within / shapes.size());
  for (size_t i = 0; i < std::min<size_t>(5, ratios.size()); ++i) {
    std::printf("  %s\n", ratios[i].second.c_str());
  }
  return absl::OkStatus();
}

// Writes every tuned shape, one line each: the shape as given, its key, the
// automatic choice and where it came from, and every measured variant as
// name=seconds, fastest first, tab-separated (a '#' header line first):
// what refitting the estimates offline needs, where the table keeps one
// shape per key.
absl::Status WriteTunedShapes(const std::vector<TunedShape>& shapes,
                              const std::string& path) {
  std::ofstream f(path);
  f << "# shape\tkey\tautomatic\tsource\tmeasured seconds, fastest first\n";
  for (const TunedShape& s : shapes) {
    f << absl::StrCat(s.label, "\t", s.key, "\t", s.automatic, "\t",
                      s.automatic_source, "\t",
                      absl::StrJoin(s.measured, ",",
                                    [](std::string* out, const auto& m) {
                                      absl::StrAppendFormat(out, "%s=%.9g",
                                                            m.first, m.second);
                                    }),
                      "\n");
  }
  f.close();
  if (!f) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::Status Explain(OpRunner runner, Client& client, OpFlags flags) {
  flags.request_hook = [measure = absl::GetFlag(FLAGS_measure)](
                           Client& c, Message& request) {
    return ExplainRequest(c, request, measure);
  };
  return runner(client, std::move(flags));
}

// Tunes every shape of --shapes and --random_shapes, then writes the table
// (and --shapes_out); 1 when a shape failed.
absl::StatusOr<int> Tune(absl::string_view op, OpRunner runner, Client& client,
                         OpFlags flags) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return UsageError("tune needs --out=TABLE");
  std::vector<std::string> shapes =
      absl::StrSplit(absl::GetFlag(FLAGS_shapes), ';', absl::SkipEmpty());
  if (absl::GetFlag(FLAGS_random_shapes) > 0) {
    absl::StatusOr<std::vector<std::string>> random = RandomShapes(
        op, absl::GetFlag(FLAGS_shape_class),
        absl::GetFlag(FLAGS_random_shapes), absl::GetFlag(FLAGS_shapes_seed),
        absl::GetFlag(FLAGS_max_shape_bytes),
        static_cast<int>(ElementSize(flags.dtype.value_or(DType::kFloat32))));
    if (!random.ok()) return UsageError(random.status().message());
    for (std::string& s : *random) shapes.push_back(std::move(s));
  } else if (!absl::GetFlag(FLAGS_shape_class).empty()) {
    return UsageError("--shape_class goes with --random_shapes");
  }
  if (shapes.empty())
    return UsageError("tune needs --shapes or --random_shapes");
  if (op == "layout") SetDefaultLayoutConversion();
  const TuneFlags base = CurrentTuneFlags();
  std::vector<TunedShape> results;
  const absl::Time start = absl::Now();
  int failed = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::fprintf(stderr, "\r[%zu/%zu %.0fs] %s %-24s", i + 1, shapes.size(),
                 absl::ToDoubleSeconds(absl::Now() - start),
                 std::string(op).c_str(), shapes[i].c_str());
    std::fflush(stderr);
    COALESCE_RETURN_IF_ERROR(SetTuneShape(op, shapes[i], base));
    flags.request_hook = [&](Client& c, Message& request) {
      COALESCE_ASSIGN_OR_RETURN(TunedShape t,
                                TuneRequest(c, request, shapes[i]));
      results.push_back(std::move(t));
      return absl::OkStatus();
    };
    absl::Status s = runner(client, flags);
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

}  // namespace

absl::StatusOr<int> RunSelectionCommand(absl::string_view command,
                                        absl::string_view op,
                                        std::vector<std::string> inputs,
                                        Connector connect) {
  const OpRunner runner = RunnerFor(op);
  if (runner == nullptr) {
    return UsageError(absl::StrCat(command, ": unknown op '", op,
                                   "'; expected transpose, gemm, layout or "
                                   "gelu-ln"));
  }
  COALESCE_ASSIGN_OR_RETURN(OpFlags flags, ParseOpFlags(std::move(inputs)));
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, connect());
  flags.shape_only = true;
  if (command == "explain") {
    COALESCE_RETURN_IF_ERROR(Explain(runner, *client, std::move(flags)));
    return 0;
  }
  return Tune(op, runner, *client, std::move(flags));
}

}  // namespace coalesce::cli
