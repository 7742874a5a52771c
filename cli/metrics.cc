// The Prometheus text format of the counters (see metrics.h).
#include "cli/metrics.h"

#include <cmath>
#include <vector>

namespace fanstore::cli {
namespace {

using Json = nlohmann::json;

// The number at `path` (keys into nested objects); 0 when absent or not a number, and a
// boolean as 0 or 1.
double Value(const Json& j, std::initializer_list<const char*> path) {
  const Json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return 0;
    p = &(*p)[k];
  }
  if (p->is_boolean()) return p->get<bool>() ? 1 : 0;
  return p->is_number() ? p->get<double>() : 0;
}

// Whole numbers as such, others in the shortest form that reads back the same.
std::string Number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    return std::to_string(static_cast<long long>(v));
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return Json(v).dump();
}

// A label value: backslash, double quote and newline escaped, as the format requires.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
  const char* key;            // the counter, or its object, in the JSON
  const char* sub = nullptr;  // the counter in that object; by_kind: one per kind of source
  bool by_kind = false;
  bool optional = false;  // only for the nodes whose JSON has `key` (the output's, with one)
};

}  // namespace

std::string PrometheusText(const Json& stats) {
  std::vector<Json> nodes;
  if (stats.is_array())
    for (const auto& n : stats) nodes.push_back(n);
  else
    nodes.push_back(stats);
  static const Family kFamilies[] = {
      {"fanstore_opens_total", "counter", "Files opened, by where they were served from.", "opens",
       nullptr, true},
      {"fanstore_bytes_total", "counter", "Bytes read, by where they were served from.", "bytes",
       nullptr, true},
      {"fanstore_open_errors_total", "counter", "Opens that failed.", "opens", "errors"},
      {"fanstore_stage_in_seconds", "gauge", "Seconds the stage-in took.", "stage_in_seconds"},
      {"fanstore_bytes_staged", "gauge", "Bytes of files staged on the node.", "bytes_staged"},
      {"fanstore_cache_used_bytes", "gauge", "Bytes in the cache of files from other nodes.",
       "cache", "used"},
      {"fanstore_cache_capacity_bytes", "gauge", "Capacity of the cache of files from other nodes.",
       "cache", "capacity"},
      {"fanstore_peer_fetch_errors_total", "counter", "Failed fetches from other nodes' agents.",
       "peers", "fetch_errors"},
      {"fanstore_opens_waited_total", "counter",
       "Opens that waited for another's fetch of their file from a peer.", "peers",
       "opens_that_waited_for_a_fetch", false, true},
      {"fanstore_opens_waited_out_total", "counter",
       "Opens that gave up waiting for another's fetch and fetched the file themselves.", "peers",
       "opens_that_gave_up_waiting", false, true},
      {"fanstore_unpack_done", "gauge", "1 once every staged file is unpacked, else 0.", "unpack",
       "done"},
      {"fanstore_output_files_pending", "gauge", "Output files waiting to drain.", "output",
       "files_pending", false, true},
      {"fanstore_output_bytes_pending", "gauge", "Bytes of output waiting to drain.", "output",
       "bytes_pending", false, true},
      {"fanstore_output_files_drained_total", "counter",
       "Output files copied to the parallel file system.", "output", "files_drained", false, true},
      {"fanstore_output_bytes_drained_total", "counter",
       "Bytes of output copied to the parallel file system.", "output", "bytes_drained", false,
       true},
      {"fanstore_output_files_failed", "gauge",
       "Output files whose last copy failed (retried with a backoff).", "output", "files_failed",
       false, true},
      {"fanstore_output_drain_rate_bytes", "gauge",
       "Bytes per second of the output's copies so far.", "output", "rate_bytes_per_s", false,
       true},
  };
  std::string out;
  for (const Family& f : kFamilies) {
    std::vector<const Json*> with;
    for (const Json& n : nodes)
      if (!f.optional || (n.is_object() && n.contains(f.key))) with.push_back(&n);
    if (with.empty()) continue;
    out += std::string("# HELP ") + f.name + " " + f.help + "\n";
    out += std::string("# TYPE ") + f.name + " " + f.type + "\n";
    for (const Json* np : with) {
      const Json& n = *np;
      const std::string node = n.is_object() && n.contains("node") && n["node"].is_string()
                                   ? n["node"].get<std::string>()
                                   : "";
      const std::string labels =
          "node=\"" + Escape(node) + "\",rank=\"" + Number(Value(n, {"rank"})) + "\"";
      if (!f.by_kind) {
        const double v = f.sub ? Value(n, {f.key, f.sub}) : Value(n, {f.key});
        out += std::string(f.name) + "{" + labels + "} " + Number(v) + "\n";
        continue;
      }
      for (const char* kind : {"local", "remote", "cached", "fallback"})
        out += std::string(f.name) + "{" + labels + ",kind=\"" + kind + "\"} " +
               Number(Value(n, {f.key, kind})) + "\n";
    }
  }
  return out;
}

}  // namespace fanstore::cli
