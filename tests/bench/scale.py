#!/usr/bin/python3
"""The scale benchmarks (issue 13): ImageNet-sized datasets from the user's first command.

Run by `tests/bench/run.sh --scale`. Datasets (mkimagenet.py, cached by generator version):
  imagenet1k        1,331,167 files (1,000 class tars inside a tar, plus 50,000 validation files)
  imagenet22k-meta  14,197,122 empty files, packed from a tar stream, never on disk as files

Measured side by side in one run (every figure in results-scale.json, the section in scale.md):
  F6  `fanstore pack` of the archive and of the extracted tree, against zstd -T0 -3 of the same
  F1  first epoch: from `fanstore run`'s start to the end of one random pass over every file,
      against T_min_cold = cat of the shards + one native pass over the extracted tree with the
      dentries and inodes dropped (on tmpfs the same as warm; T_min, warm, in the note); its
      floor here: cat + every file created in the reader's order and read back, on every core
  F2  the second pass in the same session, against the warm native pass
  F3  teardown: from the command's end to `fanstore run`'s exit, everything removed
  F4  the agent's peak RSS + the shared table, per file
  F5  J2: /bin/true with the preload library and the live mount, against without
  F1-F3-disk  the same with the local directory on the node's disk (ext4), the default mode (as
      root: an EROFS image) beside `--image no`, against T_min_cold (issue 31)
  M1, M3 at 1.33M entries; X1 exchange bytes per entry, and the model at 512 and 4,096 nodes
  F1-tarx, F1-squashfuse  F1's session beside the other designs (alone: --only arms): `tar x` of the
      archive into the local directory, and a SquashFS image copied there and mounted with
      squashfuse, each then read in the same order (issue 28)
"""
import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time

from bench import PY, drop_tree as drop  # bench.py, next to this script

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def gen_key():
    with open(os.path.join(HERE, "mkimagenet.py"), "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:8]


def packer_key(fanstore):
    """A packed dataset's cache key: the generator, the dataset format (`fanstore --version`) and
    the packer's own sources (pack/, format/, common/, tests excluded), so that any change to the
    packer packs again."""
    h = hashlib.sha1(gen_key().encode())
    h.update(subprocess.run([fanstore, "--version"], capture_output=True, text=True).stdout.split(", commit")[0].encode())
    repo = os.path.dirname(os.path.dirname(HERE))
    for d in ("pack", "format", "common"):
        for name in sorted(os.listdir(os.path.join(repo, d))):
            if name.endswith((".cc", ".h")) and not name.endswith("_test.cc"):
                with open(os.path.join(repo, d, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()[:10]


class Scale:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.fanstore = os.path.join(self.build, "bin", "fanstore")
        self.fsbench = a.fsbench
        self.cache = os.path.join(a.cache, "scale")
        self.work = os.path.join(a.work_base, f"fanstore-scale.{os.getpid()}")
        self.disk_work = os.path.join(self.cache, f"work.{os.getpid()}")
        self.res = {"rows": [], "phases": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "scale_divisor": a.divisor}
        for d in (self.cache, self.work, self.disk_work):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.drop_stale_work()

    def drop_stale_work(self):
        """The work directories of runs that were killed (their process is gone): a 1.33M-file
        tree each, which nothing else removes."""
        for base, prefix in ((self.cache, "work."), (self.a.work_base, "fanstore-scale.")):
            for name in os.listdir(base):
                pid = name[len(prefix):]
                if name.startswith(prefix) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    log(f"removing {os.path.join(base, name)}, left by a run that was killed")
                    drop(os.path.join(base, name))

    def row(self, wid, what, baseline, fanstore, unit, target, ratio=None, met=None, note=""):
        r = dict(id=wid, workload=what, baseline=baseline, fanstore=fanstore, unit=unit, ratio=ratio,
                 target=target, met=met, note=note)
        self.res["rows"].append(r)
        log(f"{wid}: {what}: baseline {baseline}, FanStore {fanstore} {unit}, ratio {ratio} ({target}) "
            f"{'' if met is None else ('met' if met else 'MISSED')} {note}")

    # --- datasets -------------------------------------------------------------------------------

    def tar(self, kind="1k"):
        """mkimagenet.py's archive of this kind (1k, sizes), generated once per generator version."""
        name = "imagenet1k" if kind == "1k" else f"imagenet-{kind}"
        path = os.path.join(self.cache, f"{name}-d{self.a.divisor}-{gen_key()}.tar")
        if not os.path.exists(path):
            log(f"generating {path}")
            sh([PY, os.path.join(HERE, "mkimagenet.py"), kind, path, "--scale", str(self.a.divisor)])
        return path

    def meta_22k(self):
        path = os.path.join(self.cache, f"imagenet22k-meta-d{self.a.divisor}-{packer_key(self.fanstore)}.fs")
        if not os.path.isdir(path):
            log(f"packing imagenet22k-meta from a tar stream into {path}")
            tmp = path[:-3] + f".tmp-{os.getpid()}.fs"
            gen = subprocess.Popen([PY, os.path.join(HERE, "mkimagenet.py"), "22k-meta", "-", "--scale",
                                    str(self.a.divisor)], stdout=subprocess.PIPE)
            t, _ = timed(lambda: subprocess.run([self.fanstore, "pack", "-q", "-", tmp], stdin=gen.stdout,
                                                check=True))
            gen.stdout.close()
            if gen.wait() != 0:
                raise RuntimeError("mkimagenet.py 22k-meta failed")
            os.rename(tmp, path)
            self.res["phases"]["22k_pack_from_stream_seconds"] = t
        return path

    def info(self, ds):
        return json.loads(sh([self.fanstore, "info", "--json", ds]).stdout)

    # --- F6: pack ---------------------------------------------------------------------------------

    def pack(self, tar):
        """Both arms write their result beside each other on the same disk (the parallel file
        system's stand-in), from a warm archive, in alternating order, twice; the means. Each
        starts with nothing left to write back (an untimed `sync`): zstd does not sync its output,
        so without it the arm after zstd paid for zstd's writes."""
        ds = os.path.join(self.disk_work, "imagenet1k.fs")
        tree = os.path.join(self.work, "native")
        zst = os.path.join(self.disk_work, "out.zst")
        sh(["bash", "-c", f"cat {tar} > /dev/null"])
        t_zstd_tar, t_pack_tar = [], []
        for rep in range(2):
            for arm in ((0, 1) if rep == 0 else (1, 0)):
                os.sync()
                if arm == 0:
                    t_zstd_tar.append(timed(lambda: sh(["zstd", "-q", "-f", "-T0", "-3", tar, "-o", zst]))[0])
                    drop(zst)
                else:
                    drop(ds)
                    t_pack_tar.append(timed(lambda: sh([self.fanstore, "pack", "-q", tar, ds]))[0])
        t_extract, _ = timed(lambda: sh([self.fanstore, "extract", "-q", ds, tree]))
        ds2 = os.path.join(self.disk_work, "tree.fs")
        t_zstd_tree, t_pack_tree = [], []
        for rep in range(2):
            for arm in ((0, 1) if rep == 0 else (1, 0)):
                os.sync()
                if arm == 0:
                    t_zstd_tree.append(timed(lambda: sh(["bash", "-c", f"tar -C {tree} -cf - . | zstd -q -f -T0 -3 -o {zst}"]))[0])
                    drop(zst)
                else:
                    t_pack_tree.append(timed(lambda: sh([self.fanstore, "pack", "-q", tree, ds2]))[0])
                    drop(ds2)
        mean = lambda xs: sum(xs) / len(xs)
        t_zstd_tar, t_pack_tar, t_zstd_tree, t_pack_tree = map(mean, (t_zstd_tar, t_pack_tar, t_zstd_tree, t_pack_tree))
        size = os.path.getsize(tar)
        self.res["phases"].update(pack_archive_seconds=t_pack_tar, zstd_archive_seconds=t_zstd_tar,
                                  extract_seconds=t_extract, pack_tree_seconds=t_pack_tree,
                                  tar_zstd_tree_seconds=t_zstd_tree, archive_bytes=size)
        self.row("F6-archive", "`fanstore pack` of the archive (1,000 class tars in a tar)", t_zstd_tar, t_pack_tar, "s",
                 "≥ 1.0× `zstd -T0 -3` of the same archive", t_zstd_tar / t_pack_tar, t_pack_tar <= t_zstd_tar,
                 f"{size / t_pack_tar / 1e6:.0f} MB/s of archive; both write their output to the same disk")
        self.row("F6", "`fanstore pack` of the extracted tree", t_zstd_tree, t_pack_tree, "s",
                 "≥ 1.0× `tar -c | zstd -T0 -3`", t_zstd_tree / t_pack_tree, t_pack_tree <= t_zstd_tree,
                 f"extracting the tree to tmpfs took {t_extract:.1f} s (`fanstore extract`: every file "
                 "created with its mode, mtime and attributes, and verified)")
        return ds, tree

    # --- F1-F5, M1, M3: one session of `fanstore run` -----------------------------------------------

    def session(self, ds, files_list, native_tree, nfiles):
        info = self.info(ds)
        self.exchange_bytes(ds, info, "1k")
        shards = [os.path.join(ds, s["file"]) for s in info["shards"]]
        mount = "/fanstore/imagenet1k"
        # T_min: the shards read once, plus one warm native pass (after a warm-up pass); T_min_cold,
        # the same pass with the reclaimable dentries and inodes dropped (issue 31). On tmpfs
        # `drop_caches` cannot drop them: a tmpfs file's dentry and inode are the file.
        t_cat, _ = timed(lambda: sh(["bash", "-c", "cat \"$@\" > /dev/null", "cat"] + shards))
        sh([self.fsbench, "read", native_tree, files_list, "1"])
        native = json.loads(sh([self.fsbench, "read", native_tree, files_list, "1"]).stdout)
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
        native_cold = json.loads(sh([self.fsbench, "read", native_tree, files_list, "1"]).stdout)
        nat_stat = json.loads(sh([self.fsbench, "stat", native_tree, files_list, "1"]).stdout)
        nat_enoent = json.loads(sh([self.fsbench, "enoent", native_tree, files_list, "200000"]).stdout)
        # F1's floor on this machine: every file created, in the reader's order, and read back once,
        # with every core sharing the files (fsbench materialise).
        mat_dir = os.path.join(self.work, "materialise")
        os.makedirs(mat_dir)
        ncpu = len(os.sched_getaffinity(0))
        mat = json.loads(sh([self.fsbench, "materialise", native_tree, files_list, mat_dir, str(ncpu)]).stdout)
        sh(["rm", "-rf", mat_dir])  # 1.33M files: faster than shutil.rmtree
        out = os.path.join(self.work, "session")
        os.makedirs(out)
        local = os.path.join(self.work, "local")
        os.makedirs(local)
        script = os.path.join(HERE, "scale_session.sh")
        t0 = time.time()
        p = subprocess.run([self.fanstore, "run", "-v", "--local-dir", local, "--mount", mount, ds, "--",
                            "bash", script, out, self.fsbench, mount, files_list, "200000"],
                           text=True, capture_output=True)
        t_end = time.time()
        if p.returncode != 0:
            raise RuntimeError(f"fanstore run failed ({p.returncode}): {p.stderr[-3000:]}")
        r = {k: json.load(open(os.path.join(out, f"{k}.json")))
             for k in ("pass1", "pass2", "pass3", "stat", "enoent", "agent", "j2_plain", "j2_preload",
                       "stats_after_pass1")}
        t = {k: float(open(os.path.join(out, k)).read()) for k in ("t_cmd_start", "t_pass1_end", "t_cmd_end")}
        left = os.listdir(local)
        stats = [json.loads(l.split("stats: ", 1)[1]) for l in p.stderr.splitlines() if "stats: {" in l]
        native2 = json.loads(sh([self.fsbench, "read", native_tree, files_list, "1"]).stdout)
        for k in ("pass1", "pass2", "pass3"):
            if r[k]["hash"] != native["hash"] or r[k]["errors"]:
                raise RuntimeError(f"{k}: read other data than the native tree ({r[k]}, native {native})")
        f1 = t["t_pass1_end"] - t0
        tmin, tmin_cold = t_cat + native["seconds"], t_cat + native_cold["seconds"]
        ready = t["t_cmd_start"] - t0
        unpack = r["stats_after_pass1"].get("unpack", {})
        self.res["phases"].update(
            f1_total_seconds=f1, f1_ready_seconds=ready, f1_pass_seconds=r["pass1"]["seconds"], cat_shards_seconds=t_cat,
            native_pass_seconds=native["seconds"], native_cold_pass_seconds=native_cold["seconds"], native_hash=native["hash"],
            materialise_seconds=mat["seconds"], materialise_procs=ncpu,
            unpack_after_pass1=unpack, teardown_seconds=t_end - t["t_cmd_end"],
            agent=r["agent"], agent_stats=stats[-1] if stats else None, left_behind=left)
        self.row("F1", f"first epoch from `fanstore run` start, default mode, {nfiles:,} files", tmin_cold, f1, "s",
                 "T_min_cold / T ≥ 0.8", tmin_cold / f1, tmin_cold / f1 >= 0.8,
                 f"ready {ready:.1f} s + pass {r['pass1']['seconds']:.1f} s; T_min_cold = cat {t_cat:.1f} s + native pass "
                 f"with dentries and inodes dropped {native_cold['seconds']:.1f} s (tmpfs keeps them); against the warm "
                 f"T_min (native pass {native['seconds']:.1f} s): {tmin / f1:.2f}; files the reader unpacked itself "
                 f"{unpack.get('by_clients', '?')}; floor: every file created in the reader's order and read back once "
                 f"on {ncpu} cores, {mat['seconds']:.1f} s, T_min_cold / (cat + that) = "
                 f"{tmin_cold / (t_cat + mat['seconds']):.2f}")
        n2 = sum(r[k]["files"] / r[k]["seconds"] for k in ("pass2", "pass3")) / 2
        nn = sum(x["files"] / x["seconds"] for x in (native, native2)) / 2
        self.row("F2", "second and third pass, same session", nn, n2, "files/s", "≥ 0.95× warm native", n2 / nn,
                 n2 / nn >= 0.95, "means: native warm passes before and after the session, FanStore's 2nd and 3rd")
        td = t_end - t["t_cmd_end"]
        self.row("F3", f"teardown, {nfiles:,} files", None, td, "s", "≤ 10 s, nothing left", None,
                 td <= 10 and not left, f"left in the local directory: {left or 'nothing'}")
        per_file, note = self.memory(r["agent"], nfiles)
        self.row("F4", f"agent peak RSS + table per file, {nfiles:,} files", None, per_file, "B/file", "≤ 200 B/file",
                 None, per_file <= 200, note)
        added = r["j2_preload"]["median_ms"] - r["j2_plain"]["median_ms"]
        self.row("F5", f"J2: /bin/true start with the live mount, {nfiles:,} entries", r["j2_plain"]["median_ms"],
                 r["j2_preload"]["median_ms"], "ms", "≤ 1 ms added", None, added <= 1.0, f"added {added:.2f} ms")
        ms = r["stat"]["stats"] / r["stat"]["seconds"]
        mn = nat_stat["stats"] / nat_stat["seconds"]
        self.row("M1-1.3M", f"stat of every file, {nfiles:,} files", mn, ms, "stat/s", "≥ 3× native", ms / mn, ms / mn >= 3)
        es = r["enoent"]["opens"] / r["enoent"]["seconds"]
        en = nat_enoent["opens"] / nat_enoent["seconds"]
        self.row("M3-1.3M", f"open of a missing path, {nfiles:,} entries", en, es, "opens/s", "≥ 3× native", es / en, es / en >= 3)

    # --- issue 31's disk arm: the local directory on the node's disk -------------------------------

    def disk_session(self, ds, lst, native, nfiles, tag="", what_files=""):
        """F1-F3 with the local directory on the node's disk (ext4 here, where GPU nodes have NVMe),
        the default mode (as root there: the share as one EROFS image) beside the per-file path
        (`--image no`), one session each; against the same tree extracted to the same disk and read
        warm, and with its dentries and inodes dropped (`echo 2 > drop_caches`: T_min_cold, issue
        31), both measured here, before the arms and after them (the means)."""
        shards = [os.path.join(ds, s["file"]) for s in self.info(ds)["shards"]]
        cat = lambda: sh(["bash", "-c", "cat \"$@\" > /dev/null", "cat"] + shards)  # noqa: E731
        t_cat, _ = timed(cat)
        read = lambda root: json.loads(sh([self.fsbench, "read", root, lst, "1"]).stdout)  # noqa: E731

        def baseline():
            """A warm native pass (after one that loads the tree), then one with the dentries
            and inodes dropped."""
            read(native)
            warm = read(native)
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2\n")
            return warm, read(native)

        # Before the arms and again after them, the means: this VM's cost of a fresh page swings
        # by 2x over minutes (it hands freed memory back to its host), and a baseline taken only
        # before the arms would charge them any drift.
        before = baseline()
        arms = {}
        for arm, extra in (("image", []), ("files", ["--image", "no"])):
            local, out = (os.path.join(self.disk_work, f"{k}-{arm}") for k in ("local", "session"))
            os.makedirs(local)
            os.makedirs(out)
            # Each arm has the machine's memory to itself, as a node running one of them would:
            # the native tree's pages, inodes and dentries (5.4 GB and 1.6 GB at 1.33M files) and
            # what the arm before left are dropped, then the shards read back into the page
            # cache, where T_min's `cat` has them. With the native tree resident, a 24 GB
            # machine cannot hold both copies and each arm evicts the other's: FanStore's passes
            # took 36, 24 and 17 s there against 25, 16 and 15 s alone, and the native pass after
            # them 26.5 s against 17 s.
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            cat()
            t0 = time.time()
            p = subprocess.run([self.fanstore, "run", "-v", "--local-dir", local, "--mount", "/fanstore/disk", *extra,
                                ds, "--", "bash", os.path.join(HERE, "scale_session.sh"), out, self.fsbench,
                                "/fanstore/disk", lst, "20000"], text=True, capture_output=True)
            t_end = time.time()
            if p.returncode != 0:
                raise RuntimeError(f"fanstore run ({arm}, disk) failed ({p.returncode}): {p.stderr[-3000:]}")
            r = {k: json.load(open(os.path.join(out, f"{k}.json"))) for k in ("pass1", "pass2", "pass3")}
            t = {k: float(open(os.path.join(out, k)).read()) for k in ("t_cmd_start", "t_pass1_end", "t_cmd_end")}
            for k in r:
                if r[k]["hash"] != before[0]["hash"] or r[k]["errors"]:
                    raise RuntimeError(f"{arm} {k}: read other data than the native tree ({r[k]})")
            stats = [json.loads(l.split("stats: ", 1)[1]) for l in p.stderr.splitlines() if "stats: {" in l]
            arms[arm] = dict(f1=t["t_pass1_end"] - t0, ready=t["t_cmd_start"] - t0, pass1=r["pass1"]["seconds"],
                             steady=sum(r[k]["files"] / r[k]["seconds"] for k in ("pass2", "pass3")) / 2,
                             teardown=t_end - t["t_cmd_end"], left=os.listdir(local),
                             local_copy=(stats[-1] if stats else {}).get("local_copy"),
                             unpack=(stats[-1] if stats else {}).get("unpack", {}).get("mode"))
            drop(out)
        after = baseline()
        for (w, c) in (before, after):
            if w["hash"] != before[0]["hash"] or c["hash"] != w["hash"]:
                raise RuntimeError("the native tree read back other data")
        warm = dict(before[0], seconds=(before[0]["seconds"] + after[0]["seconds"]) / 2)
        cold = dict(before[1], seconds=(before[1]["seconds"] + after[1]["seconds"]) / 2)
        tmin, tmin_cold = t_cat + warm["seconds"], t_cat + cold["seconds"]
        self.res["phases"]["disk" + tag] = dict(
            cat_seconds=t_cat, native_warm_seconds=warm["seconds"], native_cold_seconds=cold["seconds"],
            native_warm_before_after=[before[0]["seconds"], after[0]["seconds"]],
            native_cold_before_after=[before[1]["seconds"], after[1]["seconds"]], arms=arms, local=self.disk_work)
        nat = warm["files"] / warm["seconds"]
        for arm, a in arms.items():
            tag_arm = tag + ("" if arm == "image" else "-files")
            what = "default mode (as root: an EROFS image)" if arm == "image" else "`--image no` (a file per file)"
            self.row(f"F1-disk{tag_arm}", f"first epoch from `fanstore run` start, local directory on ext4, {what}, "
                     f"{nfiles:,}{what_files} files", tmin_cold, a["f1"], "s", "T_min_cold / T ≥ 0.8", tmin_cold / a["f1"],
                     tmin_cold / a["f1"] >= 0.8,
                     f"local copy: {a['local_copy']}, unpack {a['unpack']}; ready {a['ready']:.1f} s + pass {a['pass1']:.1f} s; T_min_cold = "
                     f"cat {t_cat:.1f} s + native pass with dentries dropped {cold['seconds']:.1f} s (mean of "
                     f"{before[1]['seconds']:.1f} s before the arms and {after[1]['seconds']:.1f} s after); against "
                     f"the warm T_min ({tmin:.1f} s): {tmin / a['f1']:.2f}")
            self.row(f"F2-disk{tag_arm}", f"second and third pass, local directory on ext4, {what}", nat, a["steady"],
                     "files/s", "≥ 0.95× warm native", a["steady"] / nat, a["steady"] / nat >= 0.95,
                     "FanStore's 2nd and 3rd passes (mean rate) against a warm native pass of the tree on the same disk")
            self.row(f"F3-disk{tag_arm}", f"teardown, local directory on ext4, {what}, {nfiles:,} files", None,
                     a["teardown"], "s", "≤ 10 s, nothing left", None, a["teardown"] <= 10 and not a["left"],
                     f"left in the local directory: {a['left'] or 'nothing'}")

    # --- F1's other designs (issue 28): tar x to local storage; squashfuse ---------------------------

    def tar_arm(self, tar, lst, want, nfiles, tmin_cold):
        """What users do without FanStore: extract the archive into the local directory (the outer
        tar, then each class's tar into its directory, on every core, as ImageNet's preparation
        script does one after the other), then read. The archive is read where it lies, as
        FanStore's shards are; the same list, the same reader, the same bytes."""
        local = os.path.join(self.work, "tarx")
        os.makedirs(local)
        ncpu = len(os.sched_getaffinity(0))
        inner = ("cd \"$1\" && [ -d train ] || exit 0; cd train && ls | grep '\\.tar$' | xargs -r -P \"$2\" -n 1 "
                 "sh -c 'd=${1%.tar}; mkdir \"$d\" && tar -xf \"$1\" -C \"$d\" && rm \"$1\"' sh")
        t0 = time.time()
        sh(["tar", "-xf", tar, "-C", local])
        sh(["bash", "-c", inner, "inner", local, str(ncpu)])
        t_x = time.time() - t0
        p1, p2 = (json.loads(sh([self.fsbench, "read", local, lst, "1"]).stdout) for _ in range(2))
        t_rm, _ = timed(lambda: sh(["rm", "-rf", local]))
        for p in (p1, p2):
            if p["hash"] != want or p["errors"]:
                raise RuntimeError(f"tar x arm: read other data than the native tree ({p})")
        f1 = t_x + p1["seconds"]
        self.res["phases"]["tarx"] = dict(extract_seconds=t_x, pass1_seconds=p1["seconds"],
                                         pass2_seconds=p2["seconds"], teardown_seconds=t_rm, procs=ncpu)
        where = "tmpfs" if self.work.startswith("/dev/shm") else self.work
        self.row("F1-tarx", f"first epoch, `tar x` of the archive (and its 1,000 class tars, on {ncpu} cores) "
                 f"into the local directory ({where}), then a pass, {nfiles:,} files", tmin_cold, f1, "s",
                 "report (FanStore's F1 beside it)", tmin_cold / f1, None,
                 f"extract {t_x:.1f} s + pass {p1['seconds']:.1f} s; the archive read from the disk's page cache, "
                 f"as FanStore's shards are")
        self.row("F3-tarx", f"teardown of the extracted tree (`rm -rf`), {nfiles:,} files", None, t_rm, "s",
                 "report", None, None, f"second pass {p2['seconds']:.1f} s ({nfiles / p2['seconds']:,.0f} files/s)")

    def squashfs_image(self, tree):
        """The tree as a SquashFS image (zstd; random bytes stay stored), made once per dataset and
        cached like the packed dataset: the other \"pack once\" design."""
        key = packer_key(self.fanstore)
        path = os.path.join(self.cache, f"imagenet1k-d{self.a.divisor}-{key}.sqfs")
        if not os.path.exists(path):
            log(f"mksquashfs of the tree into {path}")
            tmp = path + f".tmp-{os.getpid()}"
            t, _ = timed(lambda: sh(["mksquashfs", tree, tmp, "-comp", "zstd", "-noappend", "-quiet",
                                     "-no-progress", "-processors", str(len(os.sched_getaffinity(0)))]))
            os.rename(tmp, path)
            self.res["phases"]["mksquashfs_seconds"] = t
        return path

    def squashfuse_arm(self, tree, lst, nfiles, tmin_cold, sample=50_000):
        """The image copied to the local directory and mounted with squashfuse (FUSE, no root), then
        read in the reader's order. Random access through it is slow, so the pass reads the first
        `sample` files of the order and the epoch is projected at that rate."""
        img = self.squashfs_image(tree)
        sub = os.path.join(self.work, "sqfs.list")
        with open(lst) as f, open(sub, "w") as g:
            for _, line in zip(range(sample), f):
                g.write(line)
        want = json.loads(sh([self.fsbench, "read", tree, sub, "1"]).stdout)["hash"]
        local, mnt = os.path.join(self.work, "sqfs"), os.path.join(self.work, "sqfs-mnt")
        os.makedirs(local)
        os.makedirs(mnt)
        t0 = time.time()
        sh(["cp", img, os.path.join(local, "ds.sqfs")])
        sh(["squashfuse", os.path.join(local, "ds.sqfs"), mnt])
        t_stage = time.time() - t0
        try:
            p1, p2 = (json.loads(sh([self.fsbench, "read", mnt, sub, "1"]).stdout) for _ in range(2))
        finally:
            t_td, _ = timed(lambda: (sh(["fusermount3", "-u", mnt]), sh(["rm", "-rf", local])))
        for p in (p1, p2):
            if p["hash"] != want or p["errors"]:
                raise RuntimeError(f"squashfuse arm: read other data than the native tree ({p})")
        f1 = t_stage + p1["seconds"] * nfiles / p1["files"]
        self.res["phases"]["squashfuse"] = dict(stage_seconds=t_stage, sample=p1["files"], pass1=p1, pass2=p2,
                                               teardown_seconds=t_td, image_bytes=os.path.getsize(img))
        self.row("F1-squashfuse", f"first epoch, a SquashFS image of the tree copied to the local directory and "
                 f"mounted with squashfuse, then a pass, {nfiles:,} files (projected from the first "
                 f"{p1['files']:,} of the order)", tmin_cold, f1, "s", "report (FanStore's F1 beside it)", tmin_cold / f1, None,
                 f"copy + mount {t_stage:.1f} s; pass at {p1['files'] / p1['seconds']:,.0f} files/s "
                 f"({p1['files']:,} files in {p1['seconds']:.1f} s); second pass over them "
                 f"{p2['files'] / p2['seconds']:,.0f} files/s; unmount + rm {t_td:.2f} s")

    def reader_order(self, tree):
        """Every file of `tree`, in the reader's random order (fixed seed), written to WORK/files.list:
        that list and the number of files."""
        files = sorted(os.path.relpath(os.path.join(r, n), tree) for r, _, ns in os.walk(tree) for n in ns)
        random.Random(13).shuffle(files)
        lst = os.path.join(self.work, "files.list")
        with open(lst, "w") as f:
            f.write("\n".join(files) + "\n")
        return lst, len(files)

    def other_designs(self, tar, tree, lst, nfiles):
        """F1-tarx and F1-squashfuse, after F1's session, against its T_min_cold and the bytes of its
        native pass."""
        ph = self.res["phases"]
        tmin_cold = ph["cat_shards_seconds"] + ph["native_cold_pass_seconds"]
        self.tar_arm(tar, lst, ph["native_hash"], nfiles, tmin_cold)
        self.squashfuse_arm(tree, lst, nfiles, tmin_cold)

    def run_arms(self):
        """--only arms: F1 (FanStore's session, on tmpfs) beside `tar x` and squashfuse, one run."""
        try:
            tar = self.tar()
            ds = os.path.join(self.disk_work, "imagenet1k.fs")
            sh([self.fanstore, "pack", "-q", tar, ds])
            tree = os.path.join(self.work, "native")
            sh([self.fanstore, "extract", "-q", ds, tree])
            lst, n = self.reader_order(tree)
            self.session(ds, lst, tree, n)
            self.other_designs(tar, tree, lst, n)
        finally:
            drop(self.work)
            drop(self.disk_work)
        return self.res

    @staticmethod
    def memory(ag, n):
        """Per file: the agent's peak RSS without the shared pages it maps (the table, counted
        once, by its size), plus the table."""
        private = (ag["vm_hwm_kib"] - ag.get("rss_shmem_kib", 0)) * 1024
        per_file = (private + ag["table_bytes"]) / n
        return per_file, (f"peak RSS {ag['vm_hwm_kib'] / 1024:.0f} MiB of which shared (the table) "
                          f"{ag.get('rss_shmem_kib', 0) / 1024:.0f} MiB; table {ag['table_bytes'] / 2**20:.0f} MiB")

    def meta_session(self, ds):
        """imagenet22k-meta: start to ready, the agent's memory, J2 and teardown at 14.2M entries."""
        info = self.info(ds)
        n = info["files"] + info["dirs"]
        out = os.path.join(self.work, "session22k")
        os.makedirs(out)
        # Node-local disk, not tmpfs: 14 million inodes would take ~13 GB of this machine's memory.
        local = os.path.join(self.disk_work, "local22k")
        os.makedirs(local)
        t0 = time.time()
        p = subprocess.run([self.fanstore, "run", "-v", "--local-dir", local, "--mount", "/fanstore/in22k", ds, "--",
                            "bash", os.path.join(HERE, "scale_session.sh"), out, "-", "/fanstore/in22k", "-", "0"],
                           text=True, capture_output=True)
        t_end = time.time()
        if p.returncode != 0:
            raise RuntimeError(f"fanstore run (22k) failed ({p.returncode}): {p.stderr[-3000:]}")
        ag = json.load(open(os.path.join(out, "agent.json")))
        j2p, j2 = (json.load(open(os.path.join(out, f"{k}.json"))) for k in ("j2_plain", "j2_preload"))
        t = {k: float(open(os.path.join(out, k)).read()) for k in ("t_cmd_start", "t_cmd_end")}
        stats = [json.loads(l.split("stats: ", 1)[1]) for l in p.stderr.splitlines() if "stats: {" in l]
        left = os.listdir(local)
        ready = t["t_cmd_start"] - t0
        td = t_end - t["t_cmd_end"]
        self.res["phases"].update(meta_ready_seconds=ready, meta_teardown_seconds=td, meta_agent=ag,
                                  meta_agent_stats=stats[-1] if stats else None, meta_entries=n)
        per_file, note = self.memory(ag, n)
        self.row("F4-22k", f"agent peak RSS + table per entry, {n:,} entries", None, per_file, "B/entry", "≤ 200 B",
                 None, per_file <= 200, f"{note}; start to ready {ready:.1f} s")
        added = j2["median_ms"] - j2p["median_ms"]
        self.row("F5-22k", f"J2 with {n:,} entries", j2p["median_ms"], j2["median_ms"], "ms", "≤ 1 ms added", None,
                 added <= 1.0, f"added {added:.2f} ms")
        self.row("F3-22k", f"teardown, {n:,} entries (session of {t['t_cmd_end'] - t['t_cmd_start']:.0f} s)", None, td,
                 "s", "bounded, nothing left", None, not left, f"left: {left or 'nothing'}")
        self.exchange_bytes(ds, info, "meta")
        self.x1_model(n)

    def exchange_bytes(self, ds, info, tag):
        """What every node receives in the exchange for this dataset: each shard's footer and
        compressed index (agent/exchange.cc), read from the shards' footers."""
        total = 0
        for s in info["shards"]:
            with open(os.path.join(ds, s["file"]), "rb") as f:
                f.seek(-64, os.SEEK_END)
                total += 64 + int.from_bytes(f.read(16)[8:16], "little")
        entries = info["files"] + info["dirs"] + info["symlinks"]
        self.res["phases"][f"exchange_{tag}"] = {"bytes": total, "entries": entries, "per_entry": total / entries}

    def x1_model(self, entries):
        """X1 for ImageNet-22k: bytes per entry of imagenet1k (real names, sizes and hashes; the
        empty files of the meta dataset compress far better), over an allgather on Slurm's
        fan-out-50 tree at 1.25 GB/s per node, the model of the main suite's X1."""
        ex = self.res["phases"].get("exchange_1k")
        if not ex:
            return
        b = ex["per_entry"]
        meta = self.res["phases"].get("exchange_meta", {}).get("per_entry", 0)
        for nodes in (512, 4096):
            depth = max(1, math.ceil(math.log(nodes, 50)))
            secs = depth * b * entries / 1.25e9
            self.row(f"X1-{nodes}", f"metadata exchange, {entries:,} entries, model at {nodes} nodes", None, secs, "s",
                     "≤ 10 s at 4,096 nodes", None, secs <= 10 if nodes == 4096 else None,
                     f"{b:.1f} B/entry (imagenet1k's indexes; the empty-file meta dataset: {meta:.1f}), "
                     f"{b * entries / 2**20:.0f} MiB per node, {depth} tree levels")

    def slurm_job(self, tar):
        """The scale job on the test cluster (tests/slurm/e2e/scale.sh), replicas 1 and all, with the
        node-local directories on tmpfs and on the cluster's disk (issue 31: an EROFS image there)."""
        e2e = os.path.join(HERE, "..", "slurm", "e2e")
        if os.getuid() != 0:
            self.row("J1-scale", "Slurm job at scale", None, None, "s", "report", note="not measured: needs root")
            return
        up = subprocess.run([os.path.join(e2e, "start.sh"), self.build, "ports"], text=True, capture_output=True)
        out = ""
        try:
            if up.returncode != 0:
                raise RuntimeError(f"test cluster did not start: {up.stdout[-1500:]}{up.stderr[-1500:]}")
            for local in ("tmpfs", "disk"):
                p = subprocess.run([os.path.join(e2e, "scale.sh"), self.build, tar], text=True, capture_output=True,
                                   timeout=3600, env=dict(os.environ, SCALE_LOCAL=local))
                log(p.stdout[-3000:])
                if p.returncode != 0:
                    raise RuntimeError(f"scale.sh ({local}) failed: {p.stdout[-3000:]}{p.stderr[-1500:]}")
                out += p.stdout + "\n"
        finally:
            subprocess.run([os.path.join(e2e, "stop.sh"), self.build], capture_output=True)
        for line in out.splitlines():
            if not line.startswith("scale-result: "):
                continue
            r = json.loads(line.split(": ", 1)[1])
            disk = r.get("local") == "disk"
            tag = ("disk-" if disk else "") + f"r{r['replicas']}"
            where = (f"local directory on disk (ext4), node copy {'/'.join(sorted(set(r['copy'].values())))}"
                     if disk else "local directory on tmpfs")
            self.res["phases"][f"slurm_{tag}"] = {k: v for k, v in r.items() if k != "samples"}
            j1, st = r.get("j1_seconds"), r.get("stage_in_seconds")
            self.row(f"J1-scale-{tag}", f"Slurm job, 2 nodes, --fanstore-replicas={r['replicas']}, {where}: job "
                     f"start to first read", None if st is None else st + 1, j1, "s", "≤ stage-in + 1 s", None,
                     None if j1 is None or st is None else j1 <= st + 1,
                     f"stage-in {st} s; each node then read all {r['files'].get('node1')} files in "
                     f"{', '.join(f'{v:.0f} s' for v in r['pass_seconds'].values())}")
            td = r.get("teardown_seconds")
            self.row(f"F3-slurm-{tag}", f"Slurm job teardown, --fanstore-replicas={r['replicas']}, {where} (job end "
                     f"to clean nodes)", None, td, "s", "≤ 10 s, nothing left", None, td is not None and td <= 10)

    def split_session(self):
        """--only split: the dataset split over two agents (mpirun, one copy of each shard), local
        directories on this machine's disk, both "nodes" reading every file at once (split_disk.sh):
        the default mode (as root: an EROFS image that also takes the other node's files as they
        arrive) beside `--image no` (staged files, and a cache file per fetched file), one run each,
        side by side. Issue 31: no file per fetched file on a disk either."""
        tar = self.tar()
        ds = os.path.join(self.disk_work, "imagenet1k.fs")
        sh([self.fanstore, "pack", "-q", tar, ds])
        lst = os.path.join(self.work, "files.list")
        files = [p for p in sh([self.fanstore, "ls", ds]).stdout.split("\n") if p and not p.endswith("/")]
        random.Random(13).shuffle(files)
        with open(lst, "w") as f:
            f.write("\n".join(files) + "\n")
        arms = {}
        for arm, extra in (("image", []), ("files", ["--image", "no"])):
            out = sh([os.path.join(HERE, "split_disk.sh"), self.build, ds, self.fsbench, lst,
                      os.path.join(self.disk_work, f"split-{arm}"), arm, *extra]).stdout
            a = json.loads(out.strip().splitlines()[-1])
            if a["errors"] or len(a["hashes"]) != 1 or a["files"] != len(files):
                raise RuntimeError(f"split {arm}: not every file read right on both nodes: {a}")
            arms[arm] = a
        if arms["image"]["hashes"] != arms["files"]["hashes"]:
            raise RuntimeError("split: the two arms read different bytes")
        self.res["phases"]["split_disk"] = arms
        im, fi = arms["image"], arms["files"]
        n = len(files)
        rate = lambda a: sum(n / s for s in a["pass2"]) / 2  # noqa: E731
        self.row("F1-split-disk", f"first epoch from the agents' start, dataset split over 2 agents (replicas 1), "
                 f"local directories on ext4, both reading all {n:,} files at once: default (EROFS image) "
                 f"against `--image no`", fi["first_epoch"], im["first_epoch"], "s", "report (≤ files arm)",
                 fi["first_epoch"] / im["first_epoch"], im["first_epoch"] <= fi["first_epoch"],
                 f"ready {im['ready']:.1f} s against {fi['ready']:.1f} s; pass on each node "
                 f"{', '.join(f'{s:.0f}' for s in im['pass1'])} s against {', '.join(f'{s:.0f}' for s in fi['pass1'])} s")
        self.row("F2-split-disk", "second pass, dataset split over 2 agents, local directories on ext4: default "
                 "(EROFS image) against `--image no`", rate(fi), rate(im), "files/s", "report (≥ files arm)",
                 rate(im) / rate(fi), rate(im) >= 0.95 * rate(fi), "mean of the two nodes' rates, read at once")
        self.row("F3-split-disk", f"teardown, dataset split over 2 agents, local directories on ext4, {n:,} files "
                 "(SIGTERM to every local directory empty, nothing mounted)", fi["teardown"], im["teardown"], "s",
                 "≤ 10 s, nothing left", fi["teardown"] / im["teardown"], im["teardown"] <= 10 and not im["left"],
                 f"files on node 0's disk after the first epoch (besides the image's mount): "
                 f"{im['node0_files_on_disk']:,} against {fi['node0_files_on_disk']:,} with `--image no`, "
                 f"whose teardown took {fi['teardown']:.0f} s")

    def run_disk(self, sizes=False):
        """--only disk: the disk arm alone (the dataset packed once, untimed). --only sizes: the
        same on 100,000 files of ImageNet's real sizes (issue 28), where `auto` unpacks eagerly."""
        try:
            tar = self.tar("sizes" if sizes else "1k")
            ds = os.path.join(self.disk_work, "imagenet1k.fs")
            sh([self.fanstore, "pack", "-q", tar, ds])
            native = os.path.join(self.disk_work, "native")
            sh([self.fanstore, "extract", "-q", ds, native])
            lst, n = self.reader_order(native)
            if sizes:
                info = self.info(ds)
                mean = info["raw_bytes"] / max(1, info["files"])
                self.disk_session(ds, lst, native, n, "-110k", f" (mean {mean / 1024:.0f} KiB)")
            else:
                self.disk_session(ds, lst, native, n)
        finally:
            drop(self.work)
            drop(self.disk_work)
        return self.res

    def run(self):
        if self.a.only == "arms":
            return self.run_arms()
        if self.a.only in ("disk", "sizes"):
            return self.run_disk(self.a.only == "sizes")
        one_part = {"split": self.split_session, "22k": lambda: self.meta_session(self.meta_22k()),
                    "slurm": lambda: self.slurm_job(self.tar())}.get(self.a.only)
        if one_part:
            try:
                one_part()
            finally:
                drop(self.work)
                drop(self.disk_work)
            return self.res
        try:
            tar = self.tar()
            ds, tree = self.pack(tar)
            lst, n = self.reader_order(tree)
            self.session(ds, lst, tree, n)
            self.other_designs(tar, tree, lst, n)
            drop(tree)
            native = os.path.join(self.disk_work, "native")
            sh([self.fanstore, "extract", "-q", ds, native])
            self.disk_session(ds, lst, native, n)
            drop(native)
            drop(ds)
            if not self.a.skip_22k:
                self.meta_session(self.meta_22k())
            if not self.a.skip_slurm:
                self.slurm_job(tar)
        finally:
            drop(self.work)
            drop(self.disk_work)
        return self.res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--fsbench", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work-base", default="/dev/shm")
    ap.add_argument("--divisor", type=int, default=1, help="divide the file counts (tests of this script)")
    ap.add_argument("--skip-22k", action="store_true")
    ap.add_argument("--skip-slurm", action="store_true")
    ap.add_argument("--only", choices=("all", "disk", "sizes", "slurm", "split", "arms", "22k"), default="all",
                    help="disk: only the disk arm (issue 31: the local directory on the node's disk); "
                         "sizes: the disk arm on 100,000 files of ImageNet's real sizes (issue 28); "
                         "slurm: only the Slurm jobs at scale; split: the dataset split over two agents "
                         "(mpirun), local directories on disk; arms: F1 beside `tar x` to the local "
                         "directory and squashfuse (issue 28); 22k: only the 14.2M-entry session (F3-F5-22k)")
    a = ap.parse_args()
    res = Scale(a).run()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results-scale.json"), "w") as f:
        json.dump(res, f, indent=1)
    log(f"wrote {os.path.join(a.out, 'results-scale.json')}")


if __name__ == "__main__":
    main()
