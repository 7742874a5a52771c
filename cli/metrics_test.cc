// The Prometheus text of the counters: exact text for a sample, and the exposition grammar.
#include "cli/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fanstore::cli {
namespace {

// A small checker of the text exposition format (what `promtool check metrics` parses): every
// line a # HELP, a # TYPE or a sample; one HELP and one TYPE per family, before its samples; a
// family's samples together; no sample twice; the text ends with a newline. Returns "" or the
// first problem.
std::string CheckExposition(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? )"
      R"((-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|[+-]Inf)( -?[0-9]+)?)");
  if (text.empty() || text.back() != '\n') return "no final newline";
  std::set<std::string> helped, typed, done, seen;
  std::string current;
  std::istringstream in(text);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, kHelp)) {
      if (!helped.insert(m[1]).second) return "HELP twice: " + line;
    } else if (std::regex_match(line, m, kType)) {
      if (!typed.insert(m[1]).second) return "TYPE twice: " + line;
    } else if (std::regex_match(line, m, kSample)) {
      const std::string name = m[1];
      if (!typed.count(name)) return "sample before its TYPE: " + line;
      if (name != current) {
        if (done.count(name)) return "family split: " + line;
        if (!current.empty()) done.insert(current);
        current = name;
      }
      if (!seen.insert(line.substr(0, line.rfind(' '))).second) return "sample twice: " + line;
    } else {
      return "bad line: " + line;
    }
  }
  return "";
}

const char* kSample = R"({"node":"c1","rank":1,"size":2,"bytes_staged":1048576,
  "stage_in_seconds":1.25,"opens":{"local":10,"remote":2,"cached":3,"fallback":1,"errors":4},
  "bytes":{"local":4096,"remote":512,"cached":256,"fallback":128},
  "peers":{"fetch_errors":5,"refused_connections":0,"opens_that_waited_for_a_fetch":7,
           "opens_that_gave_up_waiting":1},
  "cache":{"used":768,"capacity":1000000,"evictions":0},
  "unpack":{"mode":"eager","done":true,"on_demand":0,"seconds":0}})";

TEST(PrometheusText, OneNode) {
  const std::string expected =
      R"(# HELP fanstore_opens_total Files opened, by where they were served from.
# TYPE fanstore_opens_total counter
fanstore_opens_total{node="c1",rank="1",kind="local"} 10
fanstore_opens_total{node="c1",rank="1",kind="remote"} 2
fanstore_opens_total{node="c1",rank="1",kind="cached"} 3
fanstore_opens_total{node="c1",rank="1",kind="fallback"} 1
# HELP fanstore_bytes_total Bytes read, by where they were served from.
# TYPE fanstore_bytes_total counter
fanstore_bytes_total{node="c1",rank="1",kind="local"} 4096
fanstore_bytes_total{node="c1",rank="1",kind="remote"} 512
fanstore_bytes_total{node="c1",rank="1",kind="cached"} 256
fanstore_bytes_total{node="c1",rank="1",kind="fallback"} 128
# HELP fanstore_open_errors_total Opens that failed.
# TYPE fanstore_open_errors_total counter
fanstore_open_errors_total{node="c1",rank="1"} 4
# HELP fanstore_stage_in_seconds Seconds the stage-in took.
# TYPE fanstore_stage_in_seconds gauge
fanstore_stage_in_seconds{node="c1",rank="1"} 1.25
# HELP fanstore_bytes_staged Bytes of files staged on the node.
# TYPE fanstore_bytes_staged gauge
fanstore_bytes_staged{node="c1",rank="1"} 1048576
# HELP fanstore_cache_used_bytes Bytes in the cache of files from other nodes.
# TYPE fanstore_cache_used_bytes gauge
fanstore_cache_used_bytes{node="c1",rank="1"} 768
# HELP fanstore_cache_capacity_bytes Capacity of the cache of files from other nodes.
# TYPE fanstore_cache_capacity_bytes gauge
fanstore_cache_capacity_bytes{node="c1",rank="1"} 1000000
# HELP fanstore_peer_fetch_errors_total Failed fetches from other nodes' agents.
# TYPE fanstore_peer_fetch_errors_total counter
fanstore_peer_fetch_errors_total{node="c1",rank="1"} 5
# HELP fanstore_opens_waited_total Opens that waited for another's fetch of their file from a peer.
# TYPE fanstore_opens_waited_total counter
fanstore_opens_waited_total{node="c1",rank="1"} 7
# HELP fanstore_opens_waited_out_total Opens that gave up waiting for another's fetch and fetched the file themselves.
# TYPE fanstore_opens_waited_out_total counter
fanstore_opens_waited_out_total{node="c1",rank="1"} 1
# HELP fanstore_unpack_done 1 once every staged file is unpacked, else 0.
# TYPE fanstore_unpack_done gauge
fanstore_unpack_done{node="c1",rank="1"} 1
)";
  const std::string text = PrometheusText(nlohmann::json::parse(kSample));
  EXPECT_EQ(text, expected);
  EXPECT_EQ(CheckExposition(text), "");
}

TEST(PrometheusText, TheOutputsFamiliesOnlyWhereThereIsOutput) {
  nlohmann::json with = nlohmann::json::parse(kSample), without = with;
  with["node"] = "c2";
  with["output"] = {{"files_pending", 2},    {"bytes_pending", 300}, {"files_drained", 7},
                    {"bytes_drained", 9000}, {"files_failed", 1},    {"rate_bytes_per_s", 1.5e6}};
  EXPECT_EQ(PrometheusText(without).find("fanstore_output"), std::string::npos);
  const std::string text = PrometheusText(nlohmann::json::array({without, with}));
  EXPECT_EQ(CheckExposition(text), "");
  for (const char* sample : {"fanstore_output_files_pending{node=\"c2\",rank=\"1\"} 2\n",
                             "fanstore_output_bytes_drained_total{node=\"c2\",rank=\"1\"} 9000\n",
                             "fanstore_output_files_failed{node=\"c2\",rank=\"1\"} 1\n",
                             "fanstore_output_drain_rate_bytes{node=\"c2\",rank=\"1\"} 1500000\n"})
    EXPECT_NE(text.find(sample), std::string::npos) << sample;
  EXPECT_EQ(text.find("fanstore_output_files_pending{node=\"c1\""), std::string::npos);
}

TEST(PrometheusText, SeveralNodesGroupEachFamily) {
  auto a = nlohmann::json::parse(kSample), b = a;
  b["node"] = "c\"2\\";  // label values are escaped
  b["rank"] = 0;
  b.erase("cache");  // missing counters are 0
  const std::string text = PrometheusText(nlohmann::json::array({a, b}));
  EXPECT_EQ(CheckExposition(text), "");
  EXPECT_NE(text.find("fanstore_open_errors_total{node=\"c1\",rank=\"1\"} 4\n"
                      "fanstore_open_errors_total{node=\"c\\\"2\\\\\",rank=\"0\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fanstore_cache_used_bytes{node=\"c\\\"2\\\\\",rank=\"0\"} 0\n"),
            std::string::npos);
}

TEST(PrometheusText, EmptyCountersStillParse) {
  const std::string text = PrometheusText(nlohmann::json::object());
  EXPECT_EQ(CheckExposition(text), "");
  EXPECT_NE(text.find("fanstore_unpack_done{node=\"\",rank=\"0\"} 0\n"), std::string::npos);
}

// Prometheus's own checker, where it is installed (it is not a build dependency).
TEST(PrometheusText, PromtoolAccepts) {
  if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/promtool";
  FILE* p = ::popen("/usr/bin/promtool check metrics >/dev/null 2>&1", "w");
  ASSERT_NE(p, nullptr);
  const std::string text = PrometheusText(nlohmann::json::parse(kSample));
  std::fwrite(text.data(), 1, text.size(), p);
  EXPECT_EQ(::pclose(p), 0);
}

// The checker itself refuses what Prometheus would.
TEST(CheckExposition, RefusesBadText) {
  EXPECT_NE(CheckExposition("x 1\n"), "");                                            // no TYPE
  EXPECT_NE(CheckExposition("# TYPE x gauge\nx{a=\"b} 1\n"), "");                     // bad label
  EXPECT_NE(CheckExposition("# TYPE x gauge\nx 1"), "");                              // no newline
  EXPECT_NE(CheckExposition("# TYPE x gauge\nx 1\nx 1\n"), "");                       // twice
  EXPECT_NE(CheckExposition("# TYPE x gauge\n# TYPE y gauge\nx 1\ny 1\nx 2\n"), "");  // split
  EXPECT_NE(CheckExposition("# TYPE x gauge\nx one\n"), "");  // not a number
  EXPECT_EQ(CheckExposition("# HELP x h\n# TYPE x gauge\nx{a=\"\\\"\"} 1.5e3\n"), "");
}

}  // namespace
}  // namespace fanstore::cli
