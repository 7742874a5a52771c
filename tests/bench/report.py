#!/usr/bin/python3
"""Renders results.json (the source of truth) as Markdown and PNG plots.

report.py RESULTS.json --md OUT.md --plots DIR [--results-copy PATH]
The plots are linked from the Markdown relative to its own directory. Where a target is missed,
the analysis for that workload is taken from analysis.md (next to this script, one "## ID"
section per workload, written from profiles) and quoted under the table.
"""
import argparse
import json
import os
import re
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def fmt(x, unit=""):
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if abs(x) >= 1e6:
        s = f"{x / 1e6:.2f} M"
    elif abs(x) >= 1000:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    elif abs(x) >= 1:
        s = f"{x:.2f}"
    elif x == 0:
        s = "0"
    else:
        s = f"{x:.3g}"
    return s + (f" {unit}" if unit else "")


def human_bytes(n):
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or u == "TiB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1024


def ratio_text(r):
    if r.get("ratio") is None:
        if r.get("added_ms") is not None:
            return f"+{r['added_ms']:.2f} ms"
        return "–"
    if r.get("ratio_is_fraction"):
        return f"{r['ratio'] * 100:.2f} %"
    return f"{r['ratio']:.2f}×"


def pair_text(r):
    p = r.get("paired")
    if not p:
        return "–"
    return f"{p['median']:.2f} ({p['min']:.2f}–{p['max']:.2f})"


def met_text(r):
    if r.get("met") is None:
        return "report" if r.get("fanstore") is not None else "not measured"
    return "**met**" if r["met"] else "**missed**"


def analysis_for(analysis, rid):
    """The analysis of a workload id, or of its longest dash-separated prefix that has one
    (F3-slurm-r1: F3-slurm-r1, then F3-slurm, then F3)."""
    parts = rid.split("-")
    for n in range(len(parts), 0, -1):
        text = analysis.get("-".join(parts[:n]))
        if text:
            return text
    return None


def load_analysis():
    path = os.path.join(HERE, "analysis.md")
    out = {}
    if not os.path.exists(path):
        return out
    cur = None
    with open(path) as f:
        for line in f:
            m = re.match(r"^## (\S+)", line)
            if m:
                cur = m.group(1)
                out[cur] = []
            elif cur:
                out[cur].append(line.rstrip("\n"))
    return {k: "\n".join(v).strip() for k, v in out.items()}


def plots(res, d):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(d, exist_ok=True)
    made = []

    # 1. Ratios against targets.
    rr = [r for r in res["rows"] if r.get("ratio") is not None and not r.get("ratio_is_fraction")]
    if rr:
        fig, ax = plt.subplots(figsize=(8, 0.38 * len(rr) + 1.2))
        ys = range(len(rr))
        colors = ["#3a7" if r.get("met") else ("#c44" if r.get("met") is False else "#88a") for r in rr]
        ax.barh(list(ys), [r["ratio"] for r in rr], color=colors)
        for y, r in zip(ys, rr):
            if r.get("target_min"):
                ax.plot([r["target_min"]] * 2, [y - 0.4, y + 0.4], color="k", lw=2)
            ax.text(r["ratio"] * 1.05, y, f"{r['ratio']:.2f}", va="center", fontsize=8)
        ax.set_yticks(list(ys))
        ax.set_yticklabels([r["id"] for r in rr])
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.axvline(1.0, color="#999", lw=0.8, ls="--")
        ax.set_xlabel("FanStore / baseline (log scale; black tick = target; green met, red missed, grey report)")
        ax.set_title("Ratios against the baselines, same run")
        fig.tight_layout()
        fig.savefig(os.path.join(d, "ratios.png"), dpi=110)
        plt.close(fig)
        made.append(("ratios.png", "Every ratio with its target"))

    # 2. files/s and MB/s per read workload, baseline next to FanStore.
    def bars(ids, key, unit, fname, title):
        ws = res["workloads"]
        items = []
        for wid in ids:
            w = ws.get(wid.split("-")[0] if wid.startswith("R4") else wid)
            if not w:
                continue
            arms = w["arms"]
            base = "native" if "native" in arms else ("cat" if "cat" in arms else next(iter(arms)))
            if wid == "R4-first":
                base = "floor"  # its target is a share of R4-floor's rate
            fs = {"R4-first": "fanstore_first", "R4-repeat": "fanstore_repeat",
                  "R4-demand": "fanstore_demand"}.get(wid, "fanstore")
            if fs not in arms:
                continue
            m = lambda a: sorted(s[key] for s in arms[a] if not s.get("warmup") and key in s)
            b, f = m(base), m(fs)
            if b and f:
                items.append((wid, b[len(b) // 2], f[len(f) // 2]))
        if not items:
            return
        import numpy as np
        fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(items) + 2), 3.8))
        x = np.arange(len(items))
        ax.bar(x - 0.2, [i[1] for i in items], 0.4, label="baseline", color="#889")
        ax.bar(x + 0.2, [i[2] for i in items], 0.4, label="FanStore", color="#37a")
        ax.set_xticks(x)
        ax.set_xticklabels([i[0] for i in items])
        ax.set_ylabel(unit)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(d, fname), dpi=110)
        plt.close(fig)
        made.append((fname, title))

    bars(["R1", "R2", "R3", "R4-first", "R4-repeat", "R4-demand", "R5"], "files_per_s", "files/s", "files_per_s.png",
         "Whole-file reads: files/s (median), baseline = native local")
    bars(["R1", "R2", "R3", "R5", "S1", "S1-local", "S2", "P1", "V1"], "mb_per_s", "MB/s", "mb_per_s.png",
         "MB/s (median): reads vs native, stage-in vs cat, pack vs tar|zstd, verify vs cat")

    # 3. Stage-in throughput over time.
    series = res.get("series", {})
    if series:
        fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 3.6), squeeze=False)
        for ax, (wid, s) in zip(axes[0], sorted(series.items())):
            pts = s.get("t_rchar_wchar") or []
            if len(pts) < 3:
                continue
            t = [p[0] for p in pts]
            ax.plot(t, [(p[1] - pts[0][1]) / 1e6 for p in pts], label="read from the source", color="#37a")
            ax.plot(t, [(p[2] - pts[0][2]) / 1e6 for p in pts], label="written to local storage", color="#e83")
            if s.get("cat_mb_per_s"):
                t0 = t[0]
                end = (pts[-1][1] - pts[0][1]) / 1e6
                ax.plot([t0, t0 + end / s["cat_mb_per_s"]], [0, end], color="k", ls="--", lw=1,
                        label=f"cat shards at its median rate ({s['cat_mb_per_s']:.0f} MB/s)")
            ax.set_xlabel("seconds since the agent was started")
            ax.set_ylabel("MB (cumulative)")
            ax.set_title(f"{wid}: stage-in progress (median run)")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "stagein.png"), dpi=110)
        plt.close(fig)
        made.append(("stagein.png", "Stage-in throughput over time"))
    return made


# ImageNet-1k as the C1 prediction's dataset: 1,281,167 files of 110 KiB on average.
IMAGENET_FILES, IMAGENET_GB = 1_281_167, 140.0


def cost_model_section(c1):
    mo, me = c1["model"], c1["measured"]
    L = ["## C1: per-node CPU-cost model", "",
         "CPU seconds (user + system, every thread) of each phase one node runs, measured apart: one agent alone "
         "for stage-in, unpack and serving (lazy mode: the unpack runs after ready), two agents where only one "
         "prefetches for the peer transfer (both agents' CPU from ready until every remote shard is streamed). "
         f"Median of {c1.get('rounds', '?')} rounds on `images` (110 KiB files, raw) and `text` (4.5 KiB, zstd); the "
         "model is the line CPU = a × GB + b × million files through the two. The two datasets differ in codec too, so "
         "`text`'s zstd decoding lands in the per-file term of unpack.", "",
         "| phase | images: s/GB | images: µs/file | text: s/GB | text: µs/file | a (s/GB) | b (s/M files) |",
         "|---|---|---|---|---|---|---|"]
    for ph, what in c1["phases"]:
        i, t = me[ph]["images"], me[ph]["text"]
        L.append(f"| {what} | {fmt(i['s_per_gb'])} | {fmt(i['us_per_file'])} | {fmt(t['s_per_gb'])} | "
                 f"{fmt(t['us_per_file'])} | {fmt(mo[ph]['s_per_gb'])} | {fmt(mo[ph]['s_per_mfile'])} |")
    L.append("")
    ck = c1.get("check")
    if ck:
        L.append(f"Check against this run: for R4-node ({ck['mfiles'] * 1e6:,.0f} files, {ck['gb']:.2f} GB fetched from the "
                 f"other agent and read) the model gives {ck['predicted_seconds']:.2f} s of work per core on "
                 f"{ck['cores']} cores; R4-node took {ck['measured_seconds']:.2f} s.")
        L.append("")
    if any(None in m.values() for m in mo.values()):
        L += ["The two datasets gave no fit (the same ratio of bytes to files): no prediction.", ""]
        return L
    cost = lambda ph, gb, mf: mo[ph]["s_per_gb"] * gb + mo[ph]["s_per_mfile"] * mf
    L.append(f"Prediction: ImageNet-1k ({IMAGENET_FILES:,} files, {IMAGENET_GB:.0f} GB) on 16 nodes, `--fanstore-replicas=1`, "
             "default mode. Per node: stage-in of its sixteenth (the table of every file), unpack of its files, the "
             "peer transfer of the other fifteen sixteenths (fetching them, and by symmetry serving as much of its own "
             "to the others), then serving every file once per epoch. Core-seconds, and the time they take when "
             "spread over the node's cores (a lower bound: the job's own processes share the cores).")
    L.append("")
    L.append("| phase | core-seconds per node | on 8 cores | on 16 cores |")
    L.append("|---|---|---|---|")
    n = 16
    rows = [("stage-in", cost("stage", IMAGENET_GB / n, IMAGENET_FILES / 1e6)),
            ("unpack", cost("unpack", IMAGENET_GB / n, IMAGENET_FILES / 1e6 / n)),
            ("peer transfer (first epoch)", cost("peer", IMAGENET_GB * (n - 1) / n, IMAGENET_FILES / 1e6 * (n - 1) / n)),
            ("serving, per epoch", cost("serve", IMAGENET_GB, IMAGENET_FILES / 1e6)),
            ("the job's own native reads, per epoch (for scale)", cost("native", IMAGENET_GB, IMAGENET_FILES / 1e6))]
    for label, cs in rows:
        L.append(f"| {label} | {cs:,.0f} | {cs / 8:,.1f} s | {cs / 16:,.1f} s |")
    L.append("")
    peer = mo["peer"]["s_per_gb"]
    if peer and peer > 0:
        L.append("Each prefetch stream's receiving half (about half of the peer cost) runs on one core: about "
                 f"{2 / peer:.1f} GB/s per stream. An agent streams 2 shards at once with 16 CPUs or more "
                 "(`--prefetch-streams`, 1 to 4), else one.")
        L.append("")
    return L


def markdown(res, made, plot_rel):
    m = res.get("machine", {})
    rows = res["rows"]
    analysis = load_analysis()
    L = []
    L.append("# FanStore benchmarks")
    L.append("")
    L.append("<!-- Generated by tests/bench/report.py from results.json; do not edit by hand. -->")
    L.append("")
    started = res.get("started", "?")
    L.append(f"Generated by `tests/bench/run.sh{' --quick' if res.get('mode') == 'quick' else ''}` on {started}, "
             f"commit `{m.get('git_commit', '?')}`, in {res.get('duration_seconds', 0):.0f} s. "
             f"The raw samples are in [`bench/results.json`](bench/results.json); this page and the plots are generated "
             f"from it. Workloads and targets: the project brief's `BENCHMARKS.md`; method below.")
    L.append("")
    L.append("Run it again with `tests/bench/run.sh` (the full suite, about 6 minutes on 2 cores, regenerates this page) "
             "or `tests/bench/run.sh --quick` (about a minute, small datasets; what `ctest -L bench` runs). Options: "
             "`--out DIR`, `--build DIR`, `--cache DIR` (generated datasets, kept between runs), `--only R1,S1,...`, "
             "`--skip-j1`, `--no-docs`. As root, with the packages of `tests/install-deps.sh`.")
    if res.get("error"):
        L += ["", f"**The run failed:** {res['error']}"]
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("Every ratio is FanStore against its baseline, measured side by side in this run (higher is better; for "
             "E1 and W1 it is how many times faster): the ratio of the two arms' medians over the measured rounds, which is "
             "what the target is judged on. *Per-round ratios* pair the two arms of each round, which ran back to back: "
             "their median and range show how much of a ratio is interference from the other users of this shared "
             "2-core machine (a wide range, or a paired median far from the ratio, means a noisy run).")
    L.append("")
    L.append("| id | workload | baseline | baseline value | FanStore | ratio | per-round ratios | target | result |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    cell = lambda x: str(x).replace("|", "\\|")
    for r in rows:
        r = {k: cell(v) if isinstance(v, str) else v for k, v in r.items()}
        L.append(f"| {r['id']} | {r['workload']} | {r['baseline_label']} | {fmt(r['baseline'], r['unit']) if r['baseline'] is not None else '–'} | "
                 f"{fmt(r['fanstore'], r['unit']) if r['fanstore'] is not None else '–'} | {ratio_text(r)} | {pair_text(r)} | "
                 f"{r['target']} | {met_text(r)} |")
    L.append("")
    notes = [r for r in rows if r.get("note")]
    if notes:
        L.append("Details:")
        L.append("")
        for r in notes:
            L.append(f"- **{r['id']}**: {r['note']}")
        L.append("")
    missed = [r for r in rows if r.get("met") is False or (r.get("met") is None and r.get("fanstore") is None)]
    if missed:
        L.append("## Targets missed, and why")
        L.append("")
        for r in missed:
            head = "not measured" if r.get("met") is None else f"missed: {ratio_text(r)} against {r['target']}"
            L.append(f"### {r['id']}: {head}")
            L.append("")
            text = analysis_for(analysis, r["id"])
            L.append(text if text else "No analysis recorded yet.")
            L.append("")
    diag = [r for r in rows if r["id"] in analysis and r not in missed]
    if diag:
        L.append("## Notes on the other figures")
        L.append("")
        for r in diag:
            L.append(f"### {r['id']}")
            L.append("")
            L.append(analysis[r["id"]])
            L.append("")
    if made:
        L.append("## Plots")
        L.append("")
        for f, title in made:
            L.append(f"![{title}]({plot_rel}/{f})")
            L.append("")
    # E1/E2 op counts.
    ws = res.get("workloads", {})
    for wid in ("E1", "E2"):
        w = ws.get(wid)
        if not w or "ops" not in w:
            continue
        L.append(f"## {wid}: operations reaching the source (system calls of the sftp server, strace)")
        L.append("")
        L.append("| phase | open | stat | readdir | read | close | lseek | total |")
        L.append("|---|---|---|---|---|---|---|---|")
        for k, label in (("direct_epoch", "direct epoch"), ("fanstore_stage_in", "FanStore stage-in"),
                         ("fanstore_epoch", "FanStore epoch")):
            c = w["ops"].get(k)
            if c:
                L.append(f"| {label} | {c['open']} | {c['stat']} | {c['readdir']} | {c['read']} | {c['close']} | "
                         f"{c.get('other', 0)} | {c['total']} |")
        extra = f" ({w.get('files')} files in {w.get('shards')} shards)" if wid == "E2" else ""
        L.append("")
        if wid == "E2":
            L.append(f"Dataset `{w.get('dataset')}`{extra}. Direct reading opens and stats every file; FanStore opens each "
                     "shard once during stage-in and nothing during the epoch. Reads are O(bytes) in both cases (sshfs "
                     "requests of at most 64 KiB).")
            L.append("")
    x1 = ws.get("X1")
    if x1 and "model" in x1:
        mo = x1["model"]
        L.append("## X1: metadata exchange and its extrapolation")
        L.append("")
        L.append("| agents | exchange (s, median of the per-run minimum over agents) | slowest agent (s) | bytes received per node | bytes per entry |")
        L.append("|---|---|---|---|---|")
        for n, v in sorted(x1["medians"].items(), key=lambda kv: int(kv[0])):
            L.append(f"| {n} | {v['t']:.4f} | {v['tmax']:.3f} | {v['bytes']:,.0f} | {v['bytes'] / x1['entries']:.1f} |")
        L.append("")
        L.append(f"Model: {mo['text']}. Fitted: b = {mo['bytes_per_entry']:.1f} B/entry, c = {mo['bytes_per_agent']:.0f} "
                 f"B/agent, a = {mo['fence_base_s'] * 1e3:.2f} ms, l = {mo['fence_per_log2_s'] * 1e3:.2f} ms per doubling.")
        L.append("")
        L.append("| nodes | dataset | bytes received per node | exchange time |")
        L.append("|---|---|---|---|")
        for e in mo["extrapolations"]:
            L.append(f"| {e['nodes']} | {e['dataset']} | {human_bytes(e['bytes_per_node'])} | {e['seconds']:.2f} s |")
        L.append("")
        L.append("Caveat: all agents share one 2-core machine, so a and l are fitted on a loopback fence with "
                 "oversubscribed agents; on a cluster the fence latency grows with the network diameter and the byte term "
                 "dominates for large namespaces.")
        L.append("")
    c1 = ws.get("C1")
    if c1 and "model" in c1:
        L += cost_model_section(c1)
    L.append("## Machine")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    for k in ("cpu_model", "cores", "memory_bytes", "kernel", "os", "local_dir_fs", "cache_dir_fs", "loadavg_start",
              "loadavg_end", "fanstore_version", "git_commit"):
        v = m.get(k)
        if k == "memory_bytes" and v:
            v = human_bytes(v)
        if isinstance(v, list):
            v = ", ".join(f"{x:.2f}" for x in v)
        L.append(f"| {k.replace('_', ' ')} | {v} |")
    c = m.get("costs")
    if c:
        L.append(f"| costs (`fsbench costs`) | a system call {c['syscall_us']:.2f} µs; first touch of an anonymous page "
                 f"{c['anon_page_fault_us']:.1f} µs; of a shared file's cached page {c['file_page_touch_us']:.2f} µs; "
                 f"a dependent random load over 256 MiB {c['random_load_ns']:.0f} ns |")
    L.append("")
    L.append("Local storage: both the native copies and the agents' local directories are on the same tmpfs "
             "(`/dev/shm`). On this VM the ext4 disk writes at about 370 MB/s buffered and frees blocks with "
             "synchronous discards (removing a 2 GiB staged tree took 17 s), which would have made the disk, not FanStore, "
             "the subject of every stage-in figure and broken the 10-minute budget. The packed datasets (the "
             "\"parallel file system\" directory) stay on the ext4 cache directory; the remote-file-system stand-in is "
             "sshfs over loopback from an sshd the suite starts itself, exporting that directory. The checkpoint "
             "workloads (W1-W3) are the exception: their local directories are on the ext4 disk (`/tmp`), where "
             "checkpoints go on GPU nodes, and their arms remove what they wrote before the next arm starts.")
    L.append("")
    L.append("The VM is a pvm guest (`pvm` in its kernel's command line: paravirtualised, with the host "
             "shadowing its page tables). The costs row above prices what a file costs here: a system call "
             "takes about 1 µs, several times bare metal's, and the first touch of a fresh anonymous page about "
             "20 µs, tens of times, while the kernel's own page-cache pages come at 5 GB/s (`dd` to tmpfs). So "
             "every per-file figure here is mostly system calls, and a design is judged by how many it makes "
             "per file (the library adds none to `open`, `read` and `close`; `strace -c`, 20,000 files) and "
             "by how little fresh memory it touches (read buffers live for the process; docs/design.md).")
    L.append("")
    L.append("## Datasets")
    L.append("")
    L.append("| name | files | dirs | raw | stored | shards | generated as |")
    L.append("|---|---|---|---|---|---|---|")
    for n, d in res.get("datasets", {}).items():
        p = d["params"]
        unit = "MiB" if p["kind"] == "mixed" else "KiB"
        how = (f"{p['kind']}, {p['lo']}–{p['hi']} {unit}" if p["kind"] != "jpeg" else f"JPEG {p['lo']}×{p['lo']} px") + \
              f", seed {p['seed']}, shard size {p['shard']}"
        L.append(f"| `{n}` | {d['files']:,} | {d['dirs']} | {human_bytes(d['raw_bytes'])} | {human_bytes(d['stored_bytes'])} | "
                 f"{d['shards']} | {how} |")
    L.append("")
    if res.get("mode") == "full":
        L.append("Sizes: `images` and `text` are BENCHMARKS.md's. `mixed` has 100 files instead of 1,000 (1,000 files of "
                 "1–16 MiB are 8.5 GiB, more than the RAM-backed local storage and the time budget allow). `images-pfs` is a "
                 "smaller `images` for the workloads that go through the remote-file-system stand-in (S1, E2), which reads "
                 "at 100–350 MB/s depending on the load of the machine; it is also the P1 tree (3,000 files pack in about "
                 "a second, the full `images` would cost 85 s of the budget for the same rate); `jpeg` holds the small real JPEGs of E1 (PIL).")
        L.append("")
    L.append("## Method")
    L.append("")
    me = res.get("method", {})
    L.append(f"- Arms alternate inside every round (A B A B ...); {me.get('warmup')} warm-up round, then "
             f"{me.get('reps')} measured rounds; the figure is the median of the measured rounds. Every sample is in results.json.")
    L.append("- The timed loops time themselves (C helper `fsbench.c`, the Python scripts), so process start-up, the "
             "preload library's constructor and the agent's stage-in are never counted in read workloads. Stage-in "
             "figures are measured from starting the agent until its status says ready.")
    L.append("- Both arms read the same bytes: every sample reports a hash of everything it read (XXH3 of each file's "
             "content; for E1 the sum of every decoded pixel and label; for M1 the type, size and mtime of every file; for M2 "
             "the sorted listing), and the suite fails if the arms disagree.")
    L.append("- Page-cache state, the same in both arms:")
    L.append("")
    for wid, w in ws.items():
        if w.get("cache"):
            L.append(f"  - {wid}: {w['cache']}")
    L.append("")
    return "\n".join(L) + "\n"


def later_runs(res):
    """The partial runs merged into a scale result after the full run (a dict with `from` and
    `started` under any top-level key): their rows replaced the full run's of the same id."""
    runs = [v for v in res.values() if isinstance(v, dict) and "from" in v and "started" in v]
    if not runs:
        return ""
    return (" Rows of later partial runs replaced the full run's of the same id: "
            + "; ".join(f"`{v['from']}` ({v['started']})" for v in sorted(runs, key=lambda v: v["started"])) + ".")


def scale_markdown(res):
    """The section of docs/benchmarks.md for `run.sh --scale` (scale.py's results-scale.json)."""
    analysis = load_analysis()
    ph = res.get("phases", {})
    L = ["## ImageNet scale (`run.sh --scale`)", "",
         f"Generated by `tests/bench/run.sh --scale` on {res.get('started', '?')} from "
         "[`bench/results-scale.json`](bench/results-scale.json). Datasets from `tests/bench/mkimagenet.py`: "
         "`imagenet1k`, 1,281,167 training files in 1,000 class tars inside one tar (732–1,300 files per class, as "
         "ImageNet's) plus 50,000 validation files, 200–3,000 random bytes each (ImageNet's 110 KiB mean scaled down "
         "to fit this machine; random bytes do not compress, as JPEGs do not); `imagenet22k-meta`, 14,197,122 empty "
         "files in 21,841 class directories, packed from a tar stream on standard input, never on disk as files. "
         "Node-local storage is tmpfs (`/dev/shm`) for `imagenet1k` and the VM's ext4 disk for `imagenet22k-meta` "
         "(14 million tmpfs inodes would take about 13 GB of the 24 GB). The `-disk` rows (issue 31) put "
         "`imagenet1k`'s local directory on that ext4 disk, where GPU nodes have NVMe: the default mode (as root, "
         "the share as an EROFS image) beside `--image no`, against the same tree extracted to the same disk"
         + (f" (`scale.py --only disk`, {ph['disk'].get('started', '?')})" if ph.get("disk") else "")
         + ". Each figure is one sample (one run at this scale takes minutes); the arms ran back to back in the same "
         "run." + later_runs(res), "",
         "| id | workload | baseline | FanStore | ratio | target | result |", "|---|---|---|---|---|---|---|"]
    for r in res.get("rows", []):
        r = {k: v.replace("|", "\\|") if isinstance(v, str) else v for k, v in r.items()}
        met = "–" if r.get("met") is None else ("met" if r["met"] else "**missed**")
        ratio = "–" if r.get("ratio") is None else f"{r['ratio']:.2f}×"
        L.append(f"| {r['id']} | {r['workload']} | {fmt(r['baseline'], r['unit']) if r.get('baseline') is not None else '–'} | "
                 f"{fmt(r['fanstore'], r['unit'])} | {ratio} | "
                 f"{r['target']} | {met} |")
    L.append("")
    L.append("Details:")
    L.append("")
    for r in res.get("rows", []):
        if r.get("note"):
            L.append(f"- **{r['id']}**: {r['note']}")
    if ph:
        L.append(f"- Phases (s): pack of the archive {ph.get('pack_archive_seconds', 0):.1f}, zstd of the archive "
                 f"{ph.get('zstd_archive_seconds', 0):.1f}, extract {ph.get('extract_seconds', 0):.1f}, pack of the tree "
                 f"{ph.get('pack_tree_seconds', 0):.1f}, tar \\| zstd of the tree {ph.get('tar_zstd_tree_seconds', 0):.1f}; "
                 f"first epoch: agent ready {ph.get('f1_ready_seconds', 0):.1f} + pass {ph.get('f1_pass_seconds', 0):.1f}; "
                 f"unpack state after the first pass: {json.dumps(ph.get('unpack_after_pass1'))}.")
    L.append("")
    missed = [r for r in res.get("rows", []) if r.get("met") is False]
    if missed:
        L += ["### Scale targets missed, and why", ""]
        for r in missed:
            text = analysis_for(analysis, r["id"])
            L += [f"#### {r['id']}", "", text if text else "No analysis recorded yet.", ""]
    # A met row is one sample too: its runs, where analysis.md has them.
    noted = [r for r in res.get("rows", []) if r not in missed and r["id"] in analysis]
    if noted:
        L += ["### Notes on the other scale figures", ""]
        for r in noted:
            L += [f"#### {r['id']}", "", analysis[r["id"]], ""]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md", required=True)
    ap.add_argument("--plots")
    ap.add_argument("--results-copy")
    ap.add_argument("--scale", action="store_true", help="RESULTS is scale.py's results-scale.json")
    a = ap.parse_args()
    if a.scale:
        with open(a.results) as f:
            md = scale_markdown(json.load(f))
        with open(a.md, "w") as f:
            f.write(md)
        print(f"report: wrote {a.md}")
        return
    if not a.plots:
        ap.error("--plots is required")
    with open(a.results) as f:
        res = json.load(f)
    made = plots(res, a.plots)
    rel = os.path.relpath(a.plots, os.path.dirname(os.path.abspath(a.md)))
    md = markdown(res, made, rel)
    # The scale and scale-out sections, when those runs have been published next to the plots.
    for name in ("scale.md", "scaleout.md"):
        if os.path.exists(os.path.join(a.plots, name)):
            with open(os.path.join(a.plots, name)) as f:
                md += "\n" + f.read()
    if a.results_copy:
        shutil.copy(a.results, a.results_copy)
    else:
        md = md.replace("(bench/results.json)", f"({os.path.relpath(a.results, os.path.dirname(os.path.abspath(a.md)))})")
    with open(a.md, "w") as f:
        f.write(md)
    print(f"report: wrote {a.md} and {len(made)} plots in {a.plots}")


if __name__ == "__main__":
    main()
