#!/usr/bin/python3
"""Writes a tiny ImageFolder tree of JPEGs: ROOT/class_K/img_NNN.jpg with deterministic content."""
import os
import sys

from PIL import Image


def main():
    root, classes, per_class = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            img = Image.new("RGB", (48, 40))
            px = img.load()
            for y in range(40):
                for x in range(48):
                    px[x, y] = ((x * 5 + c * 60) % 256, (y * 6 + i * 7) % 256, (x * y + i) % 256)
            img.save(os.path.join(d, f"img_{i:03d}.jpg"), quality=90)


if __name__ == "__main__":
    main()
