#include "client/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/shape.h"
#include "base/status_macros.h"

namespace coalesce {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLength = 6;
// The spec pads the header so that the data is aligned for any dtype; 64
// bytes since NumPy 1.14 (older versions used 16, which readers accept).
constexpr size_t kHeaderAlignment = 64;

// The on-disk element type of each dtype, as the header's descr names it.
struct FileType {
  DType dtype;
  absl::string_view descr;
};
constexpr FileType kFileTypes[] = {
    {DType::kFloat32, "<f4"},
    {DType::kFloat16, "<f2"},
    // NumPy has no bfloat16: its bit patterns travel as '<u2'.
    {DType::kBFloat16, "<u2"},
};

absl::string_view Descr(DType t) {
  for (const FileType& f : kFileTypes) {
    if (f.dtype == t) return f.descr;
  }
  return "";
}

// Element loads and stores through memcpy: .npy data need not be aligned
// inside the buffer it was read into.
float LoadElement(const char* p, DType t) {
  if (t == DType::kFloat32) {
    float f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return t == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

void StoreElement(char* p, DType t, float v) {
  if (t == DType::kFloat32) {
    std::memcpy(p, &v, sizeof(v));
    return;
  }
  const uint16_t bits =
      t == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
  std::memcpy(p, &bits, sizeof(bits));
}

absl::Status HeaderError(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed .npy header: ", what));
}

// A cursor over the header's Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// NumPy writes exactly this form (repr of a dict); the parser accepts any
// whitespace and either quote character but nothing beyond literals.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : rest_(text) {}

  void SkipSpace() {
    while (!rest_.empty() && absl::ascii_isspace(rest_.front())) {
      rest_.remove_prefix(1);
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (rest_.empty() || rest_.front() != c) return false;
    rest_.remove_prefix(1);
    return true;
  }

  bool AtEnd() {
    SkipSpace();
    return rest_.empty();
  }

  absl::StatusOr<std::string> String() {
    SkipSpace();
    if (rest_.empty() || (rest_.front() != '\'' && rest_.front() != '"')) {
      return HeaderError("expected a string literal");
    }
    const char quote = rest_.front();
    const size_t end = rest_.find(quote, 1);
    if (end == absl::string_view::npos) {
      return HeaderError("unterminated string literal");
    }
    std::string s(rest_.substr(1, end - 1));
    rest_.remove_prefix(end + 1);
    return s;
  }

  absl::StatusOr<bool> Bool() {
    SkipSpace();
    for (const bool value : {true, false}) {
      const absl::string_view word = value ? "True" : "False";
      if (absl::StartsWith(rest_, word)) {
        rest_.remove_prefix(word.size());
        return value;
      }
    }
    return HeaderError("expected True or False");
  }

  // A tuple of non-negative integers: (), (5,), (2, 3).
  absl::StatusOr<std::vector<int64_t>> Shape() {
    if (!Consume('(')) return HeaderError("shape must be a tuple");
    std::vector<int64_t> shape;
    while (!Consume(')')) {
      SkipSpace();
      int64_t dim = 0;
      size_t digits = 0;
      while (digits < rest_.size() && absl::ascii_isdigit(rest_[digits])) {
        const int d = rest_[digits] - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - d) / 10) {
          return HeaderError("shape dimension overflows int64");
        }
        dim = dim * 10 + d;
        ++digits;
      }
      if (digits == 0) return HeaderError("shape must hold integers >= 0");
      rest_.remove_prefix(digits);
      shape.push_back(dim);
      if (!Consume(',')) {
        if (!Consume(')')) return HeaderError("unterminated shape tuple");
        break;
      }
    }
    return shape;
  }

 private:
  absl::string_view rest_;
};

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

absl::StatusOr<Header> ParseHeaderDict(absl::string_view text) {
  HeaderParser p(text);
  Header h;
  bool seen_descr = false, seen_fortran = false, seen_shape = false;
  if (!p.Consume('{')) return HeaderError("expected a dict");
  while (!p.Consume('}')) {
    COALESCE_ASSIGN_OR_RETURN(const std::string key, p.String());
    if (!p.Consume(':')) return HeaderError("expected ':' after a key");
    if (key == "descr" && !seen_descr) {
      COALESCE_ASSIGN_OR_RETURN(h.descr, p.String());
      seen_descr = true;
    } else if (key == "fortran_order" && !seen_fortran) {
      COALESCE_ASSIGN_OR_RETURN(h.fortran_order, p.Bool());
      seen_fortran = true;
    } else if (key == "shape" && !seen_shape) {
      COALESCE_ASSIGN_OR_RETURN(h.shape, p.Shape());
      seen_shape = true;
    } else {
      return HeaderError(absl::StrCat("unexpected or repeated key '", key,
                                      "' (descr may not be a structured "
                                      "dtype)"));
    }
    if (!p.Consume(',')) {
      if (!p.Consume('}')) return HeaderError("expected ',' or '}'");
      break;
    }
  }
  if (!p.AtEnd()) return HeaderError("trailing characters after the dict");
  if (!seen_descr || !seen_fortran || !seen_shape) {
    return HeaderError("needs the keys 'descr', 'fortran_order' and 'shape'");
  }
  return h;
}

// The dtype a descr stores.
absl::StatusOr<DType> ParseDescr(absl::string_view descr) {
  for (const FileType& f : kFileTypes) {
    if (descr == f.descr) return f.dtype;
  }
  if (!descr.empty() && descr.front() == '>') {
    return absl::InvalidArgumentError(
        absl::StrCat("big-endian .npy data ('", descr,
                     "') is not supported; save it "
                     "little-endian, e.g. with arr.astype('<f4')"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported .npy dtype '", descr,
                   "'; supported: '<f4' (float32), '<f2' (float16), "
                   "'<u2' (bfloat16 bits)"));
}

std::string ShapeTuple(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array) {
  COALESCE_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(array.shape));
  const size_t element = ElementSize(array.dtype);
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / element ||
      array.bytes.size() != static_cast<size_t>(n) * element) {
    return absl::InvalidArgumentError(
        absl::StrCat("array of shape ", ShapeString(array.shape), " and dtype ",
                     DTypeName(array.dtype), " needs ", n, " elements of ",
                     element, " bytes, has ", array.bytes.size(), " bytes"));
  }
  const std::string dict = absl::StrCat(
      "{'descr': '", Descr(array.dtype),
      "', 'fortran_order': False, 'shape': ", ShapeTuple(array.shape), ", }");
  // Version 1.0 stores the header length in 16 bits, 2.0 in 32.
  int major = 1;
  size_t prefix = kMagicLength + 2 + 2;
  // +1 for the terminating newline.
  auto padded = [&] {
    const size_t unpadded = prefix + dict.size() + 1;
    return (unpadded + kHeaderAlignment - 1) / kHeaderAlignment *
               kHeaderAlignment -
           prefix;
  };
  size_t header_length = padded();
  if (header_length > std::numeric_limits<uint16_t>::max()) {
    major = 2;
    prefix = kMagicLength + 2 + 4;
    header_length = padded();
    if (header_length > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(".npy header too long");
    }
  }
  std::string out;
  out.reserve(prefix + header_length + array.bytes.size());
  out.append(kMagic, kMagicLength);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) {
    out.push_back(static_cast<char>((header_length >> (8 * i)) & 0xff));
  }
  out.append(dict);
  out.append(header_length - dict.size() - 1, ' ');
  out.push_back('\n');
  out.append(array.bytes);
  return out;
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view contents,
                                  std::optional<DType> want) {
  if (contents.size() < kMagicLength + 4 ||
      contents.substr(0, kMagicLength) != absl::string_view(kMagic)) {
    return absl::InvalidArgumentError("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(contents[kMagicLength]);
  const int minor = static_cast<unsigned char>(contents[kMagicLength + 1]);
  if ((major != 1 && major != 2) || minor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported .npy format version ", major, ".", minor,
                     "; supported: 1.0, 2.0"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLength + 2 + length_bytes;
  if (contents.size() < prefix) return HeaderError("truncated");
  uint64_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_length |=
        uint64_t{static_cast<unsigned char>(contents[kMagicLength + 2 + i])}
        << (8 * i);
  }
  if (contents.size() - prefix < header_length) {
    return HeaderError("truncated");
  }
  COALESCE_ASSIGN_OR_RETURN(
      Header header, ParseHeaderDict(contents.substr(prefix, header_length)));
  COALESCE_ASSIGN_OR_RETURN(const DType stored, ParseDescr(header.descr));
  if (header.fortran_order) {
    return absl::InvalidArgumentError(
        "fortran_order=True .npy files are not supported; save a C-order "
        "array, e.g. np.ascontiguousarray(arr)");
  }
  const DType dtype = want.value_or(stored);
  if (stored == DType::kBFloat16 && dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("'<u2' .npy data is read only as bfloat16 bits, not as ",
                     DTypeName(dtype)));
  }
  COALESCE_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(header.shape));
  const absl::string_view data = contents.substr(prefix + header_length);
  const size_t stored_size = ElementSize(stored);
  if (static_cast<uint64_t>(n) >
          std::numeric_limits<size_t>::max() / stored_size ||
      data.size() != static_cast<size_t>(n) * stored_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        ".npy data of shape ", ShapeString(header.shape), " and dtype '",
        header.descr, "' needs ", n, " elements of ", stored_size,
        " bytes, file has ", data.size(), " bytes after the header"));
  }
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(header.shape);
  if (dtype == stored) {
    array.bytes = std::string(data);
    return array;
  }
  const size_t size = ElementSize(dtype);
  array.bytes.resize(static_cast<size_t>(n) * size);
  for (int64_t i = 0; i < n; ++i) {
    StoreElement(&array.bytes[i * size], dtype,
                 LoadElement(data.data() + i * stored_size, stored));
  }
  return array;
}

absl::Status WriteNpy(const std::string& path, const NpyArray& array) {
  COALESCE_ASSIGN_OR_RETURN(const std::string contents, SerializeNpy(array));
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"),
                                          &std::fclose);
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  if (std::fwrite(contents.data(), 1, contents.size(), f.get()) !=
          contents.size() ||
      std::fclose(f.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path,
                                 std::optional<DType> want) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"),
                                          &std::fclose);
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  std::string contents;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0) {
    contents.append(buffer, got);
  }
  if (std::ferror(f.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  absl::StatusOr<NpyArray> array = ParseNpy(contents, want);
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(path, ": ", array.status().message()));
  }
  return array;
}

}  // namespace coalesce
