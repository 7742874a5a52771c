// fanstore-mktable: serves a real directory tree at a virtual mount, for tests.
//
//   fanstore-mktable [--remote PATTERN]... SOURCE_DIR TABLE_FILE
//
// Walks SOURCE_DIR (without following symlinks) and writes a metadata table in which every
// regular file is kLocal and the local root is SOURCE_DIR itself, so the interceptor opens the
// source files directly. Files whose relative path matches a --remote fnmatch(3) pattern are
// not kLocal: their opens go to the agent. Modes, sizes, mtimes and symlink targets are
// copied; the owner is the caller. Test-only: the agent builds the real tables.
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <string>
#include <vector>

#include "common/hash.h"
#include "common/table_builder.h"

namespace {

using fanstore::table::Node;

std::vector<Node>* g_nodes;
std::deque<std::string> g_strings;  // the bytes behind the nodes' views
std::vector<const char*> g_remote;
size_t g_root_len;

int Visit(const char* path, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_NS || type == FTW_DNR) {
    fprintf(stderr, "fanstore-mktable: cannot read %s\n", path);
    return 1;
  }
  Node n;
  n.path = g_strings.emplace_back(strlen(path) > g_root_len ? path + g_root_len + 1 : "");
  n.mode = st->st_mode;
  n.size = static_cast<uint64_t>(st->st_size);
  n.mtime_ns = int64_t{st->st_mtim.tv_sec} * 1000000000 + st->st_mtim.tv_nsec;
  if (S_ISREG(st->st_mode)) {
    n.flags = fanstore::table::kLocal;
    for (const char* pattern : g_remote)
      if (fnmatch(pattern, n.path.data(), 0) == 0)
        n.flags = 0;  // NUL-terminated: a whole deque string
  }
  if (S_ISLNK(st->st_mode)) {
    char target[PATH_MAX];
    ssize_t len = readlink(path, target, sizeof target);
    if (len < 0) {
      perror(path);
      return 1;
    }
    n.text = g_strings.emplace_back(target, static_cast<size_t>(len));
  }
  g_nodes->push_back(std::move(n));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int arg = 1;
  bool hold = false;
  while (arg < argc && argv[arg][0] == '-') {
    if (strcmp(argv[arg], "--hold") == 0) {
      hold = true;
      arg++;
    } else if (strcmp(argv[arg], "--remote") == 0 && arg + 1 < argc) {
      g_remote.push_back(argv[arg + 1]);
      arg += 2;
    } else {
      break;
    }
  }
  if (argc - arg != 2) {
    fprintf(stderr,
            "usage: fanstore-mktable [--hold] [--remote PATTERN]... SOURCE_DIR TABLE_FILE\n"
            "  --hold  stay in the foreground as the table's \"agent\" (clients see a live\n"
            "          agent) until SIGTERM or SIGINT; prints \"ready\" when the table is up\n");
    return 2;
  }
  char root[PATH_MAX];
  if (!realpath(argv[arg], root)) {
    perror(argv[arg]);
    return 1;
  }
  std::vector<Node> nodes;
  g_nodes = &nodes;
  g_root_len = strlen(root);
  if (nftw(root, Visit, 64, FTW_PHYS) != 0) return 1;

  fanstore::table::BuildOptions opts;
  opts.local_root = root;
  opts.dev = 0xfa5700000000ULL | (fanstore::Xxh3(root) & 0xffff);
  opts.dataset_id = fanstore::Xxh3(root);
  opts.uid = getuid();
  opts.gid = getgid();
  auto image = fanstore::table::Build(std::move(nodes), opts);
  if (!image.ok()) {
    fprintf(stderr, "fanstore-mktable: %s\n", image.status().ToString().c_str());
    return 1;
  }
  fanstore::Status s = fanstore::table::WriteFile(argv[arg + 1], image.value());
  if (!s.ok()) {
    fprintf(stderr, "fanstore-mktable: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!hold) return 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  fanstore::table::AgentLock lock;
  s = lock.Acquire(argv[arg + 1]);
  if (!s.ok()) {
    fprintf(stderr, "fanstore-mktable: %s\n", s.ToString().c_str());
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  return 0;
}
