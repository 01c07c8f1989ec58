#include "client/cli/cli_args.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace leapcache::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& args,
                                 const std::set<std::string>& repeatable) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!absl::StartsWith(a, "--") || a.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", a, "\""));
    }
    std::string name = a.substr(2);
    std::string value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    std::vector<std::string>& v = out.values_[name];
    if (!v.empty() && repeatable.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    }
    v.push_back(value);
  }
  return out;
}

absl::StatusOr<std::string> Args::Required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return it->second.front();
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.front();
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<int64_t> Args::Int(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(Get(name, ""), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer"));
  }
  return v;
}

absl::StatusOr<double> Args::Number(const std::string& name, double fallback) const {
  if (!Has(name)) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(Get(name, ""), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number"));
  }
  return v;
}

absl::StatusOr<bool> Args::Bool(const std::string& name, bool fallback) const {
  if (!Has(name)) return fallback;
  const std::string v = absl::AsciiStrToLower(Get(name, ""));
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return absl::InvalidArgumentError(absl::StrCat("--", name, " must be true or false"));
}

absl::StatusOr<absl::Duration> Args::Duration(const std::string& name,
                                              absl::Duration fallback) const {
  if (!Has(name)) return fallback;
  absl::Duration d;
  if (!absl::ParseDuration(Get(name, ""), &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a duration like 30s"));
  }
  return d;
}

absl::Status Args::CheckKnown(const std::set<std::string>& known) const {
  for (const auto& [name, v] : values_) {
    if (known.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace leapcache::cli
