#include "load/mooncake_trace.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace leapcache::load {
namespace {

// A scanner for the one shape a trace line has: a flat JSON object whose values are numbers,
// strings, literals or arrays of numbers. Anything else is an error, not silently skipped.
class LineScanner {
 public:
  LineScanner(std::string_view text, int64_t line) : s_(text), line_(line) {}

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == s_.size();
  }
  char Peek() {
    SkipSpace();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  absl::StatusOr<std::string> String() {
    if (!Consume('"')) return Error("expected a string");
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') {
        if (++pos_ == s_.size()) break;
      }
      out.push_back(s_[pos_++]);
    }
    if (pos_ == s_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }
  absl::StatusOr<double> Number(const std::string& field) {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '-' || s_[pos_] == '+' || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
    }
    const std::string token(s_.substr(start, pos_ - start));
    if (token.empty()) return Error(absl::StrCat(field, " must be a number"));
    double v = 0;
    if (!absl::SimpleAtod(token, &v) || !std::isfinite(v)) {
      return Error(absl::StrCat(field, ": \"", token, "\" is not a number"));
    }
    return v;
  }
  // A value we do not use: a string, number, literal or array of those.
  absl::Status SkipValue(const std::string& field) {
    const char c = Peek();
    if (c == '"') return String().status();
    if (c == '[') {
      ++pos_;
      if (Consume(']')) return absl::OkStatus();
      do {
        LC_RETURN_IF_ERROR(SkipValue(field));
      } while (Consume(','));
      if (!Consume(']')) return Error(absl::StrCat(field, ": unterminated array"));
      return absl::OkStatus();
    }
    for (std::string_view lit : {"true", "false", "null"}) {
      if (s_.substr(pos_, lit.size()) == lit) {
        pos_ += lit.size();
        return absl::OkStatus();
      }
    }
    if (c == '{') return Error(absl::StrCat(field, ": nested objects are not part of the format"));
    return Number(field).status();
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int64_t line_;
};

// A number that must be a whole value in [0, 2^53] (exact in a double).
absl::StatusOr<int64_t> NonNegativeInteger(LineScanner& scan, const std::string& field) {
  LC_ASSIGN_OR_RETURN(const double v, scan.Number(field));
  if (v < 0 || v != std::floor(v) || v > 9007199254740992.0) {
    return scan.Error(absl::StrCat(field, " must be a non-negative integer (got ", v, ")"));
  }
  return static_cast<int64_t>(v);
}

}  // namespace

absl::StatusOr<WorkloadRequest> ParseMooncakeLine(std::string_view line, int64_t line_number,
                                                  const MooncakeTraceOptions& options) {
  LineScanner scan(line, line_number);
  if (options.block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be positive (got ", options.block_tokens, ")"));
  }
  if (!scan.Consume('{')) return scan.Error("not a JSON object");
  std::optional<double> timestamp_ms;
  std::optional<int64_t> input, output;
  std::optional<std::vector<uint64_t>> ids;
  if (!scan.Consume('}')) {
    do {
      LC_ASSIGN_OR_RETURN(const std::string key, scan.String());
      if (!scan.Consume(':')) return scan.Error(absl::StrCat("expected ':' after \"", key, "\""));
      if (key == "timestamp") {
        LC_ASSIGN_OR_RETURN(const double t, scan.Number(key));
        if (t < 0) return scan.Error(absl::StrCat("timestamp must be >= 0 (got ", t, ")"));
        timestamp_ms = t;
      } else if (key == "input_length") {
        LC_ASSIGN_OR_RETURN(input, NonNegativeInteger(scan, key));
      } else if (key == "output_length") {
        LC_ASSIGN_OR_RETURN(output, NonNegativeInteger(scan, key));
      } else if (key == "hash_ids") {
        if (!scan.Consume('[')) return scan.Error("hash_ids must be an array of integers");
        ids.emplace();
        if (!scan.Consume(']')) {
          do {
            LC_ASSIGN_OR_RETURN(const int64_t id, NonNegativeInteger(scan, "hash_ids element"));
            ids->push_back(static_cast<uint64_t>(id));
          } while (scan.Consume(','));
          if (!scan.Consume(']')) return scan.Error("hash_ids: unterminated array");
        }
      } else {
        LC_RETURN_IF_ERROR(scan.SkipValue(key));
      }
    } while (scan.Consume(','));
    if (!scan.Consume('}')) return scan.Error("expected ',' or '}' between fields");
  }
  if (!scan.AtEnd()) return scan.Error("text after the object");
  if (!timestamp_ms) return scan.Error("missing field timestamp");
  if (!input) return scan.Error("missing field input_length");
  if (!output) return scan.Error("missing field output_length");
  if (!ids) return scan.Error("missing field hash_ids");
  const int64_t want = (*input + options.block_tokens - 1) / options.block_tokens;
  if (static_cast<int64_t>(ids->size()) != want) {
    return scan.Error(absl::StrCat("hash_ids has ", ids->size(), " ids but input_length ", *input,
                                   " spans ", want, " blocks of ", options.block_tokens,
                                   " tokens"));
  }
  WorkloadRequest r;
  r.arrival_s = *timestamp_ms / 1000.0;
  r.input_tokens = *input;
  r.output_tokens = *output;
  r.block_ids = std::move(*ids);
  return r;
}

absl::StatusOr<std::vector<WorkloadRequest>> ParseMooncakeTrace(
    std::string_view text, const std::string& source, const MooncakeTraceOptions& options) {
  std::vector<WorkloadRequest> out;
  int64_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<WorkloadRequest> r = ParseMooncakeLine(line, line_number, options);
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", r.status().message()));
    }
    if (!out.empty() && r->arrival_s < out.back().arrival_s) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": line ", line_number, ": timestamp goes backwards (requests must be in arrival order)"));
    }
    out.push_back(*std::move(r));
    if (options.max_requests > 0 && static_cast<int64_t>(out.size()) >= options.max_requests) break;
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no requests"));
  return out;
}

absl::StatusOr<std::vector<WorkloadRequest>> LoadMooncakeTrace(const std::string& path,
                                                               const MooncakeTraceOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseMooncakeTrace(buffer.str(), path, options);
}

}  // namespace leapcache::load
