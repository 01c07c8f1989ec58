#include "service/config/host_port.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace leapcache::server {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port (e.g. 127.0.0.1:7470)"));
  }
  absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", address, "\" has an unterminated [IPv6] host"));
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": write IPv6 hosts in brackets, e.g. [::1]:7470"));
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has no host"));
  }
  // No host name or address literal holds whitespace or control characters; refusing them here
  // gives a clear error at configuration time instead of a failed bind or lookup later.
  for (const char c : host) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7F) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address \"", absl::CHexEscape(address), "\" has whitespace or a control character in "
          "its host"));
    }
  }
  int port = -1;
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != absl::string_view::npos ||
      port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" has no valid port (0..65535)"));
  }
  return HostPort{std::string(host), port};
}

std::string FormatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace leapcache::server
