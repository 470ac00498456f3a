#include "util/yaml.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mnemo {

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlatYaml(
    const std::string& text, const std::string& file_name) {
  std::vector<std::pair<std::string, std::string>> out;
  absl::flat_hash_map<std::string, int> seen;
  int line_no = 0;
  // A UTF-8 byte-order mark (Windows editors write one; YAML allows it) is
  // not part of the first key. UTF-16 is refused by name.
  absl::string_view body = text;
  absl::ConsumePrefix(&body, "\xEF\xBB\xBF");
  if (absl::StartsWith(body, "\xFF\xFE") ||
      absl::StartsWith(body, "\xFE\xFF")) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name,
                     ": the file is UTF-16 text (it starts with a UTF-16 "
                     "byte-order mark); save it as UTF-8"));
  }
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    ++line_no;
    auto where = [&] { return absl::StrCat(file_name, ":", line_no, ": "); };
    absl::string_view raw = line;
    absl::ConsumeSuffix(&raw, "\r");
    // Strip a comment that starts the line or follows whitespace.
    std::string content(raw);
    bool in_quote = false;
    char quote = 0;
    for (size_t i = 0; i < content.size(); ++i) {
      char c = content[i];
      if (in_quote) {
        if (c == quote) in_quote = false;
      } else if (c == '"' || c == '\'') {
        in_quote = true;
        quote = c;
      } else if (c == '#' &&
                 (i == 0 || content[i - 1] == ' ' || content[i - 1] == '\t')) {
        content.resize(i);
        break;
      }
    }
    absl::string_view s = absl::StripTrailingAsciiWhitespace(content);
    if (absl::StripLeadingAsciiWhitespace(s).empty()) continue;
    if (s == "---" || s == "...") continue;
    if (s[0] == ' ' || s[0] == '\t') {
      return absl::InvalidArgumentError(
          absl::StrCat(where(),
                       "nested values are not supported; a config is a flat "
                       "list of 'flag-name: value' lines"));
    }
    if (s[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "lists are not supported"));
    }
    size_t colon = s.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "expected 'key: value', got '", s, "'"));
    }
    std::string key(absl::StripAsciiWhitespace(s.substr(0, colon)));
    std::string value(absl::StripAsciiWhitespace(s.substr(colon + 1)));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "empty key"));
    }
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    } else if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "key '", key, "' has no value (nesting is not supported)"));
    }
    for (char& c : key) {
      if (c == '_') c = '-';
    }
    if (auto [it, inserted] = seen.emplace(key, line_no); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "duplicate key '",
                                                     key, "' (first on line ",
                                                     it->second, ")"));
    }
    out.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ReadFlatYamlFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // An ifstream opens a directory and reads nothing: an empty config.
    return absl::InvalidArgumentError(absl::StrCat(
        "config file '", path, "' is a directory (give a YAML file)"));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open config file '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseFlatYaml(ss.str(), path);
}

}  // namespace mnemo
