// UploadFraming: each error with its code and exact message, the refusal
// that sticks after one, and random uploads in random chunks reassembled
// byte-exact from the pieces.
#include "server/frontend/native/upload_framing.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

v1::PutTensorRequest Header(v1::DataType dtype,
                            std::initializer_list<int64_t> shape) {
  v1::PutTensorRequest m;
  m.mutable_header()->set_dtype(dtype);
  for (int64_t d : shape) m.mutable_header()->add_shape(d);
  return m;
}

v1::PutTensorRequest Chunk(std::string bytes) {
  v1::PutTensorRequest m;
  m.set_chunk(std::move(bytes));
  return m;
}

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message(), message);
}

TEST(UploadFraming, StreamWithoutMessages) {
  UploadFraming framing;
  ExpectInvalid(framing.Finish(),
                "header: the stream ended before its first message");
}

TEST(UploadFraming, FirstMessageMustBeTheHeader) {
  UploadFraming framing;
  ExpectInvalid(framing.Start(Chunk("abcd")).status(),
                "header: the first message must carry the header (dtype, "
                "shape), not a chunk");
  // An empty first message carries no header either.
  UploadFraming empty;
  ExpectInvalid(empty.Start(v1::PutTensorRequest()).status(),
                "header: the first message must carry the header (dtype, "
                "shape), not a chunk");
}

TEST(UploadFraming, HeaderErrorsAreTheCodecs) {
  for (const v1::PutTensorRequest& bad :
       {Header(v1::DATA_TYPE_UNSPECIFIED, {4}),
        Header(v1::DATA_TYPE_FLOAT32, {}),
        Header(v1::DATA_TYPE_FLOAT16, {3, 0}),
        Header(v1::DATA_TYPE_FLOAT32, {int64_t{1} << 40, int64_t{1} << 40})}) {
    UploadFraming framing;
    const absl::Status got = framing.Start(bad).status();
    EXPECT_FALSE(got.ok());
    EXPECT_EQ(got, DecodePutTensorHeader(bad.header()).status());
  }
}

TEST(UploadFraming, HeaderDecodes) {
  UploadFraming framing;
  absl::StatusOr<TensorHeader> h =
      framing.Start(Header(v1::DATA_TYPE_BFLOAT16, {3, 5}));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype, DType::kBFloat16);
  EXPECT_EQ(h->shape, Shape({3, 5}));
  EXPECT_EQ(h->bytes, 30);
  EXPECT_EQ(framing.header().bytes, 30);
}

TEST(UploadFraming, LaterMessagesMustBeChunks) {
  UploadFraming framing;
  ASSERT_TRUE(framing.Start(Header(v1::DATA_TYPE_FLOAT32, {4})).ok());
  ASSERT_TRUE(framing.Next(Chunk("abcd")).ok());
  ExpectInvalid(framing.Next(Header(v1::DATA_TYPE_FLOAT32, {4})).status(),
                "chunk: message 2 carries no chunk; only the first message "
                "carries the header");
}

TEST(UploadFraming, ChunkPastTheDeclaredSize) {
  UploadFraming framing;
  ASSERT_TRUE(framing.Start(Header(v1::DATA_TYPE_FLOAT32, {4})).ok());
  ASSERT_TRUE(framing.Next(Chunk(std::string(10, 'x'))).ok());
  ExpectInvalid(framing.Next(Chunk(std::string(7, 'y'))).status(),
                "chunk: message 2 ends at byte 17, past the tensor's 16 bytes");
  EXPECT_EQ(framing.received_bytes(), 10);
}

TEST(UploadFraming, StreamEndingShort) {
  UploadFraming framing;
  ASSERT_TRUE(framing.Start(Header(v1::DATA_TYPE_FLOAT32, {4})).ok());
  ASSERT_TRUE(framing.Next(Chunk(std::string(15, 'x'))).ok());
  ExpectInvalid(framing.Finish(),
                "chunk: the stream ended after 15 bytes of the tensor's 16");
  UploadFraming header_only;
  ASSERT_TRUE(header_only.Start(Header(v1::DATA_TYPE_FLOAT16, {2, 3})).ok());
  ExpectInvalid(header_only.Finish(),
                "chunk: the stream ended after 0 bytes of the tensor's 12");
}

// After an overrun the bytes accepted may still add up to the header's
// size: the stream stays refused all the same.
TEST(UploadFraming, RefusalSticks) {
  UploadFraming framing;
  ASSERT_TRUE(framing.Start(Header(v1::DATA_TYPE_FLOAT32, {4})).ok());
  ASSERT_TRUE(framing.Next(Chunk(std::string(8, 'x'))).ok());
  const absl::Status over = framing.Next(Chunk(std::string(9, 'y'))).status();
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(framing.Next(Chunk(std::string(8, 'z'))).status(), over);
  EXPECT_EQ(framing.Finish(), over);
}

TEST(UploadFraming, MisuseIsAPrecondition) {
  UploadFraming framing;
  EXPECT_EQ(framing.Next(Chunk("ab")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  UploadFraming twice;
  ASSERT_TRUE(twice.Start(Header(v1::DATA_TYPE_FLOAT32, {1})).ok());
  EXPECT_EQ(twice.Start(Header(v1::DATA_TYPE_FLOAT32, {1})).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Random tensors cut into random chunks (empty ones included), delivered in
// order: the pieces put every byte back where it was, and the stream
// finishes only once the last byte is in.
TEST(UploadFraming, RandomUploadsReassembleExactly) {
  std::mt19937 rng(20240611);
  const v1::DataType dtypes[] = {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT16,
                                 v1::DATA_TYPE_BFLOAT16};
  for (int trial = 0; trial < 200; ++trial) {
    const v1::DataType dtype = dtypes[rng() % 3];
    v1::PutTensorRequest header;
    header.mutable_header()->set_dtype(dtype);
    const int rank = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < rank; ++i) {
      header.mutable_header()->add_shape(1 + static_cast<int64_t>(rng() % 9));
    }
    UploadFraming framing;
    absl::StatusOr<TensorHeader> h = framing.Start(header);
    ASSERT_TRUE(h.ok()) << h.status();
    std::string tensor(h->bytes, '\0');
    for (char& c : tensor) c = static_cast<char>(rng());

    std::string rebuilt(h->bytes, '\0');
    std::vector<bool> written(h->bytes, false);
    int64_t sent = 0;
    int64_t messages = 0;
    while (sent < h->bytes) {
      ASSERT_FALSE(framing.Finish().ok());
      const int64_t size = std::min<int64_t>(
          h->bytes - sent, static_cast<int64_t>(rng() % 40) - 4);
      v1::PutTensorRequest chunk =
          Chunk(tensor.substr(sent, std::max<int64_t>(size, 0)));
      absl::StatusOr<UploadFraming::Piece> piece = framing.Next(chunk);
      ASSERT_TRUE(piece.ok()) << piece.status();
      ++messages;
      EXPECT_EQ(piece->message, messages);
      EXPECT_EQ(piece->offset, sent);
      EXPECT_EQ(piece->bytes.data(), chunk.chunk().data());
      for (size_t i = 0; i < piece->bytes.size(); ++i) {
        const int64_t at = piece->offset + static_cast<int64_t>(i);
        ASSERT_LT(at, h->bytes);
        EXPECT_FALSE(written[at]) << "byte " << at << " written twice";
        written[at] = true;
        rebuilt[at] = piece->bytes[i];
      }
      sent += static_cast<int64_t>(piece->bytes.size());
    }
    EXPECT_TRUE(framing.Finish().ok()) << framing.Finish();
    EXPECT_EQ(framing.chunks(), messages);
    EXPECT_EQ(framing.received_bytes(), h->bytes);
    EXPECT_EQ(rebuilt, tensor);
    // One byte more is an overrun even when it comes empty-handed first.
    ASSERT_TRUE(framing.Next(Chunk("")).ok());
    EXPECT_EQ(framing.Next(Chunk("x")).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace coalesce
