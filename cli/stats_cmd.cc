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
#include "common/env.h"
#include "common/proto.h"
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

void PrintNodeStats(const nlohmann::json& j) {
  std::printf(
      "%s (rank %.0f of %.0f): staged %s (%.0f files, %.0f shards) in %.2f s; metadata exchange "
      "%.3f s\n",
      Str(j, "node").c_str(), At(j, "rank"), At(j, "size"),
      HumanBytes(At(j, "bytes_staged")).c_str(), At(j, "files_staged"), At(j, "shards_staged"),
      At(j, "stage_in_seconds"), At(j, "exchange_seconds"));
  PrintSources(Obj(j, "opens"), Obj(j, "bytes"));
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

int StatsFromFile(const std::string& path, bool json) {
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
  if (json) {
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
    AddCounters(total, counters);
  }
  double slowest = 0;
  for (const auto& j : nodes) slowest = std::max(slowest, At(j, "stage_in_seconds"));
  std::printf("job total, %zu node%s: staged %s (%.0f files) in %.2f s (slowest node)\n",
              nodes.size(), nodes.size() == 1 ? "" : "s",
              HumanBytes(At(total, "bytes_staged")).c_str(), At(total, "files_staged"), slowest);
  PrintSources(total["opens"], total["bytes"]);
  return kExitOk;
}

// Asks this node's agent, named by $FANSTORE_SOCKET.
int StatsFromAgent(bool json) {
  const char* sock = std::getenv(env::kSocket);
  if (!sock || !*sock)
    return Fail(
        Status::NotFound(std::string(env::kSocket) + " is not set: not inside a FanStore job"));
  int fd = proto::Connect(sock, 10000);
  if (fd < 0) return Fail(Status::FromErrno(std::string("agent socket ") + sock, -fd));
  UniqueFD conn(fd);
  proto::Frame req{proto::kMagic, proto::kStats, 0, 0}, rep;
  std::string buf(proto::kMaxPayload, '\0');
  int passed = -1;
  int rc = proto::Send(conn.get(), req, nullptr, -1);
  if (rc == 0) rc = proto::Recv(conn.get(), &rep, buf.data(), buf.size(), &passed);
  UniqueFD unused(passed);  // the agent passes no descriptor with its stats
  if (rc != 0) return Fail(Status::FromErrno("agent socket " + std::string(sock), -rc));
  auto j = nlohmann::json::parse(buf.substr(0, rep.len), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Fail(Status::Corruption("the agent sent bad stats"));
  if (json)
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
  bool json = false;
  std::string file;
  app.add_option("FILE", file, "the counters the agents saved at job end");
  app.add_flag("--json", json,
               "print the raw counters (with FILE: a JSON array of the nodes' counters)");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  return file.empty() ? StatsFromAgent(json) : StatsFromFile(file, json);
}

}  // namespace fanstore::cli
