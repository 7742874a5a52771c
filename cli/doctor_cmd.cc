// `fanstore doctor`: checks that a node can run FanStore jobs, before the first one does. Each
// check prints one line, `ok`, `warn` or `FAIL`, and for a problem says what is wrong and what to
// do. Exit 0 when nothing FAILs, 1 otherwise.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <munge.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/io.h"
#include "common/text.h"
#include "common/unique_fd.h"
#ifdef FANSTORE_HAVE_SPANK_CONFIG
#include "spank-plugin/config.h"
#endif

namespace fanstore::cli {
namespace {

constexpr const char* kPluginFile = "spank_fanstore.so";
constexpr uint64_t kLowSpace = 10ull << 30;  // below this a large dataset will not fit
constexpr uint64_t kLowInodes = 1000000;     // datasets of small files are staged as files
constexpr rlim_t kLowNofile = 65536;         // the agent keeps a descriptor per open shard

struct Check {
  std::string name, status, detail, fix;
};

class Report {
 public:
  void Add(std::string name, const char* status, std::string detail, std::string fix = "") {
    checks_.push_back({std::move(name), status, std::move(detail), std::move(fix)});
  }
  void Ok(std::string name, std::string detail) { Add(std::move(name), "ok", std::move(detail)); }
  void Warn(std::string name, std::string detail, std::string fix) {
    Add(std::move(name), "warn", std::move(detail), std::move(fix));
  }
  void Fail(std::string name, std::string detail, std::string fix) {
    Add(std::move(name), "FAIL", std::move(detail), std::move(fix));
  }
  bool Failed() const {
    for (const Check& c : checks_)
      if (c.status == "FAIL") return true;
    return false;
  }
  void Print(bool json, bool quiet) const {
    nlohmann::json out = nlohmann::json::array();
    for (const Check& c : checks_) {
      if (quiet && c.status == "ok") continue;
      if (json) {
        out.push_back({{"check", c.name}, {"status", c.status}, {"detail", c.detail}});
        if (!c.fix.empty()) out.back()["fix"] = c.fix;
        continue;
      }
      std::printf("%-4s  %-12s %s%s%s\n", c.status.c_str(), c.name.c_str(), c.detail.c_str(),
                  c.fix.empty() ? "" : ". Fix: ", c.fix.c_str());
    }
    if (json)
      std::printf("%s\n",
                  out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }

 private:
  std::vector<Check> checks_;
};

std::string Dirname(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string Basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// ---- plugstack.conf ----------------------------------------------------------------------

struct PluginLine {
  std::string where;  // FILE:LINE
  std::string kind;   // required or optional
  std::string so;     // the plugin path, resolved against Slurm's plugin directory
  std::vector<std::string> args;
};

struct Plugstack {
  std::vector<PluginLine> lines;      // those naming spank_fanstore.so
  std::vector<std::string> problems;  // unreadable files, includes nested too deep
};

// Reads `file` as Slurm does: `required|optional PLUGIN ARGS...` and `include GLOB` lines,
// '#' starting a comment. Includes are followed, relative ones from the file's directory.
void ScanPlugstack(const std::string& file, int depth, Plugstack* ps) {
  auto text = ReadSmallFile(file, 1 << 20);
  if (!text.ok()) {
    ps->problems.push_back(text.status().ToString());
    return;
  }
  int n = 0;
  for (std::string_view line : Split(*text, '\n')) {
    n++;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    std::vector<std::string> words;
    for (std::string_view w : Split(line, ' '))
      for (std::string_view v : Split(w, '\t')) words.emplace_back(v);
    if (words.empty()) continue;
    if (words[0] == "include" && words.size() >= 2) {
      if (depth >= 8) {
        ps->problems.push_back(file + ":" + std::to_string(n) + ": includes nest too deep");
        continue;
      }
      const std::string pattern = words[1][0] == '/' ? words[1] : Dirname(file) + "/" + words[1];
      glob_t g{};
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) ScanPlugstack(g.gl_pathv[i], depth + 1, ps);
      ::globfree(&g);
      continue;
    }
    if ((words[0] == "required" || words[0] == "optional") && words.size() >= 2 &&
        Basename(words[1]) == kPluginFile) {
      PluginLine pl;
      pl.where = file + ":" + std::to_string(n);
      pl.kind = words[0];
      pl.so =
          words[1][0] == '/' ? words[1] : std::string(FANSTORE_SLURM_PLUGIN_DIR) + "/" + words[1];
      pl.args.assign(words.begin() + 2, words.end());
      ps->lines.push_back(std::move(pl));
    }
  }
}

// Runs argv (no shell) and returns its standard output and error, or nothing when it cannot
// start; a command still running after `seconds` is killed.
std::optional<std::string> RunCapture(const std::vector<std::string>& argv, int seconds) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return std::nullopt;
  UniqueFD rd(p[0]), wr(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    ::dup2(wr.get(), 1);
    ::dup2(wr.get(), 2);
    std::vector<char*> av;
    for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  wr.Reset();
  std::string out;
  char buf[4096];
  struct pollfd pfd = {rd.get(), POLLIN, 0};
  while (::poll(&pfd, 1, seconds * 1000) > 0) {
    const ssize_t r = ::read(rd.get(), buf, sizeof buf);
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::kill(pid, SIGKILL);  // harmless when it has ended; it is still our unreaped child
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && out.empty()) return std::nullopt;
  return out;
}

// "22.05.8" from srun --version ("slurm-wlm 22.05.8" or "slurm 23.02.1", perhaps after error
// lines of its own); empty when unknown.
std::string SlurmVersion(const std::string& srun) {
  auto out = RunCapture({srun, "--version"}, 10);
  if (!out) return "";
  for (const auto& line : Split(*out, '\n')) {
    const std::string_view l(line);
    const size_t sp = l.find(' ');
    if (l.rfind("slurm", 0) != 0 || sp == std::string_view::npos) continue;
    std::string v(l.substr(sp + 1));
    while (!v.empty() && v.back() == ' ') v.pop_back();
    return v;
  }
  return "";
}

// Loads the plugin in a child process (a plugin that crashes on load takes only the child down)
// and reads its name and the Slurm version it was built for. Returns an error text, or "".
std::string LoadPlugin(const std::string& so, std::string* name, unsigned* version) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return std::strerror(errno);
  UniqueFD rd(p[0]), wr(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return std::strerror(errno);
  if (pid == 0) {
    // Slurm's own symbols (slurm_*) are resolved by the loading program: lazily, they need not be.
    void* h = ::dlopen(so.c_str(), RTLD_LAZY | RTLD_LOCAL);
    std::string msg;
    if (!h) {
      msg = std::string("E") + ::dlerror();
    } else {
      const auto* n = static_cast<const char*>(::dlsym(h, "plugin_name"));
      const auto* v = static_cast<const unsigned*>(::dlsym(h, "plugin_version"));
      if (!n || !v || !::dlsym(h, "slurm_spank_init"))
        msg = "Eit is not a SPANK plugin (no plugin_name, plugin_version or slurm_spank_init)";
      else
        msg = "V" + std::to_string(*v) + " " + n;
    }
    (void)WriteFull(wr.get(), msg.data(), msg.size(), "pipe");
    ::_exit(0);
  }
  wr.Reset();
  std::string msg;
  char buf[1024];
  for (ssize_t r; (r = ::read(rd.get(), buf, sizeof buf)) > 0;) msg.append(buf, r);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (msg.empty())
    return WIFSIGNALED(status)
               ? "loading it crashed (signal " + std::to_string(WTERMSIG(status)) + ")"
               : "loading it failed";
  if (msg[0] == 'E') return msg.substr(1);
  const size_t sp = msg.find(' ');
  *version = static_cast<unsigned>(std::strtoul(msg.c_str() + 1, nullptr, 10));
  *name = msg.substr(sp + 1);
  return "";
}

std::string VersionText(unsigned v) {
  return std::to_string(v >> 16) + "." + (((v >> 8) & 0xff) < 10 ? "0" : "") +
         std::to_string((v >> 8) & 0xff) + "." + std::to_string(v & 0xff);
}

struct Options {
  std::string plugstack = "/etc/slurm/plugstack.conf";
  std::string local_dir;
  std::string munge_socket;
  bool json = false, quiet = false;
};

// What the checks after the plugin's need from its line (or its defaults).
struct PluginSettings {
  std::string local_dir = "/tmp", srun = "/usr/bin/srun", mount_prefix = "/fanstore";
  bool kernel_view = true;
};

// The plugin checks; fills *ps from the plugin's line when it parses.
void CheckPlugin(const Options& o, Report* r, PluginSettings* settings) {
  const std::string add_line = "add the line 'required " + std::string(FANSTORE_SLURM_PLUGIN_DIR) +
                               "/" + kPluginFile + "' to " + o.plugstack +
                               " or to a file it includes (see the admin guide)";
  if (!Exists(o.plugstack)) {
    r->Fail("plugin", o.plugstack + " does not exist, so Slurm loads no SPANK plugin", add_line);
    return;
  }
  Plugstack ps;
  ScanPlugstack(o.plugstack, 0, &ps);
  for (const std::string& p : ps.problems)
    r->Warn("plugstack", "cannot read " + p, "make it readable by every user (Slurm reads it)");
  if (ps.lines.empty()) {
    // A snippet beside plugstack.conf that it does not include is the usual mistake.
    Plugstack beside;
    const std::string dir = Dirname(o.plugstack) + "/plugstack.conf.d";
    glob_t g{};
    if (::glob((dir + "/*.conf").c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; i++) ScanPlugstack(g.gl_pathv[i], 8, &beside);
    ::globfree(&g);
    if (!beside.lines.empty())
      r->Fail("plugin",
              beside.lines[0].where + " names " + kPluginFile + " but " + o.plugstack +
                  " does not include it",
              "add the line 'include " + dir + "/*.conf' to " + o.plugstack);
    else
      r->Fail("plugin",
              "no line of " + o.plugstack + " (or the files it includes) names " + kPluginFile +
                  ": the --fanstore option does not exist",
              add_line);
    return;
  }
  const PluginLine& pl = ps.lines[0];
#ifdef FANSTORE_HAVE_SPANK_CONFIG
  auto config = spank::ParseConfig(pl.args);
  if (config.ok()) {
    settings->local_dir = config->local_dir;
    settings->srun = config->srun;
    settings->mount_prefix = config->mount_prefix;
    settings->kernel_view = config->kernel_view;
  }
#endif
  if (ps.lines.size() > 1) {
    r->Fail("plugin",
            kPluginFile + std::string(" is named twice (") + pl.where + " and " +
                ps.lines[1].where + "): Slurm refuses the second --fanstore option",
            "keep one of the lines");
  }
  struct stat st;
  const bool exists = ::stat(pl.so.c_str(), &st) == 0;
  UniqueFD fd(::open(pl.so.c_str(), O_RDONLY | O_CLOEXEC));
  const int open_errno = errno;
  char magic[4] = {};
  constexpr char kElf[4] = {0x7f, 'E', 'L', 'F'};
  if (!exists) {
    r->Fail("plugin", pl.where + " names " + pl.so + ", which does not exist",
            "install the FanStore SPANK plugin there, or correct the path in " + pl.where);
  } else if (!fd.valid()) {
    r->Fail("plugin", "cannot read " + pl.so + ": " + std::strerror(open_errno),
            "make it readable (chmod 0644 " + pl.so + ")");
  } else if (::read(fd.get(), magic, 4) != 4 || std::memcmp(magic, kElf, 4) != 0) {
    r->Fail("plugin", pl.so + " is not a shared library (no ELF header)",
            "reinstall the FanStore SPANK plugin");
  } else {
    std::string name;
    unsigned built_for = 0;
    const std::string err = LoadPlugin(pl.so, &name, &built_for);
    if (!err.empty()) {
      r->Fail("plugin", pl.so + " does not load: " + err,
              "install its missing libraries (ldd " + pl.so + "), or rebuild it on this system");
    } else {
      std::string detail = pl.so + " (plugin '" + name + "', built for Slurm " +
                           VersionText(built_for) + ") is named at " + pl.where;
      // Slurm refuses a plugin built for another major.minor release.
      const std::string node_slurm = Exists(settings->srun) ? SlurmVersion(settings->srun) : "";
      const std::string built = VersionText(built_for);
      if (!node_slurm.empty() &&
          node_slurm.compare(0, built.rfind('.') + 1, built, 0, built.rfind('.') + 1) != 0)
        r->Fail("plugin",
                detail + ", but this node runs Slurm " + node_slurm +
                    ", which refuses a plugin of another release",
                "rebuild FanStore against this Slurm (libslurm-dev " + node_slurm + ")");
      else if (pl.kind == "optional")
        r->Warn("plugin",
                detail +
                    " as optional: a job can start without it, and then its agents"
                    " are never torn down",
                "write 'required' instead of 'optional' at " + pl.where);
      else
        r->Ok("plugin", detail);
    }
  }
#ifdef FANSTORE_HAVE_SPANK_CONFIG
  if (!config.ok()) {
    r->Fail("plugin-args", pl.where + ": " + config.status().message() + "; every job fails",
            "correct the arguments at " + pl.where);
    return;
  }
  std::string missing;
  for (const auto& [key, path] :
       {std::pair{"agent", config->agent}, {"preload", config->preload}, {"srun", config->srun}})
    if (!Exists(path)) missing += std::string(missing.empty() ? "" : ", ") + key + "=" + path;
  if (!missing.empty())
    r->Fail("plugin-args", "the plugin's programs are missing on this node: " + missing,
            "install FanStore on this node, or give their paths at " + pl.where);
  else
    r->Ok("plugin-args", "arguments parse; agent " + config->agent + ", preload " +
                             config->preload + ", local_dir " + config->local_dir);
#else
  (void)settings;
  (void)srun;
  r->Warn("plugin-args", "not checked: this fanstore was built without the SPANK plugin",
          "build FanStore with libslurm-dev installed");
#endif
}

// ---- MUNGE -------------------------------------------------------------------------------

void CheckMunge(const Options& o, Report* r) {
  munge_ctx_t ctx = munge_ctx_create();
  if (!ctx) {
    r->Fail("munge", "cannot create a MUNGE context (out of memory)", "retry");
    return;
  }
  if (!o.munge_socket.empty()) munge_ctx_set(ctx, MUNGE_OPT_SOCKET, o.munge_socket.c_str());
  char* socket = nullptr;
  munge_ctx_get(ctx, MUNGE_OPT_SOCKET, &socket);
  const std::string sock = socket ? socket : "?";
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, ctx, nullptr, 0);
  if (e == EMUNGE_SUCCESS) {
    e = munge_decode(cred, ctx, nullptr, nullptr, nullptr, nullptr);
    std::free(cred);
    if (e == EMUNGE_SUCCESS) {
      r->Ok("munge", "munged at " + sock + " encodes and decodes a credential");
    } else {
      r->Fail("munge",
              std::string("munged encodes but cannot decode its own credential: ") +
                  munge_ctx_strerror(ctx),
              "check /etc/munge/munge.key (the same on every node, owned by munge, mode 0400) "
              "and the clock (NTP), then restart munged: systemctl restart munge");
    }
  } else if (e == EMUNGE_SOCKET && !Exists(sock)) {
    r->Fail("munge", "munged is not running (no socket at " + sock + ")",
            "start it: systemctl start munge");
  } else if (e == EMUNGE_SOCKET) {
    r->Fail("munge", "cannot talk to munged at " + sock + ": " + munge_ctx_strerror(ctx),
            "check that munged runs (systemctl status munge) and that its socket is "
            "reachable by every user");
  } else {
    r->Fail("munge", std::string("munged refuses a credential: ") + munge_ctx_strerror(ctx),
            "see munged's log (journalctl -u munge)");
  }
  munge_ctx_destroy(ctx);
}

// ---- PMIx ---------------------------------------------------------------------------------

void CheckPmix(const std::string& srun, Report* r) {
  // The agent's libpmix: the one it was linked with, by its rpath (FANSTORE_PMIX_LIBDIR).
  const std::string lib = std::string(FANSTORE_PMIX_LIBDIR) + "/libpmix.so.2";
  void* h = ::dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!h) h = ::dlopen("libpmix.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    r->Fail("pmix", std::string("libpmix.so.2 does not load: ") + ::dlerror(),
            "install PMIx (Debian: apt-get install libpmix2)");
  } else {
    using GetVersion = const char* (*)();
    auto get = reinterpret_cast<GetVersion>(::dlsym(h, "PMIx_Get_version"));
    const std::string have = get ? get() : "unknown";
    const std::string built = FANSTORE_PMIX_VERSION;
    // "OpenPMIx 4.2.2rc2, repo rev: ..." against pkg-config's "4.2.2rc2": major.minor must match.
    const std::string major_minor = built.substr(0, built.find('.', built.find('.') + 1));
    if (have.find(" " + major_minor + ".") == std::string::npos)
      r->Fail("pmix", "libpmix is " + have + ", the agent was built against PMIx " + built,
              "install PMIx " + major_minor + ", or rebuild FanStore against this PMIx");
    else
      r->Ok("pmix", have.substr(0, have.find_first_of(",(")) +
                        " (the agent was built against PMIx " + built + ")");
  }
  if (!Exists(srun)) {
    r->Warn("slurm-mpi", "srun is not at " + srun + ": cannot list Slurm's MPI plugins",
            "run fanstore doctor where srun is installed, or give srun= on the plugin line");
    return;
  }
  auto out = RunCapture({srun, "--mpi=list"}, 10);
  if (!out) {
    r->Warn("slurm-mpi", "cannot run " + srun + " --mpi=list", "check that srun works");
  } else if (out->find("pmix") == std::string::npos) {
    r->Fail("slurm-mpi",
            "Slurm has no pmix MPI plugin (" + srun +
                " --mpi=list): the agents start"
                " with --mpi=pmix",
            "install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins, mpi_pmix.so)");
  } else {
    r->Ok("slurm-mpi", "Slurm's MPI plugins include pmix");
  }
}

// ---- the local directory -------------------------------------------------------------------

const char* NetworkFsName(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0x6969:
      return "NFS";
    case 0x0BD00BD0:
      return "Lustre";
    case 0x47504653:
      return "GPFS";
    case 0xFF534D42:
      return "CIFS";
    case 0xFE534D42:
      return "SMB2";
    case 0x19830326:
      return "BeeGFS";
    case 0x00C36400:
      return "CephFS";
    case 0x65735546:
      return "FUSE";
    default:
      return nullptr;
  }
}

// local_dir with %u (this user), %n (this host) and %% put in; a component holding %j is
// dropped, with everything after it (the job's part does not exist before the job).
std::string ExpandLocalDir(const std::string& tmpl, bool* per_job) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string node = host;
  node = node.substr(0, node.find('.'));
  const struct passwd* pw = ::getpwuid(::getuid());
  const std::string user = pw ? pw->pw_name : std::to_string(::getuid());
  std::string out;
  *per_job = false;
  for (size_t i = 0; i < tmpl.size(); i++) {
    if (tmpl[i] != '%' || i + 1 == tmpl.size()) {
      out += tmpl[i];
      continue;
    }
    const char c = tmpl[++i];
    if (c == 'j') {
      *per_job = true;
      const size_t slash = out.rfind('/');
      return slash == 0 ? "/" : out.substr(0, slash);
    }
    out += c == 'u' ? user : c == 'n' ? node : std::string(1, c);
  }
  return out;
}

void CheckLocalDir(const std::string& tmpl, Report* r) {
  bool per_job = false;
  const std::string dir = ExpandLocalDir(tmpl, &per_job);
  const std::string name = dir == tmpl ? dir : dir + " (from " + tmpl + ")";
  struct stat st;
  std::string probe_dir = dir;  // the directory whose file system is measured
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    while (probe_dir != "/" && !Exists(probe_dir)) probe_dir = Dirname(probe_dir);
    r->Fail("local-dir",
            "the local directory " + name +
                " does not exist (the plugin creates only"
                " fanstore.UID.JOB inside it)",
            "create it on every node: mkdir -p " + dir + " && chmod 1777 " + dir);
  } else {
    // A real write: permissions, a read-only mount, a full inode table all show here.
    std::string tmp = dir + "/.fanstore-doctor.XXXXXX";
    UniqueFD fd(::mkstemp(tmp.data()));
    if (!fd.valid()) {
      const int err = errno;
      r->Fail("local-dir",
              "cannot create a file in the local directory " + name + ": " + std::strerror(err),
              err == EROFS ? "mount it read-write"
                           : "make it writable by the job's user (chmod 1777 " + dir + ")");
    } else if (::unlink(tmp.c_str()) == 0 && ::getuid() == 0 && st.st_uid != 0 &&
               (st.st_mode & 0002) == 0) {
      // The prolog makes the job's directory only in a root-owned one; elsewhere the job's user
      // must be able to write (root always can, so its write above proves nothing for users).
      r->Warn("local-dir",
              "the local directory " + name + " belongs to uid " + std::to_string(st.st_uid) +
                  " and others cannot write to it: jobs of other users fail there",
              "chown root " + dir + ", or chmod 1777 " + dir);
    } else {
      r->Ok("local-dir",
            "the local directory " + name + " is writable" +
                (per_job ? " (each job's directory under it is made at job start)" : ""));
    }
  }
  struct statfs fs;
  if (::statfs(probe_dir.c_str(), &fs) != 0) {
    r->Warn("local-fs", "cannot statfs " + probe_dir + ": " + std::strerror(errno), "check it");
    return;
  }
  if (const char* net = NetworkFsName(fs.f_type); net && tmpl.find("%n") == std::string::npos)
    r->Warn("local-fs",
            probe_dir + " is on " + std::string(net) +
                ", a shared file system: staging there adds to its load instead of "
                "taking the load off",
            "point local_dir= at a node-local disk (or put %n in it)");
  else
    r->Ok("local-fs", probe_dir + " is on a node-local file system" +
                          std::string(fs.f_type == 0x01021994 ? " (tmpfs: the staged data uses "
                                                                "the node's memory)"
                                                              : ""));
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize;
  const uint64_t free_inodes = fs.f_ffree;
  const bool inodes_counted = fs.f_files != 0;  // some file systems report none
  const std::string figures = probe_dir + " has " + HumanBytes(free_bytes) + " free and " +
                              (inodes_counted ? std::to_string(free_inodes) : "unlimited") +
                              " free inodes";
  if (free_bytes == 0 || (inodes_counted && free_inodes == 0))
    r->Fail("local-space", figures + ": it is full, stage-in fails",
            "free space in " + probe_dir + " or point local_dir= at a larger disk");
  else if (free_bytes < kLowSpace || (inodes_counted && free_inodes < kLowInodes))
    r->Warn("local-space",
            figures + ", under " + HumanBytes(kLowSpace) + " or " + std::to_string(kLowInodes) +
                " inodes: a node holds its share of a"
                " dataset there",
            "free space in " + probe_dir + ", or point local_dir= at a larger disk");
  else
    r->Ok("local-space", figures);
}

// ---- kernel features and limits -------------------------------------------------------------

void CheckKernel(const PluginSettings& ps, Report* r) {
  const std::string lost =
      ": tasks get no kernel-visible view (static binaries, exec and dlopen of dataset files, "
      "containers); the interception library still serves them";
  struct stat st;
  if (!ps.kernel_view)
    r->Ok("fuse", "the kernel-visible view is turned off (kernel_view=no)");
  else if (::stat("/dev/fuse", &st) != 0)
    r->Warn("fuse", "/dev/fuse does not exist" + lost, "load the fuse module: modprobe fuse");
  else if ((st.st_mode & 0006) != 0006)
    r->Warn("fuse",
            "/dev/fuse is not usable by users (mode 0" + std::to_string((st.st_mode >> 6) & 7) +
                std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                "): Slurm jobs are fine (the plugin opens it as root), but `fanstore run "
                "--kernel-view` without root is not",
            "chmod 0666 /dev/fuse (Debian's default)");
  else
    r->Ok("fuse", "/dev/fuse exists and is usable by users");
  // The view's mount point: the prefix must be an empty directory (a tmpfs goes over it in each
  // task's namespace), unless every job names an existing directory with --fanstore-mount.
  if (ps.kernel_view) {
    const std::string& mp = ps.mount_prefix;
    auto empty = [&]() {
      DIR* d = ::opendir(mp.c_str());
      if (!d) return false;
      int n = 0;
      while (struct dirent* de = ::readdir(d))
        n += std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0;
      ::closedir(d);
      return n == 0;
    };
    if (::lstat(mp.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      r->Warn("mount-prefix", mp + " is not a directory" + lost + " at " + mp + "/NAME",
              "mkdir -m 0755 " + mp + " (the fanstore-spank package creates /fanstore)");
    else if (st.st_uid != 0 || (st.st_mode & 022))
      r->Warn("mount-prefix", mp + " is not root's, or others can write it" + lost,
              "chown root: " + mp + " && chmod 0755 " + mp);
    else if (!empty())
      r->Warn("mount-prefix", mp + " is not empty" + lost + " at " + mp + "/NAME",
              "point mount_prefix= at an empty directory");
    else
      r->Ok("mount-prefix", mp + " is an empty directory: each task's view is mounted under it");
  }
  const std::string why =
      " (only needed by `fanstore run --kernel-view` without root, and by rootless containers)";
  auto read_int = [](const char* path) -> std::optional<int64_t> {
    auto t = ReadSmallFile(path, 64);
    if (!t.ok()) return std::nullopt;
    std::string s = *t;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return ParseInt(s, 0, INT64_MAX);
  };
  const auto clone = read_int("/proc/sys/kernel/unprivileged_userns_clone");
  const auto max_ns = read_int("/proc/sys/user/max_user_namespaces");
  const auto apparmor = read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (clone && *clone == 0)
    r->Warn("userns", "unprivileged user namespaces are off" + why,
            "sysctl kernel.unprivileged_userns_clone=1");
  else if (max_ns && *max_ns == 0)
    r->Warn("userns", "user namespaces are off (user.max_user_namespaces=0)" + why,
            "sysctl user.max_user_namespaces=15000");
  else if (apparmor && *apparmor == 1)
    r->Warn("userns", "AppArmor restricts unprivileged user namespaces" + why,
            "sysctl kernel.apparmor_restrict_unprivileged_userns=0");
  else
    r->Ok("userns", "unprivileged user namespaces are allowed");
}

std::string Limit(rlim_t v) {
  return v == RLIM_INFINITY ? "unlimited" : std::to_string(static_cast<uint64_t>(v));
}

void CheckLimits(Report* r) {
  const std::string whose =
      ::getuid() == 0 ? " (root's; a job gets its submitting shell's, unless slurm.conf's "
                        "PropagateResourceLimits says otherwise: run fanstore doctor as a user too)"
                      : " (a job gets these, from the shell that submits it, unless slurm.conf's "
                        "PropagateResourceLimits says otherwise)";
  struct rlimit rl;
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const std::string nofile =
      "open files: soft " + Limit(rl.rlim_cur) + ", hard " + Limit(rl.rlim_max) + whose;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < kLowNofile)
    r->Warn("nofile",
            nofile + "; under " + std::to_string(kLowNofile) +
                ", a task opening many dataset files at once may run out",
            "raise nofile in /etc/security/limits.conf (and LimitNOFILE= of slurmd.service) to "
            "65536 or more");
  else
    r->Ok("nofile", nofile);
  ::getrlimit(RLIMIT_MEMLOCK, &rl);
  r->Ok("memlock", "locked memory: soft " +
                       (rl.rlim_cur == RLIM_INFINITY ? "unlimited" : HumanBytes(rl.rlim_cur)) +
                       ", hard " +
                       (rl.rlim_max == RLIM_INFINITY ? "unlimited" : HumanBytes(rl.rlim_max)));
}

}  // namespace

int CmdDoctor(int argc, char** argv) {
  CLI::App app(
      "Checks that this node can run FanStore jobs: the SPANK plugin, MUNGE, PMIx, the local "
      "directory, /dev/fuse and namespaces, and the limits. Each check prints one line: ok, warn "
      "or FAIL, and for a problem what is wrong and what to do. Run it as root and as a user.",
      "fanstore doctor");
  Configure(app);
  app.footer("Exit status: 0 when no check FAILs, 1 otherwise, 2 usage error.");
  Options o;
  app.add_option("--plugstack", o.plugstack,
                 "Slurm's plugstack.conf; the files it includes are read too")
      ->type_name("FILE")
      ->default_str(o.plugstack);
  app.add_option("--local-dir", o.local_dir,
                 "the local directory to check, a local_dir= template (default: the plugin's "
                 "local_dir=, else /tmp)")
      ->type_name("DIR");
  app.add_option("--munge-socket", o.munge_socket, "munged's socket (default: libmunge's)")
      ->type_name("PATH");
  app.add_flag("--json", o.json, "print the checks as a JSON array, one object per check");
  app.add_flag("-q,--quiet", o.quiet, "print only the checks that warn or FAIL");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  Report r;
  PluginSettings settings;  // the plugin's defaults
#ifdef FANSTORE_HAVE_SPANK_CONFIG
  settings.local_dir = spank::DefaultConfig().local_dir;
  settings.srun = spank::DefaultConfig().srun;
#endif
  CheckPlugin(o, &r, &settings);
  CheckMunge(o, &r);
  CheckPmix(settings.srun, &r);
  CheckLocalDir(o.local_dir.empty() ? settings.local_dir : o.local_dir, &r);
  CheckKernel(settings, &r);
  CheckLimits(&r);
  r.Print(o.json, o.quiet);
  return r.Failed() ? kExitBad : kExitOk;
}

}  // namespace fanstore::cli
