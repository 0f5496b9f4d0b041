#include "client/cli/server_commands.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "client/cli/cli_common.h"

ABSL_FLAG(std::string, service, "",
          "health: the service to check; empty checks the whole server.");

namespace coalesce::cli {

absl::Status RunInfo(Client& client) {
  COALESCE_ASSIGN_OR_RETURN(const v1::GetServerInfoResponse info,
                            client.GetServerInfo());
  std::printf("backend: %s%s%s\n", info.backend().c_str(),
              info.backend_reason().empty() ? "" : " - ",
              info.backend_reason().c_str());
  for (int i = 0; i < info.devices_size(); ++i) {
    const v1::DeviceInfo& d = info.devices(i);
    std::string line = absl::StrFormat("device %d: %s [%s]", d.ordinal(),
                                       d.name(), d.backend());
    if (!d.uuid().empty()) absl::StrAppend(&line, " ", d.uuid());
    if (d.compute_capability_major() > 0) {
      absl::StrAppendFormat(&line, ", compute capability %d.%d",
                            d.compute_capability_major(),
                            d.compute_capability_minor());
    }
    absl::StrAppendFormat(&line, ", %d %s", d.multiprocessors(),
                          d.backend() == "cuda" ? "SMs" : "threads");
    if (d.memory_bytes() > 0) {
      absl::StrAppend(&line, ", memory ", FormatBytes(d.memory_bytes()));
    }
    if (d.l2_cache_bytes() > 0) {
      absl::StrAppend(&line, ", L2 ", FormatBytes(d.l2_cache_bytes()));
    }
    if (d.shared_memory_per_block_bytes() > 0) {
      absl::StrAppend(&line, ", shared/block ",
                      FormatBytes(d.shared_memory_per_block_bytes()));
    }
    if (d.theoretical_bandwidth_bytes_per_second() > 0) {
      absl::StrAppendFormat(&line, ", theoretical %.1f GB/s",
                            d.theoretical_bandwidth_bytes_per_second() / 1e9);
    }
    if (d.measured_copy_bytes_per_second() > 0) {
      absl::StrAppendFormat(&line, ", measured copy %.1f GB/s",
                            d.measured_copy_bytes_per_second() / 1e9);
    }
    if (!d.serving()) {
      absl::StrAppend(&line, " (visible, not served)");
    } else if (!d.healthy()) {
      absl::StrAppend(&line, " (FAILED: ", d.health(), ")");
    }
    std::printf("%s\n", line.c_str());
  }
  const v1::BuildInfo& b = info.build();
  std::printf("build: version %s, git %s, cuda %s%s%s\n", b.version().c_str(),
              b.git_sha().c_str(), b.cuda_enabled() ? "on" : "off",
              b.cuda_architectures().empty() ? "" : ", architectures ",
              b.cuda_architectures().c_str());
  const v1::Limits& l = info.limits();
  std::printf(
      "limits: max_tensor_bytes %s, max_message_bytes %s, "
      "max_rank %d\n",
      FormatBytes(l.max_tensor_bytes()).c_str(),
      FormatBytes(l.max_message_bytes()).c_str(), l.max_rank());
  // Ops in the order the server lists them.
  std::vector<std::string> ops;
  std::map<std::string, std::vector<const v1::VariantInfo*>> by_op;
  size_t width = 0;
  for (const v1::VariantInfo& v : info.variants()) {
    if (by_op.find(v.op()) == by_op.end()) ops.push_back(v.op());
    by_op[v.op()].push_back(&v);
    width = std::max(width, v.name().size());
  }
  std::printf("variants:\n");
  for (const std::string& op : ops) {
    std::printf("  %s\n", op.c_str());
    for (const v1::VariantInfo* v : by_op[op]) {
      std::printf("    %-*s  [%s] %s\n", static_cast<int>(width),
                  v->name().c_str(), v->backend().c_str(),
                  v->description().c_str());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RunHealth(Client& client) {
  COALESCE_ASSIGN_OR_RETURN(const std::string status,
                            client.Health(absl::GetFlag(FLAGS_service)));
  std::printf("%s\n", status.c_str());
  return status == "SERVING";
}

}  // namespace coalesce::cli
