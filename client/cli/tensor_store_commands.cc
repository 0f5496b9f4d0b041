#include "client/cli/tensor_store_commands.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "base/status_macros.h"
#include "client/cli/op_common.h"
#include "client/client.h"
#include "client/npy.h"
#include "client/tensors.h"

ABSL_FLAG(std::string, name, "",
          "put: the handle to create (empty: the server picks one).");
ABSL_FLAG(int32_t, device_ordinal, -1,
          "put: the server device to keep the tensor on (-1: the server's "
          "choice).");

namespace coalesce::cli {

namespace {

// Uploads a .npy file (converted to --dtype when given); prints the handle.
absl::Status Put(Client& client, const std::string& path) {
  std::optional<DType> want;
  if (!absl::GetFlag(FLAGS_dtype).empty()) {
    DType t;
    if (!ParseDType(absl::GetFlag(FLAGS_dtype), &t)) {
      return UsageError(absl::StrCat("--dtype=", absl::GetFlag(FLAGS_dtype)));
    }
    want = t;
  }
  COALESCE_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path, want));
  COALESCE_ASSIGN_OR_RETURN(
      v1::TensorInfo info,
      client.PutTensor(
          ToProtoDType(a.dtype), a.shape, a.bytes, absl::GetFlag(FLAGS_name),
          absl::GetFlag(FLAGS_device_ordinal) >= 0
              ? std::optional<int>(absl::GetFlag(FLAGS_device_ordinal))
              : std::nullopt));
  std::printf("%s\n", info.handle().c_str());
  return absl::OkStatus();
}

absl::Status Get(Client& client, const std::string& handle) {
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) return UsageError("get needs --output=FILE.npy");
  COALESCE_ASSIGN_OR_RETURN(FetchedTensor t, client.GetTensor(handle));
  NpyArray a;
  COALESCE_ASSIGN_OR_RETURN(a.dtype, FromProtoDType(t.info.dtype()));
  a.shape.assign(t.info.shape().begin(), t.info.shape().end());
  a.bytes = std::move(t.bytes);
  return WriteNpy(output, a);
}

// One DeleteTensor for all of them: every one is deleted, or none.
absl::Status Remove(Client& client, const std::vector<std::string>& handles) {
  COALESCE_ASSIGN_OR_RETURN(int64_t freed, handles.size() == 1
                                               ? client.DeleteTensor(handles[0])
                                               : client.DeleteTensors(handles));
  std::printf("%lld bytes freed\n", static_cast<long long>(freed));
  return absl::OkStatus();
}

absl::Status List(Client& client) {
  COALESCE_ASSIGN_OR_RETURN(v1::ListTensorsResponse list, client.ListTensors());
  for (const v1::TensorInfo& t : list.tensors()) {
    std::printf("%s %s [%s] %lld bytes, owner %s, idle %.1f s, device %d\n",
                t.handle().c_str(),
                std::string(v1::DataType_Name(t.dtype())).c_str(),
                absl::StrJoin(t.shape(), ",").c_str(),
                static_cast<long long>(t.byte_size()), t.owner().c_str(),
                t.idle_seconds(), t.device_ordinal());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> RunTensorStoreCommand(absl::string_view command,
                                          const std::vector<std::string>& args,
                                          Connector connect) {
  if (command == "rm" ? args.empty()
                      : args.size() != (command == "ls" ? 0u : 1u)) {
    return UsageError(
        absl::StrCat(command, command == "rm"   ? " takes one or more handles"
                              : command == "ls" ? " takes no argument"
                                                : " takes one argument"));
  }
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, connect());
  if (command == "put") {
    COALESCE_RETURN_IF_ERROR(Put(*client, args[0]));
  } else if (command == "get") {
    COALESCE_RETURN_IF_ERROR(Get(*client, args[0]));
  } else if (command == "rm") {
    COALESCE_RETURN_IF_ERROR(Remove(*client, args));
  } else {
    COALESCE_RETURN_IF_ERROR(List(*client));
  }
  return 0;
}

}  // namespace coalesce::cli
