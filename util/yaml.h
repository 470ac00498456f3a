// A reader for the flat YAML subset mnemo's --config files use.
#ifndef MNEMO_UTIL_YAML_H_
#define MNEMO_UTIL_YAML_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo {

// Parses "key: value" lines: '#' comments, blank lines, optional quotes
// around values, an optional leading "---". One level of nesting is flattened
// with '.'/'-' joined keys is NOT supported: a config is a flat map of flag
// names (dashes or underscores) to scalar values, e.g.
//   model: tgn
//   memory-dim: 172
//   batch_size: 200
// Errors: INVALID_ARGUMENT naming the file and line for anything else
// (indentation, lists, duplicate keys).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlatYaml(
    const std::string& text, const std::string& file_name);

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ReadFlatYamlFile(const std::string& path);

}  // namespace mnemo

#endif  // MNEMO_UTIL_YAML_H_
