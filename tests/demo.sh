#!/usr/bin/env bash
# The README's first command: install, build, make a small sample dataset, pack it, start a
# 2-node Slurm test cluster, run a real `sbatch --fanstore=...` job whose tasks read the dataset
# through the interception library on both nodes, and print what happened. Run as root on
# Debian 12.
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
say "fanstore run: one torchvision ImageFolder + DataLoader epoch on this machine, no Slurm"
"$F" run "$work/sample.fs" --mount /fanstore/sample -- /usr/bin/python3 -c '
import torch, torchvision
from torchvision import transforms
ds = torchvision.datasets.ImageFolder("/fanstore/sample/train", transform=transforms.ToTensor())
n = sum(x.shape[0] for x, _ in torch.utils.data.DataLoader(ds, batch_size=10, num_workers=2))
print(f"one epoch: {n} images in {len(ds.classes)} classes read through FanStore")'
say "a real Slurm job: sbatch --fanstore=$work/sample.fs on a 2-node test cluster"
chmod -R a+rX "$work"
tests/slurm/demo_job.sh build "$work/sample.fs"
say "done: the job read every file through FanStore on both nodes, and nothing was left behind"
