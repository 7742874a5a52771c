// The kernel-visible view: the dataset as a read-only FUSE file system, for what the interceptor
// cannot reach (static binaries, raw system calls, exec, dlopen and the loader's library search,
// processes in containers). The privileged SPANK plugin mounts it at the virtual path in each
// task's own mount namespace and hands the /dev/fuse descriptor to this node's agent (proto
// kServeView), which serves it here until the mount goes away (the task's namespace ends) or the
// agent stops. The interceptor stays the fast path: a program whose libc calls it intercepts
// never reaches this view.
//
// Served from the agent's metadata table (node ids are table entries + 1, so no per-file state)
// and, for a file's bytes, from the real descriptor the interceptor would get (Agent::Open:
// the staged file, unpacked on demand, or the peer cache). Everything is immutable, so the
// kernel caches entries, attributes and pages for as long as the mount lives.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "agent/server.h"
#include "common/status.h"
#include "common/table.h"
#include "common/unique_fd.h"

namespace fanstore::agent {

class KernelView {
 public:
  // `open` returns a real read-only descriptor for a regular file's relative path, or an errno.
  using OpenFn = std::function<Reply(const std::string& rel)>;
  static constexpr int kThreadsPerMount = 2;
  static constexpr int kMaxMounts = 1024;  // tasks on one node at once

  KernelView(const table::TableView& table, OpenFn open);
  ~KernelView();
  KernelView(const KernelView&) = delete;
  KernelView& operator=(const KernelView&) = delete;

  // Serves the FUSE connection `dev` (a descriptor of /dev/fuse already mounted by the plugin;
  // anything else is refused) until it is unmounted or Stop.
  Status Serve(UniqueFD dev);
  // Ends every connection's threads (the mounts then answer ENOTCONN) and joins them.
  void Stop();
  // Mounts being served now.
  size_t mounts();

 private:
  struct Mount;
  void Reap();  // joins the threads of mounts that went away

  const table::TableView& table_;
  OpenFn open_;
  std::mutex mu_;
  std::list<std::unique_ptr<Mount>> mounts_;
  bool stopped_ = false;
};

}  // namespace fanstore::agent
