// coalesce-server: flags and wiring only. Everything it starts is built by
// CreateBackend (kernels/backends.h) and BuildServer (server/server.h), which
// the tests use as well.
#include <grpcpp/health_check_service_interface.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/quote.h"
#include "kernels/backends.h"
#include "server/auth/token_file.h"
#include "server/logging/access_log.h"
#include "server/logging/log.h"
#include "server/metrics/device_activity_metrics.h"
#include "server/metrics/profile_sampling.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "HOST:PORT to serve gRPC on; port 0 picks a free port (printed on "
          "stdout)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "HOST:PORT (IPv4) to serve Prometheus /metrics on; port 0 picks a "
          "free port (printed on stdout)");
ABSL_FLAG(std::string, metrics_detail, "basic",
          "basic | full: the kernel metric families by op and variant "
          "(basic), or also by dtype and size bucket (full: up to ~50x the "
          "series; docs/METRICS.md)");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT (IPv4) to serve the KServe v2 protocol over HTTP/REST "
          "on; port 0 picks a free port (printed on stdout); empty: off");
ABSL_FLAG(std::string, profile_sampling, "off",
          "off | sampled | gpm: sampled samples device counters (achieved "
          "occupancy, DRAM throughput) of kernel launches with CUPTI, and "
          "falls back to gpm when another profiler (DCGM) holds CUPTI's; gpm "
          "reads the whole device's SM occupancy and DRAM bandwidth from "
          "NVML GPM every second (device gauges, Hopper or newer); where "
          "neither is available the reason is logged at start-up and the "
          "rest runs");
ABSL_FLAG(double, profile_sampling_fraction,
          coalesce::kDefaultProfileSamplingFraction,
          "with --profile_sampling=sampled, the fraction of kernel launches "
          "sampled, in (0, 1]: every round(1/fraction)-th launch");
ABSL_FLAG(std::string, log_level, "info",
          "trace | debug | info | warn | error | critical | off: the least "
          "severe log line written (stderr); debug adds a line per call");
ABSL_FLAG(std::string, log_format, "text",
          "text | json: json writes every log and access-log line as one "
          "JSON object (ts, level, logger, msg, request_id, ...)");
ABSL_FLAG(std::string, access_log, "off",
          "off | stderr | FILE: one line per gRPC and REST call (request id, "
          "method, status, identity, peer, bytes, queue, kernel and total "
          "time), written off the request's thread; FILE is appended to");
ABSL_FLAG(std::string, device, "auto",
          "auto | cpu | cuda: auto uses CUDA when a device is visible, else "
          "the CPU");
ABSL_FLAG(std::string, devices, "all",
          "all | ORDINAL,...: the devices one server serves (CUDA ordinals "
          "as CUDA_VISIBLE_DEVICES numbers them), each with its own streams, "
          "staging and memory pool; a request runs where its handles live, "
          "else on the device with the least work in flight");
ABSL_FLAG(int32_t, cpu_devices, 1,
          "CPU backend: present this many simulated devices, each a CPU "
          "backend of its own (multi-device serving without a GPU); "
          "--devices picks among them");
ABSL_FLAG(int64_t, max_tensor_bytes, int64_t{1} << 30,
          "largest tensor (input or output) a request may carry or produce, "
          "in bytes; at most 2147483647 (protobuf bytes limit)");
ABSL_FLAG(int32_t, max_message_bytes, std::numeric_limits<int32_t>::max(),
          "largest gRPC message received or sent, in bytes");
ABSL_FLAG(int32_t, threads, 0,
          "CPU backend threads per kernel; 0 uses every core");
ABSL_FLAG(std::string, autotune, "off",
          "off | on_miss | eager: on a request shape with no tuned choice, "
          "time every eligible variant on scratch buffers (once per shape "
          "key) in the background (on_miss) or inline (eager)");
ABSL_FLAG(int32_t, autotune_budget_ms, 250,
          "wall time one shape's tuning may take; the variants the "
          "heuristic ranks first are timed first");
ABSL_FLAG(std::string, tuning_cache, "",
          "file of tuned choices, loaded at start and rewritten atomically "
          "after each tuning; a file of another build, device or variant "
          "set is ignored with a warning");
ABSL_FLAG(std::string, tuning_table, "",
          "shipped table of choices measured on a device of this name "
          "(written by `coalesce tune`), or a folder of them (the one of "
          "this device loads), consulted after the cache");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: with --tls_key, serve gRPC over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: require a client certificate signed by one "
          "(mTLS); its subject's common name is the caller's identity");
ABSL_FLAG(std::string, auth_tokens, "",
          "file of bearer tokens, one 'TOKEN IDENTITY ROLE' per line (role "
          "user or admin); every call must then carry 'authorization: "
          "Bearer TOKEN' (or a client certificate with --tls_client_ca)");
ABSL_FLAG(std::string, admin_identities, "",
          "comma-separated client-certificate identities with the admin "
          "role (tuning, ExplainSelection measure); others are users");
ABSL_FLAG(std::string, unix_socket, "",
          "also serve gRPC on this Unix-domain socket path, where the "
          "kernel tells the server each caller's uid; shared memory is "
          "registered only here");
ABSL_FLAG(int64_t, tensor_quota_bytes, int64_t{4} << 30,
          "bytes of server-side tensors (handles) one identity may hold, "
          "counted until the memory is freed");
ABSL_FLAG(int64_t, tensor_cap_bytes, int64_t{8} << 30,
          "bytes of server-side tensors all clients together may hold");
ABSL_FLAG(double, tensor_ttl_s, 600,
          "seconds an unused server-side tensor lives before it is freed; 0: "
          "until deleted");
ABSL_FLAG(int64_t, max_tensors_per_client, 65536,
          "server-side tensors (handles) one identity may hold at once, "
          "however small: each costs the server about 900 bytes of its own");
ABSL_FLAG(int64_t, max_tensors, 262144,
          "server-side tensors all clients together may hold at once");
ABSL_FLAG(int32_t, max_uploads_per_client, 4,
          "PutTensor uploads one identity may have in progress at once");
ABSL_FLAG(double, upload_idle_timeout_s, 60,
          "an upload that receives nothing for this long is ended and its "
          "reservation freed; 0: never");
ABSL_FLAG(bool, allow_client_shm, false,
          "serve RegisterSharedMemory (over --unix_socket): clients on this "
          "host may name POSIX shared-memory objects they own (keys under "
          "--client_shm_key_prefix) for the server to map and use as "
          "operands");
ABSL_FLAG(std::string, client_shm_key_prefix, "/coalesce",
          "with --allow_client_shm: the prefix every key must have (a '/' "
          "and a name, no further '/'); the server maps no other object");
ABSL_FLAG(int32_t, max_shm_regions, 256,
          "shared-memory regions registered at once, all clients together "
          "(each holds a descriptor and a mapping)");
ABSL_FLAG(int32_t, max_shm_regions_per_client, 64,
          "shared-memory regions one client may hold registered at once");
ABSL_FLAG(double, shutdown_grace_s, 10,
          "after SIGINT or SIGTERM: seconds in-flight calls may run on before "
          "they are cancelled; the process exits within this plus 1 s");
ABSL_FLAG(double, measure_budget_s, 30,
          "seconds one ExplainSelection measure may spend timing variants "
          "(always within the call's deadline)");
ABSL_FLAG(int64_t, grpc_memory_bytes, 0,
          "memory gRPC may hold for the calls in flight (messages being "
          "received or sent); past it new calls are refused with "
          "RESOURCE_EXHAUSTED and, under heavy pressure, connections closed; "
          "0: unbounded (set it on a server others can reach: concurrent "
          "large messages otherwise take memory without bound)");
ABSL_FLAG(int32_t, max_concurrent_streams, 1024,
          "HTTP/2 streams (concurrent RPCs) one connection may carry");
ABSL_FLAG(int32_t, max_in_flight, 0,
          "launches the device runs at once (a batch of requests is one); "
          "on a GPU each has a stream and 16 MiB of pinned staging of its "
          "own; 0: the backend's own figure (4 on a GPU, 2 on the CPU)");
ABSL_FLAG(bool, launch_graphs, false,
          "on a GPU, a request on stored tensors that repeats on a stream "
          "(the same variant, shape and tensor addresses, as a pipeline "
          "writing into one output handle sends) replays a CUDA graph of "
          "its launches: one driver call instead of several. Shortens a "
          "lone pipelined request; replayed graphs' kernel times (reports, "
          "kernel metrics, the busy gauge) read 4-6 us above the stream's");
ABSL_FLAG(int64_t, max_queue_requests, 1024,
          "ops that may wait for the device, all clients together; past it "
          "a request is refused at once with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_queue_bytes, int64_t{1} << 30,
          "bytes of the request messages waiting for the device; past it a "
          "request is refused at once with RESOURCE_EXHAUSTED (one larger "
          "than this is admitted when nothing waits)");
ABSL_FLAG(std::string, batch_ops, "auto",
          "ops whose concurrent requests are batched into one launch when "
          "they stack (transposes of one inner shape, layout conversions "
          "along N, GELU-LN rows of one H and parameters, GEMMs sharing B): "
          "a comma-separated list of transpose, convert_layout, "
          "gelu_layer_norm, gemm; none; or auto (the backend's measured "
          "default: on a GPU, requests of the first three with their inputs "
          "in host memory)");
ABSL_FLAG(int32_t, batch_max_requests, 64, "requests in one batch, at most");
ABSL_FLAG(int64_t, batch_max_bytes, int64_t{4} << 20,
          "operand bytes of one batch, at most (a larger request runs alone)");
ABSL_FLAG(int64_t, direct_run_max_bytes, -1,
          "ops moving at most this many bytes run on the thread that "
          "received them while their device is idle, sparing a thread "
          "hand-off; 0: never; -1: the backend's default (1 MiB)");
ABSL_FLAG(double, direct_run_max_rate, -1,
          "direct runs only while the device gets at most this many requests "
          "a second (a moving mean over its last 64); 0: at any rate; -1: "
          "the backend's default (0 on the CPU, 10000 on a GPU)");
ABSL_FLAG(int64_t, batch_max_delay_us, 0,
          "microseconds a batch may wait for more requests to arrive; 0: it "
          "takes only the requests already waiting, adding no latency");

namespace coalesce {
namespace {

// Exit status for command-line errors (as getopt-based tools use).
constexpr int kUsageExit = 2;
// Each region holds a descriptor: far below any sane RLIMIT_NOFILE.
constexpr int32_t kMaxShmRegions = 65536;

// The flags absl::ParseCommandLine answers with usage text itself; Abseil
// 20220623 keeps them out of its flag registry.
bool IsAbslUsageFlag(absl::string_view name) {
  for (absl::string_view usage :
       {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
        "version", "only_check_args"}) {
    if (name == usage) return true;
  }
  return false;
}

// absl::ParseCommandLine exits with status 1 on a flag it cannot parse; this
// binary documents status 2 for usage errors, so each flag is first checked
// with absl's own parser. Accepts --name=value, --name value, and for bool
// flags --name and --noname; one or two leading dashes.
bool CheckCommandLine(int argc, char** argv, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "-") || arg.empty() || arg == "-") {
      *error = absl::StrCat("unexpected argument '", argv[i],
                            "': coalesce-server takes only flags");
      return false;
    }
    absl::ConsumePrefix(&arg, "-");
    absl::string_view name = arg;
    absl::string_view value;
    const size_t eq = arg.find('=');
    const bool has_value = eq != absl::string_view::npos;
    if (has_value) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (IsAbslUsageFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::ConsumePrefix(&name, "no")) {
      flag = absl::FindCommandLineFlag(name);
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
      flag = nullptr;
    }
    if (flag == nullptr) {
      *error = absl::StrCat("unknown flag '", argv[i], "' (see --help)");
      return false;
    }
    if (flag->IsOfType<bool>() && !has_value) continue;
    if (!has_value) {
      if (i + 1 == argc) {
        *error = absl::StrCat("flag --", name, " needs a value");
        return false;
      }
      value = argv[++i];
    }
    // Sets the flag; ParseCommandLine then sets the same value again.
    std::string why;
    if (!flag->ParseFrom(value, &why)) {
      *error = absl::StrCat("--", name, ": ", why);
      return false;
    }
  }
  return true;
}

// Whether a flag's defining file is this one (for --help).
bool IsThisFile(absl::string_view filename) {
  return absl::EndsWith(filename, "server/main.cc");
}

bool ValidHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  return colon != absl::string_view::npos && colon > 0 &&
         colon + 1 < address.size();
}

// The values the flags' types allow but the server does not.
// --batch_ops: nullopt for auto.
bool ParseBatchOps(absl::string_view text,
                   std::optional<std::vector<OpKind>>* ops,
                   std::string* error) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "auto") {
    ops->reset();
    return true;
  }
  ops->emplace();
  if (text == "none") return true;
  for (absl::string_view name :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    name = absl::StripAsciiWhitespace(name);
    const OpKind* found = nullptr;
    for (const OpKind& op : kAllOps) {
      if (OpName(op) == name) found = &op;
    }
    if (found == nullptr) {
      *error = absl::StrCat("--batch_ops: unknown op ", Quoted(name),
                            " (transpose, convert_layout, gelu_layer_norm, "
                            "gemm, none or auto)");
      return false;
    }
    (*ops)->push_back(*found);
  }
  return true;
}

bool CheckFlagValues(std::string* error) {
  spdlog::level::level_enum level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    *error = absl::StrCat(
        "--log_level must be trace, debug, info, warn, error, critical or "
        "off, not '",
        absl::GetFlag(FLAGS_log_level), "'");
    return false;
  }
  LogFormat format;
  if (!ParseLogFormat(absl::GetFlag(FLAGS_log_format), &format)) {
    *error = absl::StrCat("--log_format must be text or json, not '",
                          absl::GetFlag(FLAGS_log_format), "'");
    return false;
  }
  if (absl::GetFlag(FLAGS_access_log).empty()) {
    *error = "--access_log must be off, stderr or a file path, not empty";
    return false;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "auto" && device != "cpu" && device != "cuda") {
    *error =
        absl::StrCat("--device must be auto, cpu or cuda, not '", device, "'");
    return false;
  }
  if (absl::GetFlag(FLAGS_cpu_devices) < 1) {
    *error = absl::StrCat("--cpu_devices must be at least 1, not ",
                          absl::GetFlag(FLAGS_cpu_devices));
    return false;
  }
  // The syntax here; which ordinals exist, once the devices are probed.
  if (absl::StatusOr<std::vector<int>> devices =
          absl::GetFlag(FLAGS_devices) == "all"
              ? std::vector<int>{0}
              : ParseDevices(absl::GetFlag(FLAGS_devices),
                             std::numeric_limits<int>::max());
      !devices.ok()) {
    *error = std::string(devices.status().message());
    return false;
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, std::string>{"listen",
                                            absl::GetFlag(FLAGS_listen)},
        {"metrics_listen", absl::GetFlag(FLAGS_metrics_listen)}}) {
    if (!ValidHostPort(value)) {
      *error =
          absl::StrCat("--", flag, " must be HOST:PORT, not '", value, "'");
      return false;
    }
  }
  if (const std::string http = absl::GetFlag(FLAGS_http_listen);
      !http.empty() && !ValidHostPort(http)) {
    *error = absl::StrCat("--http_listen must be HOST:PORT, not '", http, "'");
    return false;
  }
  MetricsDetail detail;
  if (!ParseMetricsDetail(absl::GetFlag(FLAGS_metrics_detail), &detail)) {
    *error = absl::StrCat("--metrics_detail must be basic or full, not '",
                          absl::GetFlag(FLAGS_metrics_detail), "'");
    return false;
  }
  ProfileSampling sampling;
  if (!ParseProfileSampling(absl::GetFlag(FLAGS_profile_sampling), &sampling)) {
    *error =
        absl::StrCat("--profile_sampling must be off, sampled or gpm, not '",
                     absl::GetFlag(FLAGS_profile_sampling), "'");
    return false;
  }
  const absl::Status fraction = ValidateProfileSamplingFraction(
      absl::GetFlag(FLAGS_profile_sampling_fraction));
  if (!fraction.ok()) {
    *error = std::string(fraction.message());
    return false;
  }
  const int64_t max_tensor_bytes = absl::GetFlag(FLAGS_max_tensor_bytes);
  if (max_tensor_bytes < 1 || max_tensor_bytes > kMaxInlineTensorBytes) {
    *error = absl::StrCat("--max_tensor_bytes must be in [1, ",
                          kMaxInlineTensorBytes, "], not ", max_tensor_bytes);
    return false;
  }
  if (absl::GetFlag(FLAGS_max_in_flight) < 0) {
    *error = absl::StrCat("--max_in_flight must be >= 0, not ",
                          absl::GetFlag(FLAGS_max_in_flight));
    return false;
  }
  if (absl::GetFlag(FLAGS_grpc_memory_bytes) < 0) {
    *error = absl::StrCat("--grpc_memory_bytes must be >= 0, not ",
                          absl::GetFlag(FLAGS_grpc_memory_bytes));
    return false;
  }
  if (absl::GetFlag(FLAGS_direct_run_max_bytes) < -1) {
    *error = absl::StrCat("--direct_run_max_bytes must be >= -1, not ",
                          absl::GetFlag(FLAGS_direct_run_max_bytes));
    return false;
  }
  if (!(absl::GetFlag(FLAGS_direct_run_max_rate) >= 0 ||
        absl::GetFlag(FLAGS_direct_run_max_rate) == -1) ||
      std::isinf(absl::GetFlag(FLAGS_direct_run_max_rate))) {
    *error = absl::StrCat(
        "--direct_run_max_rate must be -1 or finite and >= 0, not ",
        absl::GetFlag(FLAGS_direct_run_max_rate));
    return false;
  }
  if (absl::GetFlag(FLAGS_batch_max_delay_us) < 0 ||
      absl::GetFlag(FLAGS_batch_max_delay_us) > 1000000) {
    *error = absl::StrCat("--batch_max_delay_us must be in [0, 1000000], not ",
                          absl::GetFlag(FLAGS_batch_max_delay_us));
    return false;
  }
  std::optional<std::vector<OpKind>> batch_ops;
  if (!ParseBatchOps(absl::GetFlag(FLAGS_batch_ops), &batch_ops, error)) {
    return false;
  }
  if (absl::GetFlag(FLAGS_max_message_bytes) < 1) {
    *error = absl::StrCat("--max_message_bytes must be >= 1, not ",
                          absl::GetFlag(FLAGS_max_message_bytes));
    return false;
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{
            "tensor_quota_bytes", absl::GetFlag(FLAGS_tensor_quota_bytes)},
        {"tensor_cap_bytes", absl::GetFlag(FLAGS_tensor_cap_bytes)},
        {"max_concurrent_streams", absl::GetFlag(FLAGS_max_concurrent_streams)},
        {"max_queue_requests", absl::GetFlag(FLAGS_max_queue_requests)},
        {"max_queue_bytes", absl::GetFlag(FLAGS_max_queue_bytes)},
        {"batch_max_requests", absl::GetFlag(FLAGS_batch_max_requests)},
        {"max_tensors_per_client", absl::GetFlag(FLAGS_max_tensors_per_client)},
        {"max_tensors", absl::GetFlag(FLAGS_max_tensors)},
        {"batch_max_bytes", absl::GetFlag(FLAGS_batch_max_bytes)}}) {
    if (value < 1) {
      *error = absl::StrCat("--", flag, " must be >= 1, not ", value);
      return false;
    }
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int32_t>{"max_shm_regions",
                                        absl::GetFlag(FLAGS_max_shm_regions)},
        {"max_shm_regions_per_client",
         absl::GetFlag(FLAGS_max_shm_regions_per_client)},
        {"max_uploads_per_client",
         absl::GetFlag(FLAGS_max_uploads_per_client)}}) {
    if (value < 1 || value > kMaxShmRegions) {
      *error = absl::StrCat("--", flag, " must be 1 to ", kMaxShmRegions,
                            ", not ", value);
      return false;
    }
  }
  const std::string prefix = absl::GetFlag(FLAGS_client_shm_key_prefix);
  if (prefix.empty() || prefix[0] != '/' ||
      prefix.find('/', 1) != std::string::npos) {
    *error = absl::StrCat(
        "--client_shm_key_prefix must be '/' and a name with no further '/', "
        "not '",
        prefix, "'");
    return false;
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"shutdown_grace_s",
                                       absl::GetFlag(FLAGS_shutdown_grace_s)},
        {"measure_budget_s", absl::GetFlag(FLAGS_measure_budget_s)},
        {"upload_idle_timeout_s",
         absl::GetFlag(FLAGS_upload_idle_timeout_s)}}) {
    if (!(value >= 0 && value <= 3600)) {
      *error = absl::StrCat("--", flag, " must be 0 to 3600, not ", value);
      return false;
    }
  }
  if (!(absl::GetFlag(FLAGS_tensor_ttl_s) >= 0)) {
    *error = absl::StrCat("--tensor_ttl_s must be >= 0, not ",
                          absl::GetFlag(FLAGS_tensor_ttl_s));
    return false;
  }
  if (absl::GetFlag(FLAGS_threads) < 0) {
    *error = absl::StrCat("--threads must be >= 0, not ",
                          absl::GetFlag(FLAGS_threads));
    return false;
  }
  AutotuneMode mode;
  if (!ParseAutotuneMode(absl::GetFlag(FLAGS_autotune), &mode)) {
    *error = absl::StrCat("--autotune must be off, on_miss or eager, not '",
                          absl::GetFlag(FLAGS_autotune), "'");
    return false;
  }
  if (absl::GetFlag(FLAGS_autotune_budget_ms) < 1) {
    *error = absl::StrCat("--autotune_budget_ms must be >= 1, not ",
                          absl::GetFlag(FLAGS_autotune_budget_ms));
    return false;
  }
  return true;
}

// How the process ends, drained or not: nothing of ours is left to flush
// (the tuning cache is written whole on each tuning, the rest is memory) but
// the logs, stdout and an attached profiler's buffers. _Exit keeps teardown
// (civetweb's stop alone waits out a 2 s poll) out of the exit time.
[[noreturn]] void EndProcess(AccessLog* access_log, Backend* backend) {
  if (access_log != nullptr) access_log->Close();
  spdlog::shutdown();
  std::fflush(stdout);
  backend->FlushProfilerData();
  std::_Exit(0);
}

int Main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
  // detection on: every lock updates one process-wide lock graph under a
  // global lock. The tests keep it; the server does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "Serves coalesce.v1.TensorOps (memory-access-optimized tensor ops) over "
      "gRPC.\n\n"
      "  coalesce-server [--listen=HOST:PORT] [--metrics_listen=HOST:PORT]\n"
      "                  [--http_listen=HOST:PORT]\n"
      "                  [--device=auto|cpu|cuda] [--devices=all|0,2,...]\n"
      "                  [--cpu_devices=N] [--max_tensor_bytes=N]\n"
      "                  [--max_message_bytes=N] [--threads=N]\n"
      "                  [--metrics_detail=basic|full]\n"
      "                  [--profile_sampling=off|sampled|gpm]\n"
      "                  [--profile_sampling_fraction=F]\n"
      "                  [--tensor_quota_bytes=N] [--tensor_cap_bytes=N]\n"
      "                  [--tensor_ttl_s=S] [--max_concurrent_streams=N]\n"
      "                  [--grpc_memory_bytes=N]\n"
      "                  [--allow_client_shm] [--client_shm_key_prefix=/P]\n"
      "                  [--max_shm_regions=N] "
      "[--max_shm_regions_per_client=N]\n"
      "                  [--tls_cert=PEM --tls_key=PEM] "
      "[--tls_client_ca=PEM]\n"
      "                  [--auth_tokens=FILE] [--admin_identities=A,B]\n"
      "                  [--unix_socket=PATH] [--max_uploads_per_client=N]\n"
      "                  [--max_tensors_per_client=N] [--max_tensors=N]\n"
      "                  [--upload_idle_timeout_s=S] [--max_in_flight=N]\n"
      "                  [--[no]launch_graphs]\n"
      "                  [--max_queue_requests=N] [--max_queue_bytes=N]\n"
      "                  [--batch_ops=auto|none|OP,...] "
      "[--batch_max_requests=N]\n"
      "                  [--batch_max_bytes=N] [--batch_max_delay_us=US]\n"
      "                  [--direct_run_max_bytes=N] "
      "[--direct_run_max_rate=R]\n"
      "                  [--log_level=LEVEL] [--log_format=text|json]\n"
      "                  [--access_log=off|stderr|FILE]\n\n"
      "Prints 'coalesce-server listening on HOST:PORT (backend NAME)' and\n"
      "then 'coalesce-server metrics on HOST:PORT' on stdout once serving,\n"
      "and with --http_listen a third line 'coalesce-server http on\n"
      "HOST:PORT'; "
      "logs go to stderr. SIGINT or SIGTERM: NOT_SERVING at once, in-flight\n"
      "calls get --shutdown_grace_s, and the process exits within that plus\n"
      "1 s. SIGHUP: the --access_log file is opened again (after a log\n"
      "rotation moved it). Exit status 2\n"
      "on a command-line error, 1 when it cannot start.");
  // --help lists the flags of files named like the binary by default; these
  // flags live in main.cc.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = IsThisFile;
  usage_config.contains_helpshort_flags = IsThisFile;
  absl::SetFlagsUsageConfig(usage_config);
  std::string error;
  if (!CheckCommandLine(argc, argv, &error)) {
    std::cerr << "coalesce-server: " << error << "\n";
    return kUsageExit;
  }
  absl::ParseCommandLine(argc, argv);
  if (!CheckFlagValues(&error)) {
    std::cerr << "coalesce-server: " << error << "\n";
    return kUsageExit;
  }
  // stdout carries only the listening line that scripts and tests parse.
  spdlog::level::level_enum log_level = spdlog::level::info;
  ParseLogLevel(absl::GetFlag(FLAGS_log_level), &log_level);
  LogFormat log_format = LogFormat::kText;
  ParseLogFormat(absl::GetFlag(FLAGS_log_format), &log_format);
  ConfigureLogging(log_level, log_format);
  std::unique_ptr<AccessLog> access_log;
  if (const std::string target = absl::GetFlag(FLAGS_access_log);
      target != "off") {
    absl::StatusOr<std::unique_ptr<AccessLog>> opened =
        AccessLog::Open(target, log_format);
    if (!opened.ok()) {
      spdlog::critical("{}", std::string(opened.status().message()));
      return 1;
    }
    access_log = *std::move(opened);
  }

  // Block the signals this thread waits for before any thread exists so
  // that every thread (gRPC's, OpenMP's) inherits the mask and only sigwait
  // below sees them: SIGINT and SIGTERM shut down, SIGHUP reopens the
  // access log.
  sigset_t waited_signals;
  sigemptyset(&waited_signals);
  sigaddset(&waited_signals, SIGINT);
  sigaddset(&waited_signals, SIGTERM);
  sigaddset(&waited_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &waited_signals, nullptr);

  BackendOptions backend_options;
  backend_options.device = absl::GetFlag(FLAGS_device);
  backend_options.threads = absl::GetFlag(FLAGS_threads);
  backend_options.devices = absl::GetFlag(FLAGS_devices);
  backend_options.cpu_devices = absl::GetFlag(FLAGS_cpu_devices);
  // On a GPU each op in flight has a stream of its own.
  backend_options.cuda_lanes = absl::GetFlag(FLAGS_max_in_flight);
  backend_options.cuda_launch_graphs = absl::GetFlag(FLAGS_launch_graphs);
  absl::StatusOr<BackendChoice> choice = CreateBackend(backend_options);
  if (!choice.ok()) {
    spdlog::critical("cannot create a backend: {}", choice.status().ToString());
    return 1;
  }
  const DeviceInfo& device = choice->backend->device();
  const std::string backend_name(BackendName(choice->backend->kind()));
  spdlog::info("backend {} on {}{} ({} {}): {}", backend_name,
               choice->backend->device_count() > 1
                   ? absl::StrCat(choice->backend->device_count(), " x ")
                   : "",
               device.name, device.multiprocessors,
               device.backend == BackendKind::kCuda ? "SMs" : "threads",
               choice->reason);

  ProfileSampling sampling = ProfileSampling::kOff;
  ParseProfileSampling(absl::GetFlag(FLAGS_profile_sampling), &sampling);
  ProfileSamplingStart sampling_start =
      StartProfileSampling(*choice->backend, sampling,
                           absl::GetFlag(FLAGS_profile_sampling_fraction));
  if (!sampling_start.message.empty()) {
    // One line: what is on, or why not and what serves instead.
    spdlog::log(
        sampling_start.degraded ? spdlog::level::warn : spdlog::level::info,
        "--profile_sampling={}: {}", absl::GetFlag(FLAGS_profile_sampling),
        sampling_start.message);
  }

  ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  ParseMetricsDetail(absl::GetFlag(FLAGS_metrics_detail),
                     &config.metrics_detail);
  config.http_listen = absl::GetFlag(FLAGS_http_listen);
  config.max_tensor_bytes = absl::GetFlag(FLAGS_max_tensor_bytes);
  config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.tensor_quota_bytes = absl::GetFlag(FLAGS_tensor_quota_bytes);
  config.tensor_cap_bytes = absl::GetFlag(FLAGS_tensor_cap_bytes);
  config.tensor_ttl_seconds = absl::GetFlag(FLAGS_tensor_ttl_s);
  config.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  config.grpc_memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes);
  config.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  config.max_queue_requests = absl::GetFlag(FLAGS_max_queue_requests);
  config.max_queue_bytes = absl::GetFlag(FLAGS_max_queue_bytes);
  std::string unused;
  ParseBatchOps(absl::GetFlag(FLAGS_batch_ops), &config.batch_ops, &unused);
  config.batch_max_requests = absl::GetFlag(FLAGS_batch_max_requests);
  config.batch_max_bytes = absl::GetFlag(FLAGS_batch_max_bytes);
  config.batch_max_delay_us = absl::GetFlag(FLAGS_batch_max_delay_us);
  if (absl::GetFlag(FLAGS_direct_run_max_bytes) >= 0) {
    config.direct_run_max_bytes = absl::GetFlag(FLAGS_direct_run_max_bytes);
  }
  if (absl::GetFlag(FLAGS_direct_run_max_rate) >= 0) {
    config.direct_run_max_rate = absl::GetFlag(FLAGS_direct_run_max_rate);
  }
  config.access_log = access_log.get();
  config.max_uploads_per_client = absl::GetFlag(FLAGS_max_uploads_per_client);
  config.max_tensors_per_client = absl::GetFlag(FLAGS_max_tensors_per_client);
  config.max_tensors = absl::GetFlag(FLAGS_max_tensors);
  config.upload_idle_timeout_seconds =
      absl::GetFlag(FLAGS_upload_idle_timeout_s);
  config.tls.cert_path = absl::GetFlag(FLAGS_tls_cert);
  config.tls.key_path = absl::GetFlag(FLAGS_tls_key);
  config.tls.client_ca_path = absl::GetFlag(FLAGS_tls_client_ca);
  config.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  for (absl::string_view id :
       absl::StrSplit(absl::GetFlag(FLAGS_admin_identities), ',',
                      absl::SkipWhitespace())) {
    config.admin_identities.emplace_back(absl::StripAsciiWhitespace(id));
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens);
      !path.empty()) {
    absl::StatusOr<TokenTable> tokens = LoadTokenFile(path);
    if (!tokens.ok()) {
      spdlog::critical("--auth_tokens: {}",
                       std::string(tokens.status().message()));
      return 1;
    }
    if (tokens->entries.empty()) {
      spdlog::critical("--auth_tokens: '{}' holds no token", path);
      return 1;
    }
    config.auth_tokens = *std::move(tokens);
    spdlog::info("--auth_tokens: {} tokens", config.auth_tokens.entries.size());
  }
  config.shared_memory.allow = absl::GetFlag(FLAGS_allow_client_shm);
  config.shared_memory.key_prefix = absl::GetFlag(FLAGS_client_shm_key_prefix);
  config.shared_memory.max_regions = absl::GetFlag(FLAGS_max_shm_regions);
  config.shared_memory.max_regions_per_client =
      absl::GetFlag(FLAGS_max_shm_regions_per_client);
  ParseAutotuneMode(absl::GetFlag(FLAGS_autotune), &config.selection.autotune);
  config.selection.budget_seconds =
      absl::GetFlag(FLAGS_autotune_budget_ms) * 1e-3;
  config.selection.cache_path = absl::GetFlag(FLAGS_tuning_cache);
  config.selection.table_path = absl::GetFlag(FLAGS_tuning_table);
  config.selection.measure_budget_seconds =
      absl::GetFlag(FLAGS_measure_budget_s);
  config.selection.build_id = COALESCE_GIT_SHA;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, choice->backend.get(), choice->reason);
  if (!server.ok()) {
    spdlog::critical("{}", server.status().ToString());
    return 1;
  }
  // The device-level counters (--profile_sampling=gpm, or sampled's
  // fallback), read on a thread of their own and exported on each scrape.
  std::vector<std::shared_ptr<metrics::DeviceActivityPoller>> device_activity;
  if (!sampling_start.device_activity.empty()) {
    std::vector<metrics::PolledDevice> polled;
    for (size_t i = 0; i < sampling_start.device_activity.size(); ++i) {
      device_activity.push_back(std::make_shared<metrics::DeviceActivityPoller>(
          std::move(sampling_start.device_activity[i])));
      polled.push_back({choice->backend->device_at(static_cast<int>(i)),
                        device_activity.back()});
    }
    metrics::AddDeviceActivityMetrics((*server)->registry.get(),
                                      std::move(polled));
  }
  const std::string host = config.listen.substr(0, config.listen.rfind(':'));
  const std::string metrics_host =
      config.metrics_listen.substr(0, config.metrics_listen.rfind(':'));
  // Two lines, in this order: scripts and tests read the first for gRPC.
  std::cout << "coalesce-server listening on " << host << ":" << (*server)->port
            << " (backend " << backend_name << ")\n"
            << "coalesce-server metrics on " << metrics_host << ":"
            << (*server)->metrics_port << std::endl;
  if (!config.http_listen.empty()) {
    std::cout << "coalesce-server http on "
              << config.http_listen.substr(0, config.http_listen.rfind(':'))
              << ":" << (*server)->http_port << std::endl;
  }
  if (!config.unix_socket.empty()) {
    spdlog::info("also serving on unix:{}", config.unix_socket);
  }
  if (config.shared_memory.allow && config.unix_socket.empty()) {
    spdlog::warn(
        "--allow_client_shm without --unix_socket: shared memory is "
        "registered only over the local socket, so every registration will "
        "be refused");
  }

  int signal_number = 0;
  for (;;) {
    sigwait(&waited_signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (access_log == nullptr || !access_log->writes_file()) continue;
    const absl::Status reopened = access_log->Reopen();
    if (reopened.ok()) {
      spdlog::info("SIGHUP: access log {} reopened",
                   absl::GetFlag(FLAGS_access_log));
    } else {
      spdlog::error("SIGHUP: {}", reopened.ToString());
    }
  }
  const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_shutdown_grace_s)));
  spdlog::info("signal {}: NOT_SERVING, draining for up to {} ms",
               signal_number, grace.count());
  // Health checks answer NOT_SERVING at once (and /readyz 503), so load
  // balancers stop sending; no status change after this one.
  (*server)->draining.store(true);
  if (grpc::HealthCheckServiceInterface* health =
          (*server)->server->GetHealthCheckService()) {
    health->Shutdown();
  }
  Backend* backend = choice->backend.get();
  // A handler that does not notice its cancellation (a kernel or a library
  // call that cannot be interrupted) must not hold the process: half a
  // second after the grace the process ends whatever is still running.
  std::thread([grace, &access_log, backend] {
    std::this_thread::sleep_for(grace + std::chrono::milliseconds(500));
    spdlog::warn("calls still running {} ms after the signal; exiting",
                 (grace + std::chrono::milliseconds(500)).count());
    EndProcess(access_log.get(), backend);
  }).detach();
  // The device queue stops admitting (UNAVAILABLE) and lets what waits
  // start until the deadline, then refuses the rest with CANCELLED.
  const absl::Time deadline = absl::Now() + absl::FromChrono(grace);
  std::thread drain([&] { (*server)->DrainSchedulers(deadline); });
  // New calls are refused; calls still running at the deadline are
  // cancelled, and work that asks (ExplainSelection's measure does,
  // between runs) stops.
  (*server)->server->Shutdown(std::chrono::system_clock::now() + grace);
  drain.join();
  // Scrapes keep serving its last reading.
  for (const auto& poller : device_activity) poller->Stop();
  spdlog::info("drained; exiting");
  EndProcess(access_log.get(), backend);
}

}  // namespace
}  // namespace coalesce

int main(int argc, char** argv) { return coalesce::Main(argc, argv); }
