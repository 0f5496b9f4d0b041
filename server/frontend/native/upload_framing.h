// PutTensor's framing: which message of an upload stream carries what, and
// where each chunk's bytes go in the tensor. The first message carries the
// header (dtype, shape; decoded by the codec), every later one a chunk; no
// chunk may reach past the header's byte size, and the stream must end at
// exactly that size. The class does no I/O and allocates nothing sized by
// the stream: the service reads the messages, asks UploadFraming where each
// chunk goes, and copies it there. Errors are INVALID_ARGUMENT and name the
// message ("chunk: message 3 ..."), the header being message 0. Once a
// call fails the stream is refused: every later call returns that error.
// Not thread-safe: one UploadFraming follows one stream.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "server/frontend/native/codec.h"

namespace coalesce {

class UploadFraming {
 public:
  // Where one chunk's bytes go: [offset, offset + bytes.size()) of the
  // tensor. bytes points into the message it came from.
  struct Piece {
    int64_t offset = 0;
    absl::string_view bytes;
    int64_t message = 0;  // its index in the stream, the header being 0
  };

  // The first message of the stream: its header, decoded and validated.
  absl::StatusOr<TensorHeader> Start(const v1::PutTensorRequest& first);

  // Each later message, in order.
  absl::StatusOr<Piece> Next(const v1::PutTensorRequest& message);

  // The stream ended: OK only when a header came and every byte it
  // declared arrived.
  absl::Status Finish() const;

  // The header Start accepted.
  const TensorHeader& header() const { return header_; }
  // The chunks Next accepted, and the bytes they carried.
  int64_t chunks() const { return chunks_; }
  int64_t received_bytes() const { return offset_; }

 private:
  // Records a failure for every later call and returns it.
  absl::Status Refuse(absl::Status status);

  bool started_ = false;
  absl::Status refused_;
  TensorHeader header_;
  int64_t chunks_ = 0;
  int64_t offset_ = 0;
};

}  // namespace coalesce
