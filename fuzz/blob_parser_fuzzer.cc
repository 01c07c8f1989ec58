// Fuzz target: the v1 blob parser (gpu/format/format.h ParseBlob) on arbitrary bytes.
//
// Invariants: it never crashes or reads outside the input (ASan); an error has a message; a blob
// it accepts has exactly the size its spec implies, a spec that ValidateSpec accepts, and seals
// back (SealBlob over the same payload) to the same bytes, so nothing the parser lets through is
// left unchecked. Random bytes almost never carry valid CRCs, so each input is also parsed a
// second time with both CRCs recomputed, which lets the fuzzer reach the field checks behind them.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"

namespace {

using leapcache::BlobSpec;

void CheckParse(std::span<const uint8_t> blob) {
  leapcache::StatusOr<BlobSpec> spec = leapcache::ParseBlob(blob);
  if (!spec.ok()) {
    FUZZ_CHECK(!spec.status().message().empty(), "error without a message");
    return;
  }
  FUZZ_CHECK(leapcache::ValidateSpec(*spec).ok(), "accepted an invalid spec %s",
             spec->ToString().c_str());
  FUZZ_CHECK(leapcache::ComputeLayout(*spec).blob_bytes() == blob.size(),
             "accepted %zu bytes for a spec of %zu", blob.size(),
             static_cast<size_t>(leapcache::ComputeLayout(*spec).blob_bytes()));
  std::vector<uint8_t> resealed(blob.begin(), blob.end());
  leapcache::SealBlob(*spec, resealed);
  FUZZ_CHECK(std::memcmp(resealed.data(), blob.data(), blob.size()) == 0,
             "a parsed blob (%s) does not re-seal to the same bytes", spec->ToString().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  CheckParse(input);

  namespace h = leapcache::header;
  if (size >= 64) {
    std::vector<uint8_t> fixed(input.begin(), input.end());
    const size_t payload = fixed.size() - 64;
    leapcache::StoreU32(&fixed[h::kPayloadCrc], leapcache::Crc32c(fixed.data() + 64, payload));
    leapcache::StoreU32(&fixed[h::kHeaderCrc], leapcache::Crc32c(fixed.data(), h::kHeaderCrc));
    CheckParse(fixed);
  }
  return 0;
}
