#!/usr/bin/python3
"""The scale-out runs (tests/bench/run.sh --scale-out; BENCHMARKS.md "Scale-out", N1-N6).

For each N of --nodes, starts the netns test cluster with N nodes (tests/slurm/e2e/start.sh, this
build's packages), then runs, as the test user, jobs with --fanstore over one dataset:
  - "read" jobs (--runs of them): every node reads every file once, in its own random order
    (all-to-all: most reads are remote), all nodes starting together once every reader is up.
    Per node: the read time, its eth0 bytes in and out over the job, the agent's threads,
    descriptors, TCP connections and RSS once the reads are done; from the agents' stats file:
    stage-in, exchange time and bytes, CPU seconds at ready and at the end, what it prefetched.
    Per job: J1 (job start to every node ready: the first srun of the script, which starts on a
    node only once its agent is ready), the dataset directory's opens and reads seen by inotify,
    and the teardown (the script's end to no trace of the job on any node).
  - "exchange" jobs for each PMIx fence algorithm of Slurm (FANSTORE_PMIX_FENCE tree, ring, mixed),
    --runs of each: a script that does nothing, for the exchange and J1 alone. Slurm 22.05 builds
    no tree for a step of fewer nodes than TreeWidth (50 by default), and its tree fence is then
    node-local and fails; so the tree's jobs run again on a cluster of TreeWidth 2
    (--tree-also-at-width), where the tree is real at every N.
  - the fault case, once: tests/slurm/e2e/wide.sh (2 agents killed mid-epoch, every read checked).
Writes OUT/results-scaleout.json (every raw sample); scaleout_model.py fits and reports it. A job
that does not complete leaves the daemons' log lines of its time in OUT/failed-jobs/.
All nodes share this machine's cores: the CPU seconds per file and bytes per node, not the wall
times, are what carries over to a cluster.
"""
import argparse
import ctypes
import functools
import glob
import json
import os
import pwd
import random
import re
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SLURM = os.path.join(REPO, "tests", "slurm")
BASE = os.path.realpath(os.environ.get("FANSTORE_SLURM_BASE", "/var/tmp/fanstore-slurm"))
PFS = os.path.join(BASE, "pfs")
TUSER = "fsalice"
PY = "/usr/bin/python3"
FENCES = ("tree", "ring", "mixed")

READER = r'''
import glob, json, os, random, sys, time
listing, out, done, go, seed, nodes = sys.argv[1:7]
paths = open(listing).read().split("\n")[:-1]
random.Random(seed).shuffle(paths)
# The epoch starts on every node at once, as a training job's does after its first collective:
# each reader waits here until all have started, so no reader's clock runs beside another's start.
jd = os.path.dirname(out)
open(os.path.join(jd, "started." + seed), "w").close()
give_up = time.time() + 120  # a reader that never started must not hold the others for good
while len(glob.glob(os.path.join(jd, "started.*"))) < int(nodes) and time.time() < give_up:
    time.sleep(0.01)
t0 = time.perf_counter()
n = total = 0
for p in paths:
    with open(p, "rb") as f:
        total += len(f.read())
    n += 1
c = os.times()
json.dump({"files": n, "bytes": total, "seconds": time.perf_counter() - t0, "cpu": c.user + c.system},
          open(out, "w"))
open(done, "w").close()
while not os.path.exists(go):
    time.sleep(0.05)
'''


def log(msg):
    print(f"scaleout: {msg}", flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def asu(*cmd, cwd=None):
    """A command as the test user, in the cluster's hub namespace, with a clean environment."""
    return run([os.path.join(SLURM, "cluster.sh"), "exec", "--base", BASE, "--user", TUSER, "--", "env",
                "-i", f"HOME=/home/{TUSER}", f"USER={TUSER}", f"LOGNAME={TUSER}", "PATH=/usr/bin:/bin",
                "LANG=C.UTF-8", *cmd], cwd=cwd)


def asroot(*cmd):
    return run([os.path.join(SLURM, "cluster.sh"), "exec", "--base", BASE, "--", *cmd])


@functools.lru_cache(maxsize=None)
def uid():
    return pwd.getpwnam(TUSER).pw_uid


class Inotify:
    """Counts opens and reads of the dataset's files (every namespace sees the same inodes)."""
    IN_ACCESS, IN_OPEN = 0x1, 0x20

    def __init__(self, directory):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.libc.inotify_add_watch(self.fd, directory.encode(), self.IN_ACCESS | self.IN_OPEN)
        self.opens = self.reads = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        import select
        while not self.stop.is_set():
            select.select([self.fd], [], [], 0.1)
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            i = 0
            while i < len(buf):
                _, mask, _, ln = struct.unpack_from("iIII", buf, i)
                self.opens += bool(mask & self.IN_OPEN)
                self.reads += bool(mask & self.IN_ACCESS)
                i += 16 + ln

    def close(self):
        self.stop.set()
        self.thread.join()
        os.close(self.fd)
        return {"opens": self.opens, "reads": self.reads}


def make_dataset(files, size, shards):
    """FILES files of about SIZE bytes (incompressible), packed in SHARDS shards, as the test user."""
    src, ds = f"{PFS}/scaleout-{files}x{size}", f"{PFS}/scaleout-{files}x{size}.fs"
    if not os.path.isdir(src):
        rng = random.Random(1)
        os.makedirs(src + ".tmp")
        for i in range(files):
            d = f"{src}.tmp/d{i % 64:02d}"
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/f{i:06d}.bin", "wb") as f:
                f.write(rng.randbytes(size // 2 + rng.randrange(size)))
        os.rename(src + ".tmp", src)
        run(["chown", "-R", f"{TUSER}:", src])
    fanstore = "/usr/bin/fanstore"
    info = None
    if os.path.exists(f"{ds}/manifest.json"):
        try:
            info = json.loads(asu(fanstore, "info", "--json", ds))
        except subprocess.CalledProcessError:
            info = None
    if info is None:
        subprocess.run(["rm", "-rf", ds], check=True)
        total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(src) for n in ns)
        asu(fanstore, "pack", src, ds, "--no-sync", "-q", "--shard-size", str(total // shards + 1))
        info = json.loads(asu(fanstore, "info", "--json", ds))
    return ds, info


def job_dir(name):
    d = f"{BASE}/jobs/{name}"
    subprocess.run(["rm", "-rf", d], check=True)
    os.makedirs(d)
    run(["chown", f"{TUSER}:", d])
    return d


def slurmd_pid(node):
    return int(open(f"{BASE}/state/slurmd.{node}.pid").read())


def net_bytes(node):
    """eth0's received and sent bytes in NODE's network namespace."""
    for line in open(f"/proc/{slurmd_pid(node)}/net/dev"):
        if line.strip().startswith("eth0:"):
            f = line.split(":", 1)[1].split()
            return int(f[0]), int(f[8])
    return 0, 0


def agent_state(job, node):
    """The agent's threads, descriptors, TCP connections and RSS (root reads its /proc)."""
    try:
        st = json.load(open(f"/dev/shm/fanstore.{uid()}.{job}.{node}/status.json"))
        pid = st["pid"]
        status = open(f"/proc/{pid}/status").read()
        fds = os.listdir(f"/proc/{pid}/fd")
        socks = set()
        for fd in fds:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
            if m:
                socks.add(m.group(1))
        tcp = 0
        for name in ("tcp", "tcp6"):
            for line in open(f"/proc/{pid}/net/{name}").readlines()[1:]:
                tcp += line.split()[9] in socks
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return {"cpu_after_read": (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"),
                "threads": int(re.search(r"Threads:\s+(\d+)", status).group(1)),
                "rss_kib": int(re.search(r"VmRSS:\s+(\d+)", status).group(1)),
                "fds": len(fds), "tcp_conns": tcp}
    except (OSError, KeyError, AttributeError, ValueError):
        return {}


def busy_seconds():
    """The machine's CPU seconds not idle, all cores, since boot (/proc/stat)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def job_start(job):
    """When slurmctld started the job, whichever scheduler did: the main one ("sched: Allocate
    JobId=J ...") or the backfill one ("Started JobId=J in ...")."""
    for line in open(f"{BASE}/log/slurmctld.log"):
        m = re.match(rf"\[([^\]]+)\] (?:sched: Allocate JobId={job} |.*Started JobId={job} in )", line)
        if m:
            return time.mktime(time.strptime(m.group(1).split(".")[0], "%Y-%m-%dT%H:%M:%S")) + \
                float("0." + m.group(1).split(".")[1])
    return None


def leftovers(job):
    u = uid()
    return glob.glob(f"/dev/shm/fanstore.{u}.{job}*") + glob.glob(f"{BASE}/nodes/*/local/fanstore.{u}.{job}*")


def job_state(job):
    """The job's state, or GONE once slurmctld has purged it (MinJobAge after its end)."""
    try:
        return asroot("squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T").strip()
    except subprocess.CalledProcessError as e:
        if "Invalid job id" in (e.stderr or "") + (e.stdout or ""):
            return "GONE"
        raise


def job_ended(st):
    return st not in ("", "PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def wait_state(job, timeout):
    deadline, st = time.time() + timeout, ""
    while time.time() < deadline:
        st = job_state(job)
        if job_ended(st):
            return st
        time.sleep(0.3)
    return "TIMEOUT(" + st + ")"


FAILED_DIR = None  # where a failed job's log lines go (main: OUT/failed-jobs)


def keep_logs(name, since):
    """The daemons' log lines from `since` (seconds since the epoch) on, of every node, into
    FAILED_DIR/name: the next cluster's start clears the logs, and a failed job's cause is in them
    (a PMIx fence that stopped: docs/admin.md)."""
    if not FAILED_DIR:
        return
    dest = os.path.join(FAILED_DIR, name)
    os.makedirs(dest, exist_ok=True)
    start = "[" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 1))
    for log_name in sorted(glob.glob(os.path.join(BASE, "log", "*.log"))):
        with open(log_name, errors="replace") as f:
            lines = [l for l in f if l[:20] >= start]  # ISO times: in order as strings
        if lines:
            with open(os.path.join(dest, os.path.basename(log_name)), "w") as out:
                out.writelines(lines)


def one_job(kind, n, k, ds, fence, via="peers"):
    jd = job_dir(f"scaleout-{kind}")
    nodes = [f"node{i}" for i in range(1, n + 1)]
    listing = f"{jd}/files.list"
    paths = [p for p in asu("/usr/bin/fanstore", "ls", ds).splitlines() if p and not p.endswith("/")]
    with open(listing, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    open(f"{jd}/reader.py", "w").write(READER)
    body = f"srun -N{n} --ntasks-per-node=1 bash -c 'date +%s.%N' > {jd}/ready\n"
    if kind == "read":
        body += (f"srun -N{n} --ntasks-per-node=1 bash -c 'cd \"$FANSTORE_MOUNT\" && exec {PY} {jd}/reader.py "
                 f"{listing} {jd}/sum.$SLURMD_NODENAME {jd}/done.$SLURMD_NODENAME {jd}/go $SLURMD_NODENAME {n}'\n")
    body += f"date +%s.%N > {jd}/end\n"
    open(f"{jd}/job.sh", "w").write("#!/bin/bash\n" + body)
    os.chmod(f"{jd}/job.sh", 0o755)
    run(["chown", "-R", f"{TUSER}:", jd])
    # The agents' fence: FANSTORE_PMIX_FENCE, which the plugin turns into the agent step's
    # SLURM_PMIX_FENCE (builds before that passed the job's SLURM_PMIX_FENCE on: both are set).
    env_export = "ALL" if fence == "default" else f"ALL,FANSTORE_PMIX_FENCE={fence},SLURM_PMIX_FENCE={fence}"
    if via != "peers":  # a large exchange's indexes through PMIx's direct modex (agent: FANSTORE_EXCHANGE)
        env_export += f",FANSTORE_EXCHANGE={via}"
    submitted = time.time()
    net0 = {x: net_bytes(x) for x in nodes}
    watch = Inotify(ds)
    busy0 = busy_seconds()
    job = int(asu("sbatch", "--parsable", f"-N{n}", f"--chdir={jd}", f"-o{jd}/out.%j", f"--export={env_export}",
                  f"--fanstore={ds}", "--fanstore-replicas=1", f"{jd}/job.sh", cwd=jd).strip().split(";")[0])
    states = {}
    if kind == "read":
        deadline, polls = time.time() + 300 + 10 * n, 0
        # Until every reader is done, or the script ended (a reader failed), or the job did (its
        # batch step failed before the script ran: `end` is never written).
        while time.time() < deadline and len(glob.glob(f"{jd}/done.*")) < n and \
                not os.path.exists(f"{jd}/end") and not (polls % 25 == 24 and job_ended(job_state(job))):
            polls += 1
            time.sleep(0.2)
        states = {x: agent_state(job, x) for x in nodes}
        open(f"{jd}/go", "w").close()
    st = wait_state(job, 300 + 10 * n)
    busy = busy_seconds() - busy0
    clean = None
    deadline = time.time() + 120
    while time.time() < deadline:
        if not leftovers(job):
            clean = time.time()
            break
        time.sleep(0.1)
    source = watch.close()
    net1 = {x: net_bytes(x) for x in nodes}
    t0 = job_start(job)
    ready = [float(x) for x in open(f"{jd}/ready").read().split()] if os.path.exists(f"{jd}/ready") else []
    end = float(open(f"{jd}/end").read()) if os.path.exists(f"{jd}/end") else None
    stats = {}
    for line in open(f"{jd}/fanstore-{job}.stats") if os.path.exists(f"{jd}/fanstore-{job}.stats") else []:
        s = json.loads(line)
        stats[s["node"]] = s
    agents = []
    for x in nodes:
        s = stats.get(x, {})
        a = {"node": x, "rank": s.get("rank"), "stage_in_seconds": s.get("stage_in_seconds"),
             "exchange_seconds": s.get("exchange_seconds"), "exchange_bytes": s.get("exchange_bytes"),
             "exchange_via": s.get("exchange_via"),
             "cpu_ready": s.get("cpu_seconds", {}).get("ready"), "cpu_end": s.get("cpu_seconds", {}).get("now"),
             "opens": s.get("opens"), "bytes": s.get("bytes"), "bytes_read_from_source": s.get("bytes_read_from_source"),
             "prefetch": s.get("prefetch"),
             # Opens that waited for a fetch in flight, connections refused and evicted: what the
             # agents' CPU after ready may owe to the readers' race with the prefetch.
             "peers": s.get("peers"),
             "net_rx_bytes": net1[x][0] - net0[x][0], "net_tx_bytes": net1[x][1] - net0[x][1], **states.get(x, {})}
        if kind == "read" and os.path.exists(f"{jd}/sum.{x}"):
            r = json.load(open(f"{jd}/sum.{x}"))
            a.update(files_read=r["files"], bytes_read=r["bytes"], read_seconds=r["seconds"], reader_cpu=r["cpu"])
        agents.append(a)
    res = {"n": n, "run": k, "kind": kind, "fence": fence, "exchange_via": via, "job": job, "state": st, "replicas": 1,
           "machine_cpu_seconds": busy,
           "j1_seconds": max(ready) - t0 if ready and t0 else None,
           "teardown_seconds": clean - end if clean and end else None,
           "source_opens": source["opens"], "source_reads": source["reads"], "agents": agents,
           "complete": st == "COMPLETED" and len(stats) == n and
           (kind != "read" or all(a.get("files_read") == len(paths) for a in agents))}
    if not res["complete"]:
        keep_logs(f"N{n}-job{job}-{kind}-{fence}", submitted)
    ex = sorted(a["exchange_seconds"] for a in agents if a["exchange_seconds"] is not None)
    rd = sorted(a["read_seconds"] for a in agents if a.get("read_seconds"))
    log(f"N={n} {kind} fence={fence} via={via} run {k}: job {job} {st}, J1 {res['j1_seconds'] or 0:.2f} s, exchange median "
        f"{ex[len(ex) // 2] if ex else 0:.3f} max {ex[-1] if ex else 0:.3f} s, "
        + (f"read median {rd[len(rd) // 2]:.2f} max {rd[-1]:.2f} s, " if rd else "")
        + f"source opens {source['opens']}, teardown {res['teardown_seconds'] or 0:.2f} s"
        + ("" if res["complete"] else "  ** INCOMPLETE **"))
    return res


def cluster(build, n, tree_width=None):
    subprocess.run([os.path.join(SLURM, "e2e", "stop.sh"), build], capture_output=True)
    env = dict(os.environ, **({"FANSTORE_CLUSTER_TREE_WIDTH": str(tree_width)} if tree_width else {}))
    out = subprocess.run([os.path.join(SLURM, "e2e", "start.sh"), build, "netns", str(n)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"scaleout: cluster start with {n} nodes failed:\n{out.stdout}{out.stderr}")
    rss = [int(x) for x in run(["ps", "-C", "slurmd", "-o", "rss="]).split()]
    return {"slurmd_rss_kib_mean": sum(rss) / max(len(rss), 1), "slurmd_count": len(rss), "tree_width": tree_width}


def version():
    """`fanstore --version` of the installed binaries: it names the commit they were built from."""
    return run(["/usr/bin/fanstore", "--version"]).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nodes", default="2,4,8,16,32,64")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--files", type=int, default=2560)
    ap.add_argument("--size", type=int, default=8192, help="mean file size")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--no-fences", action="store_true", help="skip the exchange-only jobs")
    ap.add_argument("--fences", default=",".join(FENCES), help="the exchange-only jobs' fences")
    ap.add_argument("--no-fault", action="store_true", help="skip wide.sh")
    ap.add_argument("--no-read", action="store_true", help="skip the all-to-all read jobs")
    ap.add_argument("--exchange-via", default="peers",
                    help="how the exchange-only jobs move large indexes, a list run side by side: "
                         "peers (the default) and pmix (direct modex)")
    ap.add_argument("--tree-width", type=int,
                    help="slurm.conf's TreeWidth for the clusters (default: Slurm's, 50). Slurm 22.05's PMIx "
                         "tree fence is node-local on a step of fewer nodes than TreeWidth")
    ap.add_argument("--tree-also-at-width", type=int, default=2, metavar="W",
                    help="after each N's jobs, the tree fence's exchange jobs again on a cluster of "
                         "TreeWidth W, where Slurm builds a real tree (0: not)")
    ap.add_argument("--merge", action="store_true",
                    help="add to OUT/results-scaleout.json, replacing the runs of the N measured now")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("scaleout: run as root (it drives the test cluster)")
    os.makedirs(a.out, exist_ok=True)
    global FAILED_DIR
    FAILED_DIR = os.path.join(a.out, "failed-jobs")
    out_file = os.path.join(a.out, "results-scaleout.json")
    res = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": [], "clusters": {}, "faults": {},
           "machine": {"cores": os.cpu_count(), "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}}
    ns = [int(x) for x in a.nodes.split(",")]
    if a.merge and os.path.exists(out_file):
        res = json.load(open(out_file))
        res["runs"] = [r for r in res["runs"] if r["n"] not in ns]

    def save():
        with open(out_file, "w") as f:
            json.dump(res, f, separators=(",", ":"))

    def record(run, tree_width):  # each run as it ends: a suite cut short keeps what it measured
        res["runs"].append(dict(run, tree_width=tree_width))
        save()

    for n in ns:
        res["clusters"][str(n)] = cluster(a.build, n, a.tree_width)
        ds, info = make_dataset(a.files, a.size, a.shards)
        res["version"] = version()
        res["dataset"] = {"path": ds, "files": info.get("files"), "entries": info.get("files", 0) + info.get("dirs", 0) + 1, "shards": len(json.load(open(f"{ds}/manifest.json"))["shards"]),
                          "bytes": info.get("raw_bytes"), "stored_bytes": info.get("stored_bytes")}
        for k in range(0 if a.no_read else a.runs):
            record(one_job("read", n, k, ds, "default"), a.tree_width)
        for fence in () if a.no_fences else a.fences.split(","):
            for k in range(a.runs):
                for via in a.exchange_via.split(","):  # interleaved: side by side
                    record(one_job("exchange", n, k, ds, fence, via), a.tree_width)
        if not a.no_fault and n >= 4:
            t = time.time()
            p = subprocess.run([os.path.join(SLURM, "e2e", "wide.sh"), a.build], capture_output=True, text=True)
            summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            res["faults"][str(n)] = {"passed": p.returncode == 0, "summary": summary, "seconds": time.time() - t,
                                "checks": [l.strip() for l in p.stdout.splitlines() if l.strip().startswith(("ok", "FAIL"))]}
            log(f"N={n} fault case (wide.sh): {summary}")
        w = a.tree_also_at_width
        if not a.no_fences and w and w <= n and w != a.tree_width and "tree" in a.fences.split(","):
            res["clusters"][f"{n}-tree-width-{w}"] = cluster(a.build, n, w)
            for k in range(a.runs):
                record(one_job("exchange", n, k, ds, "tree"), w)
        save()
    subprocess.run([os.path.join(SLURM, "e2e", "stop.sh"), a.build], capture_output=True)
    log(f"results in {out_file}")


if __name__ == "__main__":
    main()
