// bf16 autocast (fp32 master weights) on a device, as a region the caller
// opens and closes: within it LibTorch runs the products in bf16 and
// caches each weight's cast (a leaf fp32 tensor that requires grad) from
// its first use until the region ends, across Pause and Resume: one cast per
// weight per region, whose backward turns the bf16 gradient into the fp32
// one. End() drops the casts, so a region must end before its weights
// change (the training step's region ends before the optimizer step; an
// evaluation pass, which changes none, holds one region for the pass), and
// casts made with gradients off (evaluation) never reach a later region.
// LibTorch's cache is keyed by the weight and shared by the process's
// threads: another region's End() only costs this one a second cast.
#ifndef MNEMO_TRAINER_PLATFORM_AUTOCAST_H_
#define MNEMO_TRAINER_PLATFORM_AUTOCAST_H_

#include <ATen/autocast_mode.h>

namespace mnemo::platform {

class AutocastRegion {
 public:
  AutocastRegion() = default;
  ~AutocastRegion() { End(); }
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;

  // Opens a region on `device` when `enabled` (a no-op otherwise).
  void Begin(bool enabled, at::DeviceType device) {
    End();
    if (!enabled) return;
    device_ = device;
    open_ = true;
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  // Runs nothing in bf16 until Resume, keeping the cached casts (work in
  // the region that must stay in fp32, such as node memory's writes).
  void Pause() {
    if (open_) at::autocast::set_autocast_enabled(device_, false);
  }
  void Resume() {
    if (open_) at::autocast::set_autocast_enabled(device_, true);
  }
  // Closes the region: casts off, their cache cleared.
  void End() {
    if (!open_) return;
    open_ = false;
    at::autocast::set_autocast_enabled(device_, false);
    at::autocast::clear_cache();
  }

 private:
  bool open_ = false;
  at::DeviceType device_ = at::kCPU;
};

// A region for the scope's life.
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled, at::DeviceType device = at::kCPU) {
    region_.Begin(enabled, device);
  }

 private:
  AutocastRegion region_;
};

}  // namespace mnemo::platform

#endif  // MNEMO_TRAINER_PLATFORM_AUTOCAST_H_
