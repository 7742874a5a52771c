// Tests only: run a body on several threads released together, for races worth provoking.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace fanstore::test {

// Runs body(t) for t in [0, n) on n threads, each starting once all of them are up, and joins.
inline void RunTogether(int n, const std::function<void(int)>& body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++)
    threads.emplace_back([&, t] {
      ready++;
      while (ready < n) std::this_thread::yield();
      body(t);
    });
  for (auto& t : threads) t.join();
}

}  // namespace fanstore::test
