#include "load/load_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace leapcache::load {

absl::StatusOr<std::vector<LoadFormat>> ParseFormats(const std::string& list) {
  std::vector<LoadFormat> out;
  for (absl::string_view label : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    LoadFormat f;
    f.label = std::string(label);
    if (label == "fp32") {
      f.format = {client::Codec::kFp32, 32, 1, 0, false};
    } else if (label == "bf16") {
      f.format = {client::Codec::kBf16, 16, 1, 0, false};
    } else if (label == "leap8" || label == "leap6" || label == "leap4") {
      f.format = client::StorageFormat::Leap(label[4] - '0');
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "formats: unknown format \"", label, "\" (known: fp32, bf16, leap8, leap6, leap4)"));
    }
    for (const LoadFormat& g : out) {
      if (g.label == f.label) {
        return absl::InvalidArgumentError(absl::StrCat("formats: \"", label, "\" given twice"));
      }
    }
    out.push_back(std::move(f));
  }
  if (out.empty()) return absl::InvalidArgumentError("formats: at least one format is needed");
  return out;
}

BlobSpec ToBlobSpec(const client::ModelShape& model, const client::StorageFormat& format) {
  BlobSpec b;
  b.kind = model.kind == client::StateKind::kGdn ? StateKind::kGdn : StateKind::kKda;
  b.dk = model.dk;
  b.dv = model.dv;
  b.codec = static_cast<Codec>(static_cast<int>(format.codec));
  b.bits = format.bits;
  b.p = format.p;
  b.r = format.r;
  b.smoothing = format.smoothing;
  return b;
}

}  // namespace leapcache::load
