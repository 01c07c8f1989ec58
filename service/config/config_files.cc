#include "service/config/config_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace leapcache::server {

absl::StatusOr<std::string> ReadConfigFile(const std::string& setting, const std::string& path) {
  auto error = [&](const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat(setting, " (", path, "): ", problem));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(absl::StrCat("cannot read: ", std::strerror(errno)));
  // Read at most one byte past the cap, so an endless file (a device, a pipe) stops here.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return error(absl::StrCat("read error: ", std::strerror(errno)));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigFileBytes) {
    return error(absl::StrCat("larger than ", kMaxConfigFileBytes, " bytes; not a ",
                              "certificate, key or tokens file"));
  }
  if (text.empty()) return error("file is empty");
  return text;
}

}  // namespace leapcache::server
