// Fuzz target: the .npy reader of the tools (gpu/tools/npy.h): ParseNpyHeader on the input as
// header text, and ReadNpy on the input as a file.
//
// Invariants: no crash, no read outside the buffers (ASan), no overflow (UBSan); every error
// names the file (ReadNpy's messages start with the path); an array it accepts holds exactly
// product(shape) elements, and writing it back with WriteNpy and reading that gives the same
// shape and bit-identical data.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "fuzz/scratch_file.h"
#include "gpu/tools/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tools = leapcache::tools;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  leapcache::StatusOr<tools::NpyHeader> header = tools::ParseNpyHeader(text);
  if (!header.ok()) FUZZ_CHECK(!header.status().message().empty(), "header error without text");

  static const std::string path = leapcache::fuzz::ScratchPath("input.npy");
  static const std::string rewritten = leapcache::fuzz::ScratchPath("rewritten.npy");
  FUZZ_CHECK(leapcache::fuzz::WriteScratch(path, data, size), "cannot write %s", path.c_str());
  leapcache::StatusOr<tools::NpyArray> array = tools::ReadNpy(path);
  if (!array.ok()) {
    FUZZ_CHECK(array.status().message().rfind(path, 0) == 0, "error does not name the file: %s",
               array.status().message().c_str());
    return 0;
  }
  leapcache::StatusOr<int64_t> n = tools::NumElements(array->shape);
  FUZZ_CHECK(n.ok(), "accepted a shape whose size is invalid");
  FUZZ_CHECK(static_cast<size_t>(*n) == array->data.size(), "shape %s but %zu elements",
             tools::ShapeToString(array->shape).c_str(), array->data.size());

  FUZZ_CHECK(tools::WriteNpy(rewritten, array->shape, array->data).ok(), "cannot write back");
  leapcache::StatusOr<tools::NpyArray> again = tools::ReadNpy(rewritten);
  FUZZ_CHECK(again.ok(), "cannot read back what was written: %s",
             again.status().message().c_str());
  FUZZ_CHECK(again->shape == array->shape, "shape changed on a round trip");
  // Bitwise (NaN payloads included); memcmp only on non-empty data (it takes no null pointers).
  FUZZ_CHECK(again->data.size() == array->data.size() &&
                 (array->data.empty() || std::memcmp(again->data.data(), array->data.data(),
                                                     array->data.size() * sizeof(float)) == 0),
             "data changed on a round trip");
  return 0;
}
