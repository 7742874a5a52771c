// The agents' counters (the kStats JSON, or the lines saved at job end) in the Prometheus text
// exposition format, for node_exporter's textfile collector.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fanstore::cli {

// `stats` is one node's counters (an object) or several (an array of objects). Every metric
// family gets # HELP and # TYPE, then one sample per node labelled node and rank (and kind for
// the opens and bytes by source). Counters missing from the JSON count as 0.
std::string PrometheusText(const nlohmann::json& stats);

}  // namespace fanstore::cli
