// `fanstore stats [FILE]`: the agents' counters, live from this node's agent or from the file
// the agents saved at job end.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/metrics.h"
#include "common/env.h"
#include "common/io.h"
#include "common/proto.h"
#include "common/run_dir.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::cli {
namespace {

double Num(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : 0.0; }
// obj[k] as a string; "?" when absent or not a string (the counters may come from any file).
std::string Str(const nlohmann::json& obj, const char* k) {
  if (!obj.is_object()) return "?";
  auto it = obj.find(k);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "?";
}
// obj[k] when it is an object, else an empty object.
nlohmann::json Obj(const nlohmann::json& obj, const char* k) {
  if (!obj.is_object()) return nlohmann::json::object();
  auto it = obj.find(k);
  return it != obj.end() && it->is_object() ? *it : nlohmann::json::object();
}
// Never throws: file names that are not UTF-8 come out with U+FFFD in their place.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
// obj[k] as a number; 0 when absent.
double At(const nlohmann::json& obj, const char* k) {
  return obj.is_object() && obj.contains(k) ? Num(obj[k]) : 0.0;
}

// Opens and bytes by source.
void PrintSources(const nlohmann::json& o, const nlohmann::json& b) {
  std::printf(
      "  opens: %.0f local, %.0f cached, %.0f from peers, %.0f from the dataset, %.0f errors\n",
      At(o, "local"), At(o, "cached"), At(o, "remote"), At(o, "fallback"), At(o, "errors"));
  std::printf("  bytes: %s local, %s cached, %s from peers, %s from the dataset\n",
              HumanBytes(At(b, "local")).c_str(), HumanBytes(At(b, "cached")).c_str(),
              HumanBytes(At(b, "remote")).c_str(), HumanBytes(At(b, "fallback")).c_str());
}

// "staging: X of Y (Z%)" while the agent stages (bytes read from the dataset of the bytes this
// node stages, and files written so far).
void PrintStaging(const nlohmann::json& j) {
  const nlohmann::json st = Obj(j, "staging");
  if (run_dir::ParseState(Str(j, "state")) != run_dir::AgentState::kStaging ||
      At(st, "bytes_total") <= 0)
    return;
  const double done = At(st, "bytes_done"), total = At(st, "bytes_total");
  std::printf("  staging: %s of %s (%.0f%%), %.0f of %.0f files\n", HumanBytes(done).c_str(),
              HumanBytes(total).c_str(), std::min(100.0, 100 * done / total), At(st, "files_done"),
              At(st, "files_total"));
}

// The output's drain (--output, --fanstore-output), when there is one.
void PrintOutput(const nlohmann::json& j) {
  const nlohmann::json o = Obj(j, "output");
  if (o.empty()) return;
  std::printf("  output: %.0f files (%s) drained to %s at %s/s, %.0f (%s) pending, %.0f failing\n",
              At(o, "files_drained"), HumanBytes(At(o, "bytes_drained")).c_str(),
              Str(o, "target").c_str(), HumanBytes(At(o, "rate_bytes_per_s")).c_str(),
              At(o, "files_pending"), HumanBytes(At(o, "bytes_pending")).c_str(),
              At(o, "files_failed"));
  if (o.contains("last_error"))
    std::printf("  output: last error: %s\n", Str(o, "last_error").c_str());
}

void PrintNodeStats(const nlohmann::json& j) {
  const std::string via = Str(j, "exchange_via");
  const char* how = via == "peers"  ? " (indexes gathered over the peer service)"
                    : via == "pmix" ? " (indexes by PMIx direct modex)"
                                    : "";
  std::printf(
      "%s (rank %.0f of %.0f): staged %s (%.0f files, %.0f shards%s) in %.2f s; metadata exchange "
      "%.3f s%s\n",
      Str(j, "node").c_str(), At(j, "rank"), At(j, "size"),
      HumanBytes(At(j, "bytes_staged")).c_str(), At(j, "files_staged"), At(j, "shards_staged"),
      Str(j, "local_copy") == "image" ? ", as an EROFS image" : "", At(j, "stage_in_seconds"),
      At(j, "exchange_seconds"), how);
  PrintStaging(j);
  PrintSources(Obj(j, "opens"), Obj(j, "bytes"));
  PrintOutput(j);
}

// Sums the numbers of `from` into `into`, key by key (nested objects too).
void AddCounters(nlohmann::json& into, const nlohmann::json& from) {
  if (!into.is_object()) into = nlohmann::json::object();
  if (!from.is_object()) return;
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (it.value().is_number() && (!into.contains(it.key()) || into[it.key()].is_number()))
      into[it.key()] = At(into, it.key().c_str()) + Num(it.value());
    else if (it.value().is_object())
      AddCounters(into[it.key()], it.value());
  }
}

// How the counters are printed: the summary, --json, or --prometheus (to stdout or --output).
struct Output {
  bool json = false, prometheus = false;
  std::string file, plot;
};

// Draws the series as a PNG with the plotting script installed beside the tools (matplotlib).
int Plot(const nlohmann::json& stats, const std::string& png) {
  const std::string self = SelfDir();
  std::string script = self + "/../share/fanstore/plot_stats.py";
  if (::access(script.c_str(), R_OK) != 0) script = FANSTORE_INSTALL_DATADIR "/plot_stats.py";
  // The paths go through the environment: no shell quoting to get wrong.
  ::setenv(env::kPlotScript, script.c_str(), 1);
  ::setenv(env::kPlotOut, png.c_str(), 1);
  const std::string command =
      std::string("exec /usr/bin/python3 \"$") + env::kPlotScript + "\" \"$" + env::kPlotOut + "\"";
  FILE* p = ::popen(command.c_str(), "w");
  if (!p) return Fail(Status::FromErrno("plot: run /usr/bin/python3", errno));
  const std::string text = Dump(stats);
  std::fwrite(text.data(), 1, text.size(), p);
  const int rc = ::pclose(p);
  if (rc != 0)
    return Fail(Status::IOError("plot: " + script + " failed (needs python3-matplotlib)"));
  return kExitOk;
}

// The Prometheus text on stdout, or in `out.file` by rename, as node_exporter's textfile
// collector requires (it must never read a half-written file).
int PrintPrometheus(const nlohmann::json& stats, const Output& out) {
  const std::string text = PrometheusText(stats);
  if (out.file.empty()) {
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  Status s = WriteFileAtomic(out.file, text, 0644);
  return s.ok() ? kExitOk : Fail(s);
}

int StatsFromFile(const std::string& path, const Output& out) {
  std::ifstream in(path);
  if (!in) return Fail(Status::FromErrno("open " + path, errno));
  nlohmann::json nodes = nlohmann::json::array();
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Fail(
          Status::Corruption(path + ":" + std::to_string(n) + ": not a line of agent counters"));
    nodes.push_back(std::move(j));
  }
  if (nodes.empty()) return Fail(Status::Corruption(path + ": no agent counters in it"));
  if (out.prometheus) return PrintPrometheus(nodes, out);
  if (out.json) {
    std::printf("%s\n", Dump(nodes).c_str());
    return kExitOk;
  }
  nlohmann::json total = nlohmann::json::object();
  for (const auto& j : nodes) {
    PrintNodeStats(j);
    nlohmann::json counters = {{"bytes_staged", At(j, "bytes_staged")},
                               {"files_staged", At(j, "files_staged")},
                               {"shards_staged", At(j, "shards_staged")},
                               {"opens", Obj(j, "opens")},
                               {"bytes", Obj(j, "bytes")}};
    if (j.contains("output")) counters["output"] = Obj(j, "output");
    AddCounters(total, counters);
    if (j.contains("output")) total["output"]["target"] = Str(Obj(j, "output"), "target");
  }
  double slowest = 0;
  for (const auto& j : nodes) slowest = std::max(slowest, At(j, "stage_in_seconds"));
  std::printf("job total, %zu node%s: staged %s (%.0f files) in %.2f s (slowest node)\n",
              nodes.size(), nodes.size() == 1 ? "" : "s",
              HumanBytes(At(total, "bytes_staged")).c_str(), At(total, "files_staged"), slowest);
  PrintSources(total["opens"], total["bytes"]);
  PrintOutput(total);
  return kExitOk;
}

// Asks this node's agent, named by $FANSTORE_SOCKET.
int StatsFromAgent(const Output& out) {
  const char* sock = std::getenv(env::kSocket);
  if (!sock || !*sock)
    return Fail(
        Status::NotFound(std::string(env::kSocket) + " is not set: not inside a FanStore job"));
  int fd = proto::Connect(sock, 10000);
  if (fd < 0) return Fail(Status::FromErrno(std::string("agent socket ") + sock, -fd));
  UniqueFD conn(fd);
  const std::string payload = out.plot.empty() ? "" : proto::kStatsSeries;
  proto::Frame req{proto::kMagic, proto::kStats, 0, static_cast<uint32_t>(payload.size())}, rep;
  std::string buf(proto::kMaxPayload, '\0');
  int passed = -1;
  int rc = proto::Send(conn.get(), req, payload.empty() ? nullptr : payload.data(), -1);
  if (rc == 0) rc = proto::Recv(conn.get(), &rep, buf.data(), buf.size(), &passed);
  UniqueFD unused(passed);  // the agent passes no descriptor with its stats
  if (rc != 0) return Fail(Status::FromErrno("agent socket " + std::string(sock), -rc));
  auto j = nlohmann::json::parse(buf.substr(0, rep.len), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Fail(Status::Corruption("the agent sent bad stats"));
  if (!out.plot.empty()) return Plot(j, out.plot);
  if (out.prometheus) return PrintPrometheus(j, out);
  if (out.json)
    std::printf("%s\n", Dump(j).c_str());
  else
    PrintNodeStats(j);
  return kExitOk;
}

}  // namespace

int CmdStats(int argc, char** argv) {
  CLI::App app(
      "Without FILE, asks this node's agent (the one named by $FANSTORE_SOCKET, set in every task\n"
      "of a FanStore job and under `fanstore run`) for its counters: files and bytes staged,\n"
      "stage-in and metadata-exchange times, and opens and bytes by source (local, cached,\n"
      "remote, fallback). In a job script, `srun --ntasks-per-node=1 fanstore stats` prints them\n"
      "for every node.\n"
      "\n"
      "With FILE, summarises the final counters the agents saved at job end (one JSON line per\n"
      "node; by default fanstore-JOBID.stats in the job's submit directory, see\n"
      "--fanstore-stats): every node, then the job's totals.",
      "fanstore stats");
  Configure(app);
  Output out;
  std::string file;
  app.add_option("FILE", file, "the counters the agents saved at job end");
  app.add_flag("--json", out.json,
               "print the raw counters (with FILE: a JSON array of the nodes' counters)");
  app.add_flag("--prometheus", out.prometheus,
               "print the counters in the Prometheus text format, labelled by node\n"
               "and rank (for node_exporter's textfile collector)");
  app.add_option("--output", out.file,
                 "with --prometheus: write FILE instead of stdout, atomically\n"
                 "(a temporary file renamed into place)")
      ->type_name("FILE");
  app.add_option("--plot", out.plot,
                 "draw this node's throughput over time (one sample a second, the\n"
                 "last hour) as a PNG, with python3-matplotlib; needs the agent")
      ->type_name("FILE.png");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  // Checked here rather than by CLI11, whose Needs/Excludes notes would clutter --help.
  if (out.json + out.prometheus + !out.plot.empty() > 1)
    return args::UsageError(app, "--json, --prometheus and --plot exclude each other");
  if (!out.file.empty() && !out.prometheus)
    return args::UsageError(app, "--output needs --prometheus");
  if (!file.empty() && !out.plot.empty())
    return args::UsageError(app, "--plot needs the agent: the saved counters have no series");
  return file.empty() ? StatsFromAgent(out) : StatsFromFile(file, out);
}

}  // namespace fanstore::cli
