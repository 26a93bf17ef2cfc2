#!/usr/bin/env python3
"""Makes the TQ1_0 / TQ2_0 / MXFP4 fixtures under tests/data/quant/ with gguf-py (run by hand).

tests/unit/quant_tq_mxfp4_test.cpp compares Kestrel's scalar code with them bit for bit. Nothing
here uses Kestrel's code.

Dequantization (IQFX files, tq1_0.bin, tq2_0.bin, mxfp4.bin): random but valid blocks (every byte
random: every TQ1_0 byte decodes to 5 trits, every TQ2_0 code, 3 included, to a level; TQ scales
drawn finite as F16, with zero, -0, subnormals and 65504; MXFP4 exponents random plus every edge
case: 0 and 1 (subnormal scales), 2, 127, 254 and 255 (2^127, whose top levels overflow to
infinity), and gguf-py's numpy dequantization of them.

Quantization (KQFX files, tq1_0_quant.bin, tq2_0_quant.bin, mxfp4_quant.bin): F32 rows, gguf-py's
quantize of them and its dequantization of that. The rows mix Gaussian blocks of several
magnitudes with blocks of exact rounding ties (x / amax = +-0.5 for the ternary types; halfway
between two MXFP4 levels), zero blocks, and for MXFP4 blocks whose largest magnitude is a power of
two or one float below it (where floor(log2f(amax)) rounds up).

tq_mxfp4.gguf, written with gguf-py's GGUFWriter: the dequantization fixtures' blocks as 8-row
matrices "tq1_0.weight", "tq2_0.weight", "mxfp4.weight" (GGML type ids 34, 35, 39), so the test
can check that Kestrel's GGUF reader takes llama.cpp's ids, shapes and sizes.

Needs gguf==0.19.0 and numpy (both in /work/main/.venv, or a venv of your own):
  .venv/bin/python scripts/gen_tq_mxfp4_fixtures.py

Fixture formats (little endian) as tests/quant_fixture.h reads them:
  IQFX: magic, u32 version (1), u32 GGML type, u32 blocks B, u32 bytes per block, u32 elements per
        block E; B raw blocks; B*E float32 values dequantized by gguf-py.
  KQFX: magic, u32 version (1), u32 GGML type, u32 blocks B, u32 bytes per block; B raw blocks
        (gguf-py's quantize of the originals); B*E float32 dequantized by gguf-py; B*E float32
        originals.
"""
import os
import struct

import numpy as np
import gguf
from gguf.quants import dequantize, quantize

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant")
Q = gguf.GGMLQuantizationType


def random_f16(rng, count):
    """Finite F16 scales: normal values over several decades, and special ones."""
    d = (rng.normal(0.0, 1.0, count) * 10.0 ** rng.integers(-4, 2, count)).astype(np.float16)
    d[:5] = np.array([0.0, -0.0, 6e-8, -3.5e-5, 65504.0], dtype=np.float16)
    return d


def random_blocks(rng, qtype, count):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (count, block_bytes), dtype=np.uint8)
    if qtype == Q.MXFP4:
        raw[:8, 0] = [0, 1, 2, 127, 254, 255, 126, 128]  # E8M0 exponent first
    else:
        raw[:, -2:] = random_f16(rng, count).view(np.uint8).reshape(count, 2)  # F16 d last
    return raw, block_size, block_bytes


def ternary_rows(rng, blocks):
    x = np.zeros((blocks, 256), dtype=np.float32)
    for b in range(blocks):
        kind = b % 4
        if kind == 0:
            x[b] = rng.normal(0.0, 10.0 ** rng.integers(-3, 2), 256)
        elif kind == 1:  # amax 2: +-1 are exact ties of round(x / amax)
            x[b] = rng.choice([-2.0, -1.0, -0.3, 0.0, 0.7, 1.0, 2.0], 256)
            x[b, 0] = 2.0
        elif kind == 2:
            x[b] = 0.0
        else:  # exactly representable: d * {-1, 0, 1} with d an F16 value
            x[b] = rng.integers(-1, 2, 256) * np.float32(np.float16(0.0371))
            x[b, 5] = np.float32(np.float16(0.0371))
    return x


def mxfp4_rows(rng, blocks):
    levels = np.array([0, 1, 2, 3, 4, 6, 8, 12, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
    x = np.zeros((blocks, 32), dtype=np.float32)
    for b in range(blocks):
        kind = b % 6
        if kind == 0:
            x[b] = rng.normal(0.0, 10.0 ** rng.integers(-6, 4), 32)
        elif kind == 1:  # amax 8 (scale 1): halfway points between neighbouring levels
            x[b] = rng.choice([0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0, -0.5, -1.5, -2.5, -5.0, -10.0], 32)
            x[b, 0] = 8.0
        elif kind == 2:  # exactly representable: scale 2^-7 times levels, amax 12 * 2^-7
            x[b] = rng.choice(levels, 32) * np.float32(2.0 ** -7)
            x[b, 3] = np.float32(12 * 2.0 ** -7)
        elif kind == 3:  # amax a power of two, or the float just below one
            x[b] = rng.normal(0.0, 0.1, 32)
            p = np.float32(2.0 ** int(rng.integers(-20, 20)))
            x[b, 7] = p if b % 12 == 3 else np.nextafter(p, np.float32(0))
            x[b] = np.clip(x[b], -abs(x[b, 7]), abs(x[b, 7]))
        elif kind == 4:
            x[b] = 0.0
        else:  # clipped outliers: values beyond 1.5 * 2^floor(log2 amax)
            x[b] = rng.normal(0.0, 1.0, 32)
            x[b, 9] = 1.9
            x[b, 10] = -1.99
    return x


def write_iqfx(name, qtype, raw, block_size, block_bytes):
    values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    with open(os.path.join(OUT_DIR, name), "wb") as f:
        f.write(b"IQFX")
        f.write(struct.pack("<5I", 1, int(qtype), raw.shape[0], block_bytes, block_size))
        f.write(raw.tobytes())
        f.write(values.astype("<f4").tobytes())
    print(f"{name}: {raw.shape[0]} blocks, {np.count_nonzero(~np.isfinite(values))} non-finite values")


def write_kqfx(name, qtype, original):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = quantize(original, qtype).reshape(-1)
    values = dequantize(raw, qtype).astype(np.float32).reshape(-1)
    blocks = raw.size // block_bytes
    with open(os.path.join(OUT_DIR, name), "wb") as f:
        f.write(b"KQFX")
        f.write(struct.pack("<4I", 1, int(qtype), blocks, block_bytes))
        f.write(raw.tobytes())
        f.write(values.astype("<f4").tobytes())
        f.write(original.astype("<f4").reshape(-1).tobytes())
    print(f"{name}: {blocks} blocks quantized by gguf-py")


def main():
    rng = np.random.default_rng(20250806)
    tensors = []
    for name, qtype, count in [("tq1_0", Q.TQ1_0, 16), ("tq2_0", Q.TQ2_0, 8), ("mxfp4", Q.MXFP4, 64)]:
        raw, block_size, block_bytes = random_blocks(rng, qtype, count)
        write_iqfx(name + ".bin", qtype, raw, block_size, block_bytes)
        tensors.append((name + ".weight", qtype, raw))
    write_kqfx("tq1_0_quant.bin", Q.TQ1_0, ternary_rows(rng, 4))
    write_kqfx("tq2_0_quant.bin", Q.TQ2_0, ternary_rows(rng, 4))
    write_kqfx("mxfp4_quant.bin", Q.MXFP4, mxfp4_rows(rng, 48))
    writer = gguf.GGUFWriter(os.path.join(OUT_DIR, "tq_mxfp4.gguf"), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_TQ2_0)
    for name, qtype, raw in tensors:
        writer.add_tensor(name, raw.reshape(8, -1), raw_dtype=qtype)  # 8 rows, shape from bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
