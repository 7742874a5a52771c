#!/usr/bin/python3
"""One epoch of torchvision ImageFolder + DataLoader(num_workers=2) over ROOT.

Prints one line: `EPOCH samples=N classes=C sum=S`, where S is the sum of all pixel values of all images
(as float64, rounded) so that two runs over the same images print the same line."""
import sys

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root = sys.argv[1]
    ds = datasets.ImageFolder(root, transform=transforms.ToTensor())
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)
    samples, total = 0, 0.0
    for images, labels in loader:
        samples += images.shape[0]
        total += float(images.double().sum())
    print(f"EPOCH samples={samples} classes={len(ds.classes)} sum={total:.3f}", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
