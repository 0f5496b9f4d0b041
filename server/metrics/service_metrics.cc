#include "server/metrics/service_metrics.h"

namespace coalesce {

absl::string_view RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kGetServerInfo:
      return "get_server_info";
    case Rpc::kExplainSelection:
      return "explain_selection";
    case Rpc::kEcho:
      return "echo";
    case Rpc::kPutTensor:
      return "put_tensor";
    case Rpc::kGetTensor:
      return "get_tensor";
    case Rpc::kDeleteTensor:
      return "delete_tensor";
    case Rpc::kListTensors:
      return "list_tensors";
    case Rpc::kRegisterSharedMemory:
      return "register_shared_memory";
    case Rpc::kUnregisterSharedMemory:
      return "unregister_shared_memory";
    case Rpc::kListSharedMemory:
      return "list_shared_memory";
    default:
      return OpName(static_cast<OpKind>(rpc));
  }
}

}  // namespace coalesce
