#include "client/npy.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

NpyArray Iota(DType dtype, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  int64_t n = 1;
  for (const int64_t d : a.shape) n *= d;
  a.bytes.resize(n * ElementSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    StoreFromFloat(a.bytes.data(), dtype, i, 0.25f * (i + 1) - 3.0f);
  }
  return a;
}

// Little-endian .npy bytes with the given header dict, padded as NumPy does.
std::string NpyFile(absl::string_view dict, absl::string_view data,
                    int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header(dict);
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return absl::StrCat(out, header, data);
}

std::string Floats(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

class NpyRoundTripTest : public ::testing::TestWithParam<DType> {};

TEST_P(NpyRoundTripTest, KeepsDtypeShapeAndBytes) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {7}, {3, 5}, {2, 3, 4}, {0, 4}}) {
    const NpyArray in = Iota(GetParam(), shape);
    absl::StatusOr<std::string> file = SerializeNpy(in);
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<NpyArray> out = ParseNpy(*file);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->dtype, in.dtype);
    EXPECT_EQ(out->shape, in.shape);
    EXPECT_EQ(out->bytes, in.bytes);
  }
}

TEST_P(NpyRoundTripTest, ThroughAFile) {
  const NpyArray in = Iota(GetParam(), {4, 9});
  const std::string path = absl::StrCat(::testing::TempDir(), "/npy_test_",
                                        DTypeName(GetParam()), ".npy");
  ASSERT_TRUE(WriteNpy(path, in).ok());
  absl::StatusOr<NpyArray> out = ReadNpy(path, GetParam());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, in.shape);
  EXPECT_EQ(out->bytes, in.bytes);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, NpyRoundTripTest,
                         ::testing::ValuesIn(kAllDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(NpyTest, HeaderIsNumpysAndDataIs64ByteAligned) {
  absl::StatusOr<std::string> file =
      SerializeNpy(Iota(DType::kFloat32, {2, 3}));
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_length = static_cast<unsigned char>((*file)[8]) |
                               (static_cast<unsigned char>((*file)[9]) << 8);
  EXPECT_EQ((10 + header_length) % 64, 0u);
  EXPECT_EQ(file->size(), 10 + header_length + 6 * sizeof(float));
  const std::string header = file->substr(10, header_length);
  EXPECT_THAT(header,
              ::testing::StartsWith("{'descr': '<f4', 'fortran_order': False, "
                                    "'shape': (2, 3), }"));
  EXPECT_EQ(header.back(), '\n');
}

TEST(NpyTest, OneDimensionalShapeIsATupleWithComma) {
  absl::StatusOr<std::string> file = SerializeNpy(Iota(DType::kFloat16, {5}));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(*file, HasSubstr("'descr': '<f2'"));
  EXPECT_THAT(*file, HasSubstr("'shape': (5,)"));
}

TEST(NpyTest, BFloat16IsWrittenAsU2) {
  absl::StatusOr<std::string> file = SerializeNpy(Iota(DType::kBFloat16, {3}));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(*file, HasSubstr("'descr': '<u2'"));
}

TEST(NpyTest, HugeHeaderUsesVersion2) {
  // 30000 dimensions of 1: a header longer than version 1.0's 65535 bytes.
  const NpyArray in = Iota(DType::kFloat32, std::vector<int64_t>(30000, 1));
  absl::StatusOr<std::string> file = SerializeNpy(in);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)[6], 2);
  uint32_t header_length;
  std::memcpy(&header_length, file->data() + 8, 4);
  EXPECT_EQ((12 + header_length) % 64, 0u);
  absl::StatusOr<NpyArray> out = ParseNpy(*file);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, in.shape);
  EXPECT_EQ(out->bytes, in.bytes);
}

TEST(NpyTest, ReadsNumpysOwnOutput) {
  // np.save(f, np.array([[1, 2, 3], [4, 5, 6]], dtype='<f4')) as written by
  // NumPy 1.x and 2.x (version 1.0, padded to 128 bytes).
  std::string file("\x93NUMPY\x01\x00\x76\x00", 10);
  file += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  file += std::string(128 - 1 - file.size(), ' ') + "\n";
  file += Floats({1, 2, 3, 4, 5, 6});
  absl::StatusOr<NpyArray> out = ParseNpy(file);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype, DType::kFloat32);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out->bytes, Floats({1, 2, 3, 4, 5, 6}));
}

TEST(NpyTest, AcceptsOtherKeyOrderQuotesAndSpacing) {
  const std::string file = NpyFile(
      "{ \"shape\" : ( 2 , ) , \"fortran_order\": False, \"descr\": \"<f4\" }",
      Floats({1.5f, -2.5f}));
  absl::StatusOr<NpyArray> out = ParseNpy(file);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(out->bytes, Floats({1.5f, -2.5f}));
}

TEST(NpyTest, Float32ConvertsToRequested16BitTypes) {
  const std::vector<float> values = {1.0f, -0.333333f, 65504.0f};
  const std::string file =
      NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
              Floats(values));
  for (const DType want : {DType::kFloat16, DType::kBFloat16}) {
    absl::StatusOr<NpyArray> out = ParseNpy(file, want);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->dtype, want);
    ASSERT_EQ(out->bytes.size(), 6u);
    for (int i = 0; i < 3; ++i) {
      std::string expected(2, '\0');
      StoreFromFloat(expected.data(), want, 0, values[i]);
      EXPECT_EQ(out->bytes.substr(2 * i, 2), expected) << i;
    }
  }
}

TEST(NpyTest, Float16WidensToFloat32) {
  const NpyArray half = Iota(DType::kFloat16, {4});
  absl::StatusOr<NpyArray> out = ParseNpy(*SerializeNpy(half), DType::kFloat32);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(LoadAsFloat(out->bytes.data(), DType::kFloat32, i),
              LoadAsFloat(half.bytes.data(), DType::kFloat16, i));
  }
}

TEST(NpyTest, U2IsOnlyBFloat16) {
  const std::string file = *SerializeNpy(Iota(DType::kBFloat16, {2}));
  EXPECT_TRUE(ParseNpy(file, DType::kBFloat16).ok());
  const absl::Status status = ParseNpy(file, DType::kFloat32).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bfloat16"));
}

void ExpectRejected(absl::string_view file, absl::string_view why) {
  const absl::Status status = ParseNpy(file).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(why));
}

TEST(NpyTest, RejectsFortranOrder) {
  ExpectRejected(
      NpyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
              Floats({1, 2})),
      "fortran_order");
}

TEST(NpyTest, RejectsBigEndian) {
  ExpectRejected(
      NpyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
              Floats({1, 2})),
      "big-endian");
}

TEST(NpyTest, RejectsOtherDtypes) {
  for (const char* descr : {"<f8", "<i4", "|u1", "<c8"}) {
    ExpectRejected(
        NpyFile(absl::StrCat("{'descr': '", descr,
                             "', 'fortran_order': False, 'shape': (1,), }"),
                std::string(8, '\0')),
        "unsupported .npy dtype");
  }
  ExpectRejected(NpyFile("{'descr': [('a', '<f4')], 'fortran_order': False, "
                         "'shape': (1,), }",
                         Floats({1})),
                 "string literal");
}

TEST(NpyTest, RejectsGarbage) {
  ExpectRejected("", "bad magic");
  ExpectRejected("PK\x03\x04 not numpy at all", "bad magic");
  ExpectRejected(std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18),
                 "truncated");
  ExpectRejected(std::string("\x93NUMPY\x03\x00", 8) + std::string(64, ' '),
                 "version 3.0");
  ExpectRejected(NpyFile("{'descr': '<f4', 'shape': (1,), }", Floats({1})),
                 "needs the keys");
  ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (1,), 'extra': 1, }",
                         Floats({1})),
                 "'extra'");
  ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (-1,), }",
                         ""),
                 "integers");
  ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (2, 3) }",
                         Floats({1, 2, 3})),
                 "needs 6 elements");  // truncated data
  ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (1,), }",
                         Floats({1, 2})),
                 "needs 1 elements");  // trailing bytes
}

TEST(NpyTest, SerializeChecksByteCount) {
  NpyArray a = Iota(DType::kFloat32, {2, 2});
  a.bytes.pop_back();
  EXPECT_EQ(SerializeNpy(a).status().code(),
            absl::StatusCode::kInvalidArgument);
  a.shape = {-1};
  EXPECT_EQ(SerializeNpy(a).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, MissingFileIsNotFound) {
  const absl::Status status =
      ReadNpy(absl::StrCat(::testing::TempDir(), "/no_such_file.npy")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no_such_file.npy"));
}

}  // namespace
}  // namespace coalesce
