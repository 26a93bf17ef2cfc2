#!/usr/bin/env python3
"""Makes tests/data/quant/nf4.bin, bitsandbytes' NF4 quantization of random blocks (run by hand).

tests/unit/quant_nf4_test.cpp checks that Kestrel's NF4 quantizer picks bitsandbytes' indices bit
for bit and that its dequantization matches. Nothing here uses Kestrel's code.

bitsandbytes itself needs torch, which the registries this project can reach do not serve as a CPU
wheel, so this is a line-by-line numpy transcription of bitsandbytes 0.50.2's default (CPU) backend,
bitsandbytes/backends/default/ops.py (quantize_4bit, _dequantize_4bit_compute), with the code table
from bitsandbytes/backends/utils.py (_NF4_QUANT_TABLE), for quant_type "nf4", blocksize 64:
  absmax = max |A| per block
  scaled = clamp(A * (1.0 / absmax.clamp(min=1e-38)), -1, 1)          (float32)
  q      = torch.bucketize(scaled, midpoints)  with midpoints = (code[i] + code[i+1]) / 2 (float32)
  dequantized = code[q] * absmax                                       (float32)
torch.bucketize (right=False) is numpy's searchsorted(side="left"): a value equal to a midpoint
takes the lower index.

The blocks: Gaussian at several magnitudes, Student-t (heavy tails, as weights have), a zero block,
and blocks whose scaled values land exactly on the midpoints (absmax 1 and values equal to the
float32 midpoints) or one float either side of them.

Needs numpy: .venv/bin/python scripts/gen_nf4_fixture.py

Format (little endian): b"NF4X", u32 version (1), u32 blocks B; B*64 float32 originals; B*64 uint8
indices; B float32 absmax; B*64 float32 dequantized values.
"""
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant", "nf4.bin")
BLOCK = 64
NF4_CODE = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], dtype=np.float32)


def quantize_4bit(a):
    blocks = a.reshape(-1, BLOCK).astype(np.float32)
    absmax = np.abs(blocks).max(axis=1)
    inverse = (np.float32(1.0) / np.maximum(absmax, np.float32(1e-38))).astype(np.float32)
    scaled = np.clip(blocks * inverse[:, None], np.float32(-1), np.float32(1)).astype(np.float32)
    midpoints = ((NF4_CODE[:-1] + NF4_CODE[1:]) / np.float32(2)).astype(np.float32)
    q = np.searchsorted(midpoints, scaled.reshape(-1), side="left").astype(np.uint8)
    return q.reshape(-1, BLOCK), absmax.astype(np.float32)


def dequantize_4bit(q, absmax):
    return (NF4_CODE[q] * absmax[:, None]).astype(np.float32)


def main():
    rng = np.random.default_rng(2026)
    rows = []
    for scale in (1e-3, 0.02, 0.5, 7.0, 300.0):
        rows += [rng.normal(0.0, scale, BLOCK) for _ in range(6)]
    rows += [rng.standard_t(3, BLOCK) * 0.05 for _ in range(12)]
    rows.append(np.zeros(BLOCK))
    midpoints = ((NF4_CODE[:-1] + NF4_CODE[1:]) / np.float32(2)).astype(np.float32)
    for direction in (0, -1, 1):  # on the midpoints, one float below, one float above
        ties = np.resize(np.concatenate([midpoints, -midpoints]), BLOCK).astype(np.float32)
        if direction:
            ties = np.nextafter(ties, np.float32(direction * np.inf)).astype(np.float32)
        ties[0] = 1.0  # absmax 1: scaled values are the values themselves
        rows.append(ties)
    originals = np.stack(rows).astype(np.float32)
    q, absmax = quantize_4bit(originals)
    dequantized = dequantize_4bit(q, absmax)
    with open(OUT, "wb") as f:
        f.write(b"NF4X" + struct.pack("<II", 1, len(rows)))
        f.write(originals.tobytes())
        f.write(q.astype(np.uint8).tobytes())
        f.write(absmax.tobytes())
        f.write(dequantized.tobytes())
    print(f"wrote {OUT}: {len(rows)} blocks")


if __name__ == "__main__":
    main()
