// Tests that run a cluster's ranks as threads of one process include this.
// c10d's flight recorder (one per process, recording every collective as
// it is enqueued) crashed in its bookkeeping when several ranks' process
// groups enqueued at once (a segmentation fault in collectives_test, 1 run
// in 30); mnemo runs one rank per process, where one thread enqueues. The
// recorder is turned off before any group exists (an operator's own
// TORCH_FR_BUFFER_SIZE wins).
#ifndef MNEMO_TESTS_UNIT_RUNTIME_THREADED_RANKS_H_
#define MNEMO_TESTS_UNIT_RUNTIME_THREADED_RANKS_H_

#include <cstdlib>

namespace mnemo::runtime::testing {

inline const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

}  // namespace mnemo::runtime::testing

#endif  // MNEMO_TESTS_UNIT_RUNTIME_THREADED_RANKS_H_
