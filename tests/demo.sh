#!/usr/bin/env bash
# The README's first command: install, build, make a small sample dataset, pack it, and show
# what FanStore does with it. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing dependencies"
tests/install-deps.sh
say "building"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 2>&1 | grep -E 'error|warning' || true
F=$root/build/bin/fanstore

work=/var/tmp/fanstore-demo
rm -rf "$work"; mkdir -p "$work"
say "generating a sample image dataset in $work/sample (JPEGs in class folders)"
/usr/bin/python3 - "$work/sample" <<'PY'
import os, sys, random
from PIL import Image
root = sys.argv[1]
random.seed(7)
for c in range(4):
    d = os.path.join(root, "train", f"class{c}")
    os.makedirs(d)
    for i in range(25):
        img = Image.new("RGB", (64, 64), (c * 60, random.randrange(256), i * 10))
        img.save(os.path.join(d, f"img{i:03d}.jpg"), quality=90)
os.makedirs(os.path.join(root, "meta"))
with open(os.path.join(root, "meta", "labels.txt"), "w") as f:
    f.write("\n".join(f"class{c}" for c in range(4)) + "\n")
PY
say "fanstore pack"
"$F" pack "$work/sample" "$work/sample.fs" --shard-size 64K
say "fanstore info"
"$F" info "$work/sample.fs"
say "fanstore verify"
"$F" verify "$work/sample.fs"
say "fanstore ls sample.fs train/class0 (first 5)"
"$F" ls -l "$work/sample.fs" train/class0 | head -5
say "fanstore cat sample.fs meta/labels.txt"
"$F" cat "$work/sample.fs" meta/labels.txt
say "fanstore extract, then diff -r against the source"
"$F" extract "$work/sample.fs" "$work/restored" -q
diff -r "$work/sample" "$work/restored" && echo "identical"
