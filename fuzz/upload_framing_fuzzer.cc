// PutTensor's framing (UploadFraming) over a stream of PutTensorRequest
// messages: the input is a sequence of records, each a 2-byte
// little-endian length and a message in protobuf wire form; the stream
// ends at the input's end or at a record that does not parse (gRPC would
// fail the call there). Checked beyond not crashing: the header is
// accepted exactly when the codec accepts it; pieces follow one another
// from byte 0 and never reach past the declared size; an error refuses
// the rest of the stream; Finish is OK exactly when the chunks add up to
// the declared size, and then the pieces rebuild the chunks' bytes.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "fuzz/fuzz_check.h"
#include "server/frontend/native/codec.h"
#include "server/frontend/native/upload_framing.h"

namespace coalesce {
namespace {

// Tensors up to this size are rebuilt from their pieces; larger ones are
// only accounted (a header may declare far more than the input holds).
constexpr int64_t kMaxRebuiltBytes = int64_t{1} << 16;

void CheckHeader(const v1::PutTensorRequest& first,
                 const absl::StatusOr<TensorHeader>& got) {
  if (first.part_case() != v1::PutTensorRequest::kHeader) {
    FUZZ_CHECK(got.status().code() == absl::StatusCode::kInvalidArgument,
               got.status().ToString());
    return;
  }
  const absl::StatusOr<TensorHeader> want =
      DecodePutTensorHeader(first.header());
  FUZZ_CHECK(got.status() == want.status(), got.status().ToString(), " vs ",
             want.status().ToString());
  if (!got.ok()) return;
  int64_t elements = 1;
  for (int64_t d : got->shape) {
    FUZZ_CHECK(d >= 1, "dimension ", d);
    FUZZ_CHECK(!__builtin_mul_overflow(elements, d, &elements), "overflow");
  }
  FUZZ_CHECK(
      got->bytes == elements * static_cast<int64_t>(ElementSize(got->dtype)),
      got->bytes, " bytes for ", elements, " elements");
}

void FuzzOne(absl::string_view input) {
  fuzz::Records records(input);
  // Pieces point into their messages: keep every message alive.
  std::deque<v1::PutTensorRequest> messages;
  UploadFraming framing;
  absl::Status failed;
  int64_t declared = -1;  // the header's bytes, once accepted
  int64_t received = 0;
  std::string sent, rebuilt;
  absl::string_view record;
  while (failed.ok() && records.Next(&record)) {
    v1::PutTensorRequest& m = messages.emplace_back();
    if (!m.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
      break;
    }
    if (messages.size() == 1) {
      const absl::StatusOr<TensorHeader> h = framing.Start(m);
      CheckHeader(m, h);
      if (!h.ok()) {
        failed = h.status();
        break;
      }
      declared = h->bytes;
      if (declared <= kMaxRebuiltBytes) rebuilt.assign(declared, '\0');
      continue;
    }
    const absl::StatusOr<UploadFraming::Piece> piece = framing.Next(m);
    if (!piece.ok()) {
      FUZZ_CHECK(piece.status().code() == absl::StatusCode::kInvalidArgument,
                 piece.status().ToString());
      FUZZ_CHECK(
          m.part_case() != v1::PutTensorRequest::kChunk ||
              received + static_cast<int64_t>(m.chunk().size()) > declared,
          "a fitting chunk was refused: ", piece.status().ToString());
      failed = piece.status();
      break;
    }
    FUZZ_CHECK(m.part_case() == v1::PutTensorRequest::kChunk, "not a chunk");
    FUZZ_CHECK(piece->message == static_cast<int64_t>(messages.size()) - 1,
               "message ", piece->message);
    FUZZ_CHECK(piece->offset == received, "offset ", piece->offset, " after ",
               received, " bytes");
    FUZZ_CHECK(piece->bytes.data() == m.chunk().data() &&
                   piece->bytes.size() == m.chunk().size(),
               "the piece is not the chunk");
    const int64_t n = static_cast<int64_t>(piece->bytes.size());
    FUZZ_CHECK(piece->offset + n <= declared, "piece ends at ",
               piece->offset + n, " past ", declared);
    if (declared <= kMaxRebuiltBytes) {
      rebuilt.replace(piece->offset, n, piece->bytes.data(), n);
      sent.append(m.chunk());
    }
    received += n;
    FUZZ_CHECK(framing.received_bytes() == received, "received ",
               framing.received_bytes(), " vs ", received);
  }

  const absl::Status finished = framing.Finish();
  if (!failed.ok()) {
    FUZZ_CHECK(finished == failed,
               "refusal did not stick: ", finished.ToString());
    return;
  }
  FUZZ_CHECK(finished.ok() == (declared >= 0 && received == declared),
             finished.ToString(), " after ", received, " of ", declared);
  if (finished.ok() && declared <= kMaxRebuiltBytes) {
    FUZZ_CHECK(rebuilt == sent, "the pieces rebuilt other bytes");
  }
}

}  // namespace
}  // namespace coalesce

COALESCE_FUZZ_TARGET(coalesce::FuzzOne)
