#include "server/service_metrics.h"

namespace coalesce {

absl::string_view RpcName(Rpc rpc) {
  if (rpc == Rpc::kGetServerInfo) return "get_server_info";
  return OpName(static_cast<OpKind>(rpc));
}

}  // namespace coalesce
