#include "util/json.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace mnemo {

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

void JsonWriter::Newline() {
  if (!pretty_) return;
  out_ += '\n';
  out_.append(2 * first_.size(), ' ');
}

void JsonWriter::Separator() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (first_.empty()) return;
  if (!first_.back()) out_ += ',';
  first_.back() = false;
  Newline();
}

void JsonWriter::BeginObject() {
  Separator();
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::EndObject() {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) Newline();
  out_ += '}';
}

void JsonWriter::BeginArray() {
  Separator();
  out_ += '[';
  first_.push_back(true);
}

void JsonWriter::EndArray() {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) Newline();
  out_ += ']';
}

void JsonWriter::Key(std::string_view key) {
  Separator();
  out_ += '"';
  out_ += JsonEscape(key);
  out_ += pretty_ ? "\": " : "\":";
  after_key_ = true;
}

void JsonWriter::String(std::string_view value) {
  Separator();
  out_ += '"';
  out_ += JsonEscape(value);
  out_ += '"';
}

void JsonWriter::Number(double value) {
  Separator();
  if (!std::isfinite(value)) {
    out_ += "null";
  } else {
    out_ += absl::StrFormat("%.10g", value);
  }
}

void JsonWriter::Int(int64_t value) {
  Separator();
  out_ += absl::StrFormat("%d", value);
}

void JsonWriter::Uint(uint64_t value) {
  Separator();
  out_ += absl::StrFormat("%d", value);
}

void JsonWriter::Bool(bool value) {
  Separator();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  Separator();
  out_ += "null";
}

}  // namespace mnemo
