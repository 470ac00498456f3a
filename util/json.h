// A small streaming JSON writer (for summary.json and benchmark results).
#ifndef MNEMO_UTIL_JSON_H_
#define MNEMO_UTIL_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo {

// Builds compact, valid JSON text. Not thread-safe. Usage:
//   JsonWriter w; w.BeginObject(); w.Key("a"); w.Number(1); w.EndObject();
//   std::string text = w.str();
class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = true) : pretty_(pretty) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(std::string_view key);
  void String(std::string_view value);
  void Number(double value);  // NaN and infinities are written as null
  void Int(int64_t value);
  void Uint(uint64_t value);
  void Bool(bool value);
  void Null();

  // Key + value shorthands.
  void Field(std::string_view key, std::string_view value) {
    Key(key);
    String(value);
  }
  void Field(std::string_view key, const char* value) {
    Key(key);
    String(value);
  }
  void Field(std::string_view key, double value) {
    Key(key);
    Number(value);
  }
  void Field(std::string_view key, int64_t value) {
    Key(key);
    Int(value);
  }
  void Field(std::string_view key, int value) {
    Key(key);
    Int(value);
  }
  void Field(std::string_view key, uint64_t value) {
    Key(key);
    Uint(value);
  }
  void Field(std::string_view key, bool value) {
    Key(key);
    Bool(value);
  }

  const std::string& str() const { return out_; }

 private:
  void Separator();
  void Newline();

  bool pretty_;
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

std::string JsonEscape(std::string_view s);

}  // namespace mnemo

#endif  // MNEMO_UTIL_JSON_H_
