// coalesce-kernel-gap: what a kernel boundary costs back to back on this GPU,
// the part of a small case's time that no kernel can move at the copy peak.
//
//   coalesce-kernel-gap [--json=PATH] [--chain=64] [--rounds=5]
//
// Everything is timed as coalesce-bench times back to back: a chain of
// launches captured into one CUDA graph between two events, the graph
// replayed twice and the second replay timed, buffers rotated so that the
// chain does not find its data in the L2. Measured, in order:
//   peak      the start-up copy peak (MeasureCopyBandwidth, as the server)
//   empty     a kernel on copy config 3's grid that does nothing, launched
//             plainly and with the early start: the boundary with no bytes
//   copy      LaunchCopy, every config, over sizes from 1 MiB to 256 MiB
//             each way: per size the best time, its fraction of the peak and
//             its excess over the bytes at the peak rate; a least-squares
//             line through the sizes up to 64 MiB (intercept, marginal rate)
//   timeline  the empty kernel and copy config 3, stamped (global timer per
//             block): per boundary, from the previous kernel's last block
//             exit to this kernel's first block entry (negative: it started
//             early), to its first block released from the wait, and from
//             that release to its own last block exit (the data phase)
//   submit    one request as a server lane submits it, one after another:
//             pinned staging to device, a copy kernel, device to staging,
//             then a host wait; wall time per request and host time to
//             submit, for plain stream calls (without timed events, with
//             two around the kernel, with four) against a CUDA graph of the
//             same work,
//             replayed as is and re-captured with new buffers each time
//             (cudaGraphExecUpdate), at 1 KiB and 64 KiB each way; and a
//             pipelined request's calls (the launch gate closed, the kernel
//             between two events on device operands, the gate opened),
//             the same without the gate, and as one graph replayed.
//             --submit_pause_us adds a pause before each request, spent
//             asleep (as a server thread waits for the next request) and
//             spinning (the CPU kept awake): what a lone client's requests,
//             a round trip apart, find
// --parts picks among empty, copy and submit (the peak is always measured).
// A progress line goes to stderr per measurement; the table goes to stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/device_util.h"

ABSL_FLAG(std::string, json, "", "write the results as JSON to this path");
ABSL_FLAG(int, chain, 64, "launches per captured chain");
ABSL_FLAG(int, rounds, 5, "chains timed per measurement (median reported)");
ABSL_FLAG(std::vector<std::string>, parts,
          std::vector<std::string>({"empty", "copy", "submit"}),
          "what to measure: empty, copy, submit");
ABSL_FLAG(int, requests, 2000, "requests timed per submit measurement");
ABSL_FLAG(std::vector<std::string>, submit_pause_us,
          std::vector<std::string>({"0"}),
          "pauses before each submitted request, microseconds; each pause "
          "above 0 is measured asleep and spinning");

namespace coalesce {
namespace {

using cuda::CudaStatus;

constexpr int64_t kMiB = 1 << 20;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What enqueue puts on stream, captured as a graph (the caller destroys it).
absl::StatusOr<cudaGraph_t> Capture(cudaStream_t stream,
                                    absl::FunctionRef<absl::Status()> enqueue) {
  cudaGraph_t graph = nullptr;
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status st = enqueue();
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  COALESCE_RETURN_IF_ERROR(st);
  COALESCE_CUDA_RETURN_IF_ERROR(end);
  return graph;
}

// Device memory freed on every exit path.
struct DeviceMemory {
  std::vector<void*> blocks;
  ~DeviceMemory() {
    for (void* p : blocks) cudaFree(p);
  }
  absl::StatusOr<void*> Alloc(int64_t bytes) {
    void* p = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    blocks.push_back(p);
    return p;
  }
};

class Prober {
 public:
  static absl::StatusOr<Prober> Create() {
    Prober p;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
    cudaDeviceProp prop{};
    COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
    p.name_ = prop.name;
    p.l2_bytes_ = prop.l2CacheSize;
    p.memory_bytes_ = static_cast<int64_t>(prop.totalGlobalMem);
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&p.stream_, cudaStreamNonBlocking));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&p.start_));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&p.stop_));
    COALESCE_ASSIGN_OR_RETURN(p.blocks_, cuda::StampedBlocks());
    return p;
  }

  const std::string& name() const { return name_; }
  int64_t l2_bytes() const { return l2_bytes_; }
  int64_t memory_bytes() const { return memory_bytes_; }
  int blocks() const { return blocks_; }
  cudaStream_t stream() const { return stream_; }

  // Seconds per launch of chain launches of launch(k), k = 0..chain-1,
  // captured as one graph: the second of two replays, timed with events.
  absl::StatusOr<double> TimeChain(
      int chain, absl::FunctionRef<absl::Status(int k)> launch) {
    COALESCE_ASSIGN_OR_RETURN(
        cudaGraphExec_t exec,
        cuda::CaptureGraph(stream_, cudaStreamCaptureModeThreadLocal,
                           [&]() -> absl::Status {
                             for (int k = 0; k < chain; ++k) {
                               COALESCE_RETURN_IF_ERROR(launch(k));
                             }
                             return absl::OkStatus();
                           }));
    absl::Status st = CudaStatus(cudaGraphLaunch(exec, stream_),
                                 "cudaGraphLaunch", __FILE__, __LINE__);
    if (st.ok())
      st = CudaStatus(cudaEventRecord(start_, stream_), "record", __FILE__,
                      __LINE__);
    if (st.ok())
      st = CudaStatus(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch",
                      __FILE__, __LINE__);
    if (st.ok())
      st = CudaStatus(cudaEventRecord(stop_, stream_), "record", __FILE__,
                      __LINE__);
    if (st.ok())
      st = CudaStatus(cudaEventSynchronize(stop_), "cudaEventSynchronize",
                      __FILE__, __LINE__);
    cudaGraphExecDestroy(exec);
    COALESCE_RETURN_IF_ERROR(st);
    float ms = 0;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3 / chain;
  }

 private:
  std::string name_;
  int64_t l2_bytes_ = 0;
  int64_t memory_bytes_ = 0;
  int blocks_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Buffer pairs a chain rotates over for copies of bytes each way: enough
// that the chain touches twice the L2 before it comes back to a pair, at
// most chain.
int RotationSets(int64_t bytes, int64_t l2_bytes, int chain) {
  const int64_t sets = (4 * l2_bytes + 2 * bytes - 1) / (2 * bytes);
  return static_cast<int>(std::clamp<int64_t>(sets, 2, chain));
}

// Medians over a chain's boundaries k = 1..chain-1, in microseconds.
struct Timeline {
  double entry_us = 0;    // first block entry after the previous last exit
  double release_us = 0;  // first block released after the previous last exit
  double data_us = 0;     // from that release to the kernel's last block exit
  double period_us = 0;   // last exit to last exit
  double tick_ns = 0;     // the smallest step seen between two readings
};

Timeline ReadTimeline(const std::vector<uint64_t>& stamps, int chain,
                      int blocks) {
  std::vector<double> entry, release, data, period;
  auto span = [&](int k, int field, bool last) {
    uint64_t v = last ? 0 : UINT64_MAX;
    for (int b = 0; b < blocks; ++b) {
      const uint64_t s =
          stamps[(static_cast<size_t>(k) * blocks + b) * cuda::kStampsPerBlock +
                 field];
      v = last ? std::max(v, s) : std::min(v, s);
    }
    return static_cast<double>(v);
  };
  for (int k = 1; k < chain; ++k) {
    const double prev_exit = span(k - 1, 2, true);
    const double first_release = span(k, 1, false);
    entry.push_back((span(k, 0, false) - prev_exit) * 1e-3);
    release.push_back((first_release - prev_exit) * 1e-3);
    data.push_back((span(k, 2, true) - first_release) * 1e-3);
    period.push_back((span(k, 2, true) - prev_exit) * 1e-3);
  }
  std::vector<uint64_t> sorted = stamps;
  std::sort(sorted.begin(), sorted.end());
  uint64_t tick = UINT64_MAX;
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i] > sorted[i - 1])
      tick = std::min(tick, sorted[i] - sorted[i - 1]);
  }
  return {Median(entry), Median(release), Median(data), Median(period),
          tick == UINT64_MAX ? 0 : static_cast<double>(tick)};
}

std::string TimelineJson(const Timeline& t) {
  return absl::StrFormat(
      "\"entry_us\":%.3f,\"release_us\":%.3f,\"data_us\":%.3f,"
      "\"period_us\":%.3f,\"tick_ns\":%.0f",
      t.entry_us, t.release_us, t.data_us, t.period_us, t.tick_ns);
}

// Pinned host memory freed on every exit path.
struct PinnedMemory {
  std::vector<void*> blocks;
  ~PinnedMemory() {
    for (void* p : blocks) cudaFreeHost(p);
  }
  absl::StatusOr<void*> Alloc(int64_t bytes) {
    void* p = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, 0));
    blocks.push_back(p);
    return p;
  }
};

// One request after another as a server lane submits an inline one
// (kernels/cuda/cuda_backend.cc): pinned staging to device, the kernel (a
// copy), device to staging, an event and a host wait on it. Modes: plain
// stream calls without timing events, with timed events around the kernel
// only, and with those and one before the copy in (four timed events in
// all, with the closing one: what the lanes recorded before they timed the
// copies on the host); a CUDA graph of
// the same work (events as nodes) replayed as is, which is the least a
// graph can cost; and re-captured each time over alternating buffers and
// swapped in by cudaGraphExecUpdate, as requests whose buffers change would
// need; and a pipelined request as the lane submits it (the launch gate
// closed, the kernel between two events on device operands, the gate
// opened). Each after each pause of --submit_pause_us, asleep and spinning.
// Returns the JSON member; prints the table.
absl::StatusOr<std::string> MeasureSubmit(const Prober& p) {
  using Clock = std::chrono::steady_clock;
  const int requests = std::max(10, absl::GetFlag(FLAGS_requests));
  const int warmup = std::max(10, requests / 20);
  // (microseconds, asleep): 0 is no pause at all.
  std::vector<std::pair<int, bool>> pauses;
  for (const std::string& text : absl::GetFlag(FLAGS_submit_pause_us)) {
    int us = 0;
    if (!absl::SimpleAtoi(text, &us) || us < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--submit_pause_us: \"", text, "\" is not a whole number >= 0"));
    }
    if (us == 0) {
      pauses.push_back({0, false});
    } else {
      pauses.push_back({us, true});
      pauses.push_back({us, false});
    }
  }
  const auto pause = [](int us, bool asleep) {
    if (us == 0) return;
    const auto d = std::chrono::microseconds(us);
    if (asleep) {
      std::this_thread::sleep_for(d);
      return;
    }
    const Clock::time_point until = Clock::now() + d;
    while (Clock::now() < until) {
    }
  };
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<cuda::LaunchGate> gate,
                            cuda::LaunchGate::Create());
  cudaStream_t stream = p.stream();
  cudaEvent_t ev[4] = {};
  struct Events {
    cudaEvent_t* ev;
    ~Events() {
      for (int i = 0; i < 4; ++i) cudaEventDestroy(ev[i]);
    }
  } events_guard{ev};
  for (cudaEvent_t& e : ev) {
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  }
  absl::PrintF("\n%12s %-30s %-12s %9s %9s\n", "bytes each",
               "one request (median)", "pause", "wall us", "submit us");
  std::vector<std::string> rows;
  for (const int64_t bytes : {int64_t{1024}, int64_t{65536}}) {
    PinnedMemory pinned;
    DeviceMemory device;
    COALESCE_ASSIGN_OR_RETURN(void* hin, pinned.Alloc(bytes));
    COALESCE_ASSIGN_OR_RETURN(void* hout, pinned.Alloc(bytes));
    void* din[2];
    void* dout[2];
    for (int set = 0; set < 2; ++set) {
      COALESCE_ASSIGN_OR_RETURN(din[set], device.Alloc(bytes));
      COALESCE_ASSIGN_OR_RETURN(dout[set], device.Alloc(bytes));
    }
    auto* in_bytes = static_cast<unsigned char*>(hin);
    for (int64_t i = 0; i < bytes; ++i) {
      in_bytes[i] = static_cast<unsigned char>((i * 2654435761u) >> 24);
    }
    // The request's work on the stream; captured, the events become nodes.
    // events: 0 none, 1 around the kernel only, 2 the kernel's and one
    // before the copy in (the lane's earlier four, with ev[3] below).
    const auto enqueue = [&](int set, int events,
                             bool captured) -> absl::Status {
      const auto record = [&](cudaEvent_t e) {
        return captured ? cudaEventRecordWithFlags(e, stream,
                                                   cudaEventRecordExternal)
                        : cudaEventRecord(e, stream);
      };
      if (events >= 2) COALESCE_CUDA_RETURN_IF_ERROR(record(ev[0]));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          din[set], hin, bytes, cudaMemcpyHostToDevice, stream));
      if (events >= 1) COALESCE_CUDA_RETURN_IF_ERROR(record(ev[1]));
      COALESCE_RETURN_IF_ERROR(
          cuda::LaunchCopy(3, din[set], dout[set], bytes, stream));
      if (events >= 1) COALESCE_CUDA_RETURN_IF_ERROR(record(ev[2]));
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          hout, dout[set], bytes, cudaMemcpyDeviceToHost, stream));
      return absl::OkStatus();
    };
    const auto capture = [&](int set) {
      return Capture(stream, [&] { return enqueue(set, 2, true); });
    };
    COALESCE_ASSIGN_OR_RETURN(
        cudaGraphExec_t exec,
        cuda::CaptureGraph(stream, cudaStreamCaptureModeThreadLocal,
                           [&] { return enqueue(0, 2, true); }));
    struct ExecGuard {
      cudaGraphExec_t e;
      ~ExecGuard() { cudaGraphExecDestroy(e); }
    } exec_guard{exec};
    // A pipelined request's kernel between its two events, as one graph:
    // the launch submits all three at once, so no gate is needed for the
    // events to time the kernel alone.
    COALESCE_ASSIGN_OR_RETURN(
        cudaGraphExec_t pipelined_exec,
        cuda::CaptureGraph(
            stream, cudaStreamCaptureModeThreadLocal, [&]() -> absl::Status {
              COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
                  ev[1], stream, cudaEventRecordExternal));
              COALESCE_RETURN_IF_ERROR(
                  cuda::LaunchCopy(3, din[1], dout[1], bytes, stream));
              COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
                  ev[2], stream, cudaEventRecordExternal));
              return absl::OkStatus();
            }));
    ExecGuard pipelined_guard{pipelined_exec};
    // Each mode's output lands in hout, or stays in device_output.
    struct Mode {
      const char* name;
      std::function<absl::Status(int)> submit;
      const void* device_output = nullptr;
    };
    const Mode modes[] = {
        {"stream calls", [&](int) { return enqueue(0, 0, false); }},
        {"stream calls, kernel events",
         [&](int) { return enqueue(0, 1, false); }},
        {"stream calls, lane events",
         [&](int) { return enqueue(0, 2, false); }},
        {"graph replayed",
         [&](int) {
           return CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch",
                             __FILE__, __LINE__);
         }},
        {"graph re-captured, updated",
         [&](int r) -> absl::Status {
           COALESCE_ASSIGN_OR_RETURN(cudaGraph_t graph, capture(r & 1));
           cudaGraphExecUpdateResultInfo info{};
           const cudaError_t up = cudaGraphExecUpdate(exec, graph, &info);
           cudaGraphDestroy(graph);
           COALESCE_CUDA_RETURN_IF_ERROR(up);
           return CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch",
                             __FILE__, __LINE__);
         }},
        {"pipelined, gated",
         [&](int r) -> absl::Status {
           const int set = r & 1;
           COALESCE_RETURN_IF_ERROR(gate->Close(stream));
           COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[1], stream));
           COALESCE_RETURN_IF_ERROR(
               cuda::LaunchCopy(3, din[set], dout[set], bytes, stream));
           COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[2], stream));
           gate->Open();
           return absl::OkStatus();
         },
         dout[1]},
        {"pipelined, ungated",
         [&](int r) -> absl::Status {
           const int set = r & 1;
           COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[1], stream));
           COALESCE_RETURN_IF_ERROR(
               cuda::LaunchCopy(3, din[set], dout[set], bytes, stream));
           COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[2], stream));
           return absl::OkStatus();
         },
         dout[1]},
        {"pipelined, graph replayed",
         [&](int) {
           return CudaStatus(cudaGraphLaunch(pipelined_exec, stream),
                             "cudaGraphLaunch", __FILE__, __LINE__);
         },
         dout[1]},
    };
    // The pipelined mode's input, for its check: both sets hold hin.
    for (int set = 0; set < 2; ++set) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(din[set], hin, bytes, cudaMemcpyHostToDevice));
    }
    for (const auto& [us, asleep] : pauses) {
      const std::string pause_name =
          us == 0 ? "-" : absl::StrCat(asleep ? "sleep " : "spin ", us);
      for (const auto& [name, submit, device_output] : modes) {
        absl::FPrintF(stderr, "[submit] %d bytes each way: %s, pause %s...\n",
                      bytes, name, pause_name);
        std::memset(hout, 0xff, bytes);
        for (int set = 0; set < 2; ++set) {
          COALESCE_CUDA_RETURN_IF_ERROR(cudaMemset(dout[set], 0xff, bytes));
        }
        std::vector<double> wall, host;
        for (int r = 0; r < warmup + requests; ++r) {
          pause(us, asleep);
          const Clock::time_point t0 = Clock::now();
          COALESCE_RETURN_IF_ERROR(submit(r));
          COALESCE_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[3], stream));
          const Clock::time_point t1 = Clock::now();
          COALESCE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ev[3]));
          const Clock::time_point t2 = Clock::now();
          if (r < warmup) continue;
          host.push_back(
              std::chrono::duration<double, std::micro>(t1 - t0).count());
          wall.push_back(
              std::chrono::duration<double, std::micro>(t2 - t0).count());
        }
        if (device_output != nullptr) {
          COALESCE_CUDA_RETURN_IF_ERROR(
              cudaMemcpy(hout, device_output, bytes, cudaMemcpyDeviceToHost));
        }
        if (std::memcmp(hout, hin, bytes) != 0) {
          return absl::InternalError(absl::StrCat(
              name, ": the request's output differs from its input"));
        }
        absl::PrintF("%12d %-30s %-12s %9.2f %9.2f\n", bytes, name, pause_name,
                     Median(wall), Median(host));
        rows.push_back(absl::StrFormat(
            "{\"bytes_each_way\":%d,\"mode\":\"%s\",\"pause_us\":%d,"
            "\"asleep\":%s,\"wall_us\":%.3f,\"submit_us\":%.3f}",
            bytes, name, us, asleep ? "true" : "false", Median(wall),
            Median(host)));
      }
    }
  }
  return absl::StrCat("\"submit\":{\"requests\":", requests, ",\"rows\":[",
                      absl::StrJoin(rows, ","), "]}");
}

absl::Status Run() {
  const int chain = std::max(4, absl::GetFlag(FLAGS_chain));
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  COALESCE_ASSIGN_OR_RETURN(Prober p, Prober::Create());
  std::vector<std::string> json;
  const std::vector<std::string> parts = absl::GetFlag(FLAGS_parts);
  const absl::flat_hash_set<std::string> want(parts.begin(), parts.end());
  absl::FPrintF(stderr, "[peak] copy peak (as at server start-up)...\n");
  const int64_t probe = std::min<int64_t>(1024 * kMiB, p.memory_bytes() / 8);
  COALESCE_ASSIGN_OR_RETURN(const double peak,
                            cuda::MeasureCopyBandwidth(probe, 10, p.stream()));
  absl::PrintF("device %s, %d stamped blocks, L2 %d MB\n", p.name(), p.blocks(),
               p.l2_bytes() / 1000000);
  absl::PrintF("copy peak %.0f GB/s\n\n", peak / 1e9);
  json.push_back(absl::StrFormat(
      "\"device\":\"%s\",\"peak_GBps\":%.2f,\"chain\":%d,\"rounds\":%d,"
      "\"stamped_blocks\":%d",
      p.name(), peak / 1e9, chain, rounds, p.blocks()));

  // Stamps for one chain of stamped launches.
  DeviceMemory mem;
  const int64_t stamp_words =
      static_cast<int64_t>(chain) * p.blocks() * cuda::kStampsPerBlock;
  COALESCE_ASSIGN_OR_RETURN(void* stamps_v,
                            mem.Alloc(stamp_words * sizeof(uint64_t)));
  auto* stamps = static_cast<uint64_t*>(stamps_v);
  auto stamps_of = [&](int k) {
    return stamps +
           static_cast<int64_t>(k) * p.blocks() * cuda::kStampsPerBlock;
  };
  // Times rounds chains of launch; the last chain's stamps are read back.
  auto timed = [&](absl::FunctionRef<absl::Status(int)> launch,
                   Timeline* timeline) -> absl::StatusOr<double> {
    std::vector<double> s;
    for (int r = 0; r < rounds; ++r) {
      COALESCE_ASSIGN_OR_RETURN(double t, p.TimeChain(chain, launch));
      s.push_back(t);
    }
    if (timeline != nullptr) {
      std::vector<uint64_t> host(stamp_words);
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), stamps,
                                               stamp_words * sizeof(uint64_t),
                                               cudaMemcpyDeviceToHost));
      *timeline = ReadTimeline(host, chain, p.blocks());
    }
    return Median(s);
  };

  if (want.contains("empty")) {
    absl::FPrintF(stderr, "[empty] empty kernels...\n");
    absl::PrintF("%-28s %9s %9s %9s %9s %9s %7s\n", "back to back", "us/launch",
                 "entry", "release", "data", "period", "tick");
    std::vector<std::string> empties;
    for (bool early : {false, true}) {
      Timeline tl;
      COALESCE_ASSIGN_OR_RETURN(const double s,
                                timed(
                                    [&](int k) {
                                      return cuda::LaunchStampedEmpty(
                                          early, stamps_of(k), p.stream());
                                    },
                                    &tl));
      const char* what = early ? "empty, early start" : "empty, plain launch";
      absl::PrintF("%-28s %9.3f %9.3f %9.3f %9.3f %9.3f %5.0fns\n", what,
                   s * 1e6, tl.entry_us, tl.release_us, tl.data_us,
                   tl.period_us, tl.tick_ns);
      empties.push_back(absl::StrFormat("{\"early_start\":%s,\"us\":%.3f,%s}",
                                        early ? "true" : "false", s * 1e6,
                                        TimelineJson(tl)));
    }
    json.push_back(
        absl::StrCat("\"empty\":[", absl::StrJoin(empties, ","), "]"));
  }

  if (want.contains("copy")) {
    // Copies: the [8,512,28,28] layouts' sizes among powers of two.
    std::vector<int64_t> sizes;
    for (int64_t s = kMiB; s <= 256 * kMiB; s *= 2) sizes.push_back(s);
    sizes.push_back(8 * 512 * 28 * 28 * 2);
    sizes.push_back(8 * 512 * 28 * 28 * 4);
    std::sort(sizes.begin(), sizes.end());
    absl::PrintF("\n%12s %6s %9s %9s %9s %9s\n", "bytes each", "config",
                 "us/launch", "x peak", "at peak", "excess");
    std::vector<std::string> copies;
    std::vector<double> fit_x, fit_y;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t bytes = sizes[i];
      absl::FPrintF(stderr, "[copy] %zu/%zu: %d bytes each way...\n", i + 1,
                    sizes.size(), bytes);
      const int sets = RotationSets(bytes, p.l2_bytes(), chain);
      DeviceMemory bufs;
      std::vector<void*> in(sets), out(sets);
      for (int s = 0; s < sets; ++s) {
        COALESCE_ASSIGN_OR_RETURN(in[s], bufs.Alloc(bytes));
        COALESCE_ASSIGN_OR_RETURN(out[s], bufs.Alloc(bytes));
        COALESCE_CUDA_RETURN_IF_ERROR(cudaMemset(in[s], 0x3c, bytes));
        COALESCE_CUDA_RETURN_IF_ERROR(cudaMemset(out[s], 0xff, bytes));
      }
      double best = 0;
      int best_config = 0;
      std::vector<std::string> per_config;
      for (int c = 0; c < cuda::kCopyConfigs; ++c) {
        COALESCE_ASSIGN_OR_RETURN(const double s, timed(
                                                      [&](int k) {
                                                        return cuda::LaunchCopy(
                                                            c, in[k % sets],
                                                            out[k % sets],
                                                            bytes, p.stream());
                                                      },
                                                      nullptr));
        per_config.push_back(absl::StrFormat("%.3f", s * 1e6));
        if (best == 0 || s < best) {
          best = s;
          best_config = c;
        }
      }
      const double at_peak = 2.0 * bytes / peak;
      absl::PrintF("%12d %6d %9.3f %9.3f %9.3f %9.3f\n", bytes, best_config,
                   best * 1e6, at_peak / best, at_peak * 1e6,
                   (best - at_peak) * 1e6);
      if (bytes <= 64 * kMiB) {
        fit_x.push_back(2.0 * bytes);
        fit_y.push_back(best);
      }
      std::string entry = absl::StrFormat(
          "{\"bytes_each_way\":%d,\"sets\":%d,\"config_us\":[%s],"
          "\"best_config\":%d,\"us\":%.3f,\"frac_peak\":%.4f,"
          "\"at_peak_us\":%.3f,\"excess_us\":%.3f",
          bytes, sets, absl::StrJoin(per_config, ","), best_config, best * 1e6,
          at_peak / best, at_peak * 1e6, (best - at_peak) * 1e6);
      // The stamped config 3 at the sizes of a small case: where its time goes.
      if (bytes <= 64 * kMiB) {
        Timeline tl;
        COALESCE_ASSIGN_OR_RETURN(const double s,
                                  timed(
                                      [&](int k) {
                                        return cuda::LaunchStampedCopy(
                                            in[k % sets], out[k % sets], bytes,
                                            stamps_of(k), p.stream());
                                      },
                                      &tl));
        absl::StrAppend(&entry, absl::StrFormat(",\"stamped\":{\"us\":%.3f,%s}",
                                                s * 1e6, TimelineJson(tl)));
        absl::PrintF(
            "%12s %6s %9.3f   stamped: entry %.3f, release %.3f, "
            "data %.3f (%.3f x peak), period %.3f us\n",
            "", "3s", s * 1e6, tl.entry_us, tl.release_us, tl.data_us,
            at_peak * 1e6 / tl.data_us, tl.period_us);
      }
      copies.push_back(entry + "}");
    }
    json.push_back(absl::StrCat("\"copy\":[", absl::StrJoin(copies, ","), "]"));

    // t = a + x / rate over the sizes up to 64 MiB each way.
    absl::FPrintF(stderr, "[copy] fit...\n");
    const double n = static_cast<double>(fit_x.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < fit_x.size(); ++i) {
      sx += fit_x[i];
      sy += fit_y[i];
      sxx += fit_x[i] * fit_x[i];
      sxy += fit_x[i] * fit_y[i];
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double intercept = (sy - slope * sx) / n;
    absl::PrintF(
        "\nbest copy, 1-64 MiB each way: t = %.3f us + bytes moved / %.0f GB/s "
        "(%.3f x peak)\n",
        intercept * 1e6, 1e-9 / slope, 1.0 / slope / peak);
    json.push_back(absl::StrFormat(
        "\"fit\":{\"intercept_us\":%.3f,\"rate_GBps\":%.2f,\"rate_frac_peak\":"
        "%.4f}",
        intercept * 1e6, 1e-9 / slope, 1.0 / slope / peak));
  }

  if (want.contains("submit")) {
    COALESCE_ASSIGN_OR_RETURN(std::string submit, MeasureSubmit(p));
    json.push_back(std::move(submit));
  }

  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return absl::InternalError(absl::StrCat("open ", path));
    absl::FPrintF(f, "{%s}\n", absl::StrJoin(json, ","));
    std::fclose(f);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace coalesce

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "What a kernel boundary costs back to back on this GPU (see the file "
      "header of bench/kernel_gap.cc).");
  absl::ParseCommandLine(argc, argv);
  const absl::Status st = coalesce::Run();
  if (!st.ok()) {
    absl::FPrintF(stderr, "coalesce-kernel-gap: %s\n", st.ToString());
    return 1;
  }
  return 0;
}
