// Shared set-up of the training tests: a small, fast TGN run on CollegeMsg.
#ifndef MNEMO_TESTS_UNIT_RUNTIME_TRAIN_TEST_UTIL_H_
#define MNEMO_TESTS_UNIT_RUNTIME_TRAIN_TEST_UTIL_H_

#include <cstdlib>
#include <string>

#include "trainer/runtime/train.h"

namespace mnemo::runtime::testing {

inline std::string SharedData() {
  const char* d = std::getenv("MNEMO_SHARED_DATA");
  return d ? d : "../shared/data";
}

// TGN with 32-wide memory/time/embeddings on CollegeMsg, 2 epochs.
inline TrainOptions SmallRun() {
  TrainOptions o;
  o.data.dataset = "collegemsg";
  o.data.data_dirs = {SharedData()};
  o.model.memory_dim = 32;
  o.model.time_dim = 32;
  o.model.embedding_dim = 32;
  o.optim.batch_size = 200;
  o.optim.lr = 1e-3;
  o.optim.epochs = 2;
  o.compute.threads = 2;
  o.optim.seed = 7;
  o.optim.patience = 0;
  o.run.progress_interval_s = 1e9;
  return o;
}

inline TrainCallbacks Quiet() {
  TrainCallbacks cb;
  cb.log = [](const std::string&) {};
  return cb;
}

}  // namespace mnemo::runtime::testing

#endif  // MNEMO_TESTS_UNIT_RUNTIME_TRAIN_TEST_UTIL_H_
