// coalesce-bench service: the end-to-end service benchmark.
//
//   coalesce-bench service --server=HOST:PORT
//       [--op=transpose,gelu-ln,gemm,convert-layout,echo] [--all_operands]
//       [--transport=inline,handle,pipeline,shm] [--bytes=65536,67108864]
//       [--concurrency=16,2] [--shape=R,C] [--duration_s=5 | --count=N]
//       [--warmup_s=0.5] [--metrics=HOST:PORT] [--json=FILE]
//       [--protocol=native,kserve] [--rounds=1] [--floor_bytes=1024]
//
// For every (bytes, concurrency) case (the lists pair up position by
// position when both have several entries, otherwise one is repeated), it
// runs Echo with a payload of the tensor's size first, then every op over
// every transport, each phase for --duration_s (or --count requests) after
// --warmup_s untimed. Each of --concurrency workers owns a connection and
// issues one request at a time.
//
// Transports: inline (tensor bytes in the request and the response), handle
// (the input uploaded once with PutTensor, the output kept on the server;
// the outputs are deleted by a background thread of the worker, 16 or 1 MiB
// of them per DeleteTensor, so the worker's loop holds only the op), pipeline
// (as handle, but each worker also uploads one output tensor and every request
// writes into it through OutputSpec.handle: a closed loop with no housekeeping)
// and shm (a POSIX shared-memory region per worker, registered with the server,
// holds the input and receives the output).
//
// Protocols: native (coalesce.v1) and kserve (KServe v2 ModelInfer on the
// same port, inline only; Echo's counterpart is the identity model): each
// op and transport runs once per protocol, by the same client code, so the
// two protocols' figures differ by the protocol alone. A kserve request
// carries the inputs as raw_input_contents and names its outputs as
// perf_analyzer does (GELU-LN's y and h with --all_operands).
//
// Figures: requests/s, GB/s (input + output tensor bytes per request, the
// payload twice for Echo), latency p50/p90/p99/max of the timed requests,
// errors, and requests/s and GB/s as a ratio to Echo of the same case,
// whose requests/s and p50 are repeated on every row. Before an op phase's
// workers start, one worker sends 5 of its requests with options.report
// and takes the median kernel_seconds (of the warm ones): "kernel us";
// "bound req/s" is 1 / that (one device running those requests back to
// back, nothing else), "busy" is req/s x kernel seconds (the fraction of
// the device the phase kept busy, by that estimate). With --metrics, the
// server's Prometheus endpoint is scraped before and after each timed
// phase: "server busy" is the delta of coalesce_device_kernel_seconds_total
// over the timed seconds (the server's own kernel time, above 1 when runs
// overlap), "mean batch" the delta of coalesce_batch_size_sum over that of
// coalesce_batch_size_count (requests per device launch) and "srv cpu us"
// the delta of process_cpu_seconds_total per timed request (the server's
// CPU time, every thread). "cli cpu us" is this client's own CPU time per
// timed request: with both on one host, their sum times req/s against the
// host's cores says whether the CPUs bound the rate. "-" (JSON null): not
// measured, or the metric is absent.
//
// Rounds: with --rounds=N every case's phases run N times, Echo first in
// odd rounds and last in even ones, so that a host whose speed drifts
// (shared, throttled) moves Echo and the ops alike. A row then gives the
// medians over its rounds (requests and errors summed, max the largest),
// its ratios to Echo the median of each round's ratio to that round's
// Echo, and "rounds xreq/s" lists those ratios round by round.
//
// A second floor: --floor_bytes=B adds Echo of B bytes at the case's
// concurrency to every case of another size (its row comes second), and
// every row of the case carries its requests/s over that Echo's in the
// same round ("xfloor", the median over the rounds; JSON vs_floor, with
// floor_rps, floor_p50_ms and vs_floor_rounds), so that a request that
// carries no tensor bytes can be set against an empty RPC paired round by
// round. In a case of B bytes the floor is the case's own Echo.
#include "bench/service_bench.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"

ABSL_FLAG(std::string, server, "localhost:50051",
          "service mode: the coalesce-server to drive");
ABSL_FLAG(std::string, shm_server, "",
          "service mode: where the shm transport connects: the server's "
          "--unix_socket as unix:PATH (shared memory is registered only "
          "there); empty: --server");
ABSL_FLAG(std::string, op, "transpose",
          "service mode: comma-separated ops (transpose, gelu-ln, gemm, "
          "convert-layout, echo); Echo always runs first as the floor. gemm: "
          "A [R, C] (the --shape) times B [C, R]; convert-layout: NCHW (a "
          "rank-4 --shape) to NHWC; both inline only");
ABSL_FLAG(bool, all_operands, false,
          "service mode: gelu-ln also sends bias, residual, gamma and beta "
          "and asks for h too, gemm also sends C (beta 0), as a KServe v2 "
          "client (perf_analyzer) sends every input and asks for every "
          "output a model lists; inline only");
ABSL_FLAG(std::string, transport, "inline",
          "service mode: comma-separated transports (inline, handle, "
          "pipeline, shm)");
ABSL_FLAG(std::string, bytes, "65536",
          "service mode: comma-separated float32 tensor sizes in bytes");
ABSL_FLAG(std::string, concurrency, "16",
          "service mode: comma-separated concurrent streams");
ABSL_FLAG(double, duration_s, 5, "service mode: timed seconds per phase");
ABSL_FLAG(int64_t, count, 0,
          "service mode: timed requests per phase (overrides --duration_s)");
ABSL_FLAG(double, warmup_s, 0.5, "service mode: untimed seconds per phase");
ABSL_FLAG(std::string, metrics, "",
          "service mode: the server's Prometheus endpoint HOST:PORT, scraped "
          "around each timed phase for server busy and mean batch; empty: "
          "off");
ABSL_FLAG(std::string, protocol, "native",
          "service mode: comma-separated protocols (native: coalesce.v1; "
          "kserve: KServe v2 ModelInfer, inline only, Echo's phase is the "
          "identity model's)");
ABSL_FLAG(int32_t, rounds, 1,
          "service mode: runs of each case's phases, the order reversed "
          "every other round; each row gives the medians over the rounds "
          "and its ratio to Echo the median of the rounds' ratios (3 or "
          "more on a host whose speed drifts)");
ABSL_FLAG(int64_t, floor_bytes, 0,
          "service mode: also run Echo of this many bytes in every case as "
          "a second floor, each row's ratio to it paired round by round "
          "(xfloor); 0: none");
ABSL_FLAG(double, ready_timeout_s, 60,
          "service mode: how long to wait for the server to serve");
ABSL_DECLARE_FLAG(std::string, json);
ABSL_DECLARE_FLAG(std::string, shape);

namespace coalesce {
namespace {

using Clock = std::chrono::steady_clock;

// One worker's means of issuing requests of a phase.
// Deletes a worker's output handles on a thread of its own, so that the
// worker's next request does not wait for a DeleteTensor round trip: the
// delete is the bench's housekeeping, not the op being measured. Handles
// go in batches, one DeleteTensor for up to kBatch of them or kBatchBytes
// of tensors (whichever comes first), as a client that keeps its outputs
// would free them; Push waits while a full batch waits, so the server
// keeps at most two batches of extra outputs per worker. The destructor
// deletes what is left.
class Deleter {
 public:
  explicit Deleter(Client* client) : client_(client) {}
  ~Deleter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // handle: an output of `bytes`.
  void Push(std::string handle, int64_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !Full(); });
    queue_.push_back(std::move(handle));
    queued_bytes_ += bytes;
    // Only a full batch wakes the thread: a wake-up per handle would cost
    // the client a context switch per request.
    if (Full()) cv_.notify_all();
  }

 private:
  static constexpr size_t kBatch = 16;
  static constexpr int64_t kBatchBytes = int64_t{1} << 20;
  bool Full() const {
    return queue_.size() >= kBatch || queued_bytes_ >= kBatchBytes;
  }
  void Run() {
    for (;;) {
      std::vector<std::string> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return done_ || Full(); });
        if (queue_.empty()) return;
        batch.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.end()));
        queue_.clear();
        queued_bytes_ = 0;
      }
      cv_.notify_all();
      client_->DeleteTensors(batch).IgnoreError();
    }
  }
  Client* const client_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> queue_;
  int64_t queued_bytes_ = 0;
  bool done_ = false;
  std::thread thread_{[this] { Run(); }};  // last: starts after the rest
};

struct Worker {
  std::unique_ptr<Client> client;
  // Issues one request; the timed part.
  std::function<absl::Status()> request;
  // Issues the same request with options.report set (ops, not Echo) and
  // returns the report; deletes an output it made (handle transport).
  std::function<absl::StatusOr<v1::KernelReport>()> probe;
  // Runs after each request, untimed (handle transport: queue the output
  // for deletion).
  std::function<void()> after;
  // Frees what setup made (shared memory, handles).
  std::function<void()> cleanup;
  // Handle transport: deletes outputs in the background; destroyed (and
  // drained) before the client.
  std::unique_ptr<Deleter> deleter;
};

struct Phase {
  std::string op;
  std::string transport;
  int64_t tensor_bytes = 0;
  int concurrency = 1;
  std::string protocol = "native";
};

// The transport column: "inline", or "inline-v2" for a KServe v2 phase.
std::string TransportLabel(const Phase& p) {
  return p.protocol == "kserve" ? absl::StrCat(p.transport, "-v2")
                                : p.transport;
}

struct PhaseResult {
  Phase phase;
  int64_t requests = 0;
  int64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double requests_per_second = 0;
  double gbps = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  double rps_vs_echo = 0, gbps_vs_echo = 0;
  // Unknown (not measured, metric absent): empty.
  std::optional<double> kernel_seconds;  // median of the probe's reports
  std::optional<double> echo_rps, echo_p50_ms;
  std::optional<double> server_busy, mean_batch;
  // CPU time per completed request, microseconds: the server's
  // (process_cpu_seconds_total) and this client's own (every thread of it,
  // the workers' included).
  std::optional<double> server_cpu_us, client_cpu_us;
  // --rounds: the rounds the row sums up, and each round's requests/s
  // against that round's Echo (the rounds in which both ran).
  int rounds = 1;
  std::vector<double> round_rps_vs_echo;
  // --floor_bytes: that Echo's requests/s and p50, and the row's
  // requests/s over it, round by round and their median.
  int64_t floor_bytes = 0;
  std::optional<double> floor_rps, floor_p50_ms, rps_vs_floor;
  std::vector<double> round_rps_vs_floor;
};

std::string SizeLabel(int64_t bytes) {
  if (bytes % (int64_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, "MiB");
  }
  if (bytes % 1024 == 0) return absl::StrCat(bytes >> 10, "KiB");
  return absl::StrCat(bytes, "B");
}

// The op's input shape for a float32 tensor of bytes: --shape (rank 2 for
// gemm, 4 for convert-layout), else near-square [R, C] (transpose, gemm),
// [rows, 1024] (gelu-ln) or [N, 16, 32, 32] (convert-layout).
absl::StatusOr<std::vector<int64_t>> ShapeFor(const std::string& op,
                                              int64_t bytes) {
  const std::string flag = absl::GetFlag(FLAGS_shape);
  std::vector<int64_t> shape;
  if (!flag.empty()) {
    int64_t product = 4;
    for (absl::string_view d : absl::StrSplit(flag, ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shape: bad dimension '", d, "'"));
      }
      shape.push_back(v);
      product *= v;
    }
    if (product != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shape=", flag, " is ", product, " bytes of float32, not ", bytes));
    }
    if (op == "gemm" && shape.size() != 2) {
      return absl::InvalidArgumentError("--op=gemm needs a rank-2 --shape");
    }
    if (op == "convert-layout" && shape.size() != 4) {
      return absl::InvalidArgumentError(
          "--op=convert-layout needs a rank-4 (NCHW) --shape");
    }
    return shape;
  }
  if (bytes % 4 != 0 || bytes < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bytes: ", bytes, " is not a float32 tensor size"));
  }
  const int64_t n = bytes / 4;
  if (op == "convert-layout") {
    // [N, 16, 32, 32] NCHW.
    if (n % (16 * 32 * 32) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--bytes: ", bytes,
          " is not a whole number of [16, 32, 32] images; give --shape"));
    }
    return std::vector<int64_t>{n / (16 * 32 * 32), 16, 32, 32};
  }
  if (op == "gelu-ln") {
    int64_t hidden = 1024;
    while (n % hidden != 0) hidden /= 2;
    return std::vector<int64_t>{n / hidden, hidden};
  }
  int64_t rows = 1;
  while (rows * 2 * rows * 2 <= n && n % (rows * 2) == 0) rows *= 2;
  return std::vector<int64_t>{rows, n / rows};
}

std::string RandomBytes(int64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string out(static_cast<size_t>(bytes), '\0');
  for (int64_t i = 0; i + 4 <= bytes; i += 4) {
    const float v = dist(rng);
    std::memcpy(&out[i], &v, 4);
  }
  return out;
}

// A POSIX shared-memory object this process created, mapped.
class ShmObject {
 public:
  static absl::StatusOr<std::unique_ptr<ShmObject>> Create(std::string key,
                                                           int64_t bytes) {
    const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("shm_open ", key, ": ", std::strerror(errno)));
    }
    if (ftruncate(fd, bytes) != 0) {
      close(fd);
      shm_unlink(key.c_str());
      return absl::InternalError(absl::StrCat("ftruncate ", key));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(key.c_str());
      return absl::InternalError(absl::StrCat("mmap ", key));
    }
    return std::unique_ptr<ShmObject>(
        new ShmObject(std::move(key), static_cast<char*>(p), bytes));
  }
  ~ShmObject() {
    munmap(data_, bytes_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }

 private:
  ShmObject(std::string key, char* data, int64_t bytes)
      : key_(std::move(key)), data_(data), bytes_(bytes) {}
  const std::string key_;
  char* const data_;
  const int64_t bytes_;
};

// Sets where an op's output goes for a transport; region/offset for shm,
// output_handle (the tensor to write into) for pipeline.
void PlaceOutput(const std::string& transport, const std::string& region,
                 int64_t offset, int64_t bytes,
                 const std::string& output_handle,
                 v1::ExecutionOptions* options) {
  if (transport == "inline") return;
  v1::OutputSpec* spec = options->add_outputs();
  if (transport == "handle" || transport == "pipeline") {
    spec->set_placement(v1::OUTPUT_PLACEMENT_SERVER_HANDLE);
    spec->set_handle(output_handle);
    return;
  }
  spec->set_placement(v1::OUTPUT_PLACEMENT_SHARED_MEMORY);
  spec->mutable_shared_memory()->set_region(region);
  spec->mutable_shared_memory()->set_offset(offset);
  spec->mutable_shared_memory()->set_byte_size(bytes);
}

// What every op's request closure shares: the worker's client, where the
// last output handle goes, the pipeline check, and whether each request
// makes a new output (the probe deletes its own).
struct RequestChecks {
  Client* client;
  std::shared_ptr<std::string> last_handle;
  std::function<absl::Status(const v1::Tensor&)> check;
  bool new_outputs;
};

// Sets worker's request (call with request) and probe (the same with
// options.report) for an op whose response carries its output at output.
template <typename Request, typename Response>
void SetRequests(const RequestChecks& k, std::shared_ptr<Request> request,
                 absl::StatusOr<Response> (Client::*call)(const Request&),
                 const v1::Tensor& (Response::*output)() const,
                 Worker* worker) {
  auto probe = std::make_shared<Request>(*request);
  probe->mutable_options()->set_report(true);
  worker->request = [k, request, call, output]() -> absl::Status {
    absl::StatusOr<Response> r = (k.client->*call)(*request);
    if (!r.ok()) return r.status();
    *k.last_handle = ((*r).*output)().handle();
    return k.check(((*r).*output)());
  };
  worker->probe = [k, probe, call,
                   output]() -> absl::StatusOr<v1::KernelReport> {
    absl::StatusOr<Response> r = (k.client->*call)(*probe);
    if (!r.ok()) return r.status();
    if (k.new_outputs) {
      k.client->DeleteTensor(((*r).*output)().handle()).IgnoreError();
    }
    return r->report();
  };
}

// Worker w of a --protocol=kserve phase: a connection of its own, one
// ModelInferRequest of the op's model with every input inline, and the
// request closure, which checks that every output asked for came back.
absl::StatusOr<Worker> MakeKserveWorker(const Phase& p, int w) {
  if (p.transport != "inline") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol=kserve runs over the inline transport only, not ",
        p.transport));
  }
  absl::StatusOr<std::vector<int64_t>> shape = ShapeFor(p.op, p.tensor_bytes);
  if (!shape.ok()) return shape.status();
  const bool all_operands = absl::GetFlag(FLAGS_all_operands);
  auto request = std::make_shared<inference::ModelInferRequest>();
  auto add_input = [&](const std::string& name,
                       const std::vector<int64_t>& dims, uint64_t seed) {
    inference::ModelInferRequest::InferInputTensor* in = request->add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    int64_t bytes = 4;
    for (int64_t d : dims) {
      in->add_shape(d);
      bytes *= d;
    }
    request->add_raw_input_contents(RandomBytes(bytes, seed));
  };
  std::vector<std::string> outputs;
  if (p.op == "echo") {
    request->set_model_name("identity");
    add_input("INPUT0", *shape, 1000 + w);
    outputs = {"OUTPUT0"};
  } else if (p.op == "transpose") {
    request->set_model_name("transpose");
    add_input("INPUT0", *shape, 1000 + w);
    outputs = {"OUTPUT0"};
  } else if (p.op == "convert-layout") {
    request->set_model_name("convert_layout");
    add_input("INPUT0", *shape, 1000 + w);
    (*request->mutable_parameters())["layout_from"].set_string_param("NCHW");
    (*request->mutable_parameters())["layout_to"].set_string_param("NHWC");
    outputs = {"OUTPUT0"};
  } else if (p.op == "gelu-ln") {
    request->set_model_name("gelu_layer_norm");
    const int64_t hidden = shape->back();
    add_input("x", *shape, 1000 + w);
    outputs = {"y"};
    if (all_operands) {
      add_input("bias", {hidden}, 3000 + w);
      add_input("residual", *shape, 4000 + w);
      add_input("gamma", {hidden}, 5000 + w);
      add_input("beta", {hidden}, 6000 + w);
      outputs.push_back("h");
    }
  } else if (p.op == "gemm") {
    request->set_model_name("gemm");
    const int64_t rows = (*shape)[0], cols = (*shape)[1];
    add_input("a", *shape, 1000 + w);
    add_input("b", {cols, rows}, 3000 + w);
    if (all_operands) add_input("c", {rows, rows}, 4000 + w);
    outputs = {"d"};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--op: unknown '", p.op,
                     "' (transpose, gelu-ln, gemm, convert-layout or echo)"));
  }
  for (const std::string& name : outputs)
    request->add_outputs()->set_name(name);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A connection of this worker's own, as the native workers have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<inference::GRPCInferenceService::Stub> stub =
      inference::GRPCInferenceService::NewStub(
          grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server),
                                    grpc::InsecureChannelCredentials(), args));
  const std::string client_id =
      absl::StrCat("coalesce-bench-", getpid(), "-", w);
  auto call = [stub, client_id, n = outputs.size()](
                  const inference::ModelInferRequest& r,
                  inference::ModelInferResponse* response) -> absl::Status {
    grpc::ClientContext context;
    context.AddMetadata("x-coalesce-client", client_id);
    const grpc::Status s = stub->ModelInfer(&context, r, response);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          s.error_message());
    }
    if (static_cast<size_t>(response->raw_output_contents_size()) != n) {
      return absl::InternalError(absl::StrCat(
          "ModelInfer answered ", response->raw_output_contents_size(),
          " raw outputs for ", n, " asked"));
    }
    return absl::OkStatus();
  };
  Worker worker;
  worker.request = [call, request] {
    inference::ModelInferResponse response;
    return call(*request, &response);
  };
  if (p.op != "echo") {
    auto probe = std::make_shared<inference::ModelInferRequest>(*request);
    (*probe->mutable_parameters())["report"].set_bool_param(true);
    worker.probe = [call, probe]() -> absl::StatusOr<v1::KernelReport> {
      inference::ModelInferResponse response;
      const absl::Status s = call(*probe, &response);
      if (!s.ok()) return s;
      const auto it = response.parameters().find("report.kernel_seconds");
      if (it == response.parameters().end()) {
        return absl::InternalError("the response has no report.kernel_seconds");
      }
      v1::KernelReport report;
      report.set_kernel_seconds(it->second.double_param());
      return report;
    };
  }
  return worker;
}

// Makes worker w of phase p: its connection, its input placed per the
// transport, and the request closure.
absl::StatusOr<Worker> MakeWorker(const Phase& p, int w) {
  // RunServiceBench admits native and kserve only.
  if (p.protocol == "kserve") return MakeKserveWorker(p, w);
  ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  if (p.transport == "shm" && !absl::GetFlag(FLAGS_shm_server).empty()) {
    options.server = absl::GetFlag(FLAGS_shm_server);
  }
  options.own_connection = true;
  options.client_id = absl::StrCat("coalesce-bench-", getpid(), "-", w);
  Worker worker;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return client.status();
  worker.client = std::move(*client);
  Client* c = worker.client.get();
  const std::string payload = RandomBytes(p.tensor_bytes, 1000 + w);

  if (p.op == "echo") {
    auto request = std::make_shared<v1::EchoRequest>();
    request->set_payload(payload);
    worker.request = [c, request] { return c->Echo(*request).status(); };
    return worker;
  }
  absl::StatusOr<std::vector<int64_t>> shape = ShapeFor(p.op, p.tensor_bytes);
  if (!shape.ok()) return shape.status();

  // Where the input is: a tensor message ready to be copied into requests.
  v1::Tensor input;
  input.set_dtype(v1::DATA_TYPE_FLOAT32);
  input.mutable_shape()->Add(shape->begin(), shape->end());
  std::string region;
  int64_t output_offset = 0;
  std::string output_handle;  // pipeline
  if (p.transport == "inline") {
    input.set_raw(payload);
  } else if (p.transport == "handle" || p.transport == "pipeline") {
    absl::StatusOr<v1::TensorInfo> info =
        c->PutTensor(v1::DATA_TYPE_FLOAT32, *shape, payload);
    if (!info.ok()) return info.status();
    input.set_handle(info->handle());
    const std::string handle = info->handle();
    worker.cleanup = [c, handle] { c->DeleteTensor(handle).IgnoreError(); };
    if (p.transport == "pipeline") {
      // The output's shape: transpose swaps the last two dimensions.
      std::vector<int64_t> out_shape = *shape;
      if (p.op == "transpose" && out_shape.size() >= 2) {
        std::swap(out_shape[out_shape.size() - 2], out_shape.back());
      }
      absl::StatusOr<v1::TensorInfo> out =
          c->PutTensor(v1::DATA_TYPE_FLOAT32, out_shape,
                       RandomBytes(p.tensor_bytes, 2000 + w));
      if (!out.ok()) {
        worker.cleanup();
        return out.status();
      }
      output_handle = out->handle();
      worker.cleanup = [c, handle, output_handle] {
        c->DeleteTensor(handle).IgnoreError();
        c->DeleteTensor(output_handle).IgnoreError();
      };
    }
  } else if (p.transport == "shm") {
    // Input at 0, output after it on a 4 KiB boundary.
    output_offset = (p.tensor_bytes + 4095) / 4096 * 4096;
    region = absl::StrCat("coalesce-bench-", getpid(), "-", w);
    absl::StatusOr<std::unique_ptr<ShmObject>> shm =
        ShmObject::Create("/" + region, output_offset + p.tensor_bytes);
    if (!shm.ok()) return shm.status();
    std::memcpy((*shm)->data(), payload.data(), payload.size());
    absl::Status registered = c->RegisterSharedMemory(
        region, (*shm)->key(), 0, output_offset + p.tensor_bytes);
    if (!registered.ok()) return registered;
    std::shared_ptr<ShmObject> object = std::move(*shm);
    worker.cleanup = [c, region, object] {
      c->UnregisterSharedMemory(region).IgnoreError();
    };
    v1::SharedMemoryRef* ref = input.mutable_shared_memory();
    ref->set_region(region);
    ref->set_offset(0);
    ref->set_byte_size(p.tensor_bytes);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport: unknown '", p.transport,
                     "' (inline, handle, pipeline or shm)"));
  }

  // The output handle of the last request (handle transport).
  auto last_handle = std::make_shared<std::string>();
  // Whether each request makes a new output handle (the probe deletes its).
  const bool new_outputs = p.transport == "handle";
  // Pipeline: a server that made a new output instead of writing into
  // output_handle would fill the caller's quota; an error says so at once.
  std::function<absl::Status(const v1::Tensor&)> check =
      [output_handle](const v1::Tensor& output) {
        if (output_handle.empty() || output.handle() == output_handle) {
          return absl::OkStatus();
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "the server wrote the output to ", output.handle(), ", not into ",
            output_handle, " (OutputSpec.handle unsupported?)"));
      };
  // The extra operands a KServe v2 client sends (every input the model
  // lists), from --all_operands: inline only.
  const bool all_operands = absl::GetFlag(FLAGS_all_operands);
  if ((all_operands || p.op == "gemm" || p.op == "convert-layout") &&
      p.transport != "inline") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--op=", p.op, all_operands ? " with --all_operands" : "",
        " runs over the inline transport only, not ", p.transport));
  }
  auto operand = [&](std::vector<int64_t> dims, uint64_t seed) {
    v1::Tensor t;
    t.set_dtype(v1::DATA_TYPE_FLOAT32);
    t.mutable_shape()->Add(dims.begin(), dims.end());
    int64_t bytes = 4;
    for (int64_t d : dims) bytes *= d;
    t.set_raw(RandomBytes(bytes, seed));
    return t;
  };
  const RequestChecks checks{c, last_handle, check, new_outputs};
  if (p.op == "transpose") {
    auto request = std::make_shared<v1::TransposeRequest>();
    *request->mutable_input() = std::move(input);
    PlaceOutput(p.transport, region, output_offset, p.tensor_bytes,
                output_handle, request->mutable_options());
    SetRequests(checks, std::move(request), &Client::Transpose,
                &v1::TransposeResponse::output, &worker);
  } else if (p.op == "gelu-ln") {
    auto request = std::make_shared<v1::GeluLayerNormRequest>();
    const int64_t hidden = shape->back();
    if (all_operands) {
      *request->mutable_bias() = operand({hidden}, 3000 + w);
      *request->mutable_residual() = operand(*shape, 4000 + w);
      *request->mutable_gamma() = operand({hidden}, 5000 + w);
      *request->mutable_beta() = operand({hidden}, 6000 + w);
      request->set_return_pre_norm(true);
    }
    *request->mutable_x() = std::move(input);
    PlaceOutput(p.transport, region, output_offset, p.tensor_bytes,
                output_handle, request->mutable_options());
    SetRequests(checks, std::move(request), &Client::GeluLayerNorm,
                &v1::GeluLayerNormResponse::y, &worker);
  } else if (p.op == "gemm") {
    // A [R, C] times B [C, R] (C [R, R] with --all_operands, beta 0).
    auto request = std::make_shared<v1::GemmRequest>();
    const int64_t rows = (*shape)[0], cols = (*shape)[1];
    *request->mutable_b() = operand({cols, rows}, 3000 + w);
    if (all_operands) *request->mutable_c() = operand({rows, rows}, 4000 + w);
    *request->mutable_a() = std::move(input);
    SetRequests(checks, std::move(request), &Client::Gemm, &v1::GemmResponse::d,
                &worker);
  } else if (p.op == "convert-layout") {
    // NCHW to NHWC.
    auto request = std::make_shared<v1::ConvertLayoutRequest>();
    request->mutable_layouts()->set_from(v1::LAYOUT_NCHW);
    request->mutable_layouts()->set_to(v1::LAYOUT_NHWC);
    *request->mutable_input() = std::move(input);
    SetRequests(checks, std::move(request), &Client::ConvertLayout,
                &v1::ConvertLayoutResponse::output, &worker);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--op: unknown '", p.op,
                     "' (transpose, gelu-ln, gemm, convert-layout or echo)"));
  }
  if (p.transport == "handle") {
    worker.deleter = std::make_unique<Deleter>(c);
    Deleter* d = worker.deleter.get();
    const int64_t output_bytes = p.tensor_bytes;
    worker.after = [d, last_handle, output_bytes] {
      if (!last_handle->empty()) d->Push(std::move(*last_handle), output_bytes);
      last_handle->clear();
    };
  }
  return worker;
}

// The median kernel_seconds of 5 probe requests, of the warm ones when any
// (a cold start includes one-time work); empty when the reports carry none.
absl::StatusOr<std::optional<double>> KernelSeconds(Worker& worker) {
  std::vector<double> warm, all;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<v1::KernelReport> report = worker.probe();
    if (!report.ok()) return report.status();
    if (report->kernel_seconds() <= 0) continue;
    all.push_back(report->kernel_seconds());
    if (!report->cold_start()) warm.push_back(report->kernel_seconds());
  }
  std::vector<double>& v = warm.empty() ? all : warm;
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GET http://address/metrics over HTTP/1.0; the body.
absl::StatusOr<std::string> Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics: '", address, "' is not HOST:PORT"));
  }
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (const int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &addrs)) {
    return absl::UnavailableError(
        absl::StrCat("--metrics: ", address, ": ", gai_strerror(e)));
  }
  int fd = -1;
  for (addrinfo* a = addrs; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // A server that stops answering must not hang the bench.
    const timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addrs);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("--metrics: connect ", address,
                                               ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET /metrics HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  std::string response;
  bool sent = true;
  for (size_t off = 0; off < request.size() && sent;) {
    const ssize_t n =
        send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    sent = n > 0;
    off += sent ? static_cast<size_t>(n) : 0;
  }
  char buffer[16384];
  ssize_t n = 0;
  while (sent && (n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  if (!sent || n < 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics: ", address, ": ", std::strerror(errno)));
  }
  const size_t body = response.find("\r\n\r\n");
  const size_t space = response.find(' ');
  if (body == std::string::npos || space == std::string::npos ||
      response.compare(space + 1, 3, "200") != 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics: ", address, ": bad answer '",
                     response.substr(0, response.find('\r')), "'"));
  }
  return response.substr(body + 4);
}

// The sum of a metric's samples over all its label sets, from Prometheus
// text format; empty when it has none.
std::optional<double> MetricSum(absl::string_view text,
                                absl::string_view name) {
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() == name.size()) continue;
    absl::string_view rest = line.substr(name.size());
    if (rest[0] == '{') {
      const size_t close = rest.rfind('}');
      if (close == absl::string_view::npos) continue;
      rest = rest.substr(close + 1);
    } else if (rest[0] != ' ') {
      continue;  // another metric whose name starts with this one
    }
    // The value, then an optional timestamp.
    const std::vector<absl::string_view> fields =
        absl::StrSplit(rest, ' ', absl::SkipEmpty());
    double v = 0;
    if (fields.empty() || !absl::SimpleAtod(fields[0], &v)) continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

// What RunPhase reads from a scrape.
struct ServerMetrics {
  std::optional<double> kernel_seconds, batches, batched_requests, cpu_seconds;
};

// Scrapes --metrics; all empty when it is off or the scrape failed (said on
// stderr).
ServerMetrics ScrapeServerMetrics() {
  const std::string address = absl::GetFlag(FLAGS_metrics);
  if (address.empty()) return {};
  absl::StatusOr<std::string> text = Scrape(address);
  if (!text.ok()) {
    std::fprintf(stderr, "\nwarning: %s\n", text.status().ToString().c_str());
    return {};
  }
  return {MetricSum(*text, "coalesce_device_kernel_seconds_total"),
          MetricSum(*text, "coalesce_batch_size_count"),
          MetricSum(*text, "coalesce_batch_size_sum"),
          MetricSum(*text, "process_cpu_seconds_total")};
}

// This process's user and system CPU time, seconds.
double ClientCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6;
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1,
                            static_cast<size_t>(q * (sorted.size() - 1) + 0.5));
  return sorted[i];
}

absl::StatusOr<PhaseResult> RunPhase(const Phase& p) {
  std::vector<Worker> workers;
  for (int w = 0; w < p.concurrency; ++w) {
    absl::StatusOr<Worker> worker = MakeWorker(p, w);
    if (!worker.ok()) {
      for (Worker& done : workers) {
        if (done.cleanup) done.cleanup();
      }
      return worker.status();
    }
    workers.push_back(std::move(*worker));
  }
  // Alone on the connection, before any load: the kernel's own time.
  std::optional<double> kernel_seconds;
  if (workers[0].probe) {
    absl::StatusOr<std::optional<double>> k = KernelSeconds(workers[0]);
    if (k.ok()) {
      kernel_seconds = *k;
    } else {
      std::fprintf(stderr, "warning: %s %s: kernel time: %s\n", p.op.c_str(),
                   p.transport.c_str(), k.status().ToString().c_str());
    }
  }
  const int64_t count = absl::GetFlag(FLAGS_count);
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> issued{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> errors{0};
  // --count: the phase ends when its last request does, not at the next
  // progress tick; written once, by the worker finishing request `count`.
  std::atomic<int64_t> finished{0};
  Clock::time_point count_end;
  Clock::time_point stop_time = Clock::time_point::max();
  std::mutex error_mu;
  std::string first_error;
  std::vector<std::vector<double>> latencies(p.concurrency);

  std::vector<std::thread> threads;
  for (int w = 0; w < p.concurrency; ++w) {
    threads.emplace_back([&, w] {
      Worker& worker = workers[w];
      while (!stop.load()) {
        const bool timed = measuring.load();
        if (timed && count > 0 && issued.fetch_add(1) >= count) break;
        const Clock::time_point t0 = Clock::now();
        const absl::Status status = worker.request();
        const Clock::time_point t1 = Clock::now();
        if (worker.after) worker.after();
        if (!timed) continue;
        if (count > 0 && finished.fetch_add(1) + 1 == count) count_end = t1;
        if (!status.ok()) {
          errors.fetch_add(1);
          std::lock_guard<std::mutex> lock(error_mu);
          if (first_error.empty()) first_error = status.ToString();
          continue;
        }
        // A request still running when the clock stopped is not counted.
        if (count == 0 && stop.load() && t1 > stop_time) break;
        latencies[w].push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
        completed.fetch_add(1);
      }
    });
  }
  const std::string label =
      absl::StrFormat("%s %s %s x%d", p.op, TransportLabel(p),
                      SizeLabel(p.tensor_bytes), p.concurrency);
  std::this_thread::sleep_for(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_s)));
  const ServerMetrics before = ScrapeServerMetrics();
  const double client_cpu_before = ClientCpuSeconds();
  const Clock::time_point start = Clock::now();
  measuring.store(true);
  const double duration = absl::GetFlag(FLAGS_duration_s);
  Clock::time_point end;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double elapsed =
        std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "\r[%s] %.1f s  %lld req  %.0f req/s  %lld errors   ",
                 label.c_str(), elapsed,
                 static_cast<long long>(completed.load()),
                 completed.load() / std::max(elapsed, 1e-9),
                 static_cast<long long>(errors.load()));
    std::fflush(stderr);
    if (count > 0 ? completed.load() + errors.load() >= count
                  : elapsed >= duration) {
      end = Clock::now();
      stop_time = end;
      stop.store(true);
      break;
    }
  }
  const double client_cpu_after = ClientCpuSeconds();
  const ServerMetrics after = ScrapeServerMetrics();
  for (std::thread& t : threads) t.join();
  if (count > 0) end = count_end;
  std::fprintf(stderr, "\n");
  for (Worker& worker : workers) {
    if (worker.cleanup) worker.cleanup();
  }

  PhaseResult r;
  r.phase = p;
  std::vector<double> all;
  for (const std::vector<double>& l : latencies) {
    all.insert(all.end(), l.begin(), l.end());
  }
  std::sort(all.begin(), all.end());
  r.requests = static_cast<int64_t>(all.size());
  r.errors = errors.load();
  r.first_error = first_error;
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.requests_per_second = r.requests / r.seconds;
  // Input and output tensor bytes (Echo: the payload there and back).
  r.gbps = r.requests_per_second * 2.0 * p.tensor_bytes / 1e9;
  r.p50_ms = Percentile(all, 0.5);
  r.p90_ms = Percentile(all, 0.9);
  r.p99_ms = Percentile(all, 0.99);
  r.max_ms = all.empty() ? 0 : all.back();
  r.kernel_seconds = kernel_seconds;
  if (before.kernel_seconds && after.kernel_seconds) {
    r.server_busy =
        (*after.kernel_seconds - *before.kernel_seconds) / r.seconds;
  }
  if (before.batches && after.batches && before.batched_requests &&
      after.batched_requests && *after.batches > *before.batches) {
    r.mean_batch = (*after.batched_requests - *before.batched_requests) /
                   (*after.batches - *before.batches);
  }
  if (r.requests > 0) {
    r.client_cpu_us = (client_cpu_after - client_cpu_before) * 1e6 / r.requests;
    if (before.cpu_seconds && after.cpu_seconds) {
      r.server_cpu_us =
          (*after.cpu_seconds - *before.cpu_seconds) * 1e6 / r.requests;
    }
  }
  return r;
}

std::string JsonEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// The kernel-only bound (1 / kernel seconds) and the busy estimate (req/s x
// kernel seconds); empty when the kernel time is.
std::optional<double> BoundRps(const PhaseResult& r) {
  if (!r.kernel_seconds) return std::nullopt;
  return 1 / *r.kernel_seconds;
}
std::optional<double> Busy(const PhaseResult& r) {
  if (!r.kernel_seconds) return std::nullopt;
  return r.requests_per_second * *r.kernel_seconds;
}

// A table cell: v with precision digits, "-" when unknown.
std::string Cell(std::optional<double> v, int precision) {
  return v ? absl::StrFormat("%.*f", precision, *v) : "-";
}

// A JSON number, null when unknown.
std::string JsonNumber(std::optional<double> v) {
  return v ? absl::StrFormat("%.6g", *v) : "null";
}

// The median (of an even count, the mean of the middle two); empty when
// there is no value.
std::optional<double> Median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of the values present.
std::optional<double> Median(const std::vector<std::optional<double>>& values) {
  std::vector<double> v;
  for (const std::optional<double>& x : values) {
    if (x) v.push_back(*x);
  }
  return Median(std::move(v));
}

// One row from a phase's rounds (empty where the round's run failed), each
// carrying its ratios to its own round's Echo: sums of the counts, the
// largest max, medians of the rest. Empty when no round ran.
std::optional<PhaseResult> Combine(
    const std::vector<std::optional<PhaseResult>>& runs) {
  std::optional<PhaseResult> out;
  std::vector<std::optional<double>> rps, gbps, p50, p90, p99, gbps_vs_echo,
      kernel, echo_rps, echo_p50, server_busy, mean_batch, server_cpu,
      client_cpu, floor_rps, floor_p50;
  for (const std::optional<PhaseResult>& r : runs) {
    if (!r) continue;
    if (!out) {
      out.emplace();
      out->phase = r->phase;
      out->rounds = 0;
    }
    ++out->rounds;
    out->requests += r->requests;
    out->errors += r->errors;
    if (out->first_error.empty()) out->first_error = r->first_error;
    out->seconds += r->seconds;
    out->max_ms = std::max(out->max_ms, r->max_ms);
    rps.push_back(r->requests_per_second);
    gbps.push_back(r->gbps);
    p50.push_back(r->p50_ms);
    p90.push_back(r->p90_ms);
    p99.push_back(r->p99_ms);
    if (r->echo_rps && *r->echo_rps > 0) {
      out->round_rps_vs_echo.push_back(r->rps_vs_echo);
      gbps_vs_echo.push_back(r->gbps_vs_echo);
    }
    out->floor_bytes = r->floor_bytes;
    if (r->rps_vs_floor) out->round_rps_vs_floor.push_back(*r->rps_vs_floor);
    floor_rps.push_back(r->floor_rps);
    floor_p50.push_back(r->floor_p50_ms);
    kernel.push_back(r->kernel_seconds);
    echo_rps.push_back(r->echo_rps);
    echo_p50.push_back(r->echo_p50_ms);
    server_busy.push_back(r->server_busy);
    mean_batch.push_back(r->mean_batch);
    server_cpu.push_back(r->server_cpu_us);
    client_cpu.push_back(r->client_cpu_us);
  }
  if (!out) return out;
  out->requests_per_second = Median(rps).value_or(0);
  out->gbps = Median(gbps).value_or(0);
  out->p50_ms = Median(p50).value_or(0);
  out->p90_ms = Median(p90).value_or(0);
  out->p99_ms = Median(p99).value_or(0);
  out->rps_vs_echo = Median(out->round_rps_vs_echo).value_or(0);
  out->gbps_vs_echo = Median(gbps_vs_echo).value_or(0);
  out->kernel_seconds = Median(kernel);
  out->echo_rps = Median(echo_rps);
  out->echo_p50_ms = Median(echo_p50);
  out->server_busy = Median(server_busy);
  out->mean_batch = Median(mean_batch);
  out->server_cpu_us = Median(server_cpu);
  out->client_cpu_us = Median(client_cpu);
  out->floor_rps = Median(floor_rps);
  out->floor_p50_ms = Median(floor_p50);
  out->rps_vs_floor = Median(out->round_rps_vs_floor);
  return out;
}

// absl::StrJoin's formatters for ratios: JSON's, the table's.
void Fixed4(std::string* out, double v) {
  absl::StrAppendFormat(out, "%.4f", v);
}
void Fixed3(std::string* out, double v) {
  absl::StrAppendFormat(out, "%.3f", v);
}

std::string ToJson(const PhaseResult& r) {
  return absl::StrFormat(
      "{\"op\":\"%s\",\"transport\":\"%s\",\"protocol\":\"%s\","
      "\"tensor_bytes\":%d,"
      "\"concurrency\":%d,\"requests\":%d,\"errors\":%d,\"seconds\":%.3f,"
      "\"requests_per_second\":%.2f,\"GBps\":%.4f,"
      "\"latency_ms\":{\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,\"max\":%.4f},"
      "\"vs_echo\":{\"requests_per_second\":%.4f,\"GBps\":%.4f},"
      "\"kernel_seconds\":%s,\"bound_rps\":%s,\"busy\":%s,"
      "\"echo_rps\":%s,\"echo_p50_ms\":%s,\"server_busy\":%s,"
      "\"mean_batch\":%s,\"server_cpu_us\":%s,\"client_cpu_us\":%s,"
      "\"rounds\":%d,\"vs_echo_rounds\":[%s],\"floor_bytes\":%d,"
      "\"floor_rps\":%s,\"floor_p50_ms\":%s,\"vs_floor\":%s,"
      "\"vs_floor_rounds\":[%s],\"first_error\":\"%s\"}",
      r.phase.op, r.phase.transport, r.phase.protocol, r.phase.tensor_bytes,
      r.phase.concurrency, r.requests, r.errors, r.seconds,
      r.requests_per_second, r.gbps, r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms,
      r.rps_vs_echo, r.gbps_vs_echo, JsonNumber(r.kernel_seconds),
      JsonNumber(BoundRps(r)), JsonNumber(Busy(r)), JsonNumber(r.echo_rps),
      JsonNumber(r.echo_p50_ms), JsonNumber(r.server_busy),
      JsonNumber(r.mean_batch), JsonNumber(r.server_cpu_us),
      JsonNumber(r.client_cpu_us), r.rounds,
      absl::StrJoin(r.round_rps_vs_echo, ",", Fixed4), r.floor_bytes,
      JsonNumber(r.floor_rps), JsonNumber(r.floor_p50_ms),
      JsonNumber(r.rps_vs_floor),
      absl::StrJoin(r.round_rps_vs_floor, ",", Fixed4),
      JsonEscape(r.first_error));
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag,
                                               const std::string& value) {
  std::vector<int64_t> out;
  for (absl::string_view v : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", v, "' is not a positive integer"));
    }
    out.push_back(n);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty"));
  }
  return out;
}

}  // namespace

// Waits until the server answers health checks with SERVING (a server
// still starting, e.g. measuring its copy peak, would turn the first
// phase's requests into UNAVAILABLE errors and understate the Echo floor
// that every ratio divides by). False after --ready_timeout_s.
bool WaitUntilServing() {
  ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  const absl::Time deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_ready_timeout_s));
  std::string last = "no answer";
  for (bool first = true;; first = false) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (client.ok()) {
      absl::StatusOr<std::string> health = (*client)->Health();
      if (health.ok() && *health == "SERVING") return true;
      last = health.ok() ? *health : health.status().ToString();
    } else {
      last = client.status().ToString();
    }
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "error: %s not serving after %.0f s: %s\n",
                   options.server.c_str(), absl::GetFlag(FLAGS_ready_timeout_s),
                   last.c_str());
      return false;
    }
    if (first) {
      std::fprintf(stderr, "waiting for %s to serve...\n",
                   options.server.c_str());
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

int RunServiceBench() {
  absl::StatusOr<std::vector<int64_t>> sizes =
      ParseList("bytes", absl::GetFlag(FLAGS_bytes));
  absl::StatusOr<std::vector<int64_t>> concurrencies =
      ParseList("concurrency", absl::GetFlag(FLAGS_concurrency));
  for (const absl::Status& s : {sizes.status(), concurrencies.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (sizes->size() > 1 && concurrencies->size() > 1 &&
      sizes->size() != concurrencies->size()) {
    std::fprintf(stderr,
                 "error: --bytes and --concurrency lists of several entries "
                 "must have the same length (they pair up)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_duration_s) <= 0 && absl::GetFlag(FLAGS_count) <= 0) {
    std::fprintf(stderr, "error: --duration_s or --count must be > 0\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_floor_bytes) < 0) {
    std::fprintf(stderr, "error: --floor_bytes must be >= 0\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_rounds) < 1) {
    std::fprintf(stderr, "error: --rounds must be >= 1, not %d\n",
                 absl::GetFlag(FLAGS_rounds));
    return 2;
  }
  const std::vector<std::string> ops =
      absl::StrSplit(absl::GetFlag(FLAGS_op), ',', absl::SkipEmpty());
  const std::vector<std::string> transports =
      absl::StrSplit(absl::GetFlag(FLAGS_transport), ',', absl::SkipEmpty());
  const std::vector<std::string> protocols =
      absl::StrSplit(absl::GetFlag(FLAGS_protocol), ',', absl::SkipEmpty());
  for (const std::string& protocol : protocols) {
    if (protocol != "native" && protocol != "kserve") {
      std::fprintf(stderr, "error: --protocol: unknown '%s' (native, kserve)\n",
                   protocol.c_str());
      return 2;
    }
  }
  if (protocols.empty()) {
    std::fprintf(stderr, "error: --protocol names no protocol\n");
    return 2;
  }

  if (!WaitUntilServing()) return 1;
  std::vector<PhaseResult> results;
  int failures = 0;
  const size_t cases = std::max(sizes->size(), concurrencies->size());
  for (size_t i = 0; i < cases; ++i) {
    const int64_t bytes = (*sizes)[std::min(i, sizes->size() - 1)];
    const int concurrency = static_cast<int>(
        (*concurrencies)[std::min(i, concurrencies->size() - 1)]);
    // Native Echo first: the floor of every ratio of the case; then Echo
    // of --floor_bytes, the second floor (the first, at that size).
    std::vector<Phase> phases = {{"echo", "inline", bytes, concurrency}};
    const int64_t floor_bytes = absl::GetFlag(FLAGS_floor_bytes);
    std::optional<size_t> floor;
    if (floor_bytes > 0) {
      floor = floor_bytes == bytes ? 0 : 1;
      if (*floor == 1) {
        phases.push_back({"echo", "inline", floor_bytes, concurrency});
      }
    }
    for (const std::string& protocol : protocols) {
      if (protocol != "native") {
        phases.push_back({"echo", "inline", bytes, concurrency, protocol});
      }
    }
    for (const std::string& op : ops) {
      if (op == "echo") continue;
      for (const std::string& transport : transports) {
        for (const std::string& protocol : protocols) {
          phases.push_back({op, transport, bytes, concurrency, protocol});
        }
      }
    }
    // runs[k][round]: phase k's run in that round, empty where it failed.
    const int rounds = absl::GetFlag(FLAGS_rounds);
    std::vector<std::vector<std::optional<PhaseResult>>> runs(
        phases.size(), std::vector<std::optional<PhaseResult>>(rounds));
    for (int round = 0; round < rounds; ++round) {
      std::vector<size_t> order(phases.size());
      std::iota(order.begin(), order.end(), 0);
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      for (size_t k : order) {
        const Phase& phase = phases[k];
        absl::StatusOr<PhaseResult> r = RunPhase(phase);
        if (!r.ok()) {
          std::fprintf(stderr, "error: %s %s: %s\n", phase.op.c_str(),
                       phase.transport.c_str(), r.status().ToString().c_str());
          ++failures;
          continue;
        }
        if (r->errors > 0) {
          ++failures;
          std::fprintf(stderr, "%s %s: %lld errors, first: %s\n",
                       phase.op.c_str(), phase.transport.c_str(),
                       static_cast<long long>(r->errors),
                       r->first_error.c_str());
        }
        runs[k][round] = *std::move(r);
      }
      // Native Echo (phase 0) is the floor of every ratio of its round;
      // the --floor_bytes Echo, where it ran, the second floor.
      const std::optional<PhaseResult>& e = runs[0][round];
      const PhaseResult* f = nullptr;
      if (floor && runs[*floor][round] &&
          runs[*floor][round]->requests_per_second > 0) {
        f = &*runs[*floor][round];
      }
      for (std::vector<std::optional<PhaseResult>>& phase_runs : runs) {
        std::optional<PhaseResult>& r = phase_runs[round];
        if (!r) continue;
        if (e) {
          if (e->requests_per_second > 0) {
            r->rps_vs_echo = r->requests_per_second / e->requests_per_second;
            r->gbps_vs_echo = r->gbps / e->gbps;
          }
          r->echo_rps = e->requests_per_second;
          r->echo_p50_ms = e->p50_ms;
        }
        if (f != nullptr) {
          r->floor_bytes = floor_bytes;
          r->floor_rps = f->requests_per_second;
          r->floor_p50_ms = f->p50_ms;
          r->rps_vs_floor = r->requests_per_second / f->requests_per_second;
        }
      }
    }
    for (const std::vector<std::optional<PhaseResult>>& phase_runs : runs) {
      std::optional<PhaseResult> row = Combine(phase_runs);
      if (row) results.push_back(*std::move(row));
    }
  }

  std::printf(
      "%-10s %-9s %9s %5s %9s %11s %9s %9s %9s %9s %9s %7s %7s %6s %10s %11s "
      "%6s %11s %11s %11s %10s %10s %10s %7s %s\n",
      "op", "transport", "bytes", "conc", "requests", "req/s", "GB/s", "p50 ms",
      "p90 ms", "p99 ms", "max ms", "xreq/s", "xGB/s", "errors", "kernel us",
      "bound req/s", "busy", "echo req/s", "echo p50 ms", "server busy",
      "mean batch", "srv cpu us", "cli cpu us", "xfloor", "rounds xreq/s");
  std::vector<std::string> rows;
  for (const PhaseResult& r : results) {
    std::optional<double> kernel_us;
    if (r.kernel_seconds) kernel_us = *r.kernel_seconds * 1e6;
    std::printf(
        "%-10s %-9s %9s %5d %9lld %11.1f %9.3f %9.3f %9.3f %9.3f %9.3f %7.3f "
        "%7.3f %6lld %10s %11s %6s %11s %11s %11s %10s %10s %10s %7s %s\n",
        r.phase.op.c_str(), TransportLabel(r.phase).c_str(),
        SizeLabel(r.phase.tensor_bytes).c_str(), r.phase.concurrency,
        static_cast<long long>(r.requests), r.requests_per_second, r.gbps,
        r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms, r.rps_vs_echo, r.gbps_vs_echo,
        static_cast<long long>(r.errors), Cell(kernel_us, 1).c_str(),
        Cell(BoundRps(r), 1).c_str(), Cell(Busy(r), 3).c_str(),
        Cell(r.echo_rps, 1).c_str(), Cell(r.echo_p50_ms, 3).c_str(),
        Cell(r.server_busy, 3).c_str(), Cell(r.mean_batch, 2).c_str(),
        Cell(r.server_cpu_us, 1).c_str(), Cell(r.client_cpu_us, 1).c_str(),
        Cell(r.rps_vs_floor, 3).c_str(),
        r.rounds > 1 ? absl::StrJoin(r.round_rps_vs_echo, ",", Fixed3).c_str()
                     : "-");
    rows.push_back(ToJson(r));
  }
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    std::ofstream f(path);
    f << absl::StrFormat(
        "{\"mode\":\"service\",\"server\":\"%s\",\"duration_s\":%.3f,"
        "\"count\":%d,\"warmup_s\":%.3f,\"results\":[\n%s\n]}\n",
        JsonEscape(absl::GetFlag(FLAGS_server)),
        absl::GetFlag(FLAGS_duration_s), absl::GetFlag(FLAGS_count),
        absl::GetFlag(FLAGS_warmup_s), absl::StrJoin(rows, ",\n"));
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace coalesce
