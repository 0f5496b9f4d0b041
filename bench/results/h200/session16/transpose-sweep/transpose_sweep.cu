// Transpose-shape sweep, back to back: which float32 tiled transpose shape is
// fastest at the [8,512,28,28] layouts ([8,512,784] <-> [8,784,512]), next
// to the best copies of the same bytes (copy configs 2 and 5's shapes)?
// Standalone (nvcc only), an experiment of the sixteenth session, timed as
// coalesce-bench times back to back (a chain of launches captured into one
// CUDA graph, the second of two replays timed, buffers rotated past the L2).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o transpose_sweep transpose_sweep.cu
//   ./transpose_sweep 3 > sweep.tsv
//
// Swept: tile rows TR (32, 64, 128) x 32 columns, 16-byte loads and stores
// (vec16's scheme: 8 lanes per 128-byte row segment, a 4-row gather from a
// [TR][33] shared tile, conflict-free); threads per block (128..1024, at
// most one vector each per tile); one tile per block, or persistent blocks
// (1-8 per SM) looping over tiles; plain launch, early start (pdl), or
// early start with the block's first tile prefetched into the L2 (pdl+pf);
// default or streaming (st.global.cs) stores. Every shape's output is
// compared with a reference transpose on the device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(x)                                                       \
  do {                                                                 \
    cudaError_t e_ = (x);                                              \
    if (e_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s (line %d)\n", #x,                   \
                   cudaGetErrorString(e_), __LINE__);                  \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

enum Launch { kPlain = 0, kPdl = 1, kPdlPrefetch = 2 };
constexpr int TC = 32;

template <bool kCs>
__device__ __forceinline__ void Store(uint4* p, uint4 v) {
  if constexpr (kCs) {
    __stcs(p, v);
  } else {
    __stwb(p, v);
  }
}

template <int TR, bool kPersistent, int kLaunch, bool kCs>
__global__ void Transpose(const uint32_t* __restrict__ in,
                          uint32_t* __restrict__ out, int64_t rows,
                          int64_t cols, int64_t tiles_r, int64_t tiles_c,
                          int64_t num_tiles) {
  __shared__ uint32_t w[TR][TC + 1];
  constexpr int kVectors = TR * TC / 4;
  auto tile_origin = [&](int64_t t, const uint32_t*& src, uint32_t*& dst,
                         int64_t& r0, int64_t& c0) {
    const int64_t tc = t % tiles_c;
    const int64_t tr = (t / tiles_c) % tiles_r;
    const int64_t b = t / (tiles_c * tiles_r);
    src = in + b * rows * cols;
    dst = out + b * rows * cols;
    r0 = tr * TR;
    c0 = tc * TC;
  };
  if constexpr (kLaunch != kPlain) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if constexpr (kLaunch == kPdlPrefetch) {
      if (blockIdx.x < num_tiles) {
        const uint32_t* src;
        uint32_t* dst;
        int64_t r0, c0;
        tile_origin(blockIdx.x, src, dst, r0, c0);
        for (int v = threadIdx.x; v < kVectors; v += blockDim.x) {
          const int row = v / (TC / 4), c4 = v % (TC / 4);
          if (c4 == 0 && r0 + row < rows && c0 < cols) {
            // The row's 128 bytes, which straddle two lines where a row is
            // not a whole number of lines (784 columns).
            const uint32_t* p = src + (r0 + row) * cols + c0;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
            if (c0 + TC <= cols) {
              asm volatile("prefetch.global.L2 [%0];" ::"l"(p + TC - 1));
            }
          }
        }
      }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const uint32_t* src;
    uint32_t* dst;
    int64_t r0, c0;
    tile_origin(t, src, dst, r0, c0);
    for (int v = threadIdx.x; v < kVectors; v += blockDim.x) {
      const int row = v / (TC / 4), c4 = v % (TC / 4);
      if (r0 + row < rows && c0 + 4 * c4 < cols) {
        const uint4 x = *reinterpret_cast<const uint4*>(
            src + (r0 + row) * cols + c0 + 4 * c4);
        w[row][4 * c4 + 0] = x.x;
        w[row][4 * c4 + 1] = x.y;
        w[row][4 * c4 + 2] = x.z;
        w[row][4 * c4 + 3] = x.w;
      }
    }
    __syncthreads();
    for (int v = threadIdx.x; v < kVectors; v += blockDim.x) {
      const int g = v / 8, within = v % 8;
      const int oc = g % TC, r4 = (g / TC) * 8 + within;
      if (c0 + oc < cols && r0 + 4 * r4 < rows) {
        uint4 x;
        x.x = w[4 * r4 + 0][oc];
        x.y = w[4 * r4 + 1][oc];
        x.z = w[4 * r4 + 2][oc];
        x.w = w[4 * r4 + 3][oc];
        Store<kCs>(reinterpret_cast<uint4*>(dst + (c0 + oc) * rows + r0 +
                                            4 * r4),
                   x);
      }
    }
    if constexpr (!kPersistent) break;
    __syncthreads();
  }
}

// The copy shapes of copy configs 2 and 5 (kernels/cuda/device_util.cu).
template <int V, int kPf, bool kCs>
__global__ void Copy(const uint4* __restrict__ in, uint4* __restrict__ out,
                     int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (threadIdx.x % 8 == 0) {
#pragma unroll
    for (int u = 0; u < kPf; ++u) {
      if (first + u * stride < n) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(in + first + u * stride));
      }
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int64_t i = first; i < n; i += stride * V) {
    uint4 v[V];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      if (i + u * stride < n) v[u] = in[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < V; ++u) {
      if (i + u * stride < n) {
        if constexpr (kCs) {
          __stcs(out + i + u * stride, v[u]);
        } else {
          out[i + u * stride] = v[u];
        }
      }
    }
  }
}

__global__ void Reference(const uint32_t* in, uint32_t* out, int64_t batch,
                          int64_t rows, int64_t cols) {
  const int64_t n = batch * rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
    out[b * rows * cols + c * rows + r] = in[i];
  }
}

__global__ void Fill(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = x | 1u;
  }
}

__global__ void Compare(const uint32_t* a, const uint32_t* b, int64_t n,
                        int* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (a[i] != b[i]) atomicOr(bad, 1);
  }
}

using TFn = void (*)(const uint32_t*, uint32_t*, int64_t, int64_t, int64_t,
                     int64_t, int64_t);
struct Config {
  int tr, threads, bps, launch;  // bps 0: one tile per block
  bool cs;
  TFn fn;
};

template <int TR, bool P, int L, bool CS>
void Add(std::vector<Config>& out) {
  for (int threads : {128, 256, 512, 1024}) {
    if (threads > TR * TC / 4) continue;
    if (!P) {
      out.push_back({TR, threads, 0, L, CS, Transpose<TR, P, L, CS>});
    } else {
      for (int bps : {1, 2, 4, 8}) {
        if (threads * bps <= 2048) {
          out.push_back({TR, threads, bps, L, CS, Transpose<TR, P, L, CS>});
        }
      }
    }
  }
}

template <int TR>
void AddTile(std::vector<Config>& out) {
  Add<TR, false, kPlain, false>(out);
  Add<TR, false, kPdl, false>(out);
  Add<TR, false, kPdlPrefetch, false>(out);
  Add<TR, false, kPdlPrefetch, true>(out);
  Add<TR, true, kPdl, false>(out);
  Add<TR, true, kPdlPrefetch, false>(out);
  Add<TR, true, kPdlPrefetch, true>(out);
}

int g_sms = 0;

void LaunchT(const Config& c, const void* in, void* out, int64_t batch,
             int64_t rows, int64_t cols, cudaStream_t s) {
  const int64_t tiles_r = (rows + c.tr - 1) / c.tr;
  const int64_t tiles_c = (cols + TC - 1) / TC;
  const int64_t num_tiles = batch * tiles_r * tiles_c;
  const int64_t grid =
      c.bps == 0 ? num_tiles : std::min<int64_t>(num_tiles, g_sms * c.bps);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(c.threads);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = c.launch == kPlain ? 0 : 1;
  CHECK(cudaLaunchKernelEx(&cfg, c.fn, static_cast<const uint32_t*>(in),
                           static_cast<uint32_t*>(out), rows, cols, tiles_r,
                           tiles_c, num_tiles));
}

template <typename F>
double TimeChain(F launch, int chain, cudaStream_t s, cudaEvent_t a,
                 cudaEvent_t b) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < chain; ++k) launch(k);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
  return ms * 1e-3 / chain;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const int chain = 64;
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<Config> configs;
  AddTile<32>(configs);
  AddTile<64>(configs);
  AddTile<128>(configs);

  // The start-up peak, as copy_sweep.cu measures it (the server's way).
  const int64_t big = int64_t{1} << 30;
  void *pa, *pb;
  CHECK(cudaMalloc(&pa, big));
  CHECK(cudaMalloc(&pb, big));
  CHECK(cudaMemset(pa, 0x3c, big));
  auto big_copy = [&]() {
    Copy<4, 0, false><<<g_sms * 8, 256, 0, s>>>(
        static_cast<const uint4*>(pa), static_cast<uint4*>(pb), big / 16);
  };
  for (int i = 0; i < 400; ++i) big_copy();
  std::vector<float> ms;
  for (int r = 0; r < 10; ++r) {
    CHECK(cudaEventRecord(a, s));
    big_copy();
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double peak = 2.0 * big / (ms[5] * 1e-3);
  CHECK(cudaFree(pa));
  CHECK(cudaFree(pb));
  std::printf("# %s, %d SMs, start-up peak %.1f GB/s, %zu shapes, chain %d, "
              "best of %d rounds\n",
              prop.name, g_sms, peak / 1e9, configs.size(), chain, rounds);
  std::printf("shape\tkind\ttile_rows\tthreads\tgrid\tlaunch\tstore\tus\tx_peak\n");
  const char* launches[] = {"plain", "pdl", "pdl+pf"};
  struct Case {
    const char* name;
    int64_t batch, rows, cols;
  } cases[] = {{"8x512x784", 8, 512, 784}, {"8x784x512", 8, 784, 512}};
  int failures = 0;
  for (const Case& k : cases) {
    const int64_t n = k.batch * k.rows * k.cols, bytes = n * 4;
    const int sets = static_cast<int>(std::clamp<int64_t>(
        (4 * int64_t{prop.l2CacheSize} + 2 * bytes - 1) / (2 * bytes), 2,
        chain));
    std::vector<void*> in(sets), out(sets);
    for (int i = 0; i < sets; ++i) {
      CHECK(cudaMalloc(&in[i], bytes));
      CHECK(cudaMalloc(&out[i], bytes));
      Fill<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(in[i]), n, i * 77 + 5);
    }
    uint32_t* want;
    CHECK(cudaMalloc(&want, bytes));
    Reference<<<1024, 256, 0, s>>>(static_cast<const uint32_t*>(in[0]), want,
                                   k.batch, k.rows, k.cols);
    int* bad;
    CHECK(cudaMallocManaged(&bad, sizeof(int)));
    auto best_of = [&](auto launch) {
      double best = 1e9;
      for (int r = 0; r < rounds; ++r) {
        best = std::min(best, TimeChain(launch, chain, s, a, b));
      }
      return best;
    };
    // The copies: config 2's shape and config 5's.
    {
      const double t2 = best_of([&](int i) {
        Copy<4, 4, false><<<g_sms * 8, 256, 0, s>>>(
            static_cast<const uint4*>(in[i % sets]),
            static_cast<uint4*>(out[i % sets]), bytes / 16);
      });
      std::printf("%s\tcopy\tconfig2\t256\t%d\tplain\tst\t%.3f\t%.4f\n", k.name,
                  g_sms * 8, t2 * 1e6, 2.0 * bytes / t2 / peak);
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      const double t5 = best_of([&](int i) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(g_sms * 4);
        cfg.blockDim = dim3(1024);
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, Copy<1, 16, true>,
                                 static_cast<const uint4*>(in[i % sets]),
                                 static_cast<uint4*>(out[i % sets]),
                                 bytes / 16));
      });
      std::printf("%s\tcopy\tconfig5\t1024\t%d\tpdl+pf\tcs\t%.3f\t%.4f\n",
                  k.name, g_sms * 4, t5 * 1e6, 2.0 * bytes / t5 / peak);
    }
    for (const Config& c : configs) {
      cudaFuncAttributes fa;
      CHECK(cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(c.fn)));
      if (fa.maxThreadsPerBlock < c.threads) continue;
      for (int i = 0; i < sets; ++i) {
        CHECK(cudaMemsetAsync(out[i], 0xff, bytes, s));
      }
      const double t = best_of([&](int i) {
        LaunchT(c, in[i % sets], out[i % sets], k.batch, k.rows, k.cols, s);
      });
      *bad = 0;
      CHECK(cudaStreamSynchronize(s));
      Compare<<<1024, 256, 0, s>>>(want, static_cast<uint32_t*>(out[0]), n,
                                   bad);
      CHECK(cudaStreamSynchronize(s));
      if (*bad) ++failures;
      char grid[32];
      if (c.bps == 0) {
        std::snprintf(grid, sizeof grid, "tile/block");
      } else {
        std::snprintf(grid, sizeof grid, "%d/SM", c.bps);
      }
      std::printf("%s\ttranspose\t%d\t%d\t%s\t%s\t%s\t%.3f\t%.4f%s\n", k.name,
                  c.tr, c.threads, grid, launches[c.launch],
                  c.cs ? "cs" : "wb", t * 1e6, 2.0 * bytes / t / peak,
                  *bad ? "\tWRONG" : "");
    }
    std::fprintf(stderr, "%s: %d shapes wrong so far\n", k.name, failures);
    for (int i = 0; i < sets; ++i) {
      CHECK(cudaFree(in[i]));
      CHECK(cudaFree(out[i]));
    }
    CHECK(cudaFree(want));
    CHECK(cudaFree(bad));
  }
  return failures == 0 ? 0 : 2;
}
