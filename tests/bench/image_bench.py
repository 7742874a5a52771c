#!/usr/bin/python3
"""The kernel-native read path's building block (issue 31), measured beside the per-file path:
one packed dataset restored on the node's disk as a tree (`fanstore extract`, a file per
dataset file) and as an EROFS image written by FanStore (`fanstore extract --erofs`: the
metadata and one blob), then read and removed. Needs root (mount) and a kernel with file-backed
EROFS (6.12+).

    image_bench.py --build BUILD --fsbench FSBENCH --ds DS.fs --base DIR [--rounds N] [--out JSON]

Per round, in this order (the arms alternate which goes first from round to round):
  tree:  extract (timed) | `echo 2 > drop_caches` | random pass (cold dentries) | warm pass | rm -rf
  image: extract --erofs (timed) | mount(2) of the file | random pass 1 | pass 2 | umount | rm
(with --prewalk, a `find` that stats every name runs from the mount on, beside pass 1)
and once: `cat` of the shards (the data every arm reads first). T_min_cold = cat + the tree's
cold-dentry pass, as issue 31 defines it; the image's first epoch = its extract + mount + pass 1.
Every pass reads every file in the same random order and the hashes must agree.
"""
import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time

libc = ctypes.CDLL("libc.so.6", use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4


def log(msg):
    print(f"[image {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def drop_dentries():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def mount_image(meta, blob, mnt):
    t0 = time.perf_counter()
    if libc.mount(meta.encode(), mnt.encode(), b"erofs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                  f"device={blob}".encode()) != 0:
        raise OSError(ctypes.get_errno(), f"mount {meta}")
    return time.perf_counter() - t0


def umount(mnt):
    t0 = time.perf_counter()
    if libc.umount2(mnt.encode(), 0) != 0:
        raise OSError(ctypes.get_errno(), f"umount {mnt}")
    return time.perf_counter() - t0


def read_pass(fsbench, root, lst):
    r = json.loads(subprocess.run([fsbench, "read", root, lst], check=True, capture_output=True, text=True).stdout)
    if r.get("errors"):
        raise RuntimeError(f"read of {root}: {r}")
    return r


def round_tree(a, lst):
    tree = os.path.join(a.base, "tree")
    s = {"extract": timed([a.fanstore, "extract", "-q", a.ds, tree])}
    drop_dentries()
    cold = read_pass(a.fsbench, tree, lst)
    warm = read_pass(a.fsbench, tree, lst)
    os.sync()
    s.update(cold=cold["seconds"], warm=warm["seconds"], hash=cold["hash"], files=cold["files"])
    s["teardown"] = timed(["rm", "-rf", tree])
    return s


def round_image(a, lst):
    img, mnt = os.path.join(a.base, "img"), os.path.join(a.base, "mnt")
    s = {"extract": timed([a.fanstore, "extract", "--erofs", "-q", a.ds, img])}
    os.makedirs(mnt, exist_ok=True)
    s["mount"] = mount_image(os.path.join(img, "image.erofs"), os.path.join(img, "data.blob"), mnt)
    # --prewalk: one `find` that stats every name (instantiating the inodes) on the spare core,
    # from the mount on, while pass 1 runs.
    walk = subprocess.Popen(["find", mnt, "-links", "0"], stdout=subprocess.DEVNULL) if a.prewalk else None
    try:
        p1 = read_pass(a.fsbench, mnt, lst)
        p2 = read_pass(a.fsbench, mnt, lst)
    finally:
        if walk:
            walk.wait()
        os.sync()
        t = umount(mnt)
    s.update(pass1=p1["seconds"], pass2=p2["seconds"], hash=p1["hash"], files=p1["files"],
             meta_bytes=os.path.getsize(os.path.join(img, "image.erofs")),
             blob_bytes=os.path.getsize(os.path.join(img, "data.blob")))
    s["teardown"] = t + timed(["rm", "-rf", img])
    s["umount"] = t
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--fsbench", required=True)
    ap.add_argument("--ds", required=True, help="a packed dataset")
    ap.add_argument("--base", required=True, help="the node's disk: a directory for the arms (emptied)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="results (JSON)")
    ap.add_argument("--prewalk", action="store_true", help="a stat walk of the image beside pass 1")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("image_bench.py: needs root (mount)")
    a.fanstore = os.path.join(os.path.abspath(a.build), "bin", "fanstore")
    os.makedirs(a.base, mode=0o700, exist_ok=True)
    # The list: every file, in a random order (from the tree, extracted once, untimed).
    probe = os.path.join(a.base, "probe")
    subprocess.run([a.fanstore, "extract", "-q", a.ds, probe], check=True)
    rels = [os.path.relpath(os.path.join(d, f), probe) for d, _, fs in os.walk(probe) for f in fs]
    subprocess.run(["rm", "-rf", probe], check=True)
    random.Random(42).shuffle(rels)
    lst = os.path.join(a.base, "list")
    with open(lst, "w") as f:
        f.write("\n".join(rels) + "\n")
    shards = [os.path.join(a.ds, n) for n in os.listdir(a.ds)]
    res = {"files": len(rels), "rounds": [], "ds": a.ds, "base": a.base}
    for i in range(a.rounds):
        cat = timed(["cat", *shards])  # warm, as the parallel file system's copy is read by both
        order = [("tree", round_tree), ("image", round_image)]
        if i % 2:
            order.reverse()
        r = {"cat": cat}
        for name, fn in order:
            r[name] = fn(a, lst)
            log(f"round {i} {name}: {r[name]}")
        if r["tree"]["hash"] != r["image"]["hash"]:
            raise RuntimeError(f"the arms read different bytes: {r}")
        res["rounds"].append(r)
    med = lambda f: statistics.median(f(r) for r in res["rounds"])  # noqa: E731
    t_min_cold = med(lambda r: r["cat"] + r["tree"]["cold"])
    first_img = med(lambda r: r["image"]["extract"] + r["image"]["mount"] + r["image"]["pass1"])
    first_tree = med(lambda r: r["tree"]["extract"] + r["tree"]["cold"])
    res["summary"] = {
        "t_min_cold": t_min_cold, "first_epoch_image": first_img, "first_epoch_tree_eager": first_tree,
        "first_ratio_image": t_min_cold / first_img, "first_ratio_tree_eager": t_min_cold / first_tree,
        "steady_ratio_image": med(lambda r: r["tree"]["warm"] / r["image"]["pass2"]),
        "teardown_image": med(lambda r: r["image"]["teardown"]), "teardown_tree": med(lambda r: r["tree"]["teardown"]),
        "extract_image": med(lambda r: r["image"]["extract"]), "extract_tree": med(lambda r: r["tree"]["extract"]),
    }
    log(f"summary: {res['summary']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
