"""Draws examples:train_vision's test images as a PNG grid: one row per class, --per_class columns.

    tools/bazel run //examples:train_vision -- --steps=1 --dump_dir=/tmp/tv_dump
    /usr/bin/python3 tools/shapes_grid.py /tmp/tv_dump/test docs/examples_shapes.png --per_class 8

The images are read from the run's --dump_dir (test.{json,bin}: "images", normalized as
(v - 0.5) / 0.25 by examples/shapes_dataset.h, and "labels"), so the picture is the C++
generator's own output. Needs numpy and torch (for benchmarks/pytorch/tensor_file.py) but no image
library: the PNG is written with zlib, atomically (temp file + rename).
"""

import argparse
import os
import struct
import sys
import zlib


def png_bytes(rgb):
    """rgb: uint8 array [height, width, 3] -> the bytes of a PNG file."""
    height, width, _ = rgb.shape
    rows = b"".join(b"\0" + rgb[y].tobytes() for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("test", help="PREFIX of the dump's test.{json,bin}")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--per_class", type=int, default=10)
    parser.add_argument("--scale", type=int, default=2, help="pixels per image pixel")
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "benchmarks", "pytorch"))
    import numpy as np
    import tensor_file

    tensors = tensor_file.read_tensors(args.test, names=["images", "labels"])
    images, labels = tensors["images"].numpy(), tensors["labels"].numpy()
    _, _, height, width = images.shape
    classes = int(labels.max()) + 1
    cell_h, cell_w, gap = height * args.scale, width * args.scale, 2
    grid = np.full((classes * (cell_h + gap), args.per_class * (cell_w + gap), 3), 255, np.uint8)
    for c in range(classes):
        picked = np.flatnonzero(labels == c)[:args.per_class]
        for j, i in enumerate(picked):
            pixels = np.clip(images[i] * 0.25 + 0.5, 0, 1).transpose(1, 2, 0)
            pixels = (pixels * 255 + 0.5).astype(np.uint8).repeat(args.scale, 0).repeat(args.scale, 1)
            y, x = c * (cell_h + gap), j * (cell_w + gap)
            grid[y:y + cell_h, x:x + cell_w] = pixels
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(png_bytes(grid))
    os.replace(tmp, args.out)
    print("shapes_grid: %d classes x %d images -> %s" % (classes, args.per_class, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
