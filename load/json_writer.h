// A minimal streaming JSON writer for the reports: objects, arrays, strings (escaped), integers
// and finite doubles (non-finite ones are written as null, which JSON requires). Commas are
// placed by the writer, so callers cannot produce malformed output by forgetting one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace leapcache::load {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value (inside an object).
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view v);
  JsonWriter& Int(int64_t v);
  JsonWriter& Uint(uint64_t v);
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool v);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  void Escaped(std::string_view v);
  void Newline();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace leapcache::load
