#include "server/frontend/native/upload_framing.h"

#include "absl/strings/str_cat.h"

namespace coalesce {

absl::Status UploadFraming::Refuse(absl::Status status) {
  refused_ = status;
  return status;
}

absl::StatusOr<TensorHeader> UploadFraming::Start(
    const v1::PutTensorRequest& first) {
  if (!refused_.ok()) return refused_;
  if (started_) {
    return Refuse(absl::FailedPreconditionError(
        "header: the stream's first message was already taken"));
  }
  started_ = true;
  if (first.part_case() != v1::PutTensorRequest::kHeader) {
    return Refuse(absl::InvalidArgumentError(
        "header: the first message must carry the header (dtype, shape), "
        "not a chunk"));
  }
  absl::StatusOr<TensorHeader> header = DecodePutTensorHeader(first.header());
  if (!header.ok()) return Refuse(header.status());
  header_ = *header;
  return header;
}

absl::StatusOr<UploadFraming::Piece> UploadFraming::Next(
    const v1::PutTensorRequest& message) {
  if (!refused_.ok()) return refused_;
  if (!started_) {
    return Refuse(absl::FailedPreconditionError(
        "chunk: a chunk before the stream's first message was taken"));
  }
  const int64_t n = chunks_ + 1;
  if (message.part_case() != v1::PutTensorRequest::kChunk) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "chunk: message ", n,
        " carries no chunk; only the first message carries the header")));
  }
  const int64_t size = static_cast<int64_t>(message.chunk().size());
  // offset_ <= header_.bytes always holds: no overflow.
  if (size > header_.bytes - offset_) {
    return Refuse(absl::InvalidArgumentError(
        absl::StrCat("chunk: message ", n, " ends at byte ", offset_ + size,
                     ", past the tensor's ", header_.bytes, " bytes")));
  }
  Piece piece;
  piece.offset = offset_;
  piece.bytes = message.chunk();
  piece.message = n;
  offset_ += size;
  chunks_ = n;
  return piece;
}

absl::Status UploadFraming::Finish() const {
  if (!refused_.ok()) return refused_;
  if (!started_) {
    return absl::InvalidArgumentError(
        "header: the stream ended before its first message");
  }
  if (offset_ != header_.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk: the stream ended after ", offset_,
                     " bytes of the tensor's ", header_.bytes));
  }
  return absl::OkStatus();
}

}  // namespace coalesce
