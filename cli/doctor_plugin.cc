// `fanstore doctor`'s checks of the SPANK plugin (see doctor.h): its line in plugstack.conf, the
// library it names, and the arguments on that line, parsed by the plugin's own parser.
#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/doctor.h"
#include "common/io.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::cli::doctor {
namespace {

constexpr const char* kPluginFile = "spank_fanstore.so";

std::string Basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

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

// "22.05.8" from srun --version ("slurm-wlm 22.05.8" or "slurm 23.02.1", perhaps after error
// lines of its own); empty when unknown.
std::string SlurmVersion(const std::string& srun) {
  auto out = Output({srun, "--version"});
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

// The first line naming the plugin, or nothing after a FAIL that says why there is none.
std::optional<Plugstack> FindPluginLines(const std::string& plugstack, Report* r) {
  const std::string add_line = "add the line 'required " + std::string(FANSTORE_SLURM_PLUGIN_DIR) +
                               "/" + kPluginFile + "' to " + plugstack +
                               " or to a file it includes (see the admin guide)";
  if (!Exists(plugstack)) {
    r->Fail("plugin", plugstack + " does not exist, so Slurm loads no SPANK plugin", add_line);
    return std::nullopt;
  }
  Plugstack ps;
  ScanPlugstack(plugstack, 0, &ps);
  for (const std::string& p : ps.problems)
    r->Warn("plugstack", "cannot read " + p, "make it readable by every user (Slurm reads it)");
  if (!ps.lines.empty()) return ps;
  // A snippet beside plugstack.conf that it does not include is the usual mistake.
  Plugstack beside;
  const std::string dir = Dirname(plugstack) + "/plugstack.conf.d";
  glob_t g{};
  if (::glob((dir + "/*.conf").c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) ScanPlugstack(g.gl_pathv[i], 8, &beside);
  ::globfree(&g);
  if (!beside.lines.empty())
    r->Fail("plugin",
            beside.lines[0].where + " names " + kPluginFile + " but " + plugstack +
                " does not include it",
            "add the line 'include " + dir + "/*.conf' to " + plugstack);
  else
    r->Fail("plugin",
            "no line of " + plugstack + " (or the files it includes) names " + kPluginFile +
                ": the --fanstore option does not exist",
            add_line);
  return std::nullopt;
}

// The library the line names: there, an ELF file, loadable, built for this node's Slurm.
void CheckPluginFile(const PluginLine& pl, const std::string& srun, Report* r) {
  struct stat st;
  const bool exists = ::stat(pl.so.c_str(), &st) == 0;
  UniqueFD fd(::open(pl.so.c_str(), O_RDONLY | O_CLOEXEC));
  const int open_errno = errno;
  char magic[4] = {};
  constexpr char kElf[4] = {0x7f, 'E', 'L', 'F'};
  if (!exists) {
    r->Fail("plugin", pl.where + " names " + pl.so + ", which does not exist",
            "install the FanStore SPANK plugin there, or correct the path in " + pl.where);
    return;
  }
  if (!fd.valid()) {
    r->Fail("plugin", "cannot read " + pl.so + ": " + std::strerror(open_errno),
            "make it readable (chmod 0644 " + pl.so + ")");
    return;
  }
  if (::read(fd.get(), magic, 4) != 4 || std::memcmp(magic, kElf, 4) != 0) {
    r->Fail("plugin", pl.so + " is not a shared library (no ELF header)",
            "reinstall the FanStore SPANK plugin");
    return;
  }
  std::string name;
  unsigned built_for = 0;
  if (const std::string err = LoadPlugin(pl.so, &name, &built_for); !err.empty()) {
    r->Fail("plugin", pl.so + " does not load: " + err,
            "install its missing libraries (ldd " + pl.so + "), or rebuild it on this system");
    return;
  }
  const std::string built = VersionText(built_for);
  const std::string detail =
      pl.so + " (plugin '" + name + "', built for Slurm " + built + ") is named at " + pl.where;
  // Slurm refuses a plugin built for another major.minor release.
  const std::string node_slurm = Exists(srun) ? SlurmVersion(srun) : "";
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

// The line's arguments parse, and the programs they name are on this node.
void CheckPluginArgs(const PluginLine& pl, const Result<spank::Config>& config, Report* r) {
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
}

}  // namespace

void CheckPlugin(const std::string& plugstack, Report* r, spank::Config* config) {
  const std::optional<Plugstack> ps = FindPluginLines(plugstack, r);
  if (!ps) return;
  const PluginLine& pl = ps->lines[0];
  const Result<spank::Config> parsed = spank::ParseConfig(pl.args);
  if (parsed.ok()) *config = parsed.value();
  if (ps->lines.size() > 1) {
    r->Fail("plugin",
            kPluginFile + std::string(" is named twice (") + pl.where + " and " +
                ps->lines[1].where + "): Slurm refuses the second --fanstore option",
            "keep one of the lines");
  }
  CheckPluginFile(pl, config->srun, r);
  CheckPluginArgs(pl, parsed, r);
}

}  // namespace fanstore::cli::doctor
