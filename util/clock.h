// The time source of everything that waits or measures in the server:
// real for the server, a fake that moves only when told in tests
// (tests/server/fake_clock.h). One clock is handed down, so that a test's
// engine and its store see the same time.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace attn {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// absl::Now(), for the server.
inline Clock& RealClock() {
  class SystemClock : public Clock {
   public:
    absl::Time Now() const override { return absl::Now(); }
  };
  static SystemClock clock;
  return clock;
}

}  // namespace attn
