#include "server/service_metrics.h"

namespace coalesce {

absl::string_view RpcName(Rpc rpc) {
  if (rpc == Rpc::kGetServerInfo) return "get_server_info";
  if (rpc == Rpc::kExplainSelection) return "explain_selection";
  return OpName(static_cast<OpKind>(rpc));
}

}  // namespace coalesce
