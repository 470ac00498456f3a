// Progress display of a training or evaluation pass: a \r progress bar on a
// terminal, otherwise a plain line every few seconds.
#ifndef MNEMO_TRAINER_RUNTIME_REPORT_PROGRESS_H_
#define MNEMO_TRAINER_RUNTIME_REPORT_PROGRESS_H_

#include <cstdint>
#include <string>

#include "trainer/runtime/train.h"

namespace mnemo::runtime {

class Progress {
 public:
  Progress(const TrainOptions& o, const TrainCallbacks& cb)
      : bar_(o.run.progress_bar),
        interval_(o.run.progress_interval_s),
        cb_(cb) {}

  void Start(std::string label, int64_t total);
  // `loss` < 0: none to show.
  void Advance(int64_t n, double loss);
  // An informational line (the callback's log, else stderr).
  void Log(const std::string& line) const;

 private:
  bool bar_;
  double interval_;
  const TrainCallbacks& cb_;
  std::string label_;
  int64_t total_ = 0, done_ = 0;
  double start_ = 0, last_ = 0;
};

}  // namespace mnemo::runtime

#endif  // MNEMO_TRAINER_RUNTIME_REPORT_PROGRESS_H_
