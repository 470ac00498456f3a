// Fuzzes the --config reader (util/yaml.h ParseFlatYaml): every input gives
// a status; a parsed config is a flat list of distinct, trimmed, non-empty
// keys (underscores turned into dashes) with values.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "tests/fuzz/fuzz_util.h"
#include "util/yaml.h"

namespace {

using mnemo::fuzz::Fail;

void WriteSeeds(const std::string& dir) {
  const char* seeds[] = {
      "model: tgn\nmemory-dim: 172\nbatch_size: 200\n",
      "---\n# a comment\npolicy: deptgl  # trailing\nseed: 7\n...\n",
      "data: \"wikipedia\"\nout: 'runs/x y'\nlr: 1e-4\r\nepochs: 3\n",
      "name: \"a # not a comment\"\nkey: 'it''s'\n",
      "nested:\n  key: 1\n",
      "- list\n- items\n",
      "dup: 1\ndup-: 2\nd_up: 3\nd-up: 4\n",
      "no value:\n",
      ": empty key\n",
      "url: http://host:8080/path\n",
  };
  int i = 0;
  for (const char* s : seeds) mnemo::fuzz::WriteSeed(dir, i++, s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = mnemo::ParseFlatYaml(text, "fuzz.yaml");
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument)
      Fail("unexpected error code: " + parsed.status().ToString());
    return 0;
  }
  std::set<std::string> keys;
  for (const auto& [key, value] : *parsed) {
    if (key.empty()) Fail("empty key");
    if (key.find('_') != std::string::npos) Fail("key with '_': " + key);
    if (key.find(':') != std::string::npos) Fail("key with ':': " + key);
    if (key.find('\n') != std::string::npos) Fail("key with a newline");
    if (value.find('\n') != std::string::npos) Fail("value with a newline");
    if (absl::StripAsciiWhitespace(key) != key) Fail("untrimmed key: " + key);
    if (!keys.insert(key).second) Fail("duplicate key: " + key);
  }
  return 0;
}
