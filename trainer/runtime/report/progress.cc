#include "trainer/runtime/report/progress.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "util/proc.h"

namespace mnemo::runtime {

void Progress::Start(std::string label, int64_t total) {
  label_ = std::move(label);
  total_ = total;
  done_ = 0;
  start_ = last_ = MonotonicSeconds();
}

void Progress::Advance(int64_t n, double loss) {
  done_ += n;
  const double now = MonotonicSeconds();
  const double elapsed = now - start_;
  const double rate = elapsed > 0 ? done_ / elapsed : 0;
  const double eta = rate > 0 ? (total_ - done_) / rate : 0;
  if (bar_) {
    if (now - last_ < 0.2 && done_ < total_) return;
    last_ = now;
    const int width = 30;
    const int filled =
        total_ ? static_cast<int>(width * done_ / total_) : width;
    const std::string loss_text =
        loss >= 0 ? absl::StrFormat("  loss %.4f", loss) : "";
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %8.0f ev/s  ETA %4.0fs%s ",
                 label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(),
                 total_ ? static_cast<int>(100 * done_ / total_) : 100, rate,
                 eta, loss_text.c_str());
    if (done_ >= total_) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  } else if (now - last_ >= interval_ && done_ < total_) {
    last_ = now;
    Log(absl::StrFormat("%s %d/%d events (%.0f%%), %.0f ev/s, ETA %.0fs%s",
                        label_, done_, total_, 100.0 * done_ / total_, rate,
                        eta,
                        loss >= 0 ? absl::StrFormat(", loss %.4f", loss) : ""));
  }
}

void Progress::Log(const std::string& line) const {
  if (cb_.log) {
    cb_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace mnemo::runtime
