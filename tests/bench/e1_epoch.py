#!/usr/bin/python3
"""E1: one epoch of torchvision ImageFolder + DataLoader(num_workers=2), decode and a small
transform. e1_epoch.py ROOT -> JSON: listing (ImageFolder construction) and iteration times,
timed in the process after `import torch`, and a hash of every decoded pixel and label."""
import json
import sys
import time

import torch
import torchvision
from torchvision import transforms

root = sys.argv[1]
t0 = time.perf_counter()
tf = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(root, transform=tf)
t1 = time.perf_counter()
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2,
                                 generator=torch.Generator().manual_seed(0))
n = pix = lab = 0
for x, y in dl:
    n += x.shape[0]
    pix += int((x * 255).round().to(torch.int64).sum())
    lab += int(y.sum())
t2 = time.perf_counter()
print(json.dumps({"files": n, "classes": len(ds.classes), "list_seconds": t1 - t0, "iterate_seconds": t2 - t1,
                  "seconds": t2 - t0, "hash": f"{pix:x}-{lab}-{n}", "errors": 0}))
