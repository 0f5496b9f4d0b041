// libFuzzer's initialization for the targets that parse protobuf messages:
// protobuf logs every string field that is not UTF-8, which the server
// parses all the same and the fuzzer makes by the million.
#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
