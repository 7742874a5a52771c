// A fixed-size thread pool and a TaskGroup that waits for (and bounds) its own tasks.
// Thread safety: Submit may be called from any thread; tasks must not throw.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fanstore {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads);
  ~ThreadPool();  // runs queued tasks to completion, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);
  size_t size() const { return workers_.size(); }
  static size_t DefaultThreads();

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Tracks tasks submitted through it. Add() blocks while `max_in_flight` tasks are pending,
// which bounds memory held by queued work. Wait() returns when all have finished.
class TaskGroup {
 public:
  // At least one task is let in flight (0 would block the first Add for ever).
  TaskGroup(ThreadPool* pool, size_t max_in_flight)
      : pool_(pool), max_(max_in_flight > 0 ? max_in_flight : 1) {}
  ~TaskGroup() { Wait(); }
  // With a null pool the task runs inline.
  void Add(std::function<void()> task);
  void Wait();

 private:
  ThreadPool* pool_;
  size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t pending_ = 0;
};

// Runs fn(0) ... fn(n - 1) on `threads` threads (the caller's among them), each taking the
// next index as it finishes one; returns when all are done. Threads that cannot be started
// (a pids cgroup, RLIMIT_NPROC) leave their share to the others.
void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn);

}  // namespace fanstore
