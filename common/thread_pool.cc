// ThreadPool and TaskGroup.
#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

namespace fanstore {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; i++) workers_.emplace_back([this] { Run(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

size_t ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 2 : n;
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void TaskGroup::Add(std::function<void()> task) {
  if (!pool_) {
    task();
    return;
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return pending_ < max_; });
    pending_++;
  }
  pool_->Submit([this, task = std::move(task)]() mutable {
    task();
    task = nullptr;  // release what the task holds before Wait() can return
    std::lock_guard<std::mutex> l(mu_);
    pending_--;
    cv_.notify_all();
  });
}

void TaskGroup::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return pending_ == 0; });
}

void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> extra;
  try {
    for (size_t t = 1; t < std::min(threads, n); t++) extra.emplace_back(worker);
  } catch (const std::system_error&) {
    // No thread to be had (a pids cgroup, RLIMIT_NPROC): the ones started and this one do it.
  }
  worker();
  for (auto& t : extra) t.join();
}

}  // namespace fanstore
