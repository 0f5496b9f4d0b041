#include "kernels/testing/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/dtype.h"
#include "base/status_macros.h"
#include "kernels/cpu/reference.h"

namespace coalesce {
namespace {

// ---------------------------------------------------------------- problems

std::vector<Problem> TransposeProblems(DType t) {
  // Tile-edge sizes (31, 32, 33, 64 around 32- and 64-element tiles),
  // degenerate rows and columns, long thin matrices and batches.
  const int64_t shapes[][3] = {
      {1, 1, 1},       {1, 1, 7},     {1, 7, 1},    {1, 7, 31},   {1, 31, 7},
      {1, 32, 32},     {1, 33, 33},   {1, 31, 32},  {1, 32, 33},  {1, 33, 64},
      {1, 64, 64},     {1, 64, 1},    {1, 1, 1000}, {1, 1000, 7}, {1, 7, 1000},
      {1, 1000, 1000}, {3, 31, 33},   {3, 64, 65},  {3, 1, 33},   {3, 33, 1},
      {1, 1000, 33},   {3, 200, 300}, {2, 1000, 64}};
  std::vector<Problem> out;
  for (const auto& s : shapes) {
    out.push_back(TransposeProblem{t, s[0], s[1], s[2]});
  }
  return out;
}

std::vector<Problem> GemmProblems(DType t) {
  std::vector<Problem> out;
  out.push_back(Gemm(t, 1, 1, 1, 1, false, false));
  out.push_back(WithC(Gemm(t, 1, 1, 1, 1, false, false), 2.0f, 0.5f));
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      out.push_back(Gemm(t, 1, 7, 13, 5, ta, tb));
      out.push_back(WithC(Gemm(t, 1, 7, 13, 5, ta, tb), 1.5f, -0.75f));
      GemmProblem g = Gemm(t, 1, 33, 31, 64, ta, tb);
      g.alpha = -0.5f;
      out.push_back(g);
      out.push_back(WithC(Gemm(t, 1, 33, 31, 64, ta, tb), 0.75f, 2.0f));
    }
  }
  out.push_back(WithC(Gemm(t, 1, 128, 96, 200, false, false), 1.0f, 1.0f));
  out.push_back(Gemm(t, 1, 128, 96, 200, true, true));
  // Vector-shaped edges: a dot product, an outer product, thin panels.
  out.push_back(Gemm(t, 1, 1, 1, 1000, true, false));
  out.push_back(Gemm(t, 1, 64, 33, 1, false, true));
  out.push_back(WithC(Gemm(t, 1, 64, 1, 33, false, false), -1.0f, 0.25f));
  out.push_back(Gemm(t, 1, 1, 64, 7, true, true));
  // Batches, dense and broadcast (stride 0) per operand.
  out.push_back(WithC(Gemm(t, 3, 33, 31, 64, false, false), 1.25f, -1.5f));
  GemmProblem bcast_a = Gemm(t, 3, 33, 31, 64, false, true);
  bcast_a.stride_a = 0;
  out.push_back(bcast_a);
  GemmProblem bcast_bc = WithC(Gemm(t, 3, 7, 13, 5, true, false), 0.5f, 3.0f);
  bcast_bc.stride_b = 0;
  bcast_bc.stride_c = 0;
  out.push_back(bcast_bc);
  out.push_back(WithC(Gemm(t, 1, 31, 33, 32, true, true), 1.0f, -1.0f));
  if (t == DType::kFloat32) {
    GemmProblem tf32 = WithC(Gemm(t, 1, 33, 31, 64, false, false), 1, 1);
    tf32.allow_tf32 = true;
    out.push_back(tf32);
    // One large case: blocking and threading inside the BLAS / the tiles.
    out.push_back(Gemm(t, 1, 1000, 1000, 1000, false, false));
  }
  return out;
}

Problem Permute(DType t, std::initializer_list<int64_t> shape,
                std::initializer_list<int> perm,
                LayoutKind kind = LayoutKind::kPermute) {
  return PermuteProblem{t, Shape(shape), Perm(perm), kind};
}

std::vector<Problem> LayoutProblems(DType t) {
  std::vector<Problem> out;
  // HW = 24 and 128: whole 16-byte vectors, small_dim's register path for
  // C = 5 and 3, batched; the others its shared-memory path.
  const int64_t nchw[][4] = {
      {2, 3, 5, 7}, {1, 64, 7, 7}, {3, 3, 33, 31}, {2, 5, 4, 6}, {3, 3, 8, 16}};
  for (const auto& s : nchw) {
    out.push_back(Permute(t, {s[0], s[1], s[2], s[3]}, {0, 2, 3, 1},
                          LayoutKind::kNchwToNhwc));
    out.push_back(Permute(t, {s[0], s[2], s[3], s[1]}, {0, 3, 1, 2},
                          LayoutKind::kNhwcToNchw));
  }
  // Generic permutations: transposes, moves that keep the innermost
  // dimension (run copies), identities (rank 1 after collapsing), size-1
  // dimensions, and ranks up to 6 that stay uncollapsed.
  out.push_back(Permute(t, {33, 31}, {1, 0}));
  out.push_back(Permute(t, {1, 7}, {1, 0}));
  out.push_back(Permute(t, {5, 7, 9}, {2, 0, 1}));
  out.push_back(Permute(t, {5, 7, 9}, {1, 0, 2}));
  out.push_back(Permute(t, {5, 7, 9}, {0, 2, 1}));
  out.push_back(Permute(t, {64, 33, 31}, {2, 1, 0}));
  out.push_back(Permute(t, {2, 3, 4, 5}, {3, 2, 1, 0}));
  out.push_back(Permute(t, {2, 3, 4, 5}, {0, 1, 2, 3}));
  out.push_back(Permute(t, {300, 1000}, {0, 1}));
  out.push_back(Permute(t, {3, 2, 100000}, {1, 0, 2}));
  out.push_back(Permute(t, {64, 64, 8, 16}, {1, 0, 2, 3}));
  out.push_back(Permute(t, {8, 16, 32, 64}, {2, 0, 3, 1}));
  out.push_back(Permute(t, {2, 3, 4, 5, 6}, {4, 1, 3, 0, 2}));
  out.push_back(Permute(t, {2, 3, 4, 5, 6}, {0, 2, 1, 3, 4}));
  out.push_back(Permute(t, {2, 1, 3, 2, 4, 3}, {5, 3, 1, 4, 0, 2}));
  out.push_back(Permute(t, {2, 1, 3, 2, 4, 3}, {1, 0, 3, 2, 4, 5}));
  out.push_back(Permute(t, {3, 2, 5, 1, 7, 4}, {2, 4, 0, 5, 3, 1}));
  // Every field count small_dim compiles a register transpose for (2..16),
  // on lengths that take it (1000) and that do not (1, 33).
  for (int64_t fields = 2; fields <= 16; ++fields) {
    for (int64_t n : {1, 33, 1000}) {
      out.push_back(Permute(t, {n, fields}, {1, 0}, LayoutKind::kAosToSoa));
      out.push_back(Permute(t, {fields, n}, {1, 0}, LayoutKind::kSoaToAos));
    }
  }
  out.push_back(Permute(t, {100000, 3}, {1, 0}, LayoutKind::kAosToSoa));
  return out;
}

std::vector<Problem> GeluLnProblems(DType t) {
  const int64_t hiddens[] = {1, 7, 32, 33, 768, 1000, 4096};
  const int64_t rows[] = {1, 2, 5, 16, 33, 65};
  std::vector<Problem> out;
  for (int hi = 0; hi < 7; ++hi) {
    // Every combination of the six flags for every hidden size; the row
    // count cycles so each size sees several.
    for (int c = 0; c < 64; ++c) {
      GeluLnProblem p;
      p.dtype = t;
      p.hidden = hiddens[hi];
      p.rows = rows[(c + hi) % 6];
      p.has_bias = c & 1;
      p.has_residual = c & 2;
      p.has_gamma = c & 4;
      p.has_beta = c & 8;
      p.approx = (c & 16) ? GeluApprox::kTanh : GeluApprox::kExact;
      p.return_pre_norm = c & 32;
      if (p.hidden == 7) p.eps = 1e-3f;
      out.push_back(p);
    }
  }
  return out;
}

// ---------------------------------------------------------------- checking

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0x5a;

// GELU-LN rows with index % 4 == 3 get x near 1000 with a spread of a few
// units: a large mean against a small variance, which E[h^2] - E[h]^2 in
// float32 cancels away entirely (1e6 against ~1).
constexpr int64_t kLargeMeanRowPeriod = 4;
constexpr double kLargeMean = 1000;

// GEMM: |d - ref| <= kGemmBoundConstant * sqrt(k) * u_acc *
// (|alpha| sum |a||b| + |beta||c|) + u_out |ref|; the constant covers the
// product, alpha, beta and the final sum (3 roundings for k = 1).
constexpr double kGemmBoundConstant = 4;
// TF32 rounds each product's inputs to 10 mantissa bits.
constexpr double kTf32UnitRoundoff = 0x1p-11;

// GELU-LN: assert_close-like rtol/atol per output dtype. float32 is looser
// than torch's 1.3e-6 because erf/exp and rsqrt chain several roundings.
struct Tolerance {
  double rtol;
  double atol;
};
Tolerance GeluLnTolerance(DType t) {
  switch (t) {
    case DType::kFloat16:
      return {1e-3, 1e-5};
    case DType::kBFloat16:
      return {1.6e-2, 1e-5};
    case DType::kFloat32:
      break;
  }
  return {1e-5, 1e-5};
}

// Half the smallest subnormal: the absolute rounding error of an output
// that lands in the subnormal range, which u_out * |ref| does not cover.
double HalfMinSubnormal(DType t) {
  switch (t) {
    case DType::kFloat16:
      return 0x1p-25;
    case DType::kBFloat16:
      return 0x1p-134;
    case DType::kFloat32:
      break;
  }
  return 0x1p-150;
}

uint32_t RawBits(const void* data, DType t, int64_t i) {
  if (ElementSize(t) == 4) {
    uint32_t v;
    std::memcpy(&v, static_cast<const char*>(data) + 4 * i, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(data) + 2 * i, 2);
  return v;
}

// The bits of v in t; exact for values that came from a t buffer.
uint32_t EncodeBits(double v, DType t) {
  unsigned char buf[4];
  StoreFromFloat(buf, t, 0, static_cast<float>(v));
  return RawBits(buf, t, 0);
}

struct Buffer {
  std::vector<unsigned char> bytes;  // guard + body + guard for outputs
  size_t offset = 0;
  size_t size = 0;
  unsigned char* body() { return bytes.data() + offset; }
};

// Inputs in operand order, with x's large-mean rows for GELU-LN.
std::vector<Buffer> MakeInputs(const Problem& p, uint64_t seed) {
  const DType t = DTypeOf(p);
  const OperandSizes sizes = OperandBytes(p);
  std::vector<Buffer> in(sizes.inputs.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].size = sizes.inputs[i];
    in[i].bytes.resize(in[i].size);
    const uint64_t operand_seed = SplitMix64(seed * 31 + i);
    FillRandom(in[i].bytes.data(), t, in[i].size / ElementSize(t), operand_seed,
               -2.0f, 2.0f);
  }
  if (const auto* ln = std::get_if<GeluLnProblem>(&p)) {
    // Spread of at least 4 steps of t at 1000 so bfloat16 rows still vary.
    const double spread = std::max(1.0, 4 * 1024 * UnitRoundoff(t));
    const size_t row_bytes = ln->hidden * ElementSize(t);
    for (int64_t r = kLargeMeanRowPeriod - 1; r < ln->rows;
         r += kLargeMeanRowPeriod) {
      FillRandom(in[kLnX].body() + r * row_bytes, t, ln->hidden,
                 SplitMix64(seed ^ r), kLargeMean - spread,
                 kLargeMean + spread);
    }
  }
  return in;
}

// Per-element tolerance of each output; empty for bit-exact outputs.
struct Expected {
  std::vector<std::vector<double>> ref;
  std::vector<std::vector<double>> tol;
};

Expected GemmExpected(const GemmProblem& g, const Operands& in) {
  Expected e;
  e.ref = ReferenceOutputs(g, in);
  // |alpha| sum |a||b| + |beta||c| is the reference GEMM of the absolute
  // values: clear the sign bits of copies of the inputs.
  const OperandSizes sizes = OperandBytes(g);
  std::vector<std::vector<unsigned char>> abs_in(sizes.inputs.size());
  Operands abs_ops;
  const size_t es = ElementSize(g.dtype);
  for (size_t i = 0; i < abs_in.size(); ++i) {
    if (in.inputs[i] == nullptr) {
      abs_ops.inputs.push_back(nullptr);
      continue;
    }
    const auto* src = static_cast<const unsigned char*>(in.inputs[i]);
    abs_in[i].assign(src, src + sizes.inputs[i]);
    for (size_t b = es - 1; b < abs_in[i].size(); b += es) {
      abs_in[i][b] &= 0x7f;  // little-endian: the sign is in the last byte
    }
    abs_ops.inputs.push_back(abs_in[i].data());
  }
  GemmProblem abs_g = g;
  abs_g.alpha = std::fabs(g.alpha);
  abs_g.beta = std::fabs(g.beta);
  const std::vector<double> magnitude = ReferenceOutputs(abs_g, abs_ops)[0];
  const double u_acc = g.allow_tf32 && g.dtype == DType::kFloat32
                           ? kTf32UnitRoundoff
                           : UnitRoundoff(DType::kFloat32);
  const double u_out = UnitRoundoff(g.dtype);
  const double scale =
      kGemmBoundConstant * std::sqrt(static_cast<double>(g.k)) * u_acc;
  std::vector<double> tol(magnitude.size());
  for (size_t i = 0; i < tol.size(); ++i) {
    tol[i] = scale * magnitude[i] + u_out * std::fabs(e.ref[0][i]) +
             HalfMinSubnormal(g.dtype);
  }
  e.tol = {tol};
  return e;
}

Expected GeluLnExpected(const GeluLnProblem& p, const Operands& in) {
  // Always compute h: its row statistics set y's tolerance.
  GeluLnProblem with_h = p;
  with_h.return_pre_norm = true;
  Expected e;
  e.ref = ReferenceOutputs(with_h, in);
  const std::vector<double>& y = e.ref[kLnY];
  const std::vector<double>& h = e.ref[kLnH];
  const Tolerance base = GeluLnTolerance(p.dtype);
  // y = (h - mean) / sigma: an error of u |h| in h or in the mean moves y
  // by u |h| / sigma, so rows with a large mean against their spread are
  // ill-conditioned whatever the algorithm. Float32 reductions over
  // `hidden` terms (tree or sequential) stay within about sqrt(hidden)
  // roundings of |h|; the constant covers h's own few roundings.
  const double u32 = UnitRoundoff(DType::kFloat32);
  const double k_cond = 2 * std::sqrt(static_cast<double>(p.hidden)) + 8;
  std::vector<double> y_tol(y.size()), h_tol(h.size());
  for (int64_t r = 0; r < p.rows; ++r) {
    const double* hr = h.data() + r * p.hidden;
    double mean = 0, max_abs = 0;
    for (int64_t j = 0; j < p.hidden; ++j) {
      mean += hr[j];
      max_abs = std::max(max_abs, std::fabs(hr[j]));
    }
    mean /= p.hidden;
    double var = 0;
    for (int64_t j = 0; j < p.hidden; ++j) {
      var += (hr[j] - mean) * (hr[j] - mean);
    }
    var /= p.hidden;
    const double cond = max_abs / std::sqrt(var + p.eps);
    for (int64_t j = 0; j < p.hidden; ++j) {
      const int64_t i = r * p.hidden + j;
      const double gamma =
          p.has_gamma ? std::fabs(LoadAsFloat(in.inputs[kLnGamma], p.dtype, j))
                      : 1.0;
      y_tol[i] =
          base.atol + base.rtol * std::fabs(y[i]) + k_cond * u32 * cond * gamma;
      h_tol[i] = base.atol + base.rtol * std::fabs(h[i]);
    }
  }
  e.tol = {y_tol, h_tol};
  if (!p.return_pre_norm) {
    e.ref[kLnH].clear();
    e.tol[kLnH].clear();
  }
  return e;
}

Expected ExpectedOutputs(const Problem& p, const Operands& in) {
  if (const auto* g = std::get_if<GemmProblem>(&p)) return GemmExpected(*g, in);
  if (const auto* ln = std::get_if<GeluLnProblem>(&p)) {
    return GeluLnExpected(*ln, in);
  }
  Expected e;
  e.ref = ReferenceOutputs(p, in);
  e.tol.resize(e.ref.size());  // empty: bit-exact
  return e;
}

// Writes the case's raw buffers to $COALESCE_CONFORMANCE_DUMP_DIR; returns
// a note for the status message.
std::string Dump(absl::string_view name, uint64_t seed,
                 const std::vector<Buffer>& in, std::vector<Buffer>& out) {
  const char* dir = std::getenv("COALESCE_CONFORMANCE_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') return "";
  const std::string prefix = absl::StrCat(dir, "/", name, "-seed", seed);
  const auto write = [](const std::string& path, const unsigned char* data,
                        size_t size) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data), size);
  };
  for (size_t i = 0; i < in.size(); ++i) {
    write(absl::StrCat(prefix, "-in", i, ".bin"), in[i].bytes.data(),
          in[i].size);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    write(absl::StrCat(prefix, "-out", i, ".bin"), out[i].body(), out[i].size);
  }
  return absl::StrCat("; raw inputs and outputs in ", prefix, "-*.bin");
}

// out against the references of p on host's inputs: bit-exact for data
// movement, within the op's error bounds for arithmetic.
absl::Status CompareOutputs(const std::string& where, const KernelVariant& v,
                            const Problem& p, uint64_t seed,
                            const Operands& host, std::vector<Buffer>& in,
                            std::vector<Buffer>& out) {
  const DType t = DTypeOf(p);
  const size_t es = ElementSize(t);
  const Expected e = ExpectedOutputs(p, host);
  for (size_t o = 0; o < out.size(); ++o) {
    const std::vector<double>& ref = e.ref[o];
    const std::vector<double>& tol = e.tol[o];
    const void* got = out[o].body();
    const int64_t n = static_cast<int64_t>(out[o].size / es);
    int64_t bad = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const bool ok = tol.empty()
                          ? RawBits(got, t, i) == EncodeBits(ref[i], t)
                          : std::fabs(LoadAsFloat(got, t, i) - ref[i]) <=
                                tol[i];  // false for NaN
      if (!ok && bad++ == 0) first = i;
    }
    if (bad == 0) continue;
    const double g = LoadAsFloat(got, t, first);
    const std::string detail =
        tol.empty() ? absl::StrFormat(
                          "got %.9g (bits 0x%x), expected %.9g (bits "
                          "0x%x), bit-exact required",
                          g, RawBits(got, t, first), ref[first],
                          EncodeBits(ref[first], t))
                    : absl::StrFormat(
                          "got %.9g, expected %.9g, error %.3g, "
                          "tolerance %.3g",
                          g, ref[first], std::fabs(g - ref[first]), tol[first]);
    return absl::InternalError(
        absl::StrCat(where, ": output ", o, ": ", bad, " of ", n,
                     " elements wrong; first at index ", first, ": ", detail,
                     Dump(v.name(), seed, in, out)));
  }
  return absl::OkStatus();
}

}  // namespace

GemmProblem Gemm(DType t, int64_t batch, int64_t m, int64_t n, int64_t k,
                 bool trans_a, bool trans_b) {
  GemmProblem g;
  g.dtype = t;
  g.batch = batch;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  if (batch > 1) {
    g.stride_a = m * k;
    g.stride_b = k * n;
    g.stride_c = m * n;
  }
  return g;
}

GemmProblem WithC(GemmProblem g, float alpha, float beta) {
  g.has_c = true;
  g.alpha = alpha;
  g.beta = beta;
  return g;
}

std::vector<Problem> ConformanceProblems(OpKind op, DType dtype) {
  switch (op) {
    case OpKind::kTranspose:
      return TransposeProblems(dtype);
    case OpKind::kGemm:
      return GemmProblems(dtype);
    case OpKind::kConvertLayout:
      return LayoutProblems(dtype);
    case OpKind::kGeluLayerNorm:
      return GeluLnProblems(dtype);
  }
  return {};
}

void FillRandom(void* data, DType t, int64_t n, uint64_t seed, float lo,
                float hi) {
  const float min_magnitude = std::max(std::fabs(lo), std::fabs(hi)) / 64;
  const uint64_t base = SplitMix64(seed);
  // Counter-based, so the values do not depend on the thread count.
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    uint64_t state = base ^ (static_cast<uint64_t>(i) * 0xd1b54a32d192ed03ull);
    float v;
    do {
      state = SplitMix64(state);
      const float unit = static_cast<float>(state >> 40) * 0x1p-24f;
      v = lo + (hi - lo) * unit;
    } while (std::fabs(v) < min_magnitude);
    StoreFromFloat(data, t, i, v);
  }
}

void Poison(void* data, size_t bytes) { std::memset(data, 0xff, bytes); }

absl::Status CheckVariant(Backend& backend, const KernelVariant& v,
                          const Problem& p, uint64_t seed) {
  const std::string where =
      absl::StrCat(v.name(), " on ", Describe(p), ", seed ", seed);
  if (absl::Status s = v.CanImplement(p, backend.device()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": variant cannot implement it: ", s.message()));
  }
  std::vector<Buffer> in = MakeInputs(p, seed);
  const std::vector<Buffer> in_copy = in;
  const OperandSizes sizes = OperandBytes(p);
  std::vector<Buffer> out(sizes.outputs.size());
  Operands ops;
  for (Buffer& b : in) {
    ops.inputs.push_back(b.size == 0 ? nullptr : b.body());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].size = sizes.outputs[i];
    out[i].offset = kGuardBytes;
    out[i].bytes.assign(out[i].size + 2 * kGuardBytes, kGuardByte);
    Poison(out[i].body(), out[i].size);
    ops.outputs.push_back(out[i].size == 0 ? nullptr : out[i].body());
  }

  RunResult result;
  if (absl::Status s = backend.Execute(v, p, ops, &result); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  }

  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<unsigned char>& bytes = out[i].bytes;
    for (size_t b = 0; b < bytes.size(); ++b) {
      const bool guard = b < kGuardBytes || b >= kGuardBytes + out[i].size;
      if (guard && bytes[b] != kGuardByte) {
        return absl::InternalError(absl::StrCat(
            where, ": wrote outside output ", i, " (guard byte at offset ",
            static_cast<int64_t>(b) - static_cast<int64_t>(kGuardBytes),
            " of a ", out[i].size, "-byte output)",
            Dump(v.name(), seed, in, out)));
      }
    }
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].bytes != in_copy[i].bytes) {
      return absl::InternalError(absl::StrCat(where, ": modified input ", i));
    }
  }

  return CompareOutputs(where, v, p, seed, ops, in, out);
}

absl::Status CheckVariantResident(Backend& backend, const KernelVariant& v,
                                  const Problem& p, uint64_t seed, int runs,
                                  int* graph_replays) {
  const std::string where = absl::StrCat(v.name(), " on ", Describe(p),
                                         " (stored operands), seed ", seed);
  if (absl::Status s = v.CanImplement(p, backend.device()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": variant cannot implement it: ", s.message()));
  }
  std::vector<Buffer> in = MakeInputs(p, seed);
  const OperandSizes sizes = OperandBytes(p);
  std::vector<Buffer> out(sizes.outputs.size());
  // Host operands: the reference's inputs and each run's outputs, read back.
  Operands host;
  // The same operands stored on the device, kept for every run.
  Operands stored;
  std::vector<std::shared_ptr<void>> keep;
  const auto store = [&](int64_t bytes) -> absl::StatusOr<void*> {
    if (bytes == 0) return nullptr;
    COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<void> r,
                              backend.AllocateResident(bytes));
    keep.push_back(r);
    return r.get();
  };
  for (Buffer& b : in) {
    host.inputs.push_back(b.size == 0 ? nullptr : b.body());
    COALESCE_ASSIGN_OR_RETURN(void* r, store(b.size));
    if (r != nullptr) {
      COALESCE_RETURN_IF_ERROR(
          backend.CopyToResident(r, b.size, 0, b.body(), b.size));
    }
    stored.inputs.push_back(r);
    stored.input_spaces.push_back(MemorySpace::kResident);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].size = sizes.outputs[i];
    out[i].bytes.assign(out[i].size, 0);
    host.outputs.push_back(out[i].size == 0 ? nullptr : out[i].body());
    COALESCE_ASSIGN_OR_RETURN(void* r, store(out[i].size));
    stored.outputs.push_back(r);
    stored.output_spaces.push_back(MemorySpace::kResident);
  }
  *graph_replays = 0;
  for (int run = 0; run < runs; ++run) {
    const std::string this_run = absl::StrCat(where, ", run ", run + 1);
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].size == 0) continue;
      Poison(out[i].body(), out[i].size);
      COALESCE_RETURN_IF_ERROR(backend.CopyToResident(
          stored.outputs[i], out[i].size, 0, out[i].body(), out[i].size));
    }
    RunResult result;
    if (absl::Status s = backend.Execute(v, p, stored, &result); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(this_run, ": ", s.message()));
    }
    if (result.graph_replayed) ++*graph_replays;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].size == 0) continue;
      COALESCE_RETURN_IF_ERROR(backend.CopyFromResident(
          stored.outputs[i], out[i].size, 0, out[i].body(), out[i].size));
    }
    COALESCE_RETURN_IF_ERROR(
        CompareOutputs(this_run, v, p, seed, host, in, out));
  }
  return absl::OkStatus();
}

}  // namespace coalesce
