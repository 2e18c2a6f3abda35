// The engine's clock for tests: time moves only when the test says so.
#pragma once

#include "absl/time/time.h"
#include "util/clock.h"

namespace attn::testing {

class FakeClock : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
};

}  // namespace attn::testing
