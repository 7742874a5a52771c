// The pieces of `fanstore doctor` (doctor_cmd.cc runs them): the report every check adds its line
// to, and the checks of the SPANK plugin (doctor_plugin.cc), whose configuration the node's checks
// then take.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "spank-plugin/config.h"

namespace fanstore::cli::doctor {

// One line per check: `ok`, `warn` or `FAIL`, what was found and, for a problem, what to do.
class Report {
 public:
  void Ok(std::string name, std::string detail) { Add(std::move(name), "ok", std::move(detail)); }
  void Warn(std::string name, std::string detail, std::string fix) {
    Add(std::move(name), "warn", std::move(detail), std::move(fix));
  }
  void Fail(std::string name, std::string detail, std::string fix) {
    Add(std::move(name), "FAIL", std::move(detail), std::move(fix));
  }
  bool Failed() const;
  // As text, one line per check, or as a JSON array of {check, status, detail[, fix]}; quiet
  // leaves out the `ok` ones.
  void Print(bool json, bool quiet) const;

 private:
  struct Check {
    std::string name, status, detail, fix;
  };
  void Add(std::string name, const char* status, std::string detail, std::string fix = "") {
    checks_.push_back({std::move(name), status, std::move(detail), std::move(fix)});
  }
  std::vector<Check> checks_;
};

// The directory of `p`: "." when it has none, "/" for an entry of the root.
std::string Dirname(const std::string& p);
bool Exists(const std::string& p);
// What argv prints on its standard output and error, run as the plugin runs its commands
// (spank::RunCapture, with this process's environment) and killed after 10 s; nothing when it
// cannot start.
std::optional<std::string> Output(const std::vector<std::string>& argv);

// The plugin's checks: the line of `plugstack` (or of a file it includes) that names the plugin,
// the plugin itself (it loads, and was built for this node's Slurm), and its arguments. *config
// becomes the line's configuration when its arguments parse, and is left as it is (the plugin's
// defaults) otherwise.
void CheckPlugin(const std::string& plugstack, Report* r, spank::Config* config);

// Which way a job keeps and reads its local copy in `local_dir` (doctor_image.cc): files or an
// EROFS image (the plugin's image=, `image`), and why; as root, an image is mounted for real to
// prove it.
void CheckReadPath(const std::string& local_dir, bool image, Report* r);

}  // namespace fanstore::cli::doctor
