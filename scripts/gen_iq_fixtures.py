#!/usr/bin/env python3
"""Makes the IQ-format dequantization fixtures under tests/data/quant/ with gguf-py (run by hand).

Random but valid blocks of llama.cpp's IQ4_NL and IQ4_XS (every byte random except the F16
scale, which is drawn finite: normal values of several magnitudes, negatives, subnormals and
zero), and gguf-py's numpy dequantization of them, which tests/unit/quant_iq_test.cpp compares
with Kestrel's scalar dequantizers bit for bit. Nothing here uses Kestrel's code.

It also writes iq4.gguf with gguf-py's GGUFWriter: the same blocks as two matrices,
"iq4_nl.weight" (rows of 256, 8 rows) and "iq4_xs.weight" (rows of 512, 8 rows), GGML type ids
20 and 23, general.file_type 30 (LLAMA_FTYPE_MOSTLY_IQ4_XS), so the test can check that Kestrel's
GGUF reader takes llama.cpp's type ids, shapes and sizes.

Needs gguf==0.19.0 and numpy in a venv:
  python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf==0.19.0 numpy
  /tmp/gguf-venv/bin/python scripts/gen_iq_fixtures.py

Fixture .bin format (little endian): magic b"IQFX", u32 version (1), u32 GGML type id, u32 block
count B, u32 bytes per block, u32 elements per block E, then B blocks of raw bytes, then B*E
float32 values dequantized by gguf-py.
"""
import os
import struct

import numpy as np
import gguf
from gguf.quants import dequantize

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant")

# (file, type, blocks): every block is one row of E elements.
CASES = [("iq4_nl.bin", gguf.GGMLQuantizationType.IQ4_NL, 64),
         ("iq4_xs.bin", gguf.GGMLQuantizationType.IQ4_XS, 16)]


def random_f16_scales(rng, count):
    """Finite F16 scales: mostly normal values over several decades, some special ones."""
    d = (rng.normal(0.0, 1.0, count) * 10.0 ** rng.integers(-4, 2, count)).astype(np.float16)
    d[0] = 0.0
    d[1] = np.float16(-0.0)
    d[2] = np.float16(6e-8)       # smallest subnormal
    d[3] = np.float16(-3.5e-5)    # subnormal
    d[4] = np.float16(65504.0)    # largest finite
    return d


def make_blocks(rng, qtype, count):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (count, block_bytes), dtype=np.uint8)
    raw[:, 0:2] = random_f16_scales(rng, count).view(np.uint8).reshape(count, 2)
    return raw, block_size, block_bytes


def main():
    rng = np.random.default_rng(20240518)
    tensors = []
    for name, qtype, count in CASES:
        raw, block_size, block_bytes = make_blocks(rng, qtype, count)
        values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == count * block_size
        path = os.path.join(OUT_DIR, name)
        with open(path, "wb") as f:
            f.write(b"IQFX")
            f.write(struct.pack("<5I", 1, int(qtype), count, block_bytes, block_size))
            f.write(raw.tobytes())
            f.write(values.astype("<f4").tobytes())
        print(f"{path}: {count} blocks of {qtype.name}, {np.count_nonzero(np.isfinite(values))} finite values")
        tensors.append((name.replace(".bin", ".weight"), qtype, raw))
    writer = gguf.GGUFWriter(os.path.join(OUT_DIR, "iq4.gguf"), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_IQ4_XS)
    for name, qtype, raw in tensors:
        writer.add_tensor(name, raw.reshape(8, -1), raw_dtype=qtype)  # 8 rows, shape from bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
