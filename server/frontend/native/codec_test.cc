#include "server/frontend/native/codec.h"

#include <unistd.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/shared_memory.h"
#include "server/store/tensor_store.h"

namespace coalesce {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMax = int64_t{1} << 30;

// A tensor whose raw bytes match its shape (zeros: the codec never reads
// them).
v1::Tensor MakeTensor(std::initializer_list<int64_t> shape,
                      v1::DataType dtype = v1::DATA_TYPE_FLOAT32) {
  v1::Tensor t;
  t.set_dtype(dtype);
  int64_t elements = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    elements *= d;
  }
  t.set_raw(
      std::string(elements * (dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2), '\0'));
  return t;
}

// A tensor with a shape but only a few raw bytes, for shapes too large to
// back with memory.
v1::Tensor ShapeOnly(std::initializer_list<int64_t> shape) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_raw("abcd");
  return t;
}

// Asserts the specific code and that the message names each given piece
// (the field first of all).
template <typename T>
void ExpectError(const absl::StatusOr<T>& result, absl::StatusCode code,
                 std::initializer_list<const char*> pieces) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  const std::string message(result.status().message());
  for (const char* piece : pieces) EXPECT_THAT(message, HasSubstr(piece));
}

v1::TransposeRequest Transpose(v1::Tensor input) {
  v1::TransposeRequest r;
  *r.mutable_input() = std::move(input);
  return r;
}

// ---- Transpose and the checks every tensor gets.

TEST(CodecTest, TransposeDecodesWithoutCopying) {
  const v1::TransposeRequest r = Transpose(MakeTensor({4, 3, 5}));
  absl::StatusOr<DecodedRequest> d = DecodeTranspose(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<TransposeProblem>(d->problem);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.rows, 3);
  EXPECT_EQ(p.cols, 5);
  ASSERT_EQ(d->operands.inputs.size(), 1u);
  EXPECT_EQ(d->operands.inputs[0], r.input().raw().data());
  EXPECT_THAT(d->operands.input_spaces, ElementsAre(MemorySpace::kHost));
  ASSERT_EQ(d->operands.outputs.size(), 1u);
  EXPECT_EQ(d->operands.outputs[0], nullptr);
  EXPECT_THAT(d->sizes.outputs, ElementsAre(4 * 3 * 5 * 4));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(4, 5, 3));
}

TEST(CodecTest, Rank2TransposeHasBatchOne) {
  absl::StatusOr<DecodedRequest> d = DecodeTranspose(
      Transpose(MakeTensor({3, 5}, v1::DATA_TYPE_BFLOAT16)), kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<TransposeProblem>(d->problem);
  EXPECT_EQ(p.dtype, DType::kBFloat16);
  EXPECT_EQ(p.batch, 1);
  EXPECT_THAT(d->output_shapes[0], ElementsAre(5, 3));
  EXPECT_THAT(d->sizes.inputs, ElementsAre(30));
}

TEST(CodecTest, MissingInput) {
  ExpectError(DecodeTranspose(v1::TransposeRequest(), kMax),
              absl::StatusCode::kInvalidArgument, {"input: required"});
}

TEST(CodecTest, UnspecifiedDType) {
  ExpectError(
      DecodeTranspose(Transpose(MakeTensor({2, 2}, v1::DATA_TYPE_UNSPECIFIED)),
                      kMax),
      absl::StatusCode::kInvalidArgument, {"input.dtype: must be set"});
}

TEST(CodecTest, UnknownDType) {
  v1::Tensor t = MakeTensor({2, 2});
  t.set_dtype(static_cast<v1::DataType>(42));
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.dtype: unknown data type 42"});
}

TEST(CodecTest, EmptyShape) {
  v1::Tensor t = MakeTensor({});
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape: is empty", "2 or 3"});
}

TEST(CodecTest, RankOutOfRange) {
  ExpectError(DecodeTranspose(Transpose(MakeTensor({2, 2, 2, 2})), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape: rank must be 2 or 3, got 4"});
  ExpectError(DecodeTranspose(Transpose(MakeTensor({7})), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape: rank must be 2 or 3, got 1"});
}

TEST(CodecTest, ZeroDimension) {
  ExpectError(DecodeTranspose(Transpose(MakeTensor({3, 0})), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape[1]: must be >= 1, got 0"});
}

TEST(CodecTest, NegativeDimension) {
  ExpectError(DecodeTranspose(Transpose(ShapeOnly({-2, 3})), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape[0]: must be >= 1, got -2"});
}

TEST(CodecTest, ElementCountOverflow) {
  ExpectError(
      DecodeTranspose(
          Transpose(ShapeOnly({int64_t{1} << 40, int64_t{1} << 40})), kMax),
      absl::StatusCode::kInvalidArgument,
      {"input.shape: element count", "overflows"});
}

TEST(CodecTest, ByteCountOverflow) {
  // 2^62 elements fit in int64; 2^64 bytes do not.
  ExpectError(
      DecodeTranspose(
          Transpose(ShapeOnly({int64_t{1} << 31, int64_t{1} << 31})), kMax),
      absl::StatusCode::kInvalidArgument,
      {"input.shape: byte size", "overflows"});
}

TEST(CodecTest, TensorAboveMaxTensorBytes) {
  // Checked before the raw length: the shape alone says it is too large.
  ExpectError(DecodeTranspose(Transpose(ShapeOnly({1024, 1024})), 1000000),
              absl::StatusCode::kResourceExhausted,
              {"input:", "4194304", "1000000"});
}

TEST(CodecTest, RawLengthMismatch) {
  v1::Tensor t = MakeTensor({2, 3});
  t.mutable_raw()->resize(20);
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.raw: has 20 bytes", "needs 24"});
}

TEST(CodecTest, HandleWithoutDataPlaneIsUnimplemented) {
  v1::Tensor t = MakeTensor({2, 3});
  t.set_handle("tensor-7");
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kUnimplemented,
              {"input.handle: server-side tensor handles are not served"});
}

// Memory that the codec must never touch: it only hands out pointers.
class UntouchedMemory final : public TensorMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    return std::shared_ptr<void>(
        new char[bytes], [](void* p) { delete[] static_cast<char*>(p); });
  }
  absl::Status CopyIn(void*, int64_t, int64_t, const void*, int64_t) override {
    return absl::InternalError("the codec copied into a stored tensor");
  }
  absl::Status CopyOut(const void*, int64_t, int64_t, void*, int64_t) override {
    return absl::InternalError("the codec copied out of a stored tensor");
  }
};

TEST(CodecTest, HandleInputsAreResidentAndInlineOnesHost) {
  UntouchedMemory memory;
  TensorStore store(TensorStoreOptions(), &memory);
  absl::StatusOr<std::shared_ptr<StoredTensor>> a =
      store.Create("me", "a", DType::kFloat32, {4, 6}, 4 * 6 * 4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(store.Commit("me", "a").ok());
  v1::GemmRequest r;
  r.mutable_a()->set_handle("a");
  *r.mutable_b() = MakeTensor({6, 2});
  DataPlane plane;
  plane.tensors = &store;
  // Another identity's "a" reads as missing.
  plane.owner = "someone-else";
  absl::StatusOr<DecodedRequest> foreign = DecodeGemm(r, kMax, false, plane);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(foreign.status().message(), HasSubstr("a.handle: "));
  plane.owner = "me";
  absl::StatusOr<DecodedRequest> d = DecodeGemm(r, kMax, false, plane);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->operands.inputs,
              ElementsAre((*a)->data.get(), r.b().raw().data(), nullptr));
  EXPECT_THAT(d->operands.input_spaces,
              ElementsAre(MemorySpace::kResident, MemorySpace::kHost,
                          MemorySpace::kHost));
}

TEST(CodecTest, SharedMemoryWithoutDataPlaneIsUnimplemented) {
  v1::Tensor t = MakeTensor({2, 3});
  t.mutable_shared_memory()->set_region("r");
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kUnimplemented, {"input.shared_memory"});
}

TEST(CodecTest, CudaRegionsAreResidentInputsAndDeviceOutputs) {
  // A CUDA region's memory is the backend's resident memory; host memory
  // stands in for it here.
  std::vector<char> device(4096);
  SharedMemoryOptions options;
  options.allow = true;
  SharedMemoryRegistry registry(options);
  ASSERT_TRUE(registry
                  .RegisterDevice("me", "gpu", 0, device.size(), geteuid(),
                                  [&](int64_t* bytes) {
                                    *bytes =
                                        static_cast<int64_t>(device.size());
                                    return std::shared_ptr<void>(device.data(),
                                                                 [](void*) {});
                                  })
                  .ok());
  v1::Tensor t = MakeTensor({2, 3});
  t.clear_raw();
  t.mutable_shared_memory()->set_region("gpu");
  t.mutable_shared_memory()->set_byte_size(24);
  v1::TransposeRequest r = Transpose(t);
  v1::OutputSpec* out = r.mutable_options()->add_outputs();
  out->set_placement(v1::OUTPUT_PLACEMENT_SHARED_MEMORY);
  out->mutable_shared_memory()->set_region("gpu");
  out->mutable_shared_memory()->set_offset(1024);
  out->mutable_shared_memory()->set_byte_size(24);
  DataPlane plane;
  plane.shared_memory = &registry;
  plane.owner = "me";
  absl::StatusOr<DecodedRequest> d = DecodeTranspose(r, kMax, false, plane);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->operands.inputs, ElementsAre(device.data()));
  EXPECT_THAT(d->operands.input_spaces, ElementsAre(MemorySpace::kResident));
  EXPECT_EQ(d->operands.outputs[0], device.data() + 1024);
  EXPECT_TRUE(d->output_targets[0].on_device);
}

TEST(CodecTest, NoTensorData) {
  v1::Tensor t = MakeTensor({2, 3});
  t.clear_data();
  ExpectError(DecodeTranspose(Transpose(t), kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.raw: no tensor data"});
}

TEST(CodecTest, HandleOutputWithoutDataPlaneIsUnimplemented) {
  v1::TransposeRequest r = Transpose(MakeTensor({2, 3}));
  r.mutable_options()->add_outputs()->set_placement(
      v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
  ExpectError(
      DecodeTranspose(r, kMax), absl::StatusCode::kUnimplemented,
      {"options.outputs[0].placement", "OUTPUT_PLACEMENT_SERVER_HANDLE"});
}

TEST(CodecTest, MoreOutputSpecsThanOutputs) {
  v1::TransposeRequest r = Transpose(MakeTensor({2, 3}));
  r.mutable_options()->add_outputs();
  r.mutable_options()->add_outputs();
  ExpectError(DecodeTranspose(r, kMax), absl::StatusCode::kInvalidArgument,
              {"options.outputs: has 2 entries"});
}

TEST(CodecTest, OptionsAreCopied) {
  v1::TransposeRequest r = Transpose(MakeTensor({2, 3}));
  r.mutable_options()->set_variant("transpose.cpu.blocked");
  r.mutable_options()->set_report(true);
  r.mutable_options()->add_outputs();  // inline
  absl::StatusOr<DecodedRequest> d = DecodeTranspose(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->forced_variant, "transpose.cpu.blocked");
  EXPECT_TRUE(d->report);
}

// ---- GEMM.

v1::GemmRequest Gemm(v1::Tensor a, v1::Tensor b) {
  v1::GemmRequest r;
  *r.mutable_a() = std::move(a);
  *r.mutable_b() = std::move(b);
  return r;
}

TEST(CodecTest, GemmDefaults) {
  const v1::GemmRequest r = Gemm(MakeTensor({4, 5}), MakeTensor({5, 6}));
  absl::StatusOr<DecodedRequest> d = DecodeGemm(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<GemmProblem>(d->problem);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.k, 5);
  EXPECT_EQ(p.alpha, 1.0f);
  EXPECT_EQ(p.beta, 0.0f);
  EXPECT_FALSE(p.has_c);
  EXPECT_EQ(p.stride_a, 0);
  EXPECT_EQ(p.stride_b, 0);
  EXPECT_THAT(d->operands.inputs,
              ElementsAre(r.a().raw().data(), r.b().raw().data(), nullptr));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(4, 6));
  EXPECT_THAT(d->sizes.outputs, ElementsAre(4 * 6 * 4));
}

TEST(CodecTest, GemmTransposedOperands) {
  v1::GemmRequest r = Gemm(MakeTensor({5, 4}), MakeTensor({6, 5}));
  r.set_trans_a(true);
  r.set_trans_b(true);
  absl::StatusOr<DecodedRequest> d = DecodeGemm(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<GemmProblem>(d->problem);
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.k, 5);
}

TEST(CodecTest, GemmKMismatch) {
  ExpectError(DecodeGemm(Gemm(MakeTensor({4, 5}), MakeTensor({6, 7})), kMax),
              absl::StatusCode::kInvalidArgument,
              {"b.shape[0]: k mismatch: op(a) has k=5, op(b) has k=6"});
  v1::GemmRequest r = Gemm(MakeTensor({2, 4, 5}), MakeTensor({2, 7, 6}));
  r.set_trans_b(true);
  ExpectError(DecodeGemm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"b.shape[2]: k mismatch: op(a) has k=5, op(b) has k=6"});
}

TEST(CodecTest, GemmBatchMismatch) {
  ExpectError(
      DecodeGemm(Gemm(MakeTensor({3, 4, 5}), MakeTensor({2, 5, 6})), kMax),
      absl::StatusCode::kInvalidArgument,
      {"b.shape[0]: batch mismatch", "has batch 2"});
}

TEST(CodecTest, GemmBroadcastsRank2Operand) {
  v1::GemmRequest r = Gemm(MakeTensor({4, 5}), MakeTensor({3, 5, 6}));
  *r.mutable_c() = MakeTensor({4, 6});
  absl::StatusOr<DecodedRequest> d = DecodeGemm(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<GemmProblem>(d->problem);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.stride_a, 0);
  EXPECT_EQ(p.stride_b, 30);
  EXPECT_EQ(p.stride_c, 0);
  EXPECT_TRUE(p.has_c);
  EXPECT_EQ(p.beta, 1.0f);  // the default with c
  EXPECT_THAT(d->output_shapes[0], ElementsAre(3, 4, 6));
  EXPECT_THAT(d->sizes.inputs,
              ElementsAre(4 * 5 * 4, 3 * 5 * 6 * 4, 4 * 6 * 4));
}

TEST(CodecTest, GemmBetaWithoutC) {
  v1::GemmRequest r = Gemm(MakeTensor({4, 5}), MakeTensor({5, 6}));
  r.set_beta(0.5f);
  ExpectError(DecodeGemm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"beta:", "requires c"});
  r.set_beta(0.0f);  // an explicit zero is fine
  EXPECT_TRUE(DecodeGemm(r, kMax).ok());
}

TEST(CodecTest, GemmDTypeMismatch) {
  ExpectError(DecodeGemm(Gemm(MakeTensor({4, 5}),
                              MakeTensor({5, 6}, v1::DATA_TYPE_FLOAT16)),
                         kMax),
              absl::StatusCode::kInvalidArgument,
              {"b.dtype: must match a.dtype (float32), got float16"});
}

TEST(CodecTest, GemmCShapeMismatch) {
  v1::GemmRequest r = Gemm(MakeTensor({4, 5}), MakeTensor({5, 6}));
  *r.mutable_c() = MakeTensor({4, 7});
  ExpectError(DecodeGemm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"c.shape: must be [m,n] = [4,6]", "got [4,7]"});
}

TEST(CodecTest, GemmOutputAboveMaxTensorBytes) {
  // Inputs of 4 KiB each, an output of 4 MiB.
  ExpectError(
      DecodeGemm(Gemm(MakeTensor({1024, 1}), MakeTensor({1, 1024})), 1 << 20),
      absl::StatusCode::kResourceExhausted, {"d:", "4194304", "1048576"});
}

// ---- ConvertLayout.

v1::ConvertLayoutRequest Layout(v1::Tensor input) {
  v1::ConvertLayoutRequest r;
  *r.mutable_input() = std::move(input);
  return r;
}

TEST(CodecTest, NchwToNhwc) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({2, 3, 4, 5}));
  r.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
  r.mutable_layouts()->set_to(v1::LAYOUT_NHWC);
  absl::StatusOr<DecodedRequest> d = DecodeConvertLayout(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<PermuteProblem>(d->problem);
  EXPECT_EQ(p.kind, LayoutKind::kNchwToNhwc);
  EXPECT_THAT(p.perm, ElementsAre(0, 2, 3, 1));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(2, 4, 5, 3));
}

TEST(CodecTest, NhwcToNchw) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({2, 4, 5, 3}));
  r.mutable_layouts()->set_from(v1::LAYOUT_NHWC);
  r.mutable_layouts()->set_to(v1::LAYOUT_NCHW);
  absl::StatusOr<DecodedRequest> d = DecodeConvertLayout(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<PermuteProblem>(d->problem);
  EXPECT_EQ(p.kind, LayoutKind::kNhwcToNchw);
  EXPECT_THAT(p.perm, ElementsAre(0, 3, 1, 2));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(2, 3, 4, 5));
}

TEST(CodecTest, NamedLayoutErrors) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({2, 3, 4, 5}));
  r.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
  ExpectError(
      DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
      {"layouts.to: must be LAYOUT_NCHW or LAYOUT_NHWC", "LAYOUT_UNSPECIFIED"});
  r.mutable_layouts()->set_to(v1::LAYOUT_NCHW);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"layouts.to: must differ from layouts.from"});
  v1::ConvertLayoutRequest rank3 = Layout(MakeTensor({2, 3, 4}));
  rank3.mutable_layouts()->set_from(v1::LAYOUT_NCHW);
  rank3.mutable_layouts()->set_to(v1::LAYOUT_NHWC);
  ExpectError(DecodeConvertLayout(rank3, kMax),
              absl::StatusCode::kInvalidArgument,
              {"input.shape: rank must be 4, got 3"});
}

TEST(CodecTest, ConversionRequired) {
  ExpectError(DecodeConvertLayout(Layout(MakeTensor({2, 3})), kMax),
              absl::StatusCode::kInvalidArgument, {"conversion:"});
}

TEST(CodecTest, Permutation) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({2, 3, 4}));
  for (int p : {2, 0, 1}) r.mutable_permutation()->add_perm(p);
  absl::StatusOr<DecodedRequest> d = DecodeConvertLayout(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<PermuteProblem>(d->problem);
  EXPECT_EQ(p.kind, LayoutKind::kPermute);
  EXPECT_THAT(p.in_shape, ElementsAre(2, 3, 4));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(4, 2, 3));
}

TEST(CodecTest, PermutationErrors) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({2, 3, 4}));
  r.mutable_permutation()->add_perm(0);
  r.mutable_permutation()->add_perm(1);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"permutation.perm: has 2 entries", "rank 3"});
  r.mutable_permutation()->add_perm(3);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"permutation.perm[2]: 3 is out of range [0, 3)"});
  r.mutable_permutation()->set_perm(2, -1);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"permutation.perm[2]: -1 is out of range"});
  r.mutable_permutation()->set_perm(2, 0);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"permutation.perm[2]: 0 appears twice"});
}

TEST(CodecTest, PermutationRankAboveMax) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({1, 1, 1, 1, 1, 1, 2}));
  for (int p = 0; p < 7; ++p) r.mutable_permutation()->add_perm(p);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"input.shape: rank must be between 1 and 6, got 7"});
}

TEST(CodecTest, AosSoa) {
  v1::ConvertLayoutRequest r = Layout(MakeTensor({10, 3}));
  r.mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_AOS_TO_SOA);
  r.mutable_aos_soa()->set_fields(3);
  absl::StatusOr<DecodedRequest> d = DecodeConvertLayout(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(std::get<PermuteProblem>(d->problem).kind, LayoutKind::kAosToSoa);
  EXPECT_THAT(d->output_shapes[0], ElementsAre(3, 10));

  r.mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_SOA_TO_AOS);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"aos_soa.fields: 3 does not match input.shape[0] = 10"});
  r.mutable_aos_soa()->set_fields(0);
  d = DecodeConvertLayout(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(std::get<PermuteProblem>(d->problem).kind, LayoutKind::kSoaToAos);

  r.mutable_aos_soa()->set_direction(v1::AosSoa::DIRECTION_UNSPECIFIED);
  ExpectError(DecodeConvertLayout(r, kMax), absl::StatusCode::kInvalidArgument,
              {"aos_soa.direction"});
}

// ---- GeluLayerNorm.

v1::GeluLayerNormRequest GeluLn(std::initializer_list<int64_t> x_shape) {
  v1::GeluLayerNormRequest r;
  *r.mutable_x() = MakeTensor(x_shape);
  return r;
}

TEST(CodecTest, GeluLayerNormFull) {
  v1::GeluLayerNormRequest r = GeluLn({2, 3, 8});
  *r.mutable_bias() = MakeTensor({8});
  *r.mutable_residual() = MakeTensor({2, 3, 8});
  *r.mutable_gamma() = MakeTensor({8});
  *r.mutable_beta() = MakeTensor({8});
  r.set_approximation(v1::GELU_APPROXIMATION_TANH);
  r.set_return_pre_norm(true);
  absl::StatusOr<DecodedRequest> d = DecodeGeluLayerNorm(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<GeluLnProblem>(d->problem);
  EXPECT_EQ(p.rows, 6);
  EXPECT_EQ(p.hidden, 8);
  EXPECT_TRUE(p.has_bias && p.has_residual && p.has_gamma && p.has_beta);
  EXPECT_EQ(p.approx, GeluApprox::kTanh);
  EXPECT_EQ(p.eps, 1e-5f);
  EXPECT_THAT(d->operands.inputs,
              ElementsAre(r.x().raw().data(), r.bias().raw().data(),
                          r.residual().raw().data(), r.gamma().raw().data(),
                          r.beta().raw().data()));
  EXPECT_THAT(d->output_shapes[0], ElementsAre(2, 3, 8));
  EXPECT_THAT(d->output_shapes[1], ElementsAre(2, 3, 8));
  EXPECT_THAT(d->sizes.outputs, ElementsAre(6 * 8 * 4, 6 * 8 * 4));
}

TEST(CodecTest, GeluLayerNormMinimal) {
  absl::StatusOr<DecodedRequest> d = DecodeGeluLayerNorm(GeluLn({5}), kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& p = std::get<GeluLnProblem>(d->problem);
  EXPECT_EQ(p.rows, 1);
  EXPECT_EQ(p.hidden, 5);
  EXPECT_THAT(d->operands.inputs, ElementsAre(testing::NotNull(), nullptr,
                                              nullptr, nullptr, nullptr));
  EXPECT_TRUE(d->output_shapes[1].empty());
  EXPECT_THAT(d->sizes.outputs, ElementsAre(20, 0));
}

TEST(CodecTest, GeluLayerNormVectorLengths) {
  v1::GeluLayerNormRequest r = GeluLn({4, 768});
  *r.mutable_gamma() = MakeTensor({767});
  ExpectError(
      DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
      {"gamma.shape: must be [768] to match x's last dimension, got [767]"});
  r.clear_gamma();
  *r.mutable_beta() = MakeTensor({1, 768});
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"beta.shape: must be [768]", "got [1,768]"});
  r.clear_beta();
  *r.mutable_bias() = MakeTensor({769});
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"bias.shape: must be [768]"});
}

TEST(CodecTest, GeluLayerNormResidualAndDTypes) {
  v1::GeluLayerNormRequest r = GeluLn({4, 8});
  *r.mutable_residual() = MakeTensor({8, 4});
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"residual.shape: must be [4,8] to match x, got [8,4]"});
  r.clear_residual();
  *r.mutable_gamma() = MakeTensor({8}, v1::DATA_TYPE_FLOAT16);
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"gamma.dtype: must match x.dtype"});
}

TEST(CodecTest, GeluLayerNormEpsilon) {
  v1::GeluLayerNormRequest r = GeluLn({4, 8});
  r.set_epsilon(0.0f);
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"epsilon: must be finite and > 0"});
  r.set_epsilon(std::numeric_limits<float>::quiet_NaN());
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"epsilon:"});
  r.set_epsilon(1e-6f);
  absl::StatusOr<DecodedRequest> d = DecodeGeluLayerNorm(r, kMax);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(std::get<GeluLnProblem>(d->problem).eps, 1e-6f);
}

TEST(CodecTest, GeluLayerNormUnknownApproximation) {
  v1::GeluLayerNormRequest r = GeluLn({4, 8});
  r.set_approximation(static_cast<v1::GeluApproximation>(9));
  ExpectError(DecodeGeluLayerNorm(r, kMax), absl::StatusCode::kInvalidArgument,
              {"approximation: unknown value 9"});
}

}  // namespace
}  // namespace coalesce
