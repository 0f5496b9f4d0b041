// Request decoding for every RPC of coalesce.v1.TensorOps: the input's first
// byte picks the RPC, the rest is that RPC's request message in protobuf
// wire form. A request that parses goes through what the server decodes it
// with (the codec's Decode* functions, UploadFraming for PutTensor's first
// message, the stores for handles and shared-memory registrations), with a
// 1 MiB max_tensor_bytes so that no input allocates much, and against a
// DataPlane in host memory that holds a few stored tensors and
// shared-memory regions for the requests to name.
//
// Checked beyond not crashing, for a decoded op: every input pointer lies
// within the request's own bytes, a stored tensor (marked resident) or a
// registered region; every operand within max_tensor_bytes; shared-memory
// outputs inside their region and aliasing nothing; the ExplainSelection
// form (shape_only) accepts whatever execution accepts, as the same
// problem. For an error: one of the codes the codec documents, and a
// message of bounded length whatever the request holds.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coalesce/v1/tensor_ops.pb.h"
#include "fuzz/fuzz_check.h"
#include "kernels/core/problem.h"
#include "server/frontend/native/codec.h"
#include "server/frontend/native/upload_framing.h"
#include "server/store/shared_memory.h"
#include "server/store/tensor_store.h"

namespace coalesce {
namespace {

constexpr int64_t kMaxTensorBytes = int64_t{1} << 20;
// Far below gRPC's 8 KiB of trailing metadata, and above any message that
// echoes client strings through Quoted() and shapes of rank <= kMaxRank.
constexpr size_t kMaxMessageBytes = 1024;
constexpr char kOwner[] = "fuzz-client";
// GetTensor's chunk sizes: the service's default, and the most that fits a
// 4 MiB message beside the tensor's description.
constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;
constexpr int64_t kMaxChunkBytes = (int64_t{4} << 20) - 4096;

// The order of the service's RPCs in tensor_ops.proto.
enum class Rpc {
  kTranspose,
  kGemm,
  kConvertLayout,
  kGeluLayerNorm,
  kGetServerInfo,
  kExplainSelection,
  kEcho,
  kPutTensor,
  kGetTensor,
  kDeleteTensor,
  kListTensors,
  kRegisterSharedMemory,
  kUnregisterSharedMemory,
  kListSharedMemory,
  kCount,
};

class HostMemory final : public TensorMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    return std::shared_ptr<void>(new char[bytes](),
                                 std::default_delete<char[]>());
  }
  absl::Status CopyIn(void* dst, int64_t size, int64_t offset, const void* src,
                      int64_t bytes) override {
    if (offset < 0 || bytes < 0 || bytes > size - offset) {
      return absl::OutOfRangeError("outside the allocation");
    }
    std::memcpy(static_cast<char*>(dst) + offset, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyOut(const void* src, int64_t size, int64_t offset, void* dst,
                       int64_t bytes) override {
    if (offset < 0 || bytes < 0 || bytes > size - offset) {
      return absl::OutOfRangeError("outside the allocation");
    }
    std::memcpy(dst, static_cast<const char*>(src) + offset, bytes);
    return absl::OkStatus();
  }
};

// [data, data + size): memory an operand may point into.
struct Range {
  const char* data = nullptr;
  int64_t size = 0;

  bool Holds(const void* p, int64_t n) const {
    const char* c = static_cast<const char*>(p);
    return c >= data && n <= size && c - data <= size - n;
  }
};

bool Overlap(const void* a, int64_t na, const void* b, int64_t nb) {
  if (a == nullptr || b == nullptr || na <= 0 || nb <= 0) return false;
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + nb && y < x + na;
}

// The shared-memory object behind the fixture's regions, unlinked when the
// process exits.
std::string& ObjectKey() {
  static std::string* key =
      new std::string(absl::StrCat("/coalesce-fuzz-decode-", getpid()));
  return *key;
}

void UnlinkObject() { shm_unlink(ObjectKey().c_str()); }

// What every input decodes against: stored tensors of each dtype and
// overlapping shared-memory regions, all owned by kOwner. Built once.
class Fixture {
 public:
  static Fixture& Get() {
    static Fixture* fixture = new Fixture();
    return *fixture;
  }

  DataPlane plane() {
    DataPlane p;
    p.tensors = &tensors_;
    p.shared_memory = &regions_;
    p.owner = kOwner;
    return p;
  }
  TensorStore& tensors() { return tensors_; }
  const std::vector<Range>& stored() const { return stored_; }
  const std::vector<std::string>& handles() const { return handles_; }
  const std::vector<Range>& mapped() const { return mapped_; }

 private:
  Fixture() : tensors_(StoreOptions(), &memory_), regions_(RegionOptions()) {
    struct Stored {
      const char* handle;
      DType dtype;
      Shape shape;
    };
    const Stored stored[] = {
        {"f32", DType::kFloat32, {4, 8}},
        {"f32-3d", DType::kFloat32, {2, 3, 4}},
        {"f32-vec", DType::kFloat32, {8}},
        {"f16", DType::kFloat16, {8, 4}},
        {"bf16", DType::kBFloat16, {2, 2, 2, 2}},
    };
    for (const Stored& s : stored) {
      const int64_t bytes = NumElements(s.shape) * ElementSize(s.dtype);
      absl::StatusOr<std::shared_ptr<StoredTensor>> t =
          tensors_.Create(kOwner, s.handle, s.dtype, s.shape, bytes);
      FUZZ_CHECK(t.ok(), t.status().ToString());
      FUZZ_CHECK(tensors_.Commit(kOwner, (*t)->handle).ok(), s.handle);
      stored_.push_back({static_cast<const char*>((*t)->data.get()), bytes});
      handles_.push_back((*t)->handle);
    }

    const int fd =
        shm_open(ObjectKey().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    FUZZ_CHECK(fd >= 0, "shm_open ", ObjectKey(), ": ", std::strerror(errno));
    std::atexit(UnlinkObject);
    FUZZ_CHECK(ftruncate(fd, 8192) == 0, std::strerror(errno));
    close(fd);
    struct Region {
      const char* name;
      uint64_t offset;
      uint64_t byte_size;
    };
    // r2 lies inside r0: an output in one may alias an input in the other.
    for (const Region& r : {Region{"r0", 0, 4096}, Region{"r1", 4096, 4096},
                            Region{"r2", 64, 256}}) {
      const absl::Status s = regions_.Register(kOwner, r.name, ObjectKey(),
                                               r.offset, r.byte_size, getuid());
      FUZZ_CHECK(s.ok(), s.ToString());
      absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> found =
          regions_.Find(kOwner, r.name);
      FUZZ_CHECK(found.ok(), found.status().ToString());
      mapped_.push_back(
          {(*found)->data(), static_cast<int64_t>((*found)->byte_size())});
    }
  }

  static TensorStoreOptions StoreOptions() {
    TensorStoreOptions o;
    o.quota_bytes = kMaxTensorBytes;
    o.cap_bytes = kMaxTensorBytes;
    o.ttl = absl::InfiniteDuration();
    o.upload_idle_timeout = absl::InfiniteDuration();
    return o;
  }
  static SharedMemoryOptions RegionOptions() {
    SharedMemoryOptions o;
    o.allow = true;
    o.key_prefix = "/coalesce-fuzz-decode";
    return o;
  }

  HostMemory memory_;
  TensorStore tensors_;
  SharedMemoryRegistry regions_;
  std::vector<Range> stored_;
  std::vector<std::string> handles_;
  std::vector<Range> mapped_;
};

void CheckError(const absl::Status& status) {
  FUZZ_CHECK(!status.ok(), "not an error");
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      break;
    default:
      FUZZ_CHECK(false, "unexpected code: ", status.ToString());
  }
  FUZZ_CHECK(status.message().size() <= kMaxMessageBytes,
             status.message().size(),
             "-byte message: ", status.message().substr(0, 200), "...");
}

// The tensors of each request, whose raw bytes inline inputs point into.
std::vector<const v1::Tensor*> TensorsOf(const v1::TransposeRequest& r) {
  return {&r.input()};
}
std::vector<const v1::Tensor*> TensorsOf(const v1::GemmRequest& r) {
  return {&r.a(), &r.b(), &r.c()};
}
std::vector<const v1::Tensor*> TensorsOf(const v1::ConvertLayoutRequest& r) {
  return {&r.input()};
}
std::vector<const v1::Tensor*> TensorsOf(const v1::GeluLayerNormRequest& r) {
  return {&r.x(), &r.bias(), &r.residual(), &r.gamma(), &r.beta()};
}

// The invariants of a decoded op (see the top of the file).
template <typename Request>
void CheckDecoded(const Request& request, const DecodedRequest& d,
                  bool shape_only) {
  Fixture& f = Fixture::Get();
  const Operands& ops = d.operands;
  const size_t inputs = ops.inputs.size();
  const size_t outputs = ops.outputs.size();
  FUZZ_CHECK(d.sizes.inputs.size() == inputs &&
                 d.sizes.outputs.size() == outputs &&
                 d.output_targets.size() == outputs &&
                 d.output_shapes.size() == outputs,
             "operand counts");
  FUZZ_CHECK(ops.input_spaces.size() == inputs, "input spaces");
  std::vector<Range> raw;
  for (const v1::Tensor* t : TensorsOf(request)) {
    if (t->data_case() == v1::Tensor::kRaw) {
      raw.push_back({t->raw().data(), static_cast<int64_t>(t->raw().size())});
    }
  }
  const auto within = [](const std::vector<Range>& ranges, const void* p,
                         int64_t n) {
    for (const Range& r : ranges) {
      if (r.Holds(p, n)) return true;
    }
    return false;
  };
  for (size_t i = 0; i < inputs; ++i) {
    const int64_t n = d.sizes.inputs[i];
    FUZZ_CHECK(n >= 0 && n <= kMaxTensorBytes, "input ", i, ": ", n, " bytes");
    const void* p = ops.inputs[i];
    if (p == nullptr) {
      FUZZ_CHECK(shape_only || n == 0, "input ", i, " of ", n,
                 " bytes has no data");
      continue;
    }
    if (ops.input_spaces[i] == MemorySpace::kResident) {
      FUZZ_CHECK(within(f.stored(), p, n), "resident input ", i,
                 " is not inside a stored tensor");
    } else {
      FUZZ_CHECK(within(raw, p, n) || within(f.mapped(), p, n), "input ", i,
                 " of ", n, " bytes lies outside the request and regions");
    }
  }
  for (size_t i = 0; i < outputs; ++i) {
    const int64_t n = d.sizes.outputs[i];
    FUZZ_CHECK(n >= 0 && n <= kMaxTensorBytes, "output ", i, ": ", n, " bytes");
    const Shape& shape = d.output_shapes[i];
    FUZZ_CHECK(n == (shape.empty() ? 0
                                   : NumElements(shape) *
                                         static_cast<int64_t>(
                                             ElementSize(DTypeOf(d.problem)))),
               "output ", i, " shape vs ", n, " bytes");
    const OutputTarget& target = d.output_targets[i];
    const bool mapped =
        !shape_only && target.placement == v1::OUTPUT_PLACEMENT_SHARED_MEMORY;
    if (!mapped) {
      FUZZ_CHECK(ops.outputs[i] == nullptr, "output ", i, " has memory");
      continue;
    }
    FUZZ_CHECK(within(f.mapped(), ops.outputs[i], n), "output ", i, " of ", n,
               " bytes is not inside a region");
    FUZZ_CHECK(target.shared_memory.byte_size() == static_cast<uint64_t>(n),
               "output ", i, " reports ", target.shared_memory.byte_size(),
               " bytes");
    for (size_t j = 0; j < inputs; ++j) {
      FUZZ_CHECK(!Overlap(ops.outputs[i], n, ops.inputs[j], d.sizes.inputs[j]),
                 "output ", i, " aliases input ", j);
    }
    for (size_t j = 0; j < i; ++j) {
      FUZZ_CHECK(
          !Overlap(ops.outputs[i], n, ops.outputs[j], d.sizes.outputs[j]),
          "output ", i, " aliases output ", j);
    }
  }
}

// The codec's decoder of each op's request.
auto DecoderOf(const v1::TransposeRequest&) { return DecodeTranspose; }
auto DecoderOf(const v1::GemmRequest&) { return DecodeGemm; }
auto DecoderOf(const v1::ConvertLayoutRequest&) { return DecodeConvertLayout; }
auto DecoderOf(const v1::GeluLayerNormRequest&) { return DecodeGeluLayerNorm; }

template <typename Request>
void DecodeOp(const Request& request) {
  const auto decode = DecoderOf(request);
  const DataPlane plane = Fixture::Get().plane();
  const absl::StatusOr<DecodedRequest> run =
      decode(request, kMaxTensorBytes, /*shape_only=*/false, plane);
  const absl::StatusOr<DecodedRequest> explain =
      decode(request, kMaxTensorBytes, /*shape_only=*/true, plane);
  if (explain.ok()) {
    CheckDecoded(request, *explain, /*shape_only=*/true);
  } else {
    CheckError(explain.status());
  }
  if (!run.ok()) {
    CheckError(run.status());
    return;
  }
  CheckDecoded(request, *run, /*shape_only=*/false);
  FUZZ_CHECK(explain.ok(),
             "executable but not explainable: ", explain.status().ToString());
  FUZZ_CHECK(Describe(run->problem) == Describe(explain->problem),
             Describe(run->problem), " vs ", Describe(explain->problem));
}

// ExplainSelection decodes its op shape_only, as the service does.
template <typename Request>
void ExplainOne(const Request& request) {
  const absl::StatusOr<DecodedRequest> d = DecoderOf(request)(
      request, kMaxTensorBytes, /*shape_only=*/true, Fixture::Get().plane());
  if (d.ok()) {
    CheckDecoded(request, *d, /*shape_only=*/true);
  } else {
    CheckError(d.status());
  }
}

void DecodeExplain(const v1::ExplainSelectionRequest& r) {
  switch (r.request_case()) {
    case v1::ExplainSelectionRequest::kTranspose:
      return ExplainOne(r.transpose());
    case v1::ExplainSelectionRequest::kGemm:
      return ExplainOne(r.gemm());
    case v1::ExplainSelectionRequest::kConvertLayout:
      return ExplainOne(r.convert_layout());
    case v1::ExplainSelectionRequest::kGeluLayerNorm:
      return ExplainOne(r.gelu_layer_norm());
    case v1::ExplainSelectionRequest::REQUEST_NOT_SET:
      return;
  }
}

void DecodePut(const v1::PutTensorRequest& first) {
  UploadFraming framing;
  const absl::StatusOr<TensorHeader> h = framing.Start(first);
  if (first.part_case() != v1::PutTensorRequest::kHeader) {
    FUZZ_CHECK(h.status().code() == absl::StatusCode::kInvalidArgument,
               h.status().ToString());
    return;
  }
  if (!h.ok()) {
    CheckError(h.status());
    return;
  }
  FUZZ_CHECK(
      h->shape.size() == static_cast<size_t>(first.header().shape_size()),
      "rank");
  int64_t elements = 1;
  for (int i = 0; i < first.header().shape_size(); ++i) {
    FUZZ_CHECK(h->shape[i] == first.header().shape(i) && h->shape[i] >= 1,
               "dimension ", i);
    FUZZ_CHECK(!__builtin_mul_overflow(elements, h->shape[i], &elements),
               "overflow");
  }
  FUZZ_CHECK(h->bytes == elements * static_cast<int64_t>(ElementSize(h->dtype)),
             h->bytes, " bytes for ", elements, " elements");
}

// A handle resolves only to the tensor stored under it.
void FindHandle(const std::string& handle) {
  Fixture& f = Fixture::Get();
  absl::StatusOr<std::shared_ptr<const StoredTensor>> t =
      f.tensors().Find(kOwner, handle);
  bool known = false;
  for (const std::string& h : f.handles()) known |= h == handle;
  FUZZ_CHECK(t.ok() == known, "handle ", handle, ": ", t.status().ToString());
  if (t.ok()) FUZZ_CHECK((*t)->handle == handle, "found ", (*t)->handle);
}

void DecodeGet(const v1::GetTensorRequest& r) {
  const absl::StatusOr<int64_t> chunk =
      DecodeChunkBytes(r.chunk_bytes(), kDefaultChunkBytes, kMaxChunkBytes);
  if (chunk.ok()) {
    FUZZ_CHECK(*chunk >= 1 && *chunk <= kMaxChunkBytes, "chunk of ", *chunk);
  } else {
    CheckError(chunk.status());
  }
  FindHandle(r.handle());
}

// Registration against a registry of its own, so that inputs stay
// independent: the fixture's object is the only one under the prefix.
void Register(const v1::RegisterSharedMemoryRequest& r) {
  SharedMemoryOptions o;
  o.allow = true;
  o.key_prefix = "/coalesce-fuzz-decode";
  SharedMemoryRegistry registry(o);
  const absl::Status s = registry.Register(kOwner, r.name(), r.key(),
                                           r.offset(), r.byte_size(), getuid());
  if (!s.ok()) {
    FUZZ_CHECK(s.message().size() <= kMaxMessageBytes, s.message().size(),
               "-byte message");
    return;
  }
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> found =
      registry.Find(kOwner, r.name());
  FUZZ_CHECK(found.ok(), found.status().ToString());
  FUZZ_CHECK((*found)->offset() == r.offset() &&
                 (*found)->byte_size() == r.byte_size(),
             "registered range");
  FUZZ_CHECK((*found)->CheckAlive().ok(), "fresh region not alive");
  FUZZ_CHECK(registry.Unregister(kOwner, r.name()).ok(), "unregister");
}

void Unregister(const v1::UnregisterSharedMemoryRequest& r) {
  SharedMemoryRegistry empty;
  FUZZ_CHECK(
      empty.Unregister(kOwner, r.name()).code() == absl::StatusCode::kNotFound,
      "unregistered a region never registered");
}

// Parses input as a Request and hands it to check when it parses.
template <typename Request, typename Check>
void IfParses(absl::string_view input, Check check) {
  Request r;
  if (r.ParseFromArray(input.data(), static_cast<int>(input.size()))) {
    check(r);
  }
}

void DecodeRpc(Rpc rpc, absl::string_view in) {
  switch (rpc) {
    case Rpc::kTranspose:
      return IfParses<v1::TransposeRequest>(in, DecodeOp<v1::TransposeRequest>);
    case Rpc::kGemm:
      return IfParses<v1::GemmRequest>(in, DecodeOp<v1::GemmRequest>);
    case Rpc::kConvertLayout:
      return IfParses<v1::ConvertLayoutRequest>(
          in, DecodeOp<v1::ConvertLayoutRequest>);
    case Rpc::kGeluLayerNorm:
      return IfParses<v1::GeluLayerNormRequest>(
          in, DecodeOp<v1::GeluLayerNormRequest>);
    case Rpc::kExplainSelection:
      return IfParses<v1::ExplainSelectionRequest>(in, DecodeExplain);
    case Rpc::kPutTensor:
      return IfParses<v1::PutTensorRequest>(in, DecodePut);
    case Rpc::kGetTensor:
      return IfParses<v1::GetTensorRequest>(in, DecodeGet);
    case Rpc::kDeleteTensor:
      // Looked up, not deleted: the fixture serves every input alike.
      return IfParses<v1::DeleteTensorRequest>(in, [](const auto& r) {
        FindHandle(r.handle());
        for (const std::string& h : r.handles()) FindHandle(h);
      });
    case Rpc::kRegisterSharedMemory:
      return IfParses<v1::RegisterSharedMemoryRequest>(in, Register);
    case Rpc::kUnregisterSharedMemory:
      return IfParses<v1::UnregisterSharedMemoryRequest>(in, Unregister);
    case Rpc::kEcho:
      // The payload goes back as it came: nothing to decode.
      return IfParses<v1::EchoRequest>(in, [](const auto&) {});
    case Rpc::kGetServerInfo:
    case Rpc::kListTensors:
    case Rpc::kListSharedMemory:
    case Rpc::kCount:
      // Empty requests: unknown fields are all they can carry.
      return IfParses<v1::ListTensorsRequest>(in, [](const auto&) {});
  }
}

void FuzzOne(absl::string_view input) {
  if (input.empty()) return;
  Fixture::Get();
  DecodeRpc(static_cast<Rpc>(static_cast<uint8_t>(input[0]) %
                             static_cast<int>(Rpc::kCount)),
            input.substr(1));
}

}  // namespace
}  // namespace coalesce

COALESCE_FUZZ_TARGET(coalesce::FuzzOne)
