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
    case Rpc::kServerLive:
      return "kserve_server_live";
    case Rpc::kServerReady:
      return "kserve_server_ready";
    case Rpc::kModelReady:
      return "kserve_model_ready";
    case Rpc::kServerMetadata:
      return "kserve_server_metadata";
    case Rpc::kModelMetadata:
      return "kserve_model_metadata";
    case Rpc::kModelInfer:
      return "kserve_model_infer";
    case Rpc::kModelStreamInfer:
      return "kserve_model_stream_infer";
    case Rpc::kModelConfig:
      return "kserve_model_config";
    case Rpc::kModelStatistics:
      return "kserve_model_statistics";
    case Rpc::kRepositoryIndex:
      return "kserve_repository_index";
    case Rpc::kSystemSharedMemoryStatus:
      return "kserve_system_shared_memory_status";
    case Rpc::kSystemSharedMemoryRegister:
      return "kserve_system_shared_memory_register";
    case Rpc::kSystemSharedMemoryUnregister:
      return "kserve_system_shared_memory_unregister";
    case Rpc::kCudaSharedMemoryStatus:
      return "kserve_cuda_shared_memory_status";
    case Rpc::kCudaSharedMemoryRegister:
      return "kserve_cuda_shared_memory_register";
    case Rpc::kCudaSharedMemoryUnregister:
      return "kserve_cuda_shared_memory_unregister";
    default:
      return OpName(static_cast<OpKind>(rpc));
  }
}

bool ParseMetricsDetail(absl::string_view text, MetricsDetail* detail) {
  if (text == "basic") {
    *detail = MetricsDetail::kBasic;
  } else if (text == "full") {
    *detail = MetricsDetail::kFull;
  } else {
    return false;
  }
  return true;
}

}  // namespace coalesce
