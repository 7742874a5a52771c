#!/usr/bin/python3
"""FanStore benchmark suite: every workload of ../shared/BENCHMARKS.md against its baseline.

Started by tests/bench/run.sh, which builds the C helper and passes its path. Method: each
workload alternates its arms (A B A B ...), one warm-up round first, then the median of the
measured rounds. Every timed loop times itself (so process start-up, the interception
library's constructor and the agent's stage-in never count in read workloads) and reports a
content hash; all arms of a workload must agree on it. results.json holds every raw sample; the
Markdown report and the plots are generated from it by report.py.
"""
import argparse
import contextlib
import hashlib
import json
import os
import platform
import pwd
import random
import resource
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"  # Debian's Python: torch, torchvision, PIL, matplotlib

# Dataset sizes. The full sizes are BENCHMARKS.md's except `mixed` (1,000 files of 1-16 MiB
# are 8.5 GiB, more than this suite's RAM-backed local storage and time budget allow) and two
# small extra datasets served through the remote-file-system stand-in, whose ~130 MB/s would
# otherwise dominate the 10-minute budget.
SIZES = {
    "full": {
        "images": dict(kind="images", n=20000, dirs=100, lo=60, hi=160, seed=1, shard="64M"),
        "images-pfs": dict(kind="images", n=3000, dirs=30, lo=60, hi=160, seed=2, shard="16M"),
        "text": dict(kind="text", n=50000, dirs=50, lo=1, hi=8, seed=3, shard="16M"),
        "mixed": dict(kind="mixed", n=100, dirs=10, lo=1, hi=16, seed=4, shard="256M"),
        "jpeg": dict(kind="jpeg", n=2000, dirs=10, lo=64, hi=64, seed=5, shard="4M"),
    },
    "quick": {
        "images": dict(kind="images", n=1500, dirs=15, lo=60, hi=160, seed=1, shard="16M"),
        "images-pfs": dict(kind="images", n=300, dirs=3, lo=60, hi=160, seed=2, shard="8M"),
        "text": dict(kind="text", n=3000, dirs=10, lo=1, hi=8, seed=3, shard="2M"),
        "mixed": dict(kind="mixed", n=6, dirs=2, lo=1, hi=16, seed=4, shard="256M"),
        "jpeg": dict(kind="jpeg", n=200, dirs=4, lo=64, hi=64, seed=5, shard="4M"),
    },
}
# Rounds: warm-up rounds (recorded, not used) and measured rounds per workload.
ROUNDS = {"full": dict(warmup=1, reps=5), "quick": dict(warmup=1, reps=2)}
# Inner repetitions of the very short metadata loops, so that one sample lasts long enough.
INNER = {"full": dict(stat_passes=10, enoent=200000, m2_passes=3, zdec_passes=1),
         "quick": dict(stat_passes=5, enoent=20000, m2_passes=1, zdec_passes=1)}


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class BenchError(Exception):
    pass


def run(cmd, env=None, check=True, capture=True, timeout=900, **kw):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise BenchError(f"{' '.join(map(str, cmd))[:300]} exited {p.returncode}: {(p.stderr or '')[-2000:]}")
    return p


def run_json(cmd, env=None):
    p = run(cmd, env=env)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise BenchError(f"{cmd[0]} printed no JSON: {p.stdout[-500:]} {p.stderr[-500:]}")
    return json.loads(lines[-1])


def timed(cmd, env=None, shell=False):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError(f"{cmd if shell else ' '.join(cmd)} exited {p.returncode}: {p.stderr[-1000:]}")
    return dt


def median(xs):
    return statistics.median(xs) if xs else None


def sha1_file(path):
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def tree_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def write_list(path, rels):
    with open(path, "w") as f:
        f.write("\n".join(rels) + "\n")
    return path


def drop_tree(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


class Ctx:
    """Everything a workload needs: paths, tools, the running services and the results."""

    def __init__(self, args):
        self.args = args
        self.mode = "quick" if args.quick else "full"
        self.sizes = SIZES[self.mode]
        self.rounds = ROUNDS[self.mode]
        self.inner = INNER[self.mode]
        self.build = os.path.abspath(args.build)
        self.bin = os.path.join(self.build, "bin")
        self.fanstore = os.path.join(self.bin, "fanstore")
        self.agent_bin = os.path.join(self.bin, "fanstore-agent")
        self.preload = os.path.join(self.build, "lib", "libfanstore_preload.so")
        self.fsbench = os.path.abspath(args.fsbench)
        self.out = os.path.abspath(args.out)
        self.cache = os.path.abspath(args.cache)
        self.data = os.path.join(self.cache, "data")
        # The working directory is node-local storage for both arms: the native copies and the
        # agents' local directories live on the same file system.
        base = args.work_base
        self.work = os.path.join(base, f"fanstore-bench.{os.getpid()}")
        self.native = os.path.join(self.work, "native")
        self.local = os.path.join(self.work, "local")
        self.rundir = os.path.join(self.work, "run")
        self.lists = os.path.join(self.work, "lists")
        self.pfs_mnt = os.path.join(self.work, "pfs")  # sshfs mount: never inside the exported dir
        # Node-local disk for the checkpoint workloads (W1-W3): checkpoints go to disk on GPU nodes,
        # and a 2 GiB write lands differently on ext4 than on tmpfs. Made by those workloads only.
        self.disk = os.path.join(args.disk_base, f"fanstore-bench.{os.getpid()}")
        self.agents = []
        self.datasets = {}
        self.results = {"workloads": {}, "rows": [], "series": {}}
        self.cores = os.cpu_count() or 1
        self.sshfs = None
        self.only = set(args.only.split(",")) if args.only else None

    def wanted(self, wid):
        return self.only is None or wid in self.only or wid.split("-")[0] in self.only


# --- datasets ---------------------------------------------------------------------------------------

# Datasets read through the remote-file-system stand-in keep their source tree in the cache
# (the exported directory); the others are generated straight into local storage every run
# (about a second for 20,000 files) and only their packed copy is cached.
SERVED = ("images-pfs", "jpeg")


def gen_dataset(ctx, name):
    p = ctx.sizes[name]
    gen_src = os.path.join(HERE, "mkjpeg.py" if p["kind"] == "jpeg" else "fsbench.c")
    key = f"{p['kind']}-n{p['n']}-d{p['dirs']}-{p['lo']}-{p['hi']}-s{p['seed']}-{sha1_file(gen_src)[:8]}"

    def generate(dst):
        if p["kind"] == "jpeg":
            run([PY, os.path.join(HERE, "mkjpeg.py"), dst, str(p["n"]), str(p["dirs"]), str(p["lo"]), str(p["seed"])])
        else:
            run([ctx.fsbench, f"gen-{p['kind']}", dst, str(p["n"]), str(p["dirs"]), str(p["lo"]), str(p["hi"]),
                 str(p["seed"])])

    if name in SERVED:
        src = os.path.join(ctx.data, key)
        if not os.path.isdir(src):
            log(f"generating {name} ({p['n']} files) in {src}")
            tmp = src + f".tmp-{os.getpid()}"
            drop_tree(tmp)
            generate(tmp)
            os.rename(tmp, src)
    else:
        src = os.path.join(ctx.native, name)
        generate(src)
    # Packed copy, keyed by the packer binary (a rebuilt packer may write another format).
    tool = sha1_file(ctx.fanstore)[:10]
    fs = os.path.join(ctx.data, f"{key}.{p['shard']}.{tool}.fs")
    if not os.path.isdir(fs):
        for old in os.listdir(ctx.data):
            if old.startswith(f"{key}.") and old.endswith(".fs"):
                drop_tree(os.path.join(ctx.data, old))
        log(f"packing {name} into {fs}")
        tmp = fs[:-3] + f".tmp-{os.getpid()}.fs"
        run([ctx.fanstore, "pack", src, tmp, "-q", "--shard-size", p["shard"]])
        os.rename(tmp, fs)
    info = json.loads(run([ctx.fanstore, "info", "--json", fs]).stdout)
    files = tree_files(src)
    if len(files) != info["files"]:
        raise BenchError(f"{name}: {len(files)} files generated, {info['files']} packed in {fs}")
    ctx.datasets[name] = {
        "name": name, "key": key, "src": src, "fs": fs, "params": p, "files": len(files),
        "dirs": p["dirs"], "raw_bytes": info["raw_bytes"], "stored_bytes": info["stored_bytes"],
        "shards": len(info["shards"]), "shard_bytes": sum(s["bytes"] for s in info["shards"]),
        "shard_files": [os.path.join(fs, s["file"]) for s in info["shards"]], "rel": files,
    }
    return ctx.datasets[name]


def prune_cache(ctx):
    """Removes cached datasets made by another version of the generators."""
    tags = {sha1_file(os.path.join(HERE, f))[:8] for f in ("fsbench.c", "mkjpeg.py")}
    for e in os.listdir(ctx.data):
        m = re.match(r"^[a-z]+-n\d+-d\d+-\d+-\d+-s\d+-([0-9a-f]{8})(\.|$)", e)
        if not m or m.group(1) not in tags:
            log(f"removing stale cache entry {e}")
            drop_tree(os.path.join(ctx.data, e))


def native_copy(ctx, name):
    d = ctx.datasets[name]
    dst = os.path.join(ctx.native, name)
    if not os.path.isdir(dst):
        run(["cp", "-a", d["src"], dst])
    return dst


def shuffled_list(ctx, name, rels=None, seed=11, tag=""):
    rels = list(ctx.datasets[name]["rel"] if rels is None else rels)
    random.Random(seed).shuffle(rels)
    return write_list(os.path.join(ctx.lists, f"{name}{tag}.list"), rels), rels


def pfs_path(ctx, path):
    """The same path seen through the remote-file-system stand-in."""
    return os.path.join(ctx.pfs_mnt, os.path.relpath(path, ctx.data))


# --- the FanStore agent -------------------------------------------------------------------------------

class Agent:
    """One agent (--bootstrap single) or N agents under mpirun (PMIx), with their own directories."""

    def __init__(self, ctx, name, dataset, np=1, replicas=None, mount=None, extra=(), rank_extra=None):
        self.ctx, self.name, self.dataset, self.np, self.replicas = ctx, name, dataset, np, replicas
        self.extra = list(extra)
        self.rank_extra = rank_extra or {}  # rank -> more options for that rank alone
        if self.rank_extra and np < 2:
            raise BenchError(f"agent {name}: options per rank need np >= 2")
        self.mount = mount or f"/fanstore/bench-{name}"
        self.local_t = os.path.join(ctx.local, f"{name}-%r")
        self.run_t = os.path.join(ctx.rundir, f"{name}-%r")
        self.logf = os.path.join(ctx.work, f"agent-{name}-{len(ctx.agents)}.log")
        self.proc = None
        self.pids = []
        self.io_series = None
        self.ready_seconds = self.unpacked_seconds = None

    def d(self, t, r):
        return t.replace("%r", str(r))

    def start(self, io_sample=False, timeout=600):
        for r in range(self.np):
            for t in (self.local_t, self.run_t):
                if os.path.exists(self.d(t, r)):
                    raise BenchError(f"{self.d(t, r)} exists: a previous agent did not clean up")
        cmd = [self.ctx.agent_bin, "--dataset", self.dataset, "--local-dir", self.local_t, "--run-dir", self.run_t,
               "--mount", self.mount]
        cmd += ["--bootstrap", "single" if self.np == 1 else "pmix"]
        if self.replicas:
            cmd += ["--replicas", str(self.replicas)]
        cmd += self.extra
        if self.np > 1:
            # One mpirun application context per rank (MPMD) when ranks differ, else one for all.
            ctxs = ([["-np", "1"] + cmd + self.rank_extra.get(r, []) for r in range(self.np)] if self.rank_extra
                    else [["-np", str(self.np)] + cmd])
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe"] + [a for c in ctxs for a in c + [":"]][:-1]
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        self.lf = open(self.logf, "a")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.ctx.agents.append(self)
        series = []
        sampler_pid = self.proc.pid if self.np == 1 else None
        last_io = -1.0
        while True:
            now = time.perf_counter()
            if io_sample and sampler_pid and now - last_io >= 0.05:
                last_io = now
                try:
                    with open(f"/proc/{sampler_pid}/io") as f:
                        io = dict(l.split(": ") for l in f.read().splitlines())
                    series.append((now - t0, int(io["rchar"]), int(io["wchar"])))
                except (OSError, ValueError, KeyError):
                    pass
            states = []
            for r in range(self.np):
                try:
                    with open(os.path.join(self.d(self.run_t, r), "status.json")) as f:
                        states.append(json.load(f))
                except (OSError, ValueError):
                    states.append({})
            if any(s.get("state") == "failed" for s in states):
                raise BenchError(f"agent {self.name} failed: {[s.get('error') for s in states if s.get('error')]}")
            if all(s.get("state") == "ready" for s in states):
                if self.ready_seconds is None:
                    self.ready_seconds = now - t0
                # Lazy unpack: reads are measured on the unpacked tree (the agents report ready
                # before their files are unpacked; the stage-in rows report both times).
                if all(s.get("unpacked", True) for s in states):
                    break
            if self.proc.poll() is not None:
                raise BenchError(f"agent {self.name} exited {self.proc.returncode}: {self.tail()}")
            if now - t0 > timeout:
                raise BenchError(f"agent {self.name} not ready after {timeout} s: {self.tail()}")
            time.sleep(0.01)  # coarse enough not to steal CPU from the agent on 2 cores
        self.unpacked_seconds = time.perf_counter() - t0
        self.pids = [s["pid"] for s in states]
        if io_sample:
            self.io_series = series
        return self.ready_seconds

    def tail(self):
        try:
            with open(self.logf) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def env(self, rank=0):
        e = dict(os.environ)
        run_dir = self.d(self.run_t, rank)
        e.update(FANSTORE_MOUNT=self.mount, FANSTORE_TABLE=os.path.join(run_dir, "table"),
                 FANSTORE_SOCKET=os.path.join(run_dir, "agent.sock"), LD_PRELOAD=self.ctx.preload)
        e.pop("FANSTORE_DISABLE", None)
        return e

    def local_dir(self, rank=0):
        return self.d(self.local_t, rank)

    def stop(self):
        """SIGTERM to every agent (they clean up), then wait; returns the stats of every agent."""
        if not self.proc:
            return []
        for pid in self.pids or ([self.proc.pid] if self.np == 1 else []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not self.pids and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.lf.close()
        if self in self.ctx.agents:
            self.ctx.agents.remove(self)
        stats = []
        with open(self.logf) as f:
            for line in f:
                m = re.search(r"stats: (\{.*\})\s*$", line)
                if m:
                    stats.append(json.loads(m.group(1)))
        open(self.logf, "w").close()  # the next run of this agent logs afresh
        for r in range(self.np):
            for t in (self.local_t, self.run_t):
                if os.path.exists(self.d(t, r)):
                    raise BenchError(f"agent {self.name} left {self.d(t, r)} behind")
        return stats


# --- the remote file system stand-in: sshfs over loopback from our own sshd ---------------------------

class Sshfs:
    def __init__(self, ctx):
        self.ctx = ctx
        self.dir = os.path.join(ctx.work, "ssh")
        self.pidfile = os.path.join(self.dir, "sshd.pid")
        self.mounted = False
        self.sftp_server = "/usr/lib/openssh/sftp-server"

    def start(self):
        os.makedirs(self.dir, mode=0o700)
        for k in ("hostkey", "userkey"):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.dir, k)])
        shutil.copy(os.path.join(self.dir, "userkey.pub"), os.path.join(self.dir, "authorized_keys"))
        os.chmod(os.path.join(self.dir, "authorized_keys"), 0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # The external sftp-server (not internal-sftp), so that E1/E2 can count its system calls.
        subsystem = self.sftp_server if os.access(self.sftp_server, os.X_OK) else "internal-sftp"
        with open(os.path.join(self.dir, "sshd_config"), "w") as f:
            f.write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.dir}/hostkey
PidFile {self.pidfile}
AuthorizedKeysFile {self.dir}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
Subsystem sftp {subsystem}
LogLevel ERROR
""")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
        run(["/usr/sbin/sshd", "-f", os.path.join(self.dir, "sshd_config"), "-E", os.path.join(self.dir, "sshd.log")])
        for _ in range(200):
            if os.path.exists(self.pidfile):
                break
            time.sleep(0.01)
        os.makedirs(self.ctx.pfs_mnt)
        user = pwd.getpwuid(os.geteuid()).pw_name
        run(["sshfs", "-p", str(self.port), "-o", f"IdentityFile={self.dir}/userkey,StrictHostKeyChecking=no,"
             "UserKnownHostsFile=/dev/null,LogLevel=ERROR,BatchMode=yes", f"{user}@127.0.0.1:{self.ctx.data}",
             self.ctx.pfs_mnt])
        self.mounted = True

    def sshd_pid(self):
        with open(self.pidfile) as f:
            return int(f.read().strip())

    def server_pids(self):
        """The sftp-server processes below our sshd."""
        return [p for p in proc_tree(self.sshd_pid())[1:] if _comm(p) == "sftp-server"]

    def stack_pids(self):
        """Every process of the stand-in: the sshfs client and its ssh (both name our key on their
        command line) and every descendant of our sshd (its session and the sftp-server)."""
        key = os.path.join(self.dir, "userkey").encode()
        out = proc_tree(self.sshd_pid())[1:]
        for p in os.listdir("/proc"):
            if p.isdigit():
                with contextlib.suppress(OSError):
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        if key in f.read():
                            out.append(int(p))
        return sorted(set(out))

    def stop(self):
        if self.mounted:
            r = run(["fusermount", "-u", self.ctx.pfs_mnt], check=False)
            if r.returncode != 0:
                run(["fusermount", "-u", "-z", self.ctx.pfs_mnt], check=False)
            self.mounted = False
        if os.path.exists(self.pidfile):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(self.sshd_pid(), signal.SIGTERM)


class OpCounter:
    """Counts the system calls the sftp server makes on the source directory (strace)."""

    def __init__(self, ctx, tag):
        self.ctx, self.tag = ctx, tag

    def __enter__(self):
        pids = self.ctx.sshfs.server_pids()
        if not pids:
            raise BenchError("no sftp-server process to count operations on")
        self.out = os.path.join(self.ctx.work, f"strace-{self.tag}.txt")
        args = ["strace", "-f", "-qq", "-o", self.out, "-e",
                "trace=open,openat,stat,lstat,fstat,newfstatat,statx,getdents64,read,pread64,readv,close,lseek"]
        for p in pids:
            args += ["-p", str(p)]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # attached (strace -p attaches before tracing; no output until then)
        return self

    def __exit__(self, *exc):
        time.sleep(0.2)
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        self.counts = self.classify()
        return False

    def classify(self):
        c = {"open": 0, "stat": 0, "readdir": 0, "read": 0, "close": 0, "other": 0}
        with open(self.out) as f:
            for line in f:
                m = re.match(r"^(?:\d+\s+)?(\w+)\((\d+)?", line)
                if not m or "resumed>" in line:
                    continue
                call, fd = m.group(1), m.group(2)
                if call in ("open", "openat"):
                    c["open"] += 1
                elif call in ("stat", "lstat", "newfstatat", "statx") or (call == "fstat" and fd not in ("0", "1", "2")):
                    c["stat"] += 1
                elif call == "getdents64":
                    c["readdir"] += 1
                elif call in ("read", "pread64", "readv"):
                    # fd 0 is the sftp channel from sshd, not the source
                    if fd not in ("0", "1", "2"):
                        c["read"] += 1
                elif call == "close":
                    if fd not in ("0", "1", "2"):
                        c["close"] += 1
                elif call == "lseek":
                    c["other"] += 1
        c["metadata"] = c["open"] + c["stat"] + c["readdir"]
        c["total"] = sum(v for k, v in c.items() if k != "metadata")
        os.unlink(self.out)
        return c


# --- the comparison loop ------------------------------------------------------------------------------

def rounds(ctx, wid, arms, check_hash=True, reps=None, warmup=None, balanced=False):
    """Runs arms (list of (name, fn)) alternately: warm-up round(s), then the measured rounds.
    Each fn(round_index) returns a dict of numbers (and a 'hash'). Returns {arm: [samples]}.
    balanced: every other round runs the arms in reverse order, so that each arm follows each
    other arm equally often (for arms that leave the machine in a state the next one pays for)."""
    reps = ctx.rounds["reps"] if reps is None else reps
    warmup = ctx.rounds["warmup"] if warmup is None else warmup
    samples = {name: [] for name, _ in arms}
    for i in range(warmup + reps):
        for name, fn in (arms[::-1] if balanced and i % 2 else arms):
            s = fn(i)
            s["warmup"] = i < warmup
            s["round"] = i
            samples[name].append(s)
    if check_hash:
        hashes = {s.get("hash") for v in samples.values() for s in v if "hash" in s}
        if len(hashes) > 1:
            raise BenchError(f"{wid}: the arms read different data: hashes {sorted(hashes)}")
    for v in samples.values():
        for s in v:
            if s.get("errors"):
                raise BenchError(f"{wid}: errors in a sample: {s}")
    return samples


def med(samples, key):
    return median([s[key] for s in samples if not s.get("warmup")])


def add_workload(ctx, wid, title, samples, **info):
    w = {"title": title, "arms": samples}
    w.update(info)
    ctx.results["workloads"][wid] = w
    return w


def paired(smp, base_arm, fs_arm, key, higher_is_better=True):
    """Per-round ratios: the two arms of one round run back to back and see the same interference
    from the rest of the machine, so these show how much of a ratio is noise."""
    rs = []
    for b, f in zip(smp[base_arm], smp[fs_arm]):
        if b.get("warmup") or not b.get(key) or not f.get(key):
            continue
        rs.append(f[key] / b[key] if higher_is_better else b[key] / f[key])
    return {"median": median(rs), "min": min(rs), "max": max(rs), "n": len(rs)} if rs else None


def add_row(ctx, wid, workload, baseline_label, baseline, fanstore, unit, target_text, target_min=None, ratio=None,
            note=None, higher_is_better=True, no_ratio=False, pairs=None):
    if ratio is None and baseline and fanstore and not no_ratio:
        ratio = fanstore / baseline if higher_is_better else baseline / fanstore
    met = None if target_min is None or ratio is None else bool(ratio >= target_min)
    row = dict(id=wid, workload=workload, baseline_label=baseline_label, baseline=baseline, fanstore=fanstore,
               unit=unit, ratio=ratio, target=target_text, target_min=target_min, met=met, note=note, paired=pairs)
    ctx.results["rows"].append(row)
    flag = "" if met is None else (" met" if met else " MISSED")
    log(f"{wid}: baseline {fmt(baseline)} {unit}, FanStore {fmt(fanstore)} {unit}, ratio {fmt(ratio)} "
        f"(target {target_text}){flag}")
    return row


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def rates(s, seconds_key="seconds"):
    s["files_per_s"] = s["files"] / s[seconds_key]
    s["mb_per_s"] = s["bytes"] / s[seconds_key] / 1e6
    return s


# --- workloads ------------------------------------------------------------------------------------------

def wl_reads(ctx, agents):
    """R1, R2, R3 and the extra R5 (mixed): open + read whole file + close, in random order."""
    specs = [("R1", "images", 1, 0.97, "random whole-file reads, `images`, 1 process"),
             ("R2", "text", 1, 0.95, "random whole-file reads, `text`, 1 process"),
             ("R3", "images", 4, 0.95, "random whole-file reads, `images`, 4 processes"),
             ("R5", "mixed", 1, None, "whole-file reads, `mixed` (1-16 MiB files), 1 process (extra)")]
    for wid, name, procs, target, title in specs:
        if not ctx.wanted(wid):
            continue
        rels = None
        if name == "mixed":  # few, large files: read the list 4 times so that a sample lasts long enough
            rels = [r for _ in range(4) for r in ctx.datasets[name]["rel"]]
        elif name == "text":  # 0.5 s per pass: two passes per sample, to take the edge off this VM's noise
            rels = [r for _ in range(2) for r in ctx.datasets[name]["rel"]]
        lst, _ = shuffled_list(ctx, name, rels=rels, seed=100 + procs)
        nat, ag = os.path.join(ctx.native, name), agents[name]

        def native(i, lst=lst, nat=nat, procs=procs):
            return rates(run_json([ctx.fsbench, "read", nat, lst, str(procs)]))

        def fanstore(i, lst=lst, ag=ag, procs=procs):
            return rates(run_json([ctx.fsbench, "read", ag.mount, lst, str(procs)], env=ag.env()))

        smp = rounds(ctx, wid, [("native", native), ("fanstore", fanstore)])
        add_workload(ctx, wid, title, smp, metric="files_per_s", cache="warm: both copies in the page cache (tmpfs) "
                     "and read once in the warm-up round", dataset=name)
        b, f = med(smp["native"], "files_per_s"), med(smp["fanstore"], "files_per_s")
        add_row(ctx, wid, title, "native local", b, f, "files/s",
                f"≥ {target}× native" if target else "report", target, pairs=paired(smp, "native", "fanstore", "files_per_s"),
                note=f"MB/s: native {fmt(med(smp['native'], 'mb_per_s'))}, FanStore {fmt(med(smp['fanstore'], 'mb_per_s'))}")


# --- writes: checkpoints through `fanstore run --output` (W1-W3) --------------------------------------

W_IDS = ("W1", "W2", "W3")
# The checkpoint: a state dict of 8 uint8 tensors of random bytes (incompressible, like trained
# weights), 2 GiB in full mode as BENCHMARKS.md says; 64 MiB in quick mode, which only checks that
# the workloads run and agree.
W_BYTES = {"full": 2 << 30, "quick": 64 << 20}
W_NAME = "ckpt.pt"
# Quick mode: no warm-up and one round of W1 (each of its samples starts Python and imports
# torch), two of W2 and W3, so that the three take about 20 s. Full mode: the suite's rounds.
W_QUICK_ROUNDS = {"W1": dict(warmup=0, reps=1), "W2": dict(warmup=0, reps=2), "W3": dict(warmup=0, reps=2)}
# Full mode: W1's samples spread widely with when ext4 writes back the earlier rounds' 2 GiB (one
# arm's sample ranged 0.9-3.9 s), and each takes seconds, so it gets 10 measured rounds (even, for
# its balanced order below); W3, whose arm without a drain alone ranged 2.9-3.9 s over 5 rounds, 9.
# W1's arms run in reverse order every other round (balanced): each leaves 2 GiB for ext4 to write
# back and free, which the arm after it paid for (a fixed order gave 0.64-0.89x for W1-local, the
# reversed pairs of a probe 1.19x).
W_FULL_ROUNDS = {"W1": dict(reps=10, balanced=True), "W3": dict(reps=9)}
# W3's R1 reads the images list this many times, each pass in its own random order, so that R1
# lasts seconds rather than under one (single passes were 0.6-0.9 s, too short to measure a ratio).
W3_PASSES = {"full": 5, "quick": 1}
# W1 and W3 need the drain only while they measure: after that `fanstore run` waits this long and
# then gives up, leaving the file in its local directory (W2 measures whole drains).
W_CUT = "0.2"
# Generates the checkpoint once per run (fixed seed), not timed.
W_GEN = r"""
import sys, numpy as np, torch
path, size, parts = sys.argv[1], int(sys.argv[2]), 8
rng = np.random.default_rng(31)
model = {f"layer{i}.weight": torch.from_numpy(rng.integers(0, 256, size // parts, dtype=np.uint8))
         for i in range(parts)}
torch.save({"model": model, "step": 1000}, path)
"""
# One W1 sample, timed in the process: the checkpoint is loaded first (not timed), as a job holds
# its state in memory; the time is until torch.save returns, with no fsync (the same in every
# arm). Then the file is hashed (fsbench read, not timed), so that the arms provably wrote the
# same bytes: torch.save is deterministic for the same state and file name. DST "-" is
# $FANSTORE_OUTPUT.
W_SAVE = r"""
import json, os, subprocess, sys, time
import torch
src, dst, fsbench, lst = sys.argv[1:5]
dst = os.environ["FANSTORE_OUTPUT"] if dst == "-" else dst
ckpt = torch.load(src)
t0 = time.perf_counter()
torch.save(ckpt, os.path.join(dst, "ckpt.pt"))
t1 = time.perf_counter()
r = json.loads(subprocess.run([fsbench, "read", dst, lst], stdout=subprocess.PIPE, check=True).stdout)
print(json.dumps({"seconds": t1 - t0, "closed_at": time.time(), "bytes": r["bytes"], "hash": r["hash"]}))
"""
# W2 and W3's command under `fanstore run`: the checkpoint written into $FANSTORE_OUTPUT and
# fsynced before it is closed, so that the drain does not share the disk with the writeback of
# its own source (on this machine the stand-in's server writes to the same disk); then the
# close's wall-clock time.
W_WRITE = 'dd if="$1" of="$FANSTORE_OUTPUT/ckpt.pt" bs=4M conv=fsync status=none && date +%s.%N'


class DrainWatch:
    """Watches a drain's target from the server's side (the exported directory itself, so that
    watching sends nothing through sshfs): when the temporary copy of `name` appears, how it
    grows, and when the final name is in place. Times are wall-clock (time.time()), as the
    manifest's committed_at and the command's close time are."""

    def __init__(self, server_dir, name, period=0.02):
        self.dir, self.name, self.period = server_dir, name, period
        self.prefix = f".{name}.fanstore-"  # output/commit.h: .NAME.fanstore-XXXXXX
        self.series = []  # (time, bytes in the temporary copy)
        self.tmp_seen = self.final_seen = None
        self.stop = threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        return False

    def loop(self):
        while not self.stop.is_set():
            t, tmp, final = time.time(), None, False
            with contextlib.suppress(OSError):  # a copy renamed between the listing and its stat
                for e in os.scandir(self.dir):
                    if e.name.startswith(self.prefix):
                        tmp = e.stat().st_size
                    elif e.name == self.name:
                        final = True
            if tmp is not None:
                self.tmp_seen = self.tmp_seen or t
                self.series.append((t, tmp))
            if final and self.final_seen is None:
                self.final_seen = t
            self.stop.wait(self.period)

    def full_at(self, size):
        """When the temporary copy first held every byte (the end of the copy phase), or None."""
        return next((t for t, n in self.series if n >= size), None)

    def copied_by(self, t):
        """Bytes in the temporary copy at time t (its last sample before t)."""
        n = 0
        for ts, b in self.series:
            if ts > t:
                break
            n = b
        return n


def proc_tree(root):
    """root and every live descendant of it."""
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
    out = [root]
    for pid in parent:
        q = pid
        while q in parent and q > 1:
            q = parent[q]
            if q == root:
                out.append(pid)
                break
    return out


def _comm(pid):
    """The process's command name, or "" when it is gone."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    return ""


def proc_cpu(pids):
    """CPU seconds (user + system, every thread) of the live processes `pids` so far."""
    tck, tot = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            tot += (int(fields[11]) + int(fields[12])) / tck
    return tot


def wl_writes(ctx, agents):
    """W1-W3: checkpoints written into $FANSTORE_OUTPUT and drained to the parallel-file-system
    stand-in (sshfs) by `fanstore run --output`. Their local directories are on the node-local
    disk (ext4, ctx.disk), not the suite's tmpfs."""
    w = _w_setup(ctx)
    try:
        if ctx.wanted("W1"):
            _w1(ctx, w)
        if ctx.wanted("W2"):
            _w2(ctx, w)
        if ctx.wanted("W3"):
            _w3(ctx, w, agents["images"])
    finally:
        drop_tree(w["server"])
        drop_tree(ctx.disk)


def _w_setup(ctx):
    size = W_BYTES[ctx.mode]
    server = os.path.join(ctx.data, f"w-out.{os.getpid()}")  # in the exported directory
    w = {"size": size, "server": server, "src_dir": os.path.join(ctx.disk, "src"),
         "local": os.path.join(ctx.disk, "local"), "run_local": os.path.join(ctx.disk, "run"),
         "run_mem": os.path.join(ctx.work, "w-run-mem"), "seq": 0}
    w["src"] = os.path.join(w["src_dir"], W_NAME)
    _w_space(ctx, size)
    os.makedirs(ctx.disk, mode=0o700)
    for d in ("src_dir", "local", "run_local", "run_mem"):
        os.makedirs(w[d])
    os.makedirs(pfs_path(ctx, server))  # through sshfs, so that sshfs has never seen it missing
    log(f"W: generating a {size >> 20} MiB checkpoint in {w['src']}")
    run([PY, "-c", W_GEN, w["src"], str(size)])
    run(["sync"])
    w["list"] = write_list(os.path.join(ctx.lists, "w.list"), [W_NAME])
    r = run_json([ctx.fsbench, "read", w["src_dir"], w["list"]])
    w["bytes"], w["hash"] = r["bytes"], r["hash"]
    return w


def _w_space(ctx, size):
    """At most three copies at once: the source and one arm's copy on the local disk, one on the
    stand-in's side (the exported directory); every arm removes its own before the next starts."""
    need = {}  # device: [a path on it, bytes]
    for path, copies in ((ctx.args.disk_base, 2), (ctx.data, 1)):
        need.setdefault(os.stat(path).st_dev, [path, 0])[1] += copies * size
    for path, b in need.values():
        free = shutil.disk_usage(path).free
        if free < b + (1 << 30):
            raise BenchError(f"W1-W3: {free >> 20} MiB free on {path}, {(b >> 20) + 1024} MiB needed")


def _w_target(ctx, w, make=False):
    """A fresh target directory: its path on the server (for watching and removing) and through
    sshfs (what the arms write to). Never reused, so that no sshfs cache can know an old one."""
    w["seq"] += 1
    server = os.path.join(w["server"], f"t{w['seq']}")
    pfs = pfs_path(ctx, server)
    if make:
        os.makedirs(pfs)
    return server, pfs


def _w_rounds(ctx, wid, arms):
    return rounds(ctx, wid, arms, **(W_QUICK_ROUNDS[wid] if ctx.mode == "quick" else W_FULL_ROUNDS.get(wid, {})))


def _w_manifest(server):
    with open(os.path.join(server, ".fanstore-output.json")) as f:
        return json.load(f)


def _w_clean_run_local(w, local=None):
    """What `fanstore run` leaves in its local directory when the drain was cut."""
    local = local or w["run_local"]
    for e in os.listdir(local):
        drop_tree(os.path.join(local, e))


def _w_cut_ok(wid, rc, stderr):
    """`fanstore run` whose drain was cut on purpose (W_CUT) exits 1 and says which file did not
    reach the target; anything else is a failure."""
    if rc == 0 or (rc == 1 and "did not reach" in stderr):
        return
    raise BenchError(f"{wid}: fanstore run exited {rc}: {stderr[-1500:]}")


def _w1(ctx, w):
    """W1: time until torch.save returns, into $FANSTORE_OUTPUT (ext4 under `fanstore run
    --output` to sshfs), straight to sshfs, and to a plain directory on the same ext4."""
    def save_cmd(dst):
        return [PY, "-c", W_SAVE, w["src"], dst, ctx.fsbench, w["list"]]

    def fanstore_in(local):
        def fanstore(i):
            server, pfs = _w_target(ctx, w)
            run(["sync"])
            p = run([ctx.fanstore, "run", "--output", pfs, "--local-dir", local, "--drain-timeout", W_CUT,
                     "--"] + save_cmd("-"), check=False)
            _w_cut_ok("W1", p.returncode, p.stderr)
            _w_clean_run_local(w, local)
            drop_tree(server)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if not lines:
                raise BenchError(f"W1: the save under fanstore run printed no JSON: {p.stderr[-1000:]}")
            return _w1_sample(json.loads(lines[-1]))
        return fanstore

    def sshfs(i):
        server, pfs = _w_target(ctx, w, make=True)
        run(["sync"])
        s = run_json(save_cmd(pfs))
        drop_tree(server)  # on the server's side: its dirty pages are dropped, not written back
        return _w1_sample(s)

    def local(i):
        run(["sync"])
        s = run_json(save_cmd(w["local"]))
        os.unlink(os.path.join(w["local"], W_NAME))
        return _w1_sample(s)

    smp = _w_rounds(ctx, "W1", [("fanstore", fanstore_in(w["run_local"])), ("sshfs", sshfs), ("local", local),
                                ("fanstore-mem", fanstore_in(w["run_mem"]))])
    for v in smp.values():
        for s in v:
            if s["hash"] != w["hash"]:
                raise BenchError(f"W1: a save wrote {s['bytes']} B, hash {s['hash']}; the source is {w['hash']}")
    add_workload(ctx, "W1", "torch.save of a checkpoint until it returns", smp, metric="seconds",
                 bytes=w["bytes"], cache="`sync` before every sample, no fsync in any arm (the saved bytes may "
                 "still be in the page cache when torch.save returns); local directories on ext4 (--disk-base), "
                 "FanStore's on tmpfs too (W1-mem); the checkpoint loaded by torch.load before the timed save; the "
                 "arms in reverse order every other round")
    size = f"{w['bytes'] / (1 << 30):.2f} GiB" if w["bytes"] >= 1 << 30 else f"{w['bytes'] >> 20} MiB"
    f, b, loc = (med(smp[a], "seconds") for a in ("fanstore", "sshfs", "local"))
    note = (f"state dict of 8 random uint8 tensors, {w['bytes']:,} B; time until torch.save returns, in the "
            "process, after torch.load of the same checkpoint; no fsync in any arm, so the bytes may still be in "
            "the page cache, which is what the user waits for too; `sync` before every sample; local "
            f"directories (FanStore's `--local-dir` and the plain one) on ext4 {ctx.args.disk_base}, not the "
            f"suite's tmpfs; the drain that follows FanStore's save is cut after {W_CUT} s (`--drain-timeout`; "
            f"W2 measures drains); MB/s: FanStore {fmt(med(smp['fanstore'], 'mb_per_s'))}, sshfs "
            f"{fmt(med(smp['sshfs'], 'mb_per_s'))}, local {fmt(med(smp['local'], 'mb_per_s'))}; the plain local-disk "
            f"arm is {fmt(b / loc)}× faster than sshfs in the same rounds, the most a write to local disk can gain here")
    add_row(ctx, "W1", f"`torch.save` of a {size} checkpoint into `$FANSTORE_OUTPUT` (`fanstore run --output` "
            "to sshfs), until it returns, seconds", "sshfs direct", b, f, "s", "≥ 5× faster", 5.0,
            higher_is_better=False, pairs=paired(smp, "sshfs", "fanstore", "seconds", higher_is_better=False), note=note)
    add_row(ctx, "W1-local", "the same against a plain directory on the same local disk", "local disk (ext4)", loc, f,
            "s", "≥ 0.8× local disk", 0.8, higher_is_better=False,
            pairs=paired(smp, "local", "fanstore", "seconds", higher_is_better=False))
    add_row(ctx, "W1-mem", "W1 with FanStore's local directory on tmpfs (`--local-dir /dev/shm/...`, not the "
            "default): the checkpoint held in memory until it drains", "sshfs direct", b,
            med(smp["fanstore-mem"], "seconds"), "s", "report", higher_is_better=False,
            pairs=paired(smp, "sshfs", "fanstore-mem", "seconds", higher_is_better=False))


def _w1_sample(s):
    s["mb_per_s"] = s["bytes"] / s["seconds"] / 1e6
    return s


def _w2(ctx, w):
    """W2: drain throughput: from the close of the file in $FANSTORE_OUTPUT until it is committed
    on the sshfs side (the manifest's committed_at), against `cp` of the same file to sshfs."""
    def drain(i):
        server, pfs = _w_target(ctx, w)
        run(["sync"])
        with DrainWatch(server, W_NAME) as dw:
            # --drain-timeout well above any drain of this size: the whole drain is the sample.
            p = run([ctx.fanstore, "run", "--output", pfs, "--local-dir", w["run_local"], "--drain-timeout", "900",
                     "--", "sh", "-c", W_WRITE, "sh", w["src"]], timeout=1200)
            returned = time.time()
        closed = float(p.stdout.split()[-1])
        man = _w_manifest(server)
        f = man["files"].get(W_NAME)
        if not f or man["not_drained"] or f["size"] != w["bytes"]:
            raise BenchError(f"W2: the drain did not commit {W_NAME}: {man}")
        full = dw.full_at(w["bytes"])
        drop_tree(server)
        secs = f["committed_at"] - closed
        s = {"seconds": secs, "bytes": f["size"], "mb_per_s": f["size"] / secs / 1e6, "hash": f["xxh3"],
             "returned_seconds": returned - closed, "final_seen_seconds": (dw.final_seen or returned) - closed}
        if dw.tmp_seen and full:  # the phases, as seen from the server's side
            s.update(start_seconds=dw.tmp_seen - closed, copy_seconds=full - dw.tmp_seen,
                     verify_seconds=f["committed_at"] - full, copy_mb_per_s=f["size"] / (full - dw.tmp_seen) / 1e6)
        return s

    def cp(i):
        server, pfs = _w_target(ctx, w, make=True)
        run(["sync"])
        run_json([ctx.fsbench, "read", w["src_dir"], w["list"]])  # the source in the page cache, as the drain finds it
        t = timed(["cp", w["src"], os.path.join(pfs, W_NAME)])
        r = run_json([ctx.fsbench, "read", server, w["list"]])
        drop_tree(server)
        return {"seconds": t, "bytes": r["bytes"], "mb_per_s": r["bytes"] / t / 1e6, "hash": r["hash"]}

    smp = _w_rounds(ctx, "W2", [("fanstore", drain), ("cp", cp)])
    if smp["cp"][0]["hash"] != w["hash"]:
        raise BenchError(f"W2: the copies hash {smp['cp'][0]['hash']}, the source {w['hash']}")
    add_workload(ctx, "W2", "drain of a checkpoint to sshfs against cp", smp, metric="mb_per_s", bytes=w["bytes"],
                 cache="`sync` before every sample; the source warm in the page cache in both arms (the drain's just "
                       "written and fsynced, cp's read once before); cp does not fsync")
    fs = smp["fanstore"]
    phases = all("copy_seconds" in s for s in fs)
    note = (f"{w['bytes']:,} B; the drain's time runs from the close (the command writes the file with `dd conv=fsync`, "
            "so the drain does not share this machine's one disk with the writeback of its own source) to the "
            f"manifest's committed_at; `fanstore run` returned {fmt(med(fs, 'returned_seconds'))} s after the close. ")
    if phases:
        note += (f"Phases seen from the server's side (median): start (the drainer's events settling, its queue) "
                 f"{fmt(med(fs, 'start_seconds'))} s, copy "
                 f"{fmt(med(fs, 'copy_seconds'))} s ({fmt(med(fs, 'copy_mb_per_s'))} MB/s, the part of the work cp "
                 f"does, {fmt(med(fs, 'copy_mb_per_s') / med(smp['cp'], 'mb_per_s'))}× cp's rate), fsync + read back "
                 f"through sshfs + rename {fmt(med(fs, 'verify_seconds'))} s. ")
    note += (f"cp writes without fsync and reads nothing back; cp takes {fmt(med(smp['cp'], 'seconds'))} s. The drainer "
             "runs at nice 19 and the idle I/O class, so other work on this shared machine slows it first")
    add_row(ctx, "W2", "drain of the checkpoint from `$FANSTORE_OUTPUT` (ext4) to sshfs: close to committed, MB/s",
            "`cp` local → sshfs", med(smp["cp"], "mb_per_s"), med(fs, "mb_per_s"), "MB/s", "≥ 0.9× cp", 0.9,
            pairs=paired(smp, "cp", "fanstore", "mb_per_s"), note=note)


def _w3(ctx, w, ag):
    """W3: R1 (the same reader and list) while the checkpoint drains to sshfs, against R1 alone.
    Both arms are one `fanstore run` of `images` whose command runs R1, so that, as in a job, the
    agent that serves the reads is the one that drains (and yields to them). In the drained arm
    the command first writes the checkpoint to $FANSTORE_OUTPUT, then starts R1 once the copy is
    seen on the server."""
    passes = W3_PASSES[ctx.mode]
    rels = []
    for k in range(passes):  # the first pass is R1's own order (wl_reads: seed 100 + 1 process)
        order = list(ctx.datasets["images"]["rel"])
        random.Random(101 + k).shuffle(order)
        rels += order
    lst = write_list(os.path.join(ctx.lists, "images-w3.list"), rels)
    stack = ctx.sshfs.stack_pids()
    ds = ctx.datasets["images"]["fs"]
    go = os.path.join(w["run_local"], "..", "w3.go")
    read = f'{shq(ctx.fsbench)} read "$FANSTORE_MOUNT" {shq(lst)} 1'

    def sample(i, drain):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(go)
        server, pfs = _w_target(ctx, w)
        run(["sync"])
        out = ["--output", pfs, "--drain-timeout", W_CUT] if drain else []
        script = (W_WRITE + f' >/dev/null && while [ ! -e {shq(go)} ]; do sleep 0.01; done && ' if drain else "") + read
        cmd = [ctx.fanstore, "run", ds, "--local-dir", w["run_local"], *out, "--", "sh", "-c", script, "sh", w["src"]]
        with DrainWatch(server, W_NAME) as dw:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t_wait = time.time()
            while drain and dw.tmp_seen is None and p.poll() is None and time.time() - t_wait < 300:
                time.sleep(0.01)
            if drain and dw.tmp_seen is None:
                p.kill()
                raise BenchError(f"W3: the drain did not start: {p.communicate()[1][-400:]}")
            c0, t0 = proc_cpu(stack), time.time()
            if drain:
                open(go, "w").close()
            stdout, err = p.communicate(timeout=900)
            t1, c1 = time.time(), proc_cpu(stack)
        if drain:
            _w_cut_ok("W3", p.returncode, err)
        elif p.returncode != 0:
            raise BenchError(f"W3: fanstore run failed: {err[-400:]}")
        s = rates(json.loads(stdout.strip().splitlines()[-1]))
        r_end = t1  # R1 ends with the command; the drain is cut W_CUT s after
        if drain:
            man = _w_manifest(server) if os.path.exists(os.path.join(server, ".fanstore-output.json")) else {"files": {}}
            f = man["files"].get(W_NAME)
            end = f["committed_at"] if f else t1
            r0 = t1 - s["seconds"]
            s.update(overlap=max(0.0, min(r_end, end) - max(r0, dw.tmp_seen)) / s["seconds"],
                     drain_mb_per_s=(dw.copied_by(r_end) - dw.copied_by(r0)) / s["seconds"] / 1e6)
        s.update(standin_cpu_per_s=(c1 - c0) / (t1 - t0))
        _w_clean_run_local(w)
        drop_tree(server)
        return s

    smp = _w_rounds(ctx, "W3", [("plain", lambda i: sample(i, False)), ("drained", lambda i: sample(i, True))])
    add_workload(ctx, "W3", "R1 while a checkpoint drains to sshfs", smp, metric="files_per_s", dataset="images",
                 bytes=w["bytes"], cache="each arm one `fanstore run` of images staged to the ext4 local disk "
                 "(so its files are in the page cache), R1 run by its command; `sync` before every sample; the "
                 "checkpoint written and fsynced to ext4 before the drain starts")
    dr = [s for s in smp["drained"] if not s.get("warmup")]
    b, f = med(smp["plain"], "files_per_s"), med(smp["drained"], "files_per_s")
    add_row(ctx, "W3", f"R1 (random whole-file reads, `images`, 1 process, {passes} passes in their own orders) "
            "while the checkpoint drains to sshfs",
            "R1 without a drain", b, f, "files/s", "≥ 0.95× without", 0.95,
            pairs=paired(smp, "plain", "drained", "files_per_s"),
            note=f"one agent serves R1 and drains {w['bytes']:,} B to sshfs, as in a job; R1 starts once the copy "
                 f"is seen on the server; share of R1's time the drain was in progress: median "
                 f"{fmt(med(dr, 'overlap') * 100)} %, least {fmt(min(s['overlap'] for s in dr) * 100)} %; the drain "
                 f"copied {fmt(med(dr, 'drain_mb_per_s'))} MB/s meanwhile (it yields to reads: a pause of 9× each "
                 f"1 MiB piece while the job reads, in a thread at nice 19); CPU seconds per second of R1 and the "
                 f"cut: the stand-in's sshfs, ssh, sshd and sftp-server (normal priority, on this machine's {ctx.cores} "
                 f"cores; on a cluster the server half runs elsewhere) {fmt(med(dr, 'standin_cpu_per_s'))}")


def wl_meta(ctx, agents):
    if ctx.wanted("M1"):
        lst, _ = shuffled_list(ctx, "text", seed=7, tag="-m1")
        p = str(ctx.inner["stat_passes"])
        nat, ag = os.path.join(ctx.native, "text"), agents["text"]
        smp = rounds(ctx, "M1", [
            ("native", lambda i: run_json([ctx.fsbench, "stat", nat, lst, p])),
            ("fanstore", lambda i: run_json([ctx.fsbench, "stat", ag.mount, lst, p], env=ag.env()))])
        for v in smp.values():
            for s in v:
                s["stats_per_s"] = s["stats"] / s["seconds"]
        add_workload(ctx, "M1", "stat of every file (C loop), `text`", smp, metric="stats_per_s",
                     cache="warm: dentries and inodes cached natively after the warm-up round", dataset="text")
        add_row(ctx, "M1", "`stat` of every file, C loop, `text`", "native local", med(smp["native"], "stats_per_s"),
                med(smp["fanstore"], "stats_per_s"), "stat/s", "≥ 3× native", 3.0,
                pairs=paired(smp, "native", "fanstore", "stats_per_s"))
    if ctx.wanted("M3"):
        lst, _ = shuffled_list(ctx, "text", seed=8, tag="-m3")
        n = str(ctx.inner["enoent"])
        nat, ag = os.path.join(ctx.native, "text"), agents["text"]
        smp = rounds(ctx, "M3", [
            ("native", lambda i: run_json([ctx.fsbench, "enoent", nat, lst, n])),
            ("fanstore", lambda i: run_json([ctx.fsbench, "enoent", ag.mount, lst, n], env=ag.env()))])
        for v in smp.values():
            for s in v:
                s["opens_per_s"] = s["opens"] / s["seconds"]
        add_workload(ctx, "M3", "open of a missing path (ENOENT)", smp, metric="opens_per_s",
                     cache="warm: native negative dentries cached after the warm-up round", dataset="text")
        add_row(ctx, "M3", "`open` of a missing path (`ENOENT`), C loop", "native local",
                med(smp["native"], "opens_per_s"), med(smp["fanstore"], "opens_per_s"), "opens/s", "≥ 3× native", 3.0,
                pairs=paired(smp, "native", "fanstore", "opens_per_s"))
    if ctx.wanted("M2"):
        nat, ag = os.path.join(ctx.native, "text"), agents["text"]
        script = os.path.join(HERE, "m2_walk.py")
        passes = str(ctx.inner["m2_passes"])
        smp = rounds(ctx, "M2", [
            ("native", lambda i: run_json([PY, script, nat, passes])),
            ("fanstore", lambda i: run_json([PY, script, ag.mount, passes], env=ag.env()))])
        for v in smp.values():
            for s in v:
                s["scandir_entries_per_s"] = s["entries"] / s["scandir_seconds"]
                s["walk_entries_per_s"] = s["entries"] / s["walk_seconds"]
        add_workload(ctx, "M2", "os.scandir and os.walk over `text` (Python)", smp, metric="walk_entries_per_s",
                     cache="warm: directories cached natively after the warm-up round", dataset="text")
        add_row(ctx, "M2-scandir", "`os.scandir` of every directory of `text` (Python, with `is_file()`)", "native local",
                med(smp["native"], "scandir_entries_per_s"), med(smp["fanstore"], "scandir_entries_per_s"), "entries/s",
                "≥ 2× native", 2.0, pairs=paired(smp, "native", "fanstore", "scandir_entries_per_s"))
        add_row(ctx, "M2-walk", "`os.walk` over `text` (Python)", "native local", med(smp["native"], "walk_entries_per_s"),
                med(smp["fanstore"], "walk_entries_per_s"), "entries/s", "≥ 2× native", 2.0,
                pairs=paired(smp, "native", "fanstore", "walk_entries_per_s"))


def wl_kview(ctx, agents):
    """K1, K2: what the kernel-visible view costs (issues 15 and 31). K1: random whole-file reads
    of `images` by a program the interception library does not reach (LD_PRELOAD cleared),
    through the view of `fanstore run --kernel-view` (as root with the local directory on a disk,
    the node's EROFS image; else FUSE): its first pass after the mount, against the library's own
    first pass in a fresh run, and its third (the view's page cache warm), against native; the
    same with `--image no`, where the view is FUSE (K1-fuse-first, K1-fuse-warm). K2:
    M2's walk through the library with the view on (directory stand-ins are the view's
    directories) and off. Needs root and /dev/fuse; the rows say so otherwise."""
    if not (ctx.wanted("K1") or ctx.wanted("K2")):
        return
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        for wid in KVIEW_ROWS:
            add_row(ctx, wid, "kernel-visible view", "native local", None, None, "-", "report",
                    note="not measured: needs root and /dev/fuse")
        return
    base = os.path.join(ctx.work, "kview")  # empty: the view's tmpfs holds the mount point
    FILES = ("--image", "no")  # a file per file: no image, so the view is FUSE
    os.makedirs(base, exist_ok=True)

    def fresh_run(ag, cmd, view=True, opts=()):
        """CMD (given the mount path) in a fresh `fanstore run` of ag's dataset, with the view or without."""
        m = os.path.join(base, os.path.basename(ag.mount))
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        out = run([ctx.fanstore, "run", ag.dataset, *opts] + (["--kernel-view"] if view else []) + ["--mount", m, "--"]
                  + cmd(m), env=env).stdout
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    if ctx.wanted("K1"):
        lst, _ = shuffled_list(ctx, "images", seed=131, tag="-k1")
        nat, ag = os.path.join(ctx.native, "images"), agents["images"]

        # A loader that lists the dataset first, as torchvision's ImageFolder does (os.walk: a
        # scandir per directory, no stat): its listing counts in its first pass.
        walk = ("import json, os, sys, time; t = time.perf_counter(); "
                "n = sum(len(f) for _, _, f in os.walk(sys.argv[1])); "
                "print(json.dumps({'listed': n, 'list_seconds': time.perf_counter() - t}))")

        # Three passes in one mount: the first after the mount, the second (each page's second
        # access: the kernel moves it to the active list, once), the third (steady, as the native
        # tree's long-read pages are).
        def view(opts=(), listed=False):
            def arm(i):
                passes = fresh_run(ag, lambda m: ["env", "-u", "LD_PRELOAD", "sh", "-c",
                                                  (f"{PY} -c {shq(walk)} {shq(m)}; " if listed else "")
                                                  + f"{shq(ctx.fsbench)} read {shq(m)} {shq(lst)} 1; " * 3], opts=opts)
                listing = passes.pop(0) if listed else {"list_seconds": 0.0}
                if listed and listing["listed"] < passes[0]["files"]:
                    raise RuntimeError(f"K1: the listing found {listing['listed']} files, the reader read {passes[0]['files']}")
                passes[0]["seconds"] += listing["list_seconds"]
                first, second, third = (rates(s) for s in passes)
                first["list_seconds"] = listing["list_seconds"]
                first["second_files_per_s"] = second["files_per_s"]
                first["warm_files_per_s"] = third["files_per_s"]
                return first
            return arm

        def library_first(opts=()):
            return lambda i: rates(fresh_run(ag, lambda m: [ctx.fsbench, "read", m, lst, "1"], view=False, opts=opts)[0])

        # The library's own first pass after the mount: a `fanstore run` of the same dataset with
        # the same defaults as the view's (as root on a disk, the image), the reader under the
        # library; the baseline of K1-first (issue 31: the view at >= 0.5x the library's first
        # pass). "library" is the suite's agent, staged long before (steady state, for reference).
        # Each fresh run leaves the next one its 2 GB blob's writeback and unlink (with discards on
        # this disk): the arms run in both orders, in more rounds than most workloads.
        smp = rounds(ctx, "K1", balanced=True, reps=None if ctx.mode == "quick" else 8, arms=[
            ("native", lambda i: rates(run_json([ctx.fsbench, "read", nat, lst, "1"]))),
            ("library", lambda i: rates(run_json([ctx.fsbench, "read", ag.mount, lst, "1"], env=ag.env()))),
            ("library-first", library_first()),
            ("view", view()),
            # Where the node has no image (a tmpfs local directory, no root, or a node that does
            # not yet hold every shard), the view is FUSE: the same, with a file per file.
            ("library-first-files", library_first(FILES)),
            ("view-fuse", view(FILES)),
            # The same view where the reader lists the dataset first (READDIRPLUS: the listing
            # gives the kernel every name, so no open makes a LOOKUP).
            ("view-fuse-listed", view(FILES, listed=True))])
        add_workload(ctx, "K1", "random whole-file reads of `images` through the kernel-visible view", smp,
                     metric="files_per_s", dataset="images",
                     cache="warm page cache under native and the suite's agent; the view's own cache and the "
                           "library's fresh run cold in their first passes, the view's warm in its second and third")
        b = med(smp["native"], "files_per_s")
        lib, lib_first = med(smp["library"], "files_per_s"), med(smp["library-first"], "files_per_s")
        add_row(ctx, "K1-first", "random whole-file reads, `images`, kernel view alone, first pass after the mount",
                "the library's first pass after the mount", lib_first, med(smp["view"], "files_per_s"), "files/s",
                "≥ 0.5× the library's first pass", 0.5, pairs=paired(smp, "library-first", "view", "files_per_s"),
                note=f"against native (warm): {fmt(med(smp['view'], 'files_per_s') / b)}×; the library's first "
                     f"pass {fmt(lib_first / b)}× native; the library on the suite's agent (staged before, "
                     f"steady): {fmt(lib)} files/s, {fmt(lib / b)}× native")
        add_row(ctx, "K1-warm", "the same, third pass in the same mount (the view's page cache warm and settled)",
                "native local", b, med(smp["view"], "warm_files_per_s"), "files/s", "≥ 0.9× native", 0.9,
                note=f"the second pass: {fmt(med(smp['view'], 'second_files_per_s') / b)}× native (each page's "
                     "second access moves it to the kernel's active list, once)")
        fuse, lib_files = med(smp["view-fuse"], "files_per_s"), med(smp["library-first-files"], "files_per_s")
        add_row(ctx, "K1-fuse-first", "K1-first where the view is FUSE (`--image no`: a file per file, as on tmpfs)",
                "the library's first pass after the mount, `--image no`", lib_files, fuse, "files/s",
                "≥ 0.5× the library's first pass", 0.5, pairs=paired(smp, "library-first-files", "view-fuse", "files_per_s"),
                note=f"against native (warm): {fmt(fuse / b)}×; a reader that lists the dataset first (`os.walk`, as "
                     f"ImageFolder; the listing counted in its pass): {fmt(med(smp['view-fuse-listed'], 'files_per_s'))} "
                     f"files/s, {fmt(med(smp['view-fuse-listed'], 'files_per_s') / lib_files)}× the library's first pass")
        add_row(ctx, "K1-fuse-warm", "K1-warm where the view is FUSE (`--image no`)", "native local", b,
                med(smp["view-fuse"], "warm_files_per_s"), "files/s", "≥ 0.9× native", 0.9,
                note=f"the second pass: {fmt(med(smp['view-fuse'], 'second_files_per_s') / b)}× native")
    if ctx.wanted("K2"):
        ag = agents["text"]
        script, passes = os.path.join(HERE, "m2_walk.py"), str(ctx.inner["m2_passes"])
        smp = rounds(ctx, "K2", [
            ("off", lambda i: run_json([PY, script, ag.mount, passes], env=ag.env())),
            ("on", lambda i: fresh_run(ag, lambda m: [PY, script, m, passes])[0])])
        for v in smp.values():
            for x in v:
                x["walk_entries_per_s"] = x["entries"] / x["walk_seconds"]
        add_workload(ctx, "K2", "M2's os.walk through the library, the kernel view off and on", smp,
                     metric="walk_entries_per_s", dataset="text")
        add_row(ctx, "K2", "`os.walk` over `text` through the library, view on vs off", "view off",
                med(smp["off"], "walk_entries_per_s"), med(smp["on"], "walk_entries_per_s"), "entries/s", "report",
                pairs=paired(smp, "off", "on", "walk_entries_per_s"))


def agent_stats(run_dir):
    """The agent's JSON counters over its local socket (proto.h: Frame{magic, op, status, len})."""
    import struct
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as so:
        so.settimeout(10)
        so.connect(os.path.join(run_dir, "agent.sock"))
        so.sendall(struct.pack("=IIiI", 0x46534c31, 3, 0, 0))
        hdr = b""
        while len(hdr) < 16:
            chunk = so.recv(16 - len(hdr))
            if not chunk:
                raise BenchError("agent closed the stats connection")
            hdr += chunk
        magic, op, status, n = struct.unpack("=IIiI", hdr)
        body = b""
        while len(body) < n:
            chunk = so.recv(n - len(body))
            if not chunk:
                break
            body += chunk
    if magic != 0x46534c31 or status != 0:
        raise BenchError(f"agent stats: bad reply (magic {magic:x}, status {status})")
    return json.loads(body)


class Munge:
    """Peer connections between agents authenticate with MUNGE. When munged is not running, it is
    started the way tests/slurm/cluster.sh does, and stopped afterwards only if it was ours."""
    PIDFILE = "/run/munge/munged.pid"

    def __init__(self):
        self.pid = None

    @staticmethod
    def works():
        return subprocess.run("munge -n | unmunge", shell=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0

    def ensure(self):
        if self.works():
            return "already running"
        if os.geteuid() != 0 or not os.access("/usr/sbin/munged", os.X_OK) or not os.path.exists("/etc/munge/munge.key"):
            return "not available (not root, or munge not installed)"
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            os.makedirs(d, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        os.chmod("/run/munge", 0o755)
        with contextlib.suppress(OSError):
            with open(self.PIDFILE) as f:
                old = int(f.read().strip())
            if not os.path.exists(f"/proc/{old}"):
                os.unlink(self.PIDFILE)
        r = run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"], check=False)
        for _ in range(100):
            with contextlib.suppress(OSError, ValueError):
                with open(self.PIDFILE) as f:
                    self.pid = int(f.read().strip())
                break
            time.sleep(0.05)
        return "started by the benchmark" if self.works() else f"could not be started ({r.stderr.strip()[:200]})"

    def __enter__(self):  # `with Munge() as state:` ensures it for the block, stops it after if ours
        return self.ensure()

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if not self.pid:
            return
        with contextlib.suppress(OSError):
            with open(f"/proc/{self.pid}/comm") as f:
                if f.read().strip() == "munged":
                    os.kill(self.pid, signal.SIGTERM)
                    for _ in range(100):
                        if not os.path.exists(f"/proc/{self.pid}"):
                            break
                        time.sleep(0.05)
        self.pid = None


def opens_delta(before, after):
    return {k: after["opens"].get(k, 0) - before["opens"].get(k, 0) for k in after.get("opens", {})}


def wl_r4(ctx):
    """R4: every file read is held by the other agent (2 agents on this machine, --replicas 1).
    R4-first: the first epoch over every remote file, started the moment both agents are ready,
    with default settings (so the agent's prefetch of remote shards runs while the epoch reads);
    fresh agents for every round, so that every read is a real first read. R4-demand
    (diagnostic) and R4-repeat: with --no-prefetch, a different subset per round is fetched on
    open, then read again from the local cache."""
    if not ctx.wanted("R4"):
        return
    d = ctx.datasets["images"]
    nat = os.path.join(ctx.native, "images")
    res = {}
    with Munge() as munge_state:
        _r4_first(ctx, d, nat, res)
        _r4_demand(ctx, d, nat, res)
    _r4_report(ctx, res, munge_state)


def _r4_shares(ag, with_local=False):
    """The files only rank 1 holds (relative paths), checked to be disjoint from rank 0's; with
    with_local, also rank 0's (sorted)."""
    data1, data0 = os.path.join(ag.local_dir(1), "data"), os.path.join(ag.local_dir(0), "data")
    remote = sorted(tree_files(data1 if os.path.isdir(data1) else ag.local_dir(1)))
    local0 = set(tree_files(data0 if os.path.isdir(data0) else ag.local_dir(0)))
    if not remote or local0 & set(remote):
        raise BenchError(f"R4: expected disjoint shares, got {len(local0)} and {len(remote)} files")
    return (remote, sorted(local0)) if with_local else remote


def _r4_read(ctx, ag, lst, kind):
    rd0 = ag.d(ag.run_t, 0)
    before = agent_stats(rd0)
    s = rates(run_json([ctx.fsbench, "read", ag.mount, lst], env=ag.env(0)))
    after = agent_stats(rd0)
    s["opens"] = opens_delta(before, after)
    s["kind"] = kind
    s["prefetch_bytes"] = after.get("prefetch", {}).get("bytes", 0)
    return s


def children_cpu():
    """CPU seconds (user + system) of this script's finished children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def agents_cpu(ag):
    """CPU seconds of every agent of `ag` so far (their cpu_seconds.now counters)."""
    return sum(agent_stats(ag.d(ag.run_t, r))["cpu_seconds"]["now"] for r in range(ag.np))


def _r4_first(ctx, d, nat, res):
    state = {}

    def fresh(i, node=False):
        # node: only the reading agent prefetches; on one machine that is the work of one node
        # in the default mode on real nodes (its own fetches, and serving the other's).
        ag = Agent(ctx, f"r4{'n' if node else 'f'}{i}", d["fs"], np=2, replicas=1,
                   rank_extra={1: ["--no-prefetch"]} if node else None)
        ag.start()
        try:
            remote, local0 = _r4_shares(ag, with_local=True)
            if "list" not in state:
                random.Random(44).shuffle(remote)
                state["list"] = write_list(os.path.join(ctx.lists, "r4-first.list"), remote)
                state["local0"] = write_list(os.path.join(ctx.lists, "r4-local0.list"), local0)
                state["files"] = len(remote)
            elif len(remote) != state["files"]:
                raise BenchError(f"R4: rank 1 holds {len(remote)} files, {state['files']} before")
            s = _r4_read(ctx, ag, state["list"], "first")
        finally:
            s_stats = ag.stop()
        s["agent_stats"] = s_stats
        return s

    def native(i):
        if "list" not in state:  # the native arm runs second: the list exists by then
            raise BenchError("R4: no file list")
        return rates(run_json([ctx.fsbench, "read", nat, state["list"]]))

    def floor(i, both=False):
        # The least work of any design that moves each file over TCP into local storage and
        # reads it there (fsbench netcopy): its CPU time, on these 2 cores, bounds R4-first.
        # both: rank 0's files move the other way at the same time, as the other agent's
        # prefetch does in R4-first (two nodes' transfers on this one machine); the rate is the
        # reader's direction's.
        dst, dst2 = os.path.join(ctx.work, "r4-floor"), os.path.join(ctx.work, "r4-floor-back")
        os.makedirs(dst)
        other = None
        try:
            if both:
                os.makedirs(dst2)
                other = subprocess.Popen([ctx.fsbench, "netcopy", nat, state["local0"], dst2],
                                         stdout=subprocess.DEVNULL)
            before = children_cpu()
            s = rates(run_json([ctx.fsbench, "netcopy", nat, state["list"], dst]))
            s["cpu_seconds"] = children_cpu() - before
        finally:
            if other and other.wait() != 0:
                raise BenchError("R4: the other direction's netcopy failed")
            drop_tree(dst)
            if both:
                drop_tree(dst2)
        return s

    smp = rounds(ctx, "R4", [("fanstore_first", fresh), ("native", native), ("floor", floor),
                             ("fanstore_node", lambda i: fresh(i, node=True)),
                             ("floor_both", lambda i: floor(i, both=True))])
    res["first"] = dict(samples=smp, remote_files=state["files"])


def _r4_demand(ctx, d, nat, res):
    nrounds = ctx.rounds["warmup"] + ctx.rounds["reps"]
    ag = Agent(ctx, "r4d", d["fs"], np=2, replicas=1, extra=["--no-prefetch"])
    ag.start()
    try:
        remote = _r4_shares(ag)
        random.Random(45).shuffle(remote)
        chunk = len(remote) // nrounds
        lists = [write_list(os.path.join(ctx.lists, f"r4-{i}.list"), remote[i * chunk:(i + 1) * chunk])
                 for i in range(nrounds)]
        # A different subset in every round, so that every demand fetch is a real first read.
        arms = [("native", lambda i: rates(run_json([ctx.fsbench, "read", nat, lists[i]]))),
                ("fanstore_demand", lambda i: _r4_read(ctx, ag, lists[i], "demand")),
                ("fanstore_repeat", lambda i: _r4_read(ctx, ag, lists[i], "repeat"))]
        smp = rounds(ctx, "R4", arms, check_hash=False)
        for i in range(nrounds):
            hs = {smp[a][i]["hash"] for a in smp}
            if len(hs) != 1:
                raise BenchError(f"R4 round {i}: the arms read different data {hs}")
    finally:
        stats = ag.stop()
    res["demand"] = dict(samples=smp, stats=stats)


def _r4_report(ctx, res, munge_state):
    def served(samples):
        tot = {}
        for s in samples:
            if s.get("warmup"):
                continue
            for k, v in s.get("opens", {}).items():
                tot[k] = tot.get(k, 0) + v
        return ", ".join(f"{v} {k}" for k, v in sorted(tot.items()) if v) or "no opens counted"

    fi, dm = res["first"]["samples"], res["demand"]["samples"]
    add_workload(ctx, "R4", "reads of files held by the other agent (2 agents, --replicas 1)",
                 {"native_first": fi["native"], "fanstore_first": fi["fanstore_first"], "floor": fi["floor"],
                  "floor_both": fi["floor_both"],
                  "fanstore_node": fi["fanstore_node"], "native": dm["native"],
                  "fanstore_demand": dm["fanstore_demand"], "fanstore_repeat": dm["fanstore_repeat"]},
                 metric="files_per_s", agent_stats={"demand": res["demand"]["stats"]},
                 remote_files=res["first"]["remote_files"], munged=munge_state,
                 cache="native copy warm (tmpfs); the holder's staged copy warm (tmpfs); agents on one machine, "
                       "peer traffic over loopback TCP", dataset="images")
    nat_s, floor_cpu = med(fi["native"], "seconds"), med(fi["floor"], "cpu_seconds")
    add_row(ctx, "R4-floor", "the same files moved over loopback TCP into tmpfs and read there, with nothing else "
            "(`fsbench netcopy`: no protocol, verification or cache)", "native local",
            med(fi["native"], "files_per_s"), med(fi["floor"], "files_per_s"), "files/s", "report", None,
            pairs=paired(fi, "native", "floor", "files_per_s"),
            note=f"{fmt(floor_cpu)} s of CPU for what native reads in {fmt(nat_s)} s: on {ctx.cores} cores no design "
                 f"with a TCP transport and a local cache can finish an epoch in less than "
                 f"{fmt(floor_cpu / ctx.cores)} s, {fmt(nat_s / (floor_cpu / ctx.cores))}× native")
    floor_rate = med(fi["floor"], "files_per_s")
    add_row(ctx, "R4-first", f"first epoch over the {res['first']['remote_files']:,} files held by the other agent, "
            "started when the agents are ready (default settings: both agents prefetch meanwhile); fresh agents each "
            "round", "R4-floor", floor_rate, med(fi["fanstore_first"], "files_per_s"), "files/s",
            "≥ 0.8× R4-floor", 0.8, pairs=paired(fi, "floor", "fanstore_first", "files_per_s"),
            note=f"opens by source: {served(fi['fanstore_first'])}; "
                 f"{fmt(med(fi['fanstore_first'], 'files_per_s') / med(fi['native'], 'files_per_s'))}× native; "
                 f"munged {munge_state}")
    add_row(ctx, "R4-node", "R4-first with only the reading agent prefetching (the other serves): on one machine, "
            "the work of one node of the default mode on real nodes (diagnostic)", "R4-floor", floor_rate,
            med(fi["fanstore_node"], "files_per_s"), "files/s", "report", None,
            pairs=paired(fi, "floor", "fanstore_node", "files_per_s"),
            note=f"opens by source: {served(fi['fanstore_node'])}")
    add_row(ctx, "R4-both", "R4-first against the floor doing the same two-way work on this machine: `fsbench "
            "netcopy` of the reader's files while the other agent's files move the other way (diagnostic)",
            "R4-floor-both", med(fi["floor_both"], "files_per_s"), med(fi["fanstore_first"], "files_per_s"),
            "files/s", "report", None, pairs=paired(fi, "floor_both", "fanstore_first", "files_per_s"),
            note=f"the two-way floor runs at {fmt(med(fi['floor_both'], 'files_per_s') / floor_rate)}× the one-way "
                 "R4-floor here")
    b = med(dm["native"], "files_per_s")
    add_row(ctx, "R4-repeat", "repeat read of the same files (local cache)", "native local", b,
            med(dm["fanstore_repeat"], "files_per_s"), "files/s", "≥ 0.95× native", 0.95,
            pairs=paired(dm, "native", "fanstore_repeat", "files_per_s"), note=f"opens by source: {served(dm['fanstore_repeat'])}")
    add_row(ctx, "R4-demand", "first read with `--no-prefetch`: each file fetched from the peer on open (diagnostic)",
            "native local", b, med(dm["fanstore_demand"], "files_per_s"), "files/s", "report", None,
            pairs=paired(dm, "native", "fanstore_demand", "files_per_s"), note=f"opens by source: {served(dm['fanstore_demand'])}")


# Per-node CPU-cost model (C1): the phases one node runs, measured apart on two datasets of very
# different file sizes, and fitted as CPU seconds per GB plus per million files.
COST_PHASES = (
    ("stage", "stage-in: start to ready (shard copy with XXH3, indexes, exchange, table), per byte copied and per file of the dataset"),
    ("unpack", "unpack: every file of the node's shards created and written (lazy mode, after ready)"),
    ("serve", "serving: the library's and the agent's CPU beyond a native read, per file read"),
    ("peer", "peer transfer: both agents, holder and fetcher (prefetch streams: read, tag, send, receive, check, cache)"),
    ("native", "native read: open + read + close of the same files on local storage (the job's own cost)"),
)


def _cost_local(ctx, name, i):
    """Session A: one agent, lazy unpack. Stage-in, unpack, then a serving pass against native."""
    d = ctx.datasets[name]
    ag = Agent(ctx, f"c1l-{name}{i}", d["fs"], extra=["--unpack", "lazy"])
    ag.start()
    try:
        st = agent_stats(ag.d(ag.run_t, 0))
        lst, _ = shuffled_list(ctx, name, seed=21, tag="-c1")
        a0, c0 = agents_cpu(ag), children_cpu()
        fs = run_json([ctx.fsbench, "read", ag.mount, lst], env=ag.env(0))
        a1, c1 = agents_cpu(ag), children_cpu()
        nat = run_json([ctx.fsbench, "read", os.path.join(ctx.native, name), lst])
        c2 = children_cpu()
    finally:
        ag.stop()
    if fs["hash"] != nat["hash"] or fs["files"] != d["files"]:
        raise BenchError(f"C1 {name}: the serving pass read other data than native")
    cpu, read = st["cpu_seconds"], (d["raw_bytes"] / 1e9, d["files"] / 1e6)
    return {"stage": (st["bytes_read_from_source"] / 1e9, read[1], cpu["ready"]),
            "unpack": (st["bytes_staged"] / 1e9, st["files_staged"] / 1e6, cpu["unpacked"] - cpu["ready"]),
            "serve": read + ((c1 - c0) - (c2 - c1) + (a1 - a0),),
            "native": read + (c2 - c1,)}


def _cost_peer(ctx, name, i):
    """Session B: two agents, eager unpack (done before ready); only rank 0 prefetches. Both
    agents' CPU from ready until rank 0 has streamed every shard rank 1 holds."""
    d = ctx.datasets[name]
    ag = Agent(ctx, f"c1p-{name}{i}", d["fs"], np=2, replicas=1, extra=["--unpack", "eager"],
               rank_extra={1: ["--no-prefetch"]})
    ag.start()
    try:
        with open(os.path.join(ag.d(ag.run_t, 1), "status.json")) as f:
            remote_shards = len(json.load(f)["shards"])
        rd = ag.d(ag.run_t, 0)
        t0, last, last_t = time.perf_counter(), None, time.perf_counter()
        while True:
            pf = agent_stats(rd)["prefetch"]
            if pf["shards"] >= remote_shards:
                break
            if pf != last:
                last, last_t = pf, time.perf_counter()
            elif time.perf_counter() - last_t > 2:  # the cache is full: what was streamed counts
                break
            if time.perf_counter() - t0 > 300:
                raise BenchError(f"C1 {name}: prefetch not done after 300 s")
            time.sleep(0.02)
        stats = [agent_stats(ag.d(ag.run_t, r)) for r in range(2)]
    finally:
        ag.stop()
    pf = stats[0]["prefetch"]
    if not pf["files"]:
        raise BenchError(f"C1 {name}: nothing prefetched")
    cpu = sum(s["cpu_seconds"]["now"] - s["cpu_seconds"]["ready"] for s in stats)
    return {"peer": (pf["bytes"] / 1e9, pf["files"] / 1e6, cpu)}


def cost_fit(points):
    """CPU = a * GB + b * Mfiles through two (GB, Mfiles, CPU) points: (a, b)."""
    (g1, f1, c1), (g2, f2, c2) = points
    det = g1 * f2 - g2 * f1
    if abs(det) < 1e-12:
        return None, None
    return (c1 * f2 - c2 * f1) / det, (g1 * c2 - g2 * c1) / det


def wl_cost(ctx):
    """C1: CPU seconds per GB and per million files for each phase of a node (BENCHMARKS.md R4's
    per-node CPU-cost model), fitted on `images` (110 KiB files) and `text` (4.5 KiB, zstd), and
    the prediction it makes for larger nodes, checked against R4-node of the same run."""
    if not ctx.wanted("C1"):
        return
    names = ("images", "text")
    reps = min(3, ctx.rounds["reps"])
    per = {n: [] for n in names}
    with Munge():
        for i in range(reps):
            for n in names:
                smp = _cost_local(ctx, n, i)
                smp.update(_cost_peer(ctx, n, i))
                per[n].append(smp)
                log(f"C1 {n} round {i}: " + ", ".join(f"{k} {v[2]:.2f} s" for k, v in smp.items()))
    model, measured = {}, {}
    for ph, _ in COST_PHASES:
        pts = []
        for n in names:
            g = median([s[ph][0] for s in per[n]])
            f = median([s[ph][1] for s in per[n]])
            c = median([s[ph][2] for s in per[n]])
            measured.setdefault(ph, {})[n] = {"gb": g, "mfiles": f, "cpu_seconds": c,
                                              "s_per_gb": c / g if g else None, "us_per_file": c / f if f else None}
            pts.append((g, f, c))
        a, b = cost_fit(pts)
        model[ph] = {"s_per_gb": a, "s_per_mfile": b}
    w = add_workload(ctx, "C1", "per-node CPU-cost model", {n: per[n] for n in names}, model=model,
                     measured=measured, rounds=reps, phases=COST_PHASES)
    # The model's check: R4-node (one node's work of the default mode) on this machine's cores.
    r4 = ctx.results["workloads"].get("R4")
    if r4 and all(None not in model[p].values() for p in ("peer", "serve", "native")):
        node = [s for s in r4["arms"]["fanstore_node"] if not s.get("warmup")]
        gb, mf = median([s["bytes"] for s in node]) / 1e9, median([s["files"] for s in node]) / 1e6
        cpu = sum(model[p]["s_per_gb"] * gb + model[p]["s_per_mfile"] * mf for p in ("peer", "serve", "native"))
        w["check"] = {"predicted_seconds": cpu / ctx.cores, "measured_seconds": median([s["seconds"] for s in node]),
                      "cores": ctx.cores, "gb": gb, "mfiles": mf}
    phases = "; ".join(f"{ph} {fmt(m['s_per_gb'])} s/GB + {fmt(m['s_per_mfile'])} s/M files" for ph, m in model.items())
    c = w.get("check")
    if c:  # a fit through noise can go negative: then the row has no model figure
        add_row(ctx, "C1", "the CPU-cost model's time for R4-node (its peer, serving and native-read CPU over this "
                f"machine's {ctx.cores} cores) against R4-node's measured time (diagnostic)", "model",
                c["predicted_seconds"] if c["predicted_seconds"] > 0 else None,
                c["measured_seconds"], "s", "report", None, higher_is_better=False,
                note=f"fitted on `images` and `text`, {reps} rounds: {phases}")


def cat_shards(d, where=None):
    """Seconds for `cat shards > /dev/null`, the shards read from directory `where` (default: their own)."""
    files = [os.path.join(where, os.path.basename(f)) if where else f for f in d["shard_files"]]
    return timed("cat " + " ".join(map(shq, files)) + " > /dev/null", shell=True)


def shq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def stage_sample(ctx, name, dataset_path, io_sample=False):
    ag = Agent(ctx, f"stage-{name}", dataset_path)
    t = ag.start(io_sample=io_sample)
    series = ag.io_series
    stats = ag.stop()
    st = stats[0] if stats else {}
    return {"seconds": t, "unpacked_seconds": ag.unpacked_seconds, "unpack": st.get("unpack", {}).get("mode"),
            "stage_in_seconds": st.get("stage_in_seconds"), "files": st.get("files_staged"),
            "bytes_staged": st.get("bytes_staged"), "bytes_read": st.get("bytes_read_from_source")}, series


def wl_stage(ctx):
    # S1: images through the remote file system stand-in, and (diagnostic) from a warm local source.
    for wid, name, remote in (("S1", "images-pfs", True), ("S1-local", "images", False)):
        if not ctx.wanted(wid):
            continue
        d = ctx.datasets[name]
        src = pfs_path(ctx, d["fs"]) if remote else d["fs"]
        series = {}

        def base(i, d=d, src=src):
            run(["sync"])
            t = cat_shards(d, src)
            return {"seconds": t, "bytes": d["shard_bytes"], "mb_per_s": d["shard_bytes"] / t / 1e6}

        def stage(i, name=name, src=src):
            run(["sync"])
            s, ser = stage_sample(ctx, name, src, io_sample=True)
            s["bytes"] = d["shard_bytes"]
            s["mb_per_s"] = d["shard_bytes"] / s["seconds"] / 1e6
            s["stage_only_mb_per_s"] = d["shard_bytes"] / s["stage_in_seconds"] / 1e6
            series[i] = ser
            return s

        def cp_tree(i, name=name):
            # Reference for the local case: copying the unpacked tree (create every file, write
            # every byte, no hashing), on the same tmpfs.
            dst = os.path.join(ctx.work, "cp-ref")
            t = timed(["cp", "-r", os.path.join(ctx.native, name), dst])
            drop_tree(dst)
            return {"seconds": t, "bytes": d["shard_bytes"], "mb_per_s": d["shard_bytes"] / t / 1e6}

        arms = [("cat", base), ("fanstore", stage)] + ([] if remote else [("cp_tree", cp_tree)])
        smp = rounds(ctx, wid, arms, check_hash=False)
        for s in smp["fanstore"]:
            if s["files"] != d["files"] or s["bytes_staged"] != d["raw_bytes"]:
                raise BenchError(f"{wid}: staged {s['files']} files / {s['bytes_staged']} B, expected {d['files']} / {d['raw_bytes']}")
        # The series of the median measured sample, for the throughput plot.
        meas = [s for s in smp["fanstore"] if not s["warmup"]]
        mid = sorted(meas, key=lambda s: s["seconds"])[len(meas) // 2]
        ctx.results["series"][wid] = {"t_rchar_wchar": series.get(mid["round"], []), "source": src,
                                      "cat_mb_per_s": med(smp["cat"], "mb_per_s")}
        where = "the remote file system stand-in (sshfs over loopback)" if remote else "local ext4, warm page cache"
        cache = ("sshfs server side warm in the page cache, client page cache dropped by sshfs on every open (its "
                 "default); staged to tmpfs" if remote else "source warm in the page cache; staged to tmpfs")
        add_workload(ctx, wid, f"stage-in of `{name}` from {where}", smp, metric="mb_per_s", cache=cache, dataset=name,
                     source=src)
        b, f = med(smp["cat"], "mb_per_s"), med(smp["fanstore"], "mb_per_s")
        add_row(ctx, wid, f"stage-in of `{name}` ({d['shards']} shards) from {where}, until ready",
                "`cat shards > /dev/null`", b, f, "MB/s", "≥ 0.9× source read" if remote else "report (diagnostic)",
                0.9 if remote else None, pairs=paired(smp, "cat", "fanstore", "mb_per_s"),
                note=f"stage-in alone (agent's own clock): {fmt(med(smp['fanstore'], 'stage_only_mb_per_s'))} MB/s" +
                ("" if remote else f"; `cp -r` of the unpacked tree on the same tmpfs: {fmt(med(smp['cp_tree'], 'mb_per_s'))} MB/s"))
    if ctx.wanted("S2"):
        d = ctx.datasets["text"]
        src = pfs_path(ctx, d["fs"])
        lst, _ = shuffled_list(ctx, "text", seed=9, tag="-s2")
        nat = os.path.join(ctx.native, "text")

        def base(i):
            run(["sync"])
            t = cat_shards(d, src)
            z = run_json([ctx.fsbench, "zdec", nat, lst, str(d["params"].get("level", 3)), "1"])
            zt = z["seconds"] / ctx.cores  # decompression spread on every core
            return {"cat_seconds": t, "zdec_seconds_1core": z["seconds"], "zdec_raw_bytes": z["raw_bytes"],
                    "seconds": max(t, zt), "bytes": d["raw_bytes"], "mb_per_s": d["raw_bytes"] / max(t, zt) / 1e6,
                    "source_mb_per_s_raw": d["raw_bytes"] / t / 1e6,
                    "zstd_cores_mb_per_s": d["raw_bytes"] / zt / 1e6}

        def stage(i):
            run(["sync"])
            s, _ = stage_sample(ctx, "text", src)
            s["bytes"] = d["raw_bytes"]
            s["mb_per_s"] = d["raw_bytes"] / s["seconds"] / 1e6
            s["stage_only_mb_per_s"] = d["raw_bytes"] / s["stage_in_seconds"] / 1e6
            s["unpacked_mb_per_s"] = d["raw_bytes"] / s["unpacked_seconds"] / 1e6
            return s

        smp = rounds(ctx, "S2", [("baseline", base), ("fanstore", stage)], check_hash=False)
        add_workload(ctx, "S2", "stage-in of `text` (zstd) from the remote file system stand-in", smp, metric="mb_per_s",
                     cache="as S1; the zstd baseline decodes one frame per file from memory", dataset="text", source=src)
        add_row(ctx, "S2", f"stage-in of `text` (zstd, {d['shards']} shards) from sshfs, until ready, raw MB/s",
                "min(source read, zstd decode × cores)", med(smp["baseline"], "mb_per_s"),
                med(smp["fanstore"], "mb_per_s"), "MB/s", "≥ 0.9× baseline", 0.9,
                pairs=paired(smp, "baseline", "fanstore", "mb_per_s"), note=f"source read {fmt(med(smp['baseline'], 'source_mb_per_s_raw'))} MB/s raw; zstd decode × "
                     f"{ctx.cores} cores {fmt(med(smp['baseline'], 'zstd_cores_mb_per_s'))} MB/s; stage-in alone "
                     f"{fmt(med(smp['fanstore'], 'stage_only_mb_per_s'))} MB/s; unpack mode "
                     f"{smp['fanstore'][-1].get('unpack')}, until every file is unpacked "
                     f"{fmt(med(smp['fanstore'], 'unpacked_mb_per_s'))} MB/s")


def wl_pack(ctx):
    if ctx.wanted("P1"):
        # `images-pfs`: the same kind of files as `images`, 3,000 of them; packing rates do not
        # depend on the count, and the full `images` would cost ~85 s of the 10-minute budget.
        d = ctx.datasets["images-pfs"]
        src = d["src"]
        outd = os.path.join(ctx.work, "p1")
        os.makedirs(outd, exist_ok=True)

        def tarz(i):
            out = os.path.join(outd, "p1.tar.zst")
            run(["sync"])
            t = timed(f"tar -cf - -C {shq(src)} . | zstd -T0 -3 -q > {shq(out)}", shell=True)
            size = os.path.getsize(out)
            os.unlink(out)
            return {"seconds": t, "bytes": d["raw_bytes"], "mb_per_s": d["raw_bytes"] / t / 1e6, "out_bytes": size}

        def pack(i):
            out = os.path.join(outd, "p1.fs")
            run(["sync"])
            t = timed([ctx.fanstore, "pack", src, out, "-q", "--no-sync", "--shard-size", d["params"]["shard"]])
            info = json.loads(run([ctx.fanstore, "info", "--json", out]).stdout)
            drop_tree(out)
            if info["files"] != d["files"]:
                raise BenchError(f"P1: packed {info['files']} files, expected {d['files']}")
            return {"seconds": t, "bytes": info["raw_bytes"], "mb_per_s": info["raw_bytes"] / t / 1e6,
                    "out_bytes": info["stored_bytes"]}

        smp = rounds(ctx, "P1", [("tar_zstd", tarz), ("fanstore", pack)], check_hash=False)
        add_workload(ctx, "P1", "pack `images-pfs`", smp, metric="mb_per_s", dataset="images-pfs",
                     cache="source tree warm in the page cache (cache directory, ext4); output to tmpfs; "
                           "`fanstore pack --no-sync` (tar | zstd does not sync either)")
        add_row(ctx, "P1", f"`fanstore pack` of `images-pfs` ({d['files']:,} incompressible files; zstd -3, all cores)", "`tar -c | zstd -T0 -3`",
                med(smp["tar_zstd"], "mb_per_s"), med(smp["fanstore"], "mb_per_s"), "MB/s", "≥ 0.8×", 0.8,
                pairs=paired(smp, "tar_zstd", "fanstore", "mb_per_s"))
    if ctx.wanted("V1"):
        d = ctx.datasets["images"]

        def cat(i):
            t = cat_shards(d)
            return {"seconds": t, "mb_per_s": d["shard_bytes"] / t / 1e6}

        def verify(i):
            t = timed([ctx.fanstore, "verify", d["fs"], "-q"])
            return {"seconds": t, "mb_per_s": d["shard_bytes"] / t / 1e6}

        smp = rounds(ctx, "V1", [("cat", cat), ("fanstore", verify)], check_hash=False)
        add_workload(ctx, "V1", "reading a shard back: `fanstore verify` of `images` (issue 2)", smp, metric="mb_per_s",
                     cache="shards warm in the page cache (local ext4)", dataset="images")
        add_row(ctx, "V1", "read-back of incompressible shards (`images`): `fanstore verify`, every hash checked",
                "`cat shards > /dev/null`", med(smp["cat"], "mb_per_s"), med(smp["fanstore"], "mb_per_s"), "MB/s",
                "≥ 0.9×", 0.9, pairs=paired(smp, "cat", "fanstore", "mb_per_s"))


def wl_e1(ctx):
    if not ctx.wanted("E1"):
        return
    d = ctx.datasets["jpeg"]
    script = os.path.join(HERE, "e1_epoch.py")
    direct_root = pfs_path(ctx, d["src"])
    local_root = os.path.join(ctx.native, "jpeg")
    ds_remote = pfs_path(ctx, d["fs"])

    def direct(i):
        return run_json([PY, script, direct_root])

    def fanstore(i):
        ag = Agent(ctx, "e1", ds_remote)
        t = ag.start()
        try:
            s = run_json([PY, script, ag.mount], env=ag.env())
        finally:
            st = ag.stop()
        s["stage_in_ready_seconds"] = t
        s["stage_in_seconds"] = st[0]["stage_in_seconds"] if st else None
        s["with_stage_in_seconds"] = s["seconds"] + t
        return s

    def native(i):
        return run_json([PY, script, local_root])

    # Each sample starts Python and imports torch (~1.5 s), so quick mode measures one round only.
    quick = ctx.mode == "quick"
    smp = rounds(ctx, "E1", [("sshfs_direct", direct), ("fanstore", fanstore), ("native_local", native)],
                 warmup=0 if quick else None, reps=1 if quick else None)
    # Operations reaching the source, counted in separate untimed runs (strace slows the server).
    with OpCounter(ctx, "e1-direct") as c_direct:
        run_json([PY, script, direct_root])
    ag = Agent(ctx, "e1", ds_remote)
    with OpCounter(ctx, "e1-stage") as c_stage:
        ag.start()
    try:
        with OpCounter(ctx, "e1-epoch") as c_epoch:
            run_json([PY, script, ag.mount], env=ag.env())
    finally:
        ag.stop()
    ops = {"direct_epoch": c_direct.counts, "fanstore_stage_in": c_stage.counts, "fanstore_epoch": c_epoch.counts}
    add_workload(ctx, "E1", "torchvision ImageFolder + DataLoader epoch", smp, metric="seconds", ops=ops, dataset="jpeg",
                 cache="sshfs: server page cache warm, sshfs attribute/directory caches as by default; FanStore: staged "
                       "from sshfs before each epoch (stage-in reported separately); native: tmpfs copy")
    b, f = med(smp["sshfs_direct"], "seconds"), med(smp["fanstore"], "seconds")
    add_row(ctx, "E1", f"one epoch, ImageFolder + DataLoader(num_workers=2), {d['files']} JPEGs, seconds",
            "sshfs direct", b, f, "s", "≥ 3× faster", 3.0, higher_is_better=False,
            pairs=paired(smp, "sshfs_direct", "fanstore", "seconds", higher_is_better=False),
            note=f"native local copy {fmt(med(smp['native_local'], 'seconds'))} s; stage-in from sshfs "
                 f"{fmt(med(smp['fanstore'], 'stage_in_ready_seconds'))} s; epoch + stage-in "
                 f"{fmt(med(smp['fanstore'], 'with_stage_in_seconds'))} s")
    direct_ops, epoch_ops = c_direct.counts["total"], c_epoch.counts["total"]
    add_row(ctx, "E1-ops", "source operations during the epoch (open, stat, readdir, read, close)", "sshfs direct",
            direct_ops, epoch_ops, "ops", "≤ 0.1% of direct", None,
            ratio=epoch_ops / direct_ops if direct_ops else None,
            note=f"stage-in itself: {c_stage.counts['total']} ops ({c_stage.counts['open']} opens)")
    r = ctx.results["rows"][-1]
    r["met"] = bool(direct_ops and epoch_ops <= 0.001 * direct_ops)
    r["ratio_is_fraction"] = True


def wl_e2(ctx):
    if not ctx.wanted("E2"):
        return
    d = ctx.datasets["images-pfs"]
    lst, _ = shuffled_list(ctx, "images-pfs", seed=12)
    with OpCounter(ctx, "e2-direct") as c_direct:
        r_direct = run_json([ctx.fsbench, "read", pfs_path(ctx, d["src"]), lst])
    ag = Agent(ctx, "e2", pfs_path(ctx, d["fs"]))
    with OpCounter(ctx, "e2-stage") as c_stage:
        ag.start()
    try:
        with OpCounter(ctx, "e2-epoch") as c_epoch:
            r_fs = run_json([ctx.fsbench, "read", ag.mount, lst], env=ag.env())
    finally:
        ag.stop()
    if r_direct["hash"] != r_fs["hash"]:
        raise BenchError("E2: the arms read different data")
    ops = {"direct_epoch": c_direct.counts, "fanstore_stage_in": c_stage.counts, "fanstore_epoch": c_epoch.counts}
    add_workload(ctx, "E2", "operations reaching the source for one epoch of R1", {"direct": [r_direct], "fanstore": [r_fs]},
                 metric="ops", ops=ops, dataset="images-pfs", files=d["files"], shards=d["shards"],
                 cache="sshfs as in E1; counts from strace on the sftp server")
    fs_total = c_stage.counts["metadata"] + c_epoch.counts["metadata"]
    add_row(ctx, "E2", f"metadata ops (open+stat+readdir) at the source, one R1 epoch of {d['files']} files "
            f"in {d['shards']} shards", "direct", c_direct.counts["metadata"], fs_total, "ops",
            "O(shards), not O(files): report", None, ratio=fs_total / max(1, c_direct.counts["metadata"]),
            note=f"direct: {c_direct.counts['open']} opens, {c_direct.counts['stat']} stats; FanStore stage-in: "
                 f"{c_stage.counts['open']} opens, {c_stage.counts['stat']} stats; FanStore epoch: "
                 f"{c_epoch.counts['total']} ops; reads: direct {c_direct.counts['read']}, stage-in {c_stage.counts['read']}")
    ctx.results["rows"][-1]["ratio_is_fraction"] = True


def wl_x1(ctx):
    if not ctx.wanted("X1"):
        return
    d = ctx.datasets["text"]
    entries = d["files"] + d["dirs"] + 1
    reps = ctx.rounds["reps"]
    smp = {}
    for n in (1, 2, 4):
        smp[f"n{n}"] = []
    # A node's share of `text` is over the fence's limit, so the agents gather the indexes over
    # their peer service, whose handshakes take MUNGE credentials.
    with Munge():
        for i in range(reps):
            for n in (1, 2, 4):
                ag = Agent(ctx, f"x1-{n}", d["fs"], np=n, replicas=1)
                ag.start()
                stats = ag.stop()
                if len(stats) != n:
                    raise BenchError(f"X1: {len(stats)} agent stats for {n} agents")
                ex = [s["exchange_seconds"] for s in stats]
                smp[f"n{n}"].append({"agents": n, "exchange_seconds_min": min(ex), "exchange_seconds_max": max(ex),
                                     "exchange_bytes": stats[0]["exchange_bytes"], "bytes_per_entry": stats[0]["exchange_bytes"] / entries,
                                     "stage_in_seconds_max": max(s["stage_in_seconds"] for s in stats), "warmup": False,
                                     "round": i, "per_agent": stats})
    meds = {n: {"t": med(smp[f"n{n}"], "exchange_seconds_min"), "tmax": med(smp[f"n{n}"], "exchange_seconds_max"),
                "bytes": med(smp[f"n{n}"], "exchange_bytes")} for n in (1, 2, 4)}
    # Model. Bytes: every node receives every shard index once, so B(N) = b·entries + c·N.
    b1, b4 = meds[1]["bytes"], meds[4]["bytes"]
    c = (b4 - b1) / 3
    b = (b1 - c) / entries
    # Time: a PMIx fence with collect is an allgather: T(N) = a + l·log2(N) + B(N)/BW. On one
    # machine the byte term is invisible; a and l are fitted to the measured minima (pure
    # exchange: the last agent to arrive waits for nobody), BW is an assumed per-node network rate.
    import math
    xs = [math.log2(n) for n in (1, 2, 4)]
    ys = [meds[n]["t"] for n in (1, 2, 4)]
    xm, ym = sum(xs) / 3, sum(ys) / 3
    l = max(0.0, sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sum((x - xm) ** 2 for x in xs))
    a = max(0.0, ym - l * xm)
    bw = 1.25e9  # 10 Gbit/s per node, conservative for HPC interconnects
    fanout = 50  # Slurm's TreeWidth default; its PMIx plugin runs the fence collective over that tree
    model = {"bytes_per_entry": b, "bytes_per_agent": c, "fence_base_s": a, "fence_per_log2_s": l, "bw_bytes_per_s": bw,
             "tree_fanout": fanout,
             "text": "B(N) = b·entries + c·N bytes received by every node (every shard index once, plus a small "
                     "per-agent record); T(N) = a + l·log2(N) + d(N)·B(N)/BW, where a and l are fitted to the measured "
                     "exchange times at 1, 2 and 4 agents (minimum over agents), d(N) = ⌈log₅₀ N⌉ store-and-forward "
                     "levels of a fan-out-50 tree (Slurm's default TreeWidth), BW = 1.25 GB/s per node (10 GbE)",
             "extrapolations": []}
    for nodes in (512, 4096):
        depth = max(1, math.ceil(math.log(nodes, fanout)))
        for label, ent in ((f"this dataset ({entries} entries)", entries), ("ImageNet-1k scale (1.28 M files)", 1_281_167 + 1000)):
            B = b * ent + c * nodes
            T = a + l * math.log2(nodes) + depth * B / bw
            model["extrapolations"].append({"nodes": nodes, "dataset": label, "bytes_per_node": B, "seconds": T})
    add_workload(ctx, "X1", "metadata exchange at 1, 2 and 4 agents (mpirun, --replicas 1)", smp, medians=meds,
                 model=model, entries=entries, dataset="text", cache="dataset warm (local ext4); local dirs on tmpfs")
    for n in (1, 2, 4):
        add_row(ctx, f"X1-{n}", f"metadata exchange, {n} agent{'s' if n > 1 else ''}, `text` ({entries} entries)", "-", None,
                meds[n]["t"], "s", "report", None, ratio=None,
                note=f"{fmt(meds[n]['bytes'] / entries)} B/entry ({fmt(meds[n]['bytes'])} B); slowest agent "
                     f"{fmt(meds[n]['tmax'])} s (the first round, which starts once each agent has opened its shards; the staging runs meanwhile)")


def wl_j2(ctx, agents):
    if not ctx.wanted("J2"):
        return
    ag = agents["text"]
    runs = "100" if ctx.mode == "full" else "30"

    def hf(env, i):
        out = os.path.join(ctx.work, "hf.json")
        run(["hyperfine", "-N", "--warmup", "20", "--runs", runs, "--export-json", out, "/bin/true"], env=env)
        with open(out) as f:
            r = json.load(f)["results"][0]
        return {"median_ms": r["median"] * 1e3, "mean_ms": r["mean"] * 1e3, "times_ms": [t * 1e3 for t in r["times"]]}

    plain = dict(os.environ)
    plain.pop("LD_PRELOAD", None)
    inactive = dict(plain, LD_PRELOAD=ctx.preload)
    smp = rounds(ctx, "J2", [("plain", lambda i: hf(plain, i)), ("preload", lambda i: hf(ag.env(), i)),
                             ("preload_inactive", lambda i: hf(inactive, i))], check_hash=False)
    b, f = med(smp["plain"], "median_ms"), med(smp["preload"], "median_ms")
    add_workload(ctx, "J2", "process start: /bin/true with and without the preload library", smp, metric="median_ms",
                 cache="hyperfine -N; with the preload library and FANSTORE_* set for a live agent (table mapped at start)")
    add_row(ctx, "J2", "`/bin/true` start with `LD_PRELOAD` and a live mount (hyperfine), added time", "without",
            b, f, "ms", "≤ 1 ms added", None, no_ratio=True,
            note=f"added: {fmt(f - b)} ms with a live mount (`text`, {ctx.datasets['text']['files']} files in the table); "
                 f"{fmt(med(smp['preload_inactive'], 'median_ms') - b)} ms with the library loaded but no FanStore "
                 "environment (srun, the batch shell)")
    r = ctx.results["rows"][-1]
    r["added_ms"] = f - b
    r["met"] = bool(f - b <= 1.0)


def wl_j1(ctx):
    """J1 on the test Slurm cluster with the SPANK plugin, through tests/slurm's harness (j1.sh)."""
    if not ctx.wanted("J1"):
        return
    title = "Slurm job (2 nodes) start to first read, with `--fanstore`"
    if ctx.args.skip_j1:
        reason = "skipped (--skip-j1)"
    else:
        samples = "3" if ctx.mode == "full" else "1"
        p = run(["bash", os.path.join(HERE, "j1.sh"), ctx.build, samples], check=False, timeout=600)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode == 0 and lines:
            r = json.loads(lines[-1])
            add_workload(ctx, "J1", "Slurm job start to first read with --fanstore", {"job": r.get("samples", [])},
                         metric="first_read_seconds", detail=r,
                         cache="a fresh 2-node test cluster; the e2e harness's small tree dataset on its PFS directory")
            add_row(ctx, "J1", title, "stage-in + 1 s", r["budget_seconds"], r["first_read_seconds"], "s",
                    "≤ stage-in + 1 s", None, no_ratio=True,
                    note=f"stage-in (the batch step's wait for its agent) {fmt(r['stage_in_seconds'])} s; {r.get('note', '')}")
            ctx.results["rows"][-1]["met"] = bool(r["first_read_seconds"] <= r["budget_seconds"])
            return
        tail = (p.stdout + p.stderr).strip().splitlines()
        reason = tail[-1] if tail else f"j1.sh exited {p.returncode}"
    add_workload(ctx, "J1", "Slurm job start to first read with --fanstore", {}, not_measured=reason)
    add_row(ctx, "J1", title, "stage-in + 1 s", None, None, "s", "≤ stage-in + 1 s", None, note=f"not measured: {reason}")


# --- machine --------------------------------------------------------------------------------------------------

def machine(ctx):
    cpu = "unknown"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    mem = {}
    with contextlib.suppress(OSError):
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":")
                mem[k] = int(v.split()[0]) * 1024
    fs_of = lambda p: (run(["findmnt", "-n", "-o", "FSTYPE", "-T", p]).stdout.split() or ["?"])[-1]
    version = run([ctx.fanstore, "version"], check=False).stdout.strip()
    # The commit the binaries were built from (the build stamps it), not the checkout's HEAD.
    built = re.search(r"commit ([^)]+)\)", version)
    return {
        "cpu_model": cpu, "cores": ctx.cores, "kernel": platform.release(), "memory_bytes": mem.get("MemTotal"),
        "local_dir": ctx.work, "local_dir_fs": fs_of(ctx.work), "cache_dir": ctx.cache, "cache_dir_fs": fs_of(ctx.cache),
        "os": run(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"], check=False).stdout.strip(),
        "loadavg_start": os.getloadavg(), "git_commit": built.group(1) if built else "unknown",
        "fanstore_version": version,
        "build_dir": ctx.build,
        # What the machine charges per system call, fresh page and cache miss (fsbench costs):
        # the prices every per-file figure is made of.
        "costs": json.loads(run([ctx.fsbench, "costs"]).stdout),
    }


# --- main ----------------------------------------------------------------------------------------------------

# wl_kview's rows: measured only as root with /dev/fuse (otherwise reported as not measured).
KVIEW_ROWS = ("K1-first", "K1-warm", "K1-fuse-first", "K1-fuse-warm", "K2")
ALL_ROWS = ["R1", "R2", "R3", "R5", "W1", "W1-local", "W1-mem", "W2", "W3", "M1", "M3", "M2-scandir", "M2-walk", "J2",
            *KVIEW_ROWS, "R4-first", "R4-floor", "R4-node", "R4-both", "R4-repeat", "R4-demand", "C1", "P1", "V1", "S1", "S1-local", "S2", "E1", "E1-ops", "E2", "X1-1", "X1-2", "X1-4", "J1"]


def sanity(ctx):
    """What --quick checks (never a ratio): every workload ran and gave positive numbers. That
    every arm read the same data is checked where the samples are taken."""
    rows = {r["id"]: r for r in ctx.results["rows"]}
    problems = []
    if ctx.only is None:
        problems += [f"{i}: no result" for i in ALL_ROWS if i not in rows]
    for r in rows.values():
        if r["id"] in ("J1", *KVIEW_ROWS) and r["fanstore"] is None:
            continue  # not measured (the reason is in the row), not a failure of FanStore
        if r["id"] in ("E1-ops", "E2"):
            ok = r["baseline"] and r["baseline"] > 0 and r["fanstore"] is not None and r["fanstore"] >= 0
        else:
            ok = r["fanstore"] is not None and r["fanstore"] > 0 and (r["baseline"] is None or r["baseline"] > 0)
        if not ok:
            problems.append(f"{r['id']}: baseline {r['baseline']}, FanStore {r['fanstore']}")
    if problems:
        raise BenchError("insane results: " + "; ".join(problems))
    log(f"sanity: {len(rows)} results, all positive, every arm read the same data")


def clean_stale(base):
    """Leftovers of a run that was killed (SIGKILL): its sshfs mount and its tmpfs working tree."""
    for e in os.listdir(base):
        m = re.match(r"^fanstore-bench\.(\d+)$", e)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        path = os.path.join(base, e)
        # Its agents, mpirun, sshd and sshfs name the working tree on their command line.
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if (path + "/").encode() in f.read():
                        os.kill(int(p), signal.SIGTERM)
        time.sleep(1)
        mnt = os.path.join(path, "pfs")
        if os.path.ismount(mnt):
            run(["fusermount", "-u", "-z", mnt], check=False)
        log(f"removing the leftovers of a killed run: {path}")
        drop_tree(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--fsbench", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--work-base", default="/dev/shm")
    ap.add_argument("--disk-base", default="/tmp", help="node-local disk (ext4) for W1-W3's local directories")
    ap.add_argument("--only", default="", help="comma-separated workload ids (R1,M2,S1,W1,...)")
    ap.add_argument("--skip-j1", action="store_true")
    args = ap.parse_args()
    clean_stale(args.work_base)
    clean_stale(args.disk_base)
    ctx = Ctx(args)
    t_start = time.time()
    for d in (ctx.out, ctx.data):
        os.makedirs(d, exist_ok=True)
    for d in (ctx.work, ctx.native, ctx.local, ctx.rundir, ctx.lists):
        os.makedirs(d, mode=0o700)

    def on_signal(sig, frame):
        raise KeyboardInterrupt(f"signal {sig}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when started in the background, where SIGINT is ignored
    status = 1
    try:
        ctx.results["machine"] = machine(ctx)
        ctx.results["mode"] = ctx.mode
        ctx.results["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        ctx.results["method"] = {"order": "A B A B (arms alternate within every round)", **ctx.rounds,
                                 "statistic": "median of the measured rounds", **ctx.inner}
        prune_cache(ctx)
        for name in ctx.sizes:
            gen_dataset(ctx, name)
        ctx.results["datasets"] = {k: {kk: vv for kk, vv in v.items() if kk not in ("rel", "shard_files")}
                                   for k, v in ctx.datasets.items()}
        native_copy(ctx, "jpeg")
        ctx.sshfs = Sshfs(ctx)
        ctx.sshfs.start()
        log(f"sshd on 127.0.0.1:{ctx.sshfs.port}, sshfs at {ctx.pfs_mnt}")
        # Long-lived agents for the read and metadata workloads (their stage-in is not measured here).
        agents = {}
        for name in ("images", "text", "mixed"):
            agents[name] = Agent(ctx, name, ctx.datasets[name]["fs"])
            agents[name].start()
        wl_reads(ctx, agents)
        if any(ctx.wanted(w) for w in W_IDS):
            wl_writes(ctx, agents)
        wl_meta(ctx, agents)
        wl_j2(ctx, agents)
        wl_kview(ctx, agents)
        for a in list(agents.values()):
            a.stop()
        wl_r4(ctx)
        wl_cost(ctx)
        wl_pack(ctx)
        wl_stage(ctx)
        wl_e1(ctx)
        wl_e2(ctx)
        wl_x1(ctx)
        wl_j1(ctx)
        sanity(ctx)
        status = 0
    except (BenchError, KeyboardInterrupt, subprocess.TimeoutExpired) as e:
        log(f"FAILED: {e}")
        ctx.results["error"] = str(e)
    finally:
        for a in list(ctx.agents):
            with contextlib.suppress(Exception):
                a.stop()
        if ctx.sshfs:
            ctx.sshfs.stop()
        drop_tree(ctx.work)
        drop_tree(ctx.disk)
        ctx.results["duration_seconds"] = time.time() - t_start
        if "machine" in ctx.results:
            ctx.results["machine"]["loadavg_end"] = os.getloadavg()
        path = os.path.join(ctx.out, "results.json")
        with open(path, "w") as f:
            json.dump(ctx.results, f, indent=1)
        log(f"wrote {path} ({ctx.results['duration_seconds']:.0f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
