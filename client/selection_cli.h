// `coalesce explain` and `coalesce tune`: what the server would pick for a
// request shape and why, and an offline sweep that times every eligible
// variant over a list of shapes and writes a table the server loads with
// --tuning_table. Both reuse the op subcommands' request building: the CLI
// builds the request, then hands it here instead of sending it.
// Not thread-safe (a CLI runs one of these at a time).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "google/protobuf/message.h"

namespace coalesce {

// Sends `request` (a Transpose/Gemm/ConvertLayout/GeluLayerNorm request)
// as an ExplainSelection without its tensor data, and prints the answer;
// with measure the server also times every eligible variant now.
absl::Status ExplainRequest(Client& client, google::protobuf::Message& request,
                            bool measure);

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
absl::StatusOr<TunedShape> TuneRequest(Client& client,
                                       google::protobuf::Message& request,
                                       std::string label);

// Writes the tuning table (the format of kernels/selection/tuning_store.h, build
// "any") and prints the quality summary: for how many shapes the automatic
// choice was within 10% of the fastest.
absl::Status WriteTable(const std::vector<TunedShape>& shapes,
                        const std::string& path);

// Writes every tuned shape, one line each: the shape as given, its key, the
// automatic choice and where it came from, and every measured variant as
// name=seconds, fastest first, tab-separated (a '#' header line first):
// what refitting the estimates offline needs, where the table keeps one
// shape per key.
absl::Status WriteTunedShapes(const std::vector<TunedShape>& shapes,
                              const std::string& path);

// Random shapes for an op's sweep: sizes log-uniform from tiny to large,
// half of them aligned to 64, total bytes bounded by max_bytes. Each entry
// is the flag values of one request ("M,N" for transpose, "M,N,K" for
// gemm, "N,C,H,W" for layout, "ROWS,H" for gelu-ln).
std::vector<std::string> RandomShapes(const std::string& op, int count,
                                      uint64_t seed, int64_t max_bytes);

}  // namespace coalesce
