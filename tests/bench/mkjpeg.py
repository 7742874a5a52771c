#!/usr/bin/python3
"""Small real JPEGs for E1, deterministic: mkjpeg.py DIR N CLASSES SIZE SEED.
Smooth colour patterns plus noise, so that they decode like photos, in CLASSES class directories."""
import os
import sys

import numpy as np
from PIL import Image

root, n, classes, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = np.random.default_rng(seed)
for c in range(classes):
    os.makedirs(f"{root}/c{c:02d}", exist_ok=True)
yy, xx = np.mgrid[0:size, 0:size]
for i in range(n):
    c = i % classes
    a, b, ph = rng.uniform(0.05, 0.3, 3)
    base = np.stack([np.sin(xx * a + ph), np.cos(yy * b + c), np.sin((xx + yy) * (a + b) / 2)], -1)
    img = (base * 90 + 128 + rng.normal(0, 12, (size, size, 3))).clip(0, 255).astype(np.uint8)
    Image.fromarray(img).save(f"{root}/c{c:02d}/{i:06d}.jpg", quality=90)
print(f'{{"files": {n}}}')
