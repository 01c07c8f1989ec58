// Command-line arguments of leapcache-cli: "--name value" or "--name=value" options after a
// command word, each option given at most once unless it is declared repeatable. Values are
// checked where they are read, with messages naming the option.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::cli {

class Args {
 public:
  // `repeatable`: options that may appear more than once (their values are kept in order).
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& args,
                                    const std::set<std::string>& repeatable = {});

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The option's value; INVALID_ARGUMENT naming it when absent.
  absl::StatusOr<std::string> Required(const std::string& name) const;
  std::string Get(const std::string& name, const std::string& fallback) const;
  std::vector<std::string> All(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> Number(const std::string& name, double fallback) const;
  absl::StatusOr<bool> Bool(const std::string& name, bool fallback) const;
  absl::StatusOr<absl::Duration> Duration(const std::string& name, absl::Duration fallback) const;
  // INVALID_ARGUMENT naming any option not in `known`.
  absl::Status CheckKnown(const std::set<std::string>& known) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace leapcache::cli
