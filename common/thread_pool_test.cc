#include "common/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

namespace fanstore {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Spins until `pred` holds or `ms` pass; true when it held. Bounded so a broken pool fails the
// test instead of hanging it.
template <typename Pred>
bool WaitFor(Pred pred, int ms = 5000) {
  const auto deadline = steady_clock::now() + milliseconds(ms);
  while (!pred()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(ThreadPool, EveryTaskRunsBeforeTheDestructorReturns) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(4);
    EXPECT_EQ(pool.size(), 4u);
    for (int i = 0; i < 1000; i++) pool.Submit([&] { ran++; });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadPool, DestructorRunsTasksStillQueuedBehindABlockedOne) {
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  std::thread releaser;
  {
    ThreadPool pool(1);
    pool.Submit([&] {
      while (!release) std::this_thread::sleep_for(milliseconds(1));
    });
    for (int i = 0; i < 10; i++) pool.Submit([&] { ran++; });
    // Released only once the destructor has started waiting: queued work must still run.
    releaser = std::thread([&] {
      std::this_thread::sleep_for(milliseconds(20));
      release = true;
    });
  }
  releaser.join();
  EXPECT_EQ(ran.load(), 10);
}

TEST(ThreadPool, ZeroThreadsMeansOne) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(0);
    EXPECT_EQ(pool.size(), 1u);
    pool.Submit([&] { ran++; });
  }
  EXPECT_EQ(ran.load(), 1);
}

TEST(ThreadPool, OneThreadRunsTasksInSubmissionOrder) {
  std::vector<int> order;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; i++) pool.Submit([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(order[i], i);
}

TEST(ThreadPool, TwoThreadsRunTwoTasksAtOnce) {
  // Each task waits for the other to start: only a pool that really runs both at once
  // lets both see the count reach 2.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 2; i++)
      pool.Submit([&] {
        started++;
        if (WaitFor([&] { return started.load() == 2; }, 2000)) met++;
      });
  }
  EXPECT_EQ(met.load(), 2);
}

TEST(ThreadPool, TasksRunOnTheWorkersNotTheCaller) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  {
    ThreadPool pool(3);
    for (int i = 0; i < 60; i++)
      pool.Submit([&] {
        std::this_thread::sleep_for(milliseconds(1));
        std::lock_guard<std::mutex> l(mu);
        ids.insert(std::this_thread::get_id());
      });
  }
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  EXPECT_GE(ids.size(), 1u);
  EXPECT_LE(ids.size(), 3u);
}

TEST(ThreadPool, DefaultThreadsIsPositive) { EXPECT_GE(ThreadPool::DefaultThreads(), 1u); }

// The header's contract: tasks must not throw. One that does ends the process.
TEST(ThreadPoolDeathTest, AThrowingTaskTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        pool.Submit([] { throw 1; });
      },
      "");
}

TEST(TaskGroup, WaitReturnsOnlyWhenEveryTaskHasFinished) {
  ThreadPool pool(4);
  std::atomic<int> done{0};
  TaskGroup group(&pool, 100);
  for (int i = 0; i < 50; i++)
    group.Add([&] {
      std::this_thread::sleep_for(milliseconds(1));
      done++;
    });
  group.Wait();
  EXPECT_EQ(done.load(), 50);
}

TEST(TaskGroup, ABoundOfZeroStillRunsEveryTask) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  TaskGroup group(&pool, 0);
  for (int i = 0; i < 10; i++) group.Add([&] { done++; });
  group.Wait();
  EXPECT_EQ(done.load(), 10);
}

TEST(TaskGroup, NullPoolRunsTheTaskInlineBeforeAddReturns) {
  TaskGroup group(nullptr, 1);
  std::thread::id ran_on;
  group.Add([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(TaskGroup, AtMostMaxInFlightTasksArePending) {
  ThreadPool pool(4);
  std::atomic<int> running{0}, peak{0};
  {
    TaskGroup group(&pool, 2);
    for (int i = 0; i < 40; i++)
      group.Add([&] {
        int now = ++running;
        for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
        }
        std::this_thread::sleep_for(milliseconds(1));
        running--;
      });
  }  // the destructor waits
  EXPECT_EQ(running.load(), 0);
  EXPECT_LE(peak.load(), 2);
  EXPECT_GE(peak.load(), 1);
}

TEST(TaskGroup, AddBlocksWhileTheBoundIsReached) {
  ThreadPool pool(2);
  std::atomic<bool> release{false};
  TaskGroup group(&pool, 1);
  group.Add([&] {
    while (!release) std::this_thread::sleep_for(milliseconds(1));
  });
  std::atomic<bool> second_added{false};
  std::thread adder([&] {
    group.Add([] {});
    second_added = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(second_added.load());  // the first task still holds the only slot
  release = true;
  adder.join();
  EXPECT_TRUE(second_added.load());
  group.Wait();
}

TEST(TaskGroup, WhatATaskHoldsIsReleasedBeforeWaitReturns) {
  ThreadPool pool(2);
  auto held = std::make_shared<int>(7);
  TaskGroup group(&pool, 4);
  group.Add([held] { EXPECT_EQ(*held, 7); });
  group.Wait();
  EXPECT_EQ(held.use_count(), 1);
}

TEST(ParallelFor, EveryIndexRunsExactlyOnce) {
  for (size_t n : {0u, 1u, 7u, 1000u})
    for (size_t threads : {0u, 1u, 3u, 16u}) {
      std::vector<std::atomic<int>> hits(n);
      ParallelFor(n, threads, [&](size_t i) { hits[i]++; });
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(hits[i].load(), 1) << n << " " << threads << " " << i;
    }
}

TEST(ParallelFor, OneThreadIsTheCallersOwn) {
  std::set<std::thread::id> ids;
  ParallelFor(20, 1, [&](size_t) { ids.insert(std::this_thread::get_id()); });
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(*ids.begin(), std::this_thread::get_id());
}

TEST(ParallelFor, TwoThreadsRunTwoIndexesAtOnce) {
  std::atomic<int> started{0}, met{0};
  ParallelFor(2, 2, [&](size_t) {
    started++;
    if (WaitFor([&] { return started.load() == 2; }, 2000)) met++;
  });
  EXPECT_EQ(met.load(), 2);
}

// Where no thread can be started (RLIMIT_NPROC reached, here as another user in a child: root
// is not held to it), the caller's thread does every index.
TEST(ParallelFor, WithoutThreadsTheCallerDoesEveryIndex) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become a user held to RLIMIT_NPROC";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit none = {0, 0};
    if (::setgid(65534) != 0 || ::setuid(65534) != 0 || ::setrlimit(RLIMIT_NPROC, &none) != 0)
      ::_exit(2);
    bool refused = false;
    try {
      std::thread([] {}).join();
    } catch (const std::system_error&) {
      refused = true;
    }
    std::atomic<int> done{0};
    ParallelFor(100, 8, [&](size_t) { done++; });
    ::_exit(!refused ? 3 : done == 100 ? 0 : 1);
  }
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws));
  EXPECT_EQ(WEXITSTATUS(ws), 0) << "2: could not become nobody; 3: a thread was still started";
}

}  // namespace
}  // namespace fanstore
