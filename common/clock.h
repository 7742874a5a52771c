// The steady clock, as the agent and the tools time their steps: seconds since a point, and the
// clock as nanoseconds (for a time kept in an atomic).
#pragma once

#include <chrono>
#include <cstdint>

namespace fanstore {

using SteadyClock = std::chrono::steady_clock;

inline double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

inline int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

}  // namespace fanstore
