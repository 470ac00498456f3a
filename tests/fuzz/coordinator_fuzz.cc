// Fuzzes the coordinator's RPCs against a running job
// (tests/fuzz/coordinator_driver.h): each input is a sequence of raw
// requests to a fresh CoordinatorServer whose job has two of its three
// workers joined. A refused Join must leave the job and its workers as
// they were; no call may answer UNKNOWN or, unless it waits by design,
// take seconds. Regression cases: coordinator_service_test
// (CoordinatorFuzzRegressionTest).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tests/fuzz/coordinator_driver.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void WriteSeeds(const std::string& dir) {
  int i = 0;
  for (const auto& [name, input] : mnemo::fuzz::CoordinatorSeeds()) {
    mnemo::fuzz::WriteSeed(dir, i++, input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mnemo::fuzz::MaybeWriteSeedsAndExit(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  auto job = mnemo::fuzz::CoordinatorJob::Start(&error);
  if (job == nullptr) mnemo::fuzz::Fail("cannot start the job: " + error);
  error =
      job->Drive(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!error.empty()) mnemo::fuzz::Fail(error);
  return 0;
}
