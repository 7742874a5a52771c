#!/usr/bin/python3
"""Writes ImageNet-shaped tar archives for the scale benchmarks (tests/bench/scale.py).

  mkimagenet.py 1k OUT.tar [--seed N] [--scale K]
      ImageNet-1k as distributed: train/<wnid>.tar for 1,000 classes of 732-1,300 files each
      (1,281,167 in all), each file 200-3,000 random bytes (JPEGs do not compress either; sizes
      scaled down from ~110 KiB so that the tree fits this machine), plus val/ with 50,000 files.
      --scale K divides the file counts by K (tests).
  mkimagenet.py sizes OUT.tar [--seed N] [--scale K]
      100,000 files at ImageNet's real sizes (issue 28: F1 where `auto` unpacks eagerly): 100 class
      directories of 1,000 files each, log-normal sizes of mean ~110 KiB (median ~94 KiB, 1 KiB to
      8 MiB), random bytes; about 11 GB, as a plain tar of the tree.
  mkimagenet.py 22k-meta - [--seed N] [--scale K]
      ImageNet-22k's namespace: 14,197,122 empty files in 21,841 class directories, as a tar
      stream (headers only) on standard output, for `fanstore pack -`; never written to disk.

Deterministic for a given seed.
"""
import argparse
import io
import os
import random
import sys
import tarfile

IMAGENET_1K_TRAIN = 1_281_167
IMAGENET_1K_CLASSES = 1000
IMAGENET_1K_VAL = 50_000
IMAGENET_22K_FILES = 14_197_122
IMAGENET_22K_CLASSES = 21_841
MTIME = 1_356_998_400  # 2013-01-01
# The sizes dataset: ImageNet-1k's train set is 1,281,167 JPEGs in ~140 GB, a mean of ~110 KiB;
# log-normal with sigma 0.55 and that mean.
SIZES_FILES = 100_000
SIZES_CLASSES = 100
SIZES_SIGMA = 0.55
SIZES_MU = 11.63 - SIZES_SIGMA ** 2 / 2  # ln(112,640 B) - sigma^2 / 2


def class_counts(rng, total, classes, lo, hi):
    """Per-class file counts between lo and hi that sum to total (ImageNet-1k: 732 to 1,300)."""
    counts = [rng.randint(lo, hi) for _ in range(classes)]
    while sum(counts) != total:
        i = rng.randrange(classes)
        d = total - sum(counts)
        step = max(-(counts[i] - lo), min(hi - counts[i], d))
        counts[i] += step if abs(step) <= abs(d) else (1 if d > 0 else -1)
    return counts


def member(name, data, mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), MTIME, mode
    return ti


def blob(rng, lo, hi):
    return rng.randbytes(rng.randint(lo, hi))


def write_1k(out, seed, scale):
    rng = random.Random(seed)
    total = IMAGENET_1K_TRAIN // scale
    lo, hi = max(1, 732 // scale), max(1, 1300 // scale)
    counts = class_counts(rng, total, IMAGENET_1K_CLASSES, lo, hi) if scale == 1 else \
        [max(1, total // IMAGENET_1K_CLASSES)] * IMAGENET_1K_CLASSES
    tmp = out + f".tmp-{os.getpid()}"
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as outer:
        for c, n in enumerate(counts):
            wnid = f"n{1440764 + c * 7919:08d}"
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as inner:
                for k in range(n):
                    data = blob(rng, 200, 3000)
                    inner.addfile(member(f"{wnid}_{k}.JPEG", data), io.BytesIO(data))
            raw = buf.getvalue()
            outer.addfile(member(f"train/{wnid}.tar", raw), io.BytesIO(raw))
            if c % 100 == 99:
                print(f"mkimagenet: {c + 1} classes", file=sys.stderr, flush=True)
        for k in range(IMAGENET_1K_VAL // scale):
            data = blob(rng, 200, 3000)
            outer.addfile(member(f"val/ILSVRC2012_val_{k + 1:08d}.JPEG", data), io.BytesIO(data))
    os.rename(tmp, out)


def write_sizes(out, seed, scale):
    rng = random.Random(seed)
    classes, per_class = SIZES_CLASSES, SIZES_FILES // SIZES_CLASSES // scale
    tmp = out + f".tmp-{os.getpid()}"
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as t:
        for c in range(classes):
            wnid = f"n{1440764 + c * 7919:08d}"
            for k in range(per_class):
                n = int(min(8 << 20, max(1024, rng.lognormvariate(SIZES_MU, SIZES_SIGMA))))
                data = rng.randbytes(n)
                t.addfile(member(f"train/{wnid}/{wnid}_{k}.JPEG", data), io.BytesIO(data))
            if c % 10 == 9:
                print(f"mkimagenet: {c + 1} classes", file=sys.stderr, flush=True)
    os.rename(tmp, out)


def ustar_header(name, size=0, mode=0o644, typeflag=b"0"):
    h = bytearray(512)
    nb = name.encode()
    h[0:len(nb)] = nb
    h[100:108] = b"%07o\0" % mode
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % MTIME
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def write_22k_meta(out, seed, scale):
    rng = random.Random(seed)
    classes = IMAGENET_22K_CLASSES // scale
    total = IMAGENET_22K_FILES // scale
    counts = [total // classes] * classes
    for i in range(total - sum(counts)):
        counts[i] += 1
    rng.shuffle(counts)
    w = sys.stdout.buffer if out == "-" else open(out, "wb")
    # One empty file's header with no name: each member adds its name and its checksum.
    tmpl = ustar_header("")
    tmpl = tmpl[:148] + b" " * 8 + tmpl[156:]
    base, head, tail = sum(tmpl), tmpl[:148], tmpl[156:]
    for c, n in enumerate(counts):
        wnid = f"n{c * 4409 + 1000000:08d}"
        parts = [ustar_header(f"train/{wnid}/", mode=0o755, typeflag=b"5")]
        for k in range(n):
            nb = f"train/{wnid}/{wnid}_{k}.JPEG".encode()
            parts.append(nb + head[len(nb):] + b"%06o\0 " % (base + sum(nb)) + tail)
        w.write(b"".join(parts))
        if c % 2000 == 1999:
            print(f"mkimagenet: {c + 1} classes", file=sys.stderr, flush=True)
    w.write(b"\0" * 1024)
    w.flush()
    if w is not sys.stdout.buffer:
        w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("1k", "sizes", "22k-meta"))
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=2012)
    ap.add_argument("--scale", type=int, default=1)
    a = ap.parse_args()
    {"1k": write_1k, "sizes": write_sizes, "22k-meta": write_22k_meta}[a.kind](a.out, a.seed, a.scale)


if __name__ == "__main__":
    main()
