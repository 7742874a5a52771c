#!/usr/bin/python3
"""The median of several runs of scale.py, as one results file that report.py renders.

median_runs.py RUN1.json RUN2.json RUN3.json [...] --out OUT.json

BENCHMARKS.md asks scale figures as medians of at least 3 runs, with their spread. For each row
id found in every run, the row of the run with the median ratio (the median FanStore figure for
a row without a ratio) is kept whole, so its baseline, figure and note stay one measurement, and
its note gains every run's figure. A target is met when the median meets it. Rows missing from
some run are left out, and named on stderr.
"""
import argparse
import json
import sys


def key(row):
    return row["ratio"] if row.get("ratio") is not None else row.get("fanstore")


def median_row(rows):
    present = [r for r in rows if key(r) is not None]
    if not present:
        return dict(rows[0])
    ordered = sorted(present, key=key)
    # The lower median of an even count: a row that was measured, never an average of two.
    mid = dict(ordered[(len(ordered) - 1) // 2])
    shown = ", ".join(f"{key(r):.3g}" for r in rows if key(r) is not None)
    what = "ratio" if mid.get("ratio") is not None else "figure"
    mid["note"] = (f"median of {len(rows)} runs ({what}s {shown}; spread {key(ordered[0]):.3g}-"
                   f"{key(ordered[-1]):.3g}); the median run's: {mid.get('note', '')}")
    return mid


def merge(runs):
    ids = [r["id"] for r in runs[0]["rows"]]
    out = dict(runs[0])
    out["rows"] = []
    for rid in ids:
        rows = [next((r for r in run["rows"] if r["id"] == rid), None) for run in runs]
        if any(r is None for r in rows):
            print(f"median_runs: {rid} is not in every run; left out", file=sys.stderr)
            continue
        out["rows"].append(median_row(rows))
    out["runs"] = [run.get("started") for run in runs]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if len(a.runs) < 3:
        ap.error("at least 3 runs (BENCHMARKS.md: medians of at least 3 runs)")
    runs = []
    for p in a.runs:
        try:
            with open(p) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            ap.error(f"{p}: {e}")
    json.dump(merge(runs), open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
