#!/usr/bin/python3
"""Draws an agent's throughput over time as a PNG: `fanstore stats --plot OUT.png` runs it with
the agent's counters and their "series" (cumulative bytes, one sample a second) on stdin."""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on a compute node
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20
SOURCES = (("local", "local"), ("cached", "cached"), ("remote", "from peers"),
           ("fallback", "from the dataset"), ("staged", "staged in"))


def rates(t, values):
    """MiB/s between consecutive samples, at the later sample's time."""
    return [(values[i] - values[i - 1]) / MIB / max(t[i] - t[i - 1], 1e-9)
            for i in range(1, len(t))]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_stats.py OUT.png < stats.json")
    stats = json.load(sys.stdin)
    series = stats.get("series") or {}
    t = series.get("t") or []
    if len(t) < 2:
        sys.exit("fanstore: plot: fewer than two samples yet (one a second): try again later")
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for key, label in SOURCES:
        values = series.get(key) or []
        if len(values) == len(t) and values[-1] > values[0]:
            ax.plot(t[1:], rates(t, values), label=label)
    ax.set_xlabel("seconds since the agent started")
    ax.set_ylabel("MiB/s")
    ax.set_title("FanStore throughput on %s (rank %s)" % (stats.get("node", "?"), stats.get("rank", "?")))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(sys.argv[1], format="png", dpi=100)


if __name__ == "__main__":
    main()
