#!/usr/bin/python3
"""M2: os.scandir of every directory and os.walk of the tree, timed in the process.
m2_walk.py ROOT PASSES -> JSON with entries per loop, the seconds of each loop and a hash of
what was listed (per directory: the sorted names and whether each is a file), so that both arms
provably listed the same tree. Nothing large is kept alive across the loops, so that Python's
garbage collector costs the same in both arms."""
import gc
import hashlib
import json
import os
import sys
import time

root, passes = sys.argv[1], int(sys.argv[2])
dirs = sorted(e.path for e in os.scandir(root) if e.is_dir())


def scandir_loop():
    h = hashlib.sha1()
    n = 0
    for p in range(passes):
        for d in dirs:
            names = []
            with os.scandir(d) as it:
                for e in it:
                    names.append((e.name, e.is_file()))
            n += len(names)
            if p == 0:  # dirs is sorted, so the order of the updates is the same in both arms
                h.update(repr((os.path.relpath(d, root), sorted(names))).encode())
    return n, h.hexdigest()


def walk_loop():
    seen = []  # one digest per directory; os.walk's order follows the listing order, so sort them
    n = 0
    for p in range(passes):
        for d, subdirs, files in os.walk(root):
            n += len(subdirs) + len(files)
            if p == 0:
                seen.append(hashlib.sha1(repr((os.path.relpath(d, root), sorted(subdirs), sorted(files))).encode()).hexdigest())
    return n, hashlib.sha1("".join(sorted(seen)).encode()).hexdigest()


gc.collect()
t0 = time.perf_counter()
n_scan, h_scan = scandir_loop()
t1 = time.perf_counter()
gc.collect()
t2 = time.perf_counter()
n_walk, h_walk = walk_loop()
t3 = time.perf_counter()
print(json.dumps({"entries": n_scan, "walk_entries": n_walk, "scandir_seconds": t1 - t0, "walk_seconds": t3 - t2,
                  "hash": f"{h_scan}-{h_walk}", "errors": 0}))
