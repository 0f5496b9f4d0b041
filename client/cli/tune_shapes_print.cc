// Prints RandomShapes(OP, CLASS, COUNT, SEED, MAX_BYTES, ELEMENT_BYTES), one
// tune shape a line, for bench/sweep_shapes_test.py to hold the Python
// mirror to.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/cli/tune_shapes.h"

int main(int argc, char** argv) {
  int count = 0, element_bytes = 0;
  uint64_t seed = 0;
  int64_t max_bytes = 0;
  if (argc != 7 || !absl::SimpleAtoi(argv[3], &count) ||
      !absl::SimpleAtoi(argv[4], &seed) ||
      !absl::SimpleAtoi(argv[5], &max_bytes) ||
      !absl::SimpleAtoi(argv[6], &element_bytes)) {
    std::fprintf(stderr,
                 "usage: %s OP CLASS COUNT SEED MAX_BYTES ELEMENT_BYTES\n",
                 argv[0]);
    return 2;
  }
  const auto shapes = coalesce::cli::RandomShapes(argv[1], argv[2], count, seed,
                                                  max_bytes, element_bytes);
  if (!shapes.ok()) {
    std::fprintf(stderr, "%s\n", shapes.status().ToString().c_str());
    return 1;
  }
  for (const std::string& s : *shapes) std::printf("%s\n", s.c_str());
  return 0;
}
