#include "gpu/tools/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

namespace leapcache::tools {

// The payload is copied to and from float memory byte for byte, which is '<f4' only on a
// little-endian host; a big-endian one would need swaps that nothing here implements.
static_assert(std::endian::native == std::endian::little, "npy.cc assumes a little-endian host");
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559);

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr size_t kAlign = 64;  // numpy aligns the data start so it can be memory-mapped
constexpr size_t kGrowthAxisMaxDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS
constexpr int kMaxRank = 64;                 // numpy 2's NPY_MAXDIMS; numpy 1 allows 32
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

std::string ErrnoMessage() { return std::generic_category().message(errno); }

// Printable form of raw bytes for messages: "\x93NUMPY" rather than mojibake.
std::string Escape(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// "float64", "big-endian float32", ... for a simple numpy type string; empty if it is not one.
std::string DescribeDtype(const std::string& descr) {
  if (descr.size() < 3) return "";
  const char order = descr[0], kind = descr[1];
  if (std::string_view("<>|=").find(order) == std::string_view::npos) return "";
  const std::string size = descr.substr(2);
  if (size.find_first_not_of("0123456789") != std::string::npos || size.size() > 2) return "";
  std::string name;
  switch (kind) {
    case 'f':
      name = "float";
      break;
    case 'i':
      name = "int";
      break;
    case 'u':
      name = "uint";
      break;
    case 'c':
      name = "complex";
      break;
    case 'b':
      return "bool";
    default:
      return "";
  }
  name += std::to_string(8 * std::stoi(size));
  if (order == '>') return "big-endian " + name;
  return name;
}

// A recursive-descent parser for the one Python literal a .npy header holds: a dict of string
// keys to a string, a bool and a tuple of ints. Anything else is rejected, not evaluated.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : t_(text) {}

  StatusOr<NpyHeader> Parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    if (!Consume('{')) return Error("expected '{' to open the header dict");
    while (true) {
      if (Consume('}')) break;  // also closes "{...,}" after a trailing comma
      SkipSpace();
      if (!AtQuote()) return Error("expected a quoted key or '}'");
      LEAPCACHE_ASSIGN_OR_RETURN(const std::string key, ParseString());
      if (!Consume(':')) return Error("expected ':' after key '" + key + "'");
      if (key == "descr") {
        if (have_descr) return Error("duplicate key 'descr'");
        have_descr = true;
        SkipSpace();
        if (Peek() == '[') {
          return Error("'descr' is a list: structured dtypes are not supported, only '<f4'");
        }
        if (!AtQuote()) return Error("expected a quoted dtype string such as '<f4' for 'descr'");
        LEAPCACHE_ASSIGN_OR_RETURN(h.descr, ParseString());
      } else if (key == "fortran_order") {
        if (have_order) return Error("duplicate key 'fortran_order'");
        have_order = true;
        LEAPCACHE_ASSIGN_OR_RETURN(h.fortran_order, ParseBool());
      } else if (key == "shape") {
        if (have_shape) return Error("duplicate key 'shape'");
        have_shape = true;
        LEAPCACHE_ASSIGN_OR_RETURN(h.shape, ParseShape());
      } else {
        return Error("unknown key '" + Escape(key) +
                     "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}' after the value of '" + key + "'");
    }
    SkipSpace();
    if (pos_ != t_.size()) return Error("unexpected text after the header dict");
    for (auto [name, present] :
         {std::pair{"descr", have_descr}, std::pair{"fortran_order", have_order},
          std::pair{"shape", have_shape}}) {
      if (!present) return Error(std::string("missing key '") + name + "'");
    }
    return h;
  }

 private:
  char Peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  bool AtQuote() const { return Peek() == '\'' || Peek() == '"'; }

  void SkipSpace() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // Skips spaces, then consumes c if it is next.
  bool Consume(char c) {
    SkipSpace();
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  // The message names the position and quotes the header, trimmed of its padding.
  Status Error(const std::string& what) const {
    std::string_view shown = t_;
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.remove_suffix(1);
    constexpr size_t kMaxShown = 200;
    std::string quoted = Escape(shown.substr(0, kMaxShown));
    if (shown.size() > kMaxShown) quoted += "...";
    return InvalidArgumentError("bad header: " + what + " at offset " + std::to_string(pos_) +
                                " of \"" + quoted + "\"");
  }

  StatusOr<std::string> ParseString() {
    const char quote = t_[pos_++];
    const size_t start = pos_;
    while (pos_ < t_.size() && t_[pos_] != quote) {
      if (t_[pos_] == '\\' || t_[pos_] == '\n') {
        return Error("escape sequences and line breaks in strings are not supported");
      }
      ++pos_;
    }
    if (pos_ == t_.size()) return Error("unterminated string");
    return std::string(t_.substr(start, pos_++ - start));
  }

  StatusOr<bool> ParseBool() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < t_.size() &&
           (std::isalnum(static_cast<unsigned char>(t_[pos_])) || t_[pos_] == '_')) {
      ++pos_;
    }
    const std::string_view word = t_.substr(start, pos_ - start);
    if (word == "True") return true;
    if (word == "False") return false;
    pos_ = start;
    return Error("expected True or False for 'fortran_order'");
  }

  StatusOr<int64_t> ParseDim() {
    SkipSpace();
    if (Peek() == '-') return Error("negative dimension in 'shape'");
    if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
      return Error("expected a non-negative integer dimension in 'shape'");
    }
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) {
      const int digit = t_[pos_] - '0';
      if (v > (kMaxInt64 - digit) / 10) return Error("dimension in 'shape' overflows int64");
      v = v * 10 + digit;
      ++pos_;
    }
    if (Peek() == 'L' || Peek() == 'l') ++pos_;  // Python 2 long literal, as old numpy wrote
    return v;
  }

  StatusOr<std::vector<int64_t>> ParseShape() {
    if (!Consume('(')) return Error("expected a tuple such as (3, 4), (3,) or () for 'shape'");
    std::vector<int64_t> shape;
    bool comma_after_last = false;
    while (true) {
      if (Consume(')')) break;
      if (!shape.empty() && !comma_after_last) return Error("expected ',' or ')' in 'shape'");
      if (static_cast<int>(shape.size()) == kMaxRank) {
        return Error("'shape' has more than " + std::to_string(kMaxRank) + " dimensions");
      }
      LEAPCACHE_ASSIGN_OR_RETURN(const int64_t dim, ParseDim());
      shape.push_back(dim);
      comma_after_last = Consume(',');
    }
    // In Python "(3)" is the int 3, not a tuple; numpy would reject it too.
    if (shape.size() == 1 && !comma_after_last) {
      return Error("'shape' (" + std::to_string(shape[0]) + ") is not a tuple; a 1-d shape is (" +
                   std::to_string(shape[0]) + ",)");
    }
    return shape;
  }

  std::string_view t_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<NpyHeader> ParseNpyHeader(std::string_view text) { return HeaderParser(text).Parse(); }

StatusOr<int64_t> NumElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return InvalidArgumentError("shape " + ShapeToString(shape) + " has a negative dimension");
    }
  }
  for (int64_t d : shape) {
    if (d == 0) return int64_t{0};  // (0, 2^62, 2^62) is empty, not an overflow
  }
  for (int64_t d : shape) {
    if (n > kMaxInt64 / d) {
      return OutOfRangeError("shape " + ShapeToString(shape) + " has more than 2^63 elements");
    }
    n *= d;
  }
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

StatusOr<NpyArray> ReadNpy(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return NotFoundError(path + ": no such file");
  if (ec) return InvalidArgumentError(path + ": cannot stat: " + ec.message());
  if (fs::is_directory(st)) return InvalidArgumentError(path + ": is a directory, not a .npy file");
  const uintmax_t file_bytes = fs::file_size(path, ec);
  if (ec) return InvalidArgumentError(path + ": cannot get the file size: " + ec.message());

  if (file_bytes == 0) return InvalidArgumentError(path + ": is empty, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError(path + ": cannot open: " + ErrnoMessage());
  auto read_exact = [&](char* dst, size_t n) {
    in.read(dst, static_cast<std::streamsize>(n));
    return in.gcount() == static_cast<std::streamsize>(n);
  };

  // Magic (6), version (2), header length (2 in v1.0, 4 in v2.0 and v3.0).
  char preamble[12] = {};
  const size_t head = std::min<uintmax_t>(file_bytes, 8);
  if (!read_exact(preamble, head)) return DataLossError(path + ": read failed: " + ErrnoMessage());
  const std::string_view magic(preamble, std::min(head, kMagicBytes));
  if (magic != std::string_view(kMagic, kMagicBytes)) {
    return InvalidArgumentError(path +
                                ": not a .npy file (bad magic: expected \"\\x93NUMPY\", found \"" +
                                Escape(magic) + "\")");
  }
  if (head < 8) {
    return DataLossError(path + ": truncated .npy preamble (" + std::to_string(file_bytes) +
                         " bytes)");
  }
  const int major = static_cast<unsigned char>(preamble[6]);
  const int minor = static_cast<unsigned char>(preamble[7]);
  size_t len_bytes = 0;
  if (minor == 0 && major == 1) {
    len_bytes = 2;
  } else if (minor == 0 && (major == 2 || major == 3)) {
    len_bytes = 4;  // 3.0 differs from 2.0 only in allowing utf-8 in the header
  } else {
    return InvalidArgumentError(path + ": unsupported .npy format version " +
                                std::to_string(major) + "." + std::to_string(minor) +
                                " (supported: 1.0, 2.0, 3.0)");
  }
  const size_t preamble_bytes = 8 + len_bytes;
  if (file_bytes < preamble_bytes || !read_exact(preamble + 8, len_bytes)) {
    return DataLossError(path + ": truncated .npy preamble (" + std::to_string(file_bytes) +
                         " bytes)");
  }
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(preamble[8 + i])) << (8 * i);
  }
  if (header_len > file_bytes - preamble_bytes) {
    return DataLossError(path + ": header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(file_bytes) +
                         " bytes)");
  }
  std::string header_text(header_len, '\0');
  if (!read_exact(header_text.data(), header_len)) {
    return DataLossError(path + ": read failed: " + ErrnoMessage());
  }

  StatusOr<NpyHeader> parsed = ParseNpyHeader(header_text);
  if (!parsed.ok()) return Status(parsed.status().code(), path + ": " + parsed.status().message());
  NpyHeader& h = *parsed;
  if (h.descr != "<f4") {
    const std::string what = DescribeDtype(h.descr);
    return InvalidArgumentError(path + ": dtype '" + Escape(h.descr) + "'" +
                                (what.empty() ? "" : " (" + what + ")") +
                                " is not supported; expected '<f4' (little-endian float32): "
                                "save x.astype('<f4')");
  }
  if (h.fortran_order) {
    return InvalidArgumentError(path +
                                ": array is in Fortran order (fortran_order: True); only "
                                "C order is supported: save np.ascontiguousarray(x)");
  }
  StatusOr<int64_t> count = NumElements(h.shape);
  if (!count.ok() || *count > kMaxInt64 / 4) {
    return OutOfRangeError(path + ": shape " + ShapeToString(h.shape) +
                           " is too large to be held in memory");
  }
  const uint64_t want = static_cast<uint64_t>(*count) * 4;
  const uint64_t have = file_bytes - preamble_bytes - header_len;
  if (have < want) {
    return DataLossError(path + ": data is truncated: shape " + ShapeToString(h.shape) + " needs " +
                         std::to_string(want) + " bytes of '<f4' data, the file has " +
                         std::to_string(have));
  }
  if (have > want) {
    return DataLossError(path + ": " + std::to_string(have - want) +
                         " unexpected trailing bytes after the data of shape " +
                         ShapeToString(h.shape) + " (" + std::to_string(want) + " bytes)");
  }
  NpyArray a;
  a.shape = std::move(h.shape);
  a.data.resize(static_cast<size_t>(*count));
  if (want > 0 && !read_exact(reinterpret_cast<char*>(a.data.data()), want)) {
    return DataLossError(path + ": read of " + std::to_string(want) +
                         " data bytes failed (was the file changed while being read?)");
  }
  return a;
}

Status WriteNpy(const std::string& path, std::span<const int64_t> shape,
                std::span<const float> data) {
  namespace fs = std::filesystem;
  StatusOr<int64_t> count = NumElements(shape);
  if (!count.ok()) return Status(count.status().code(), path + ": " + count.status().message());
  if (static_cast<uint64_t>(*count) != data.size()) {
    return InvalidArgumentError(path + ": shape " + ShapeToString(shape) + " holds " +
                                std::to_string(*count) + " elements but " +
                                std::to_string(data.size()) + " were given");
  }
  // Byte for byte what np.save writes (numpy/lib/format.py, _write_array_header and
  // _wrap_header), so outputs can be checksummed against numpy's: the dict with sorted keys and
  // a trailing ", ", spare spaces for the first dimension to grow to 21 digits in place, then
  // 1 to 64 spaces and a newline so the data starts on a 64-byte boundary.
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + ShapeToString(shape) + ", }";
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    dict += std::string(kGrowthAxisMaxDigits - std::min(digits, kGrowthAxisMaxDigits), ' ');
  }
  auto padded = [&](size_t preamble_bytes) {
    const size_t unpadded = preamble_bytes + dict.size() + 1;
    return dict + std::string(kAlign - unpadded % kAlign, ' ') + "\n";
  };
  int major = 1;
  std::string header = padded(10);
  if (header.size() > std::numeric_limits<uint16_t>::max()) {  // numpy's fallback too
    major = 2;
    header = padded(12);
  }
  std::string preamble(kMagic, kMagicBytes);
  preamble += static_cast<char>(major);
  preamble += '\0';
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) {
    preamble += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }

  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return InvalidArgumentError(path + ": cannot create " + tmp + ": " + ErrnoMessage());
    out.write(preamble.data(), static_cast<std::streamsize>(preamble.size()));
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (!data.empty()) {
      out.write(reinterpret_cast<const char*>(data.data()),
                static_cast<std::streamsize>(data.size() * sizeof(float)));
    }
    out.close();
    if (!out) {
      const std::string why = ErrnoMessage();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return InternalError(path + ": writing " + tmp + " failed: " + why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic replace on POSIX: readers see the old file or the new one
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return InternalError(path + ": cannot rename " + tmp + " into place: " + ec.message());
  }
  return OkStatus();
}

Status CheckFinite(const std::string& name, const NpyArray& array) {
  for (size_t i = 0; i < array.data.size(); ++i) {
    const float x = array.data[i];
    if (std::isfinite(x)) continue;
    const char* value = std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
    std::string where = "flat index " + std::to_string(i);
    // For rank >= 2 also give numpy's a[i, j] index, unravelled in C order.
    const StatusOr<int64_t> count = NumElements(array.shape);
    if (array.shape.size() >= 2 && count.ok() &&
        static_cast<uint64_t>(*count) == array.data.size()) {
      std::vector<uint64_t> index(array.shape.size());
      uint64_t rest = i;
      for (size_t d = array.shape.size(); d-- > 0;) {
        index[d] = rest % static_cast<uint64_t>(array.shape[d]);
        rest /= static_cast<uint64_t>(array.shape[d]);
      }
      where += " (index [";
      for (size_t d = 0; d < index.size(); ++d) {
        where += (d > 0 ? ", " : "") + std::to_string(index[d]);
      }
      where += "])";
    }
    return InvalidArgumentError(name + ": non-finite value " + value + " at " + where);
  }
  return OkStatus();
}

}  // namespace leapcache::tools
