#include "client/selection_cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "kernels/core/problem.h"
#include "kernels/selection/selection_key.h"
#include "base/status_macros.h"
#include "kernels/selection/tuning_store.h"

namespace coalesce {
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

absl::StatusOr<v1::ExplainSelectionRequest> ToExplain(const Message& request) {
  v1::ExplainSelectionRequest e;
  if (auto* t = dynamic_cast<const v1::TransposeRequest*>(&request)) {
    *e.mutable_transpose() = *t;
  } else if (auto* g = dynamic_cast<const v1::GemmRequest*>(&request)) {
    *e.mutable_gemm() = *g;
  } else if (auto* l =
                 dynamic_cast<const v1::ConvertLayoutRequest*>(&request)) {
    *e.mutable_convert_layout() = *l;
  } else if (auto* n =
                 dynamic_cast<const v1::GeluLayerNormRequest*>(&request)) {
    *e.mutable_gelu_layer_norm() = *n;
  } else {
    return absl::InvalidArgumentError("not an op request");
  }
  Message* inner = nullptr;
  switch (e.request_case()) {
    case v1::ExplainSelectionRequest::kTranspose:
      inner = e.mutable_transpose();
      break;
    case v1::ExplainSelectionRequest::kGemm:
      inner = e.mutable_gemm();
      break;
    case v1::ExplainSelectionRequest::kConvertLayout:
      inner = e.mutable_convert_layout();
      break;
    case v1::ExplainSelectionRequest::kGeluLayerNorm:
      inner = e.mutable_gelu_layer_norm();
      break;
    default:
      break;
  }
  StripTensorData(*inner);
  return e;
}

std::string Us(double s) {
  return s < 0 ? "-" : absl::StrFormat("%.2f", s * 1e6);
}

}  // namespace

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
  std::vector<std::string> worst;
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

std::vector<std::string> RandomShapes(const std::string& op, int count,
                                      uint64_t seed, int64_t max_bytes) {
  std::mt19937_64 rng(seed);
  auto size = [&](int64_t lo, int64_t hi) {
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    int64_t v = static_cast<int64_t>(std::exp(u(rng)));
    // Half the shapes aligned to 64 (the common case), half odd-sized.
    if (rng() % 2 == 0) v = std::max<int64_t>(64, (v + 32) / 64 * 64);
    return std::clamp<int64_t>(v, lo, hi);
  };
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < count) {
    std::vector<int64_t> s;
    if (op == "transpose") {
      s = {size(1, 16384), size(1, 16384)};
    } else if (op == "gemm") {
      s = {size(1, 8192), size(1, 8192), size(1, 8192)};
    } else if (op == "layout") {
      const int64_t c = rng() % 3 == 0 ? 3 : size(1, 512);
      const int64_t hw = size(1, 224);
      s = {size(1, 64), c, hw, hw};
    } else {
      s = {size(1, 32768), size(1, 16384)};
    }
    int64_t elems = 1;
    for (int64_t d : s) elems *= d;
    if (op == "gemm") elems = s[0] * s[2] + s[2] * s[1] + s[0] * s[1];
    if (elems * 4 > max_bytes) continue;
    out.push_back(absl::StrJoin(s, ","));
  }
  return out;
}

}  // namespace coalesce
