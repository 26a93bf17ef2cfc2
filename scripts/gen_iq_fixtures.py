#!/usr/bin/env python3
"""Makes the IQ-format dequantization fixtures under tests/data/quant/ with gguf-py (run by hand).

Random but valid blocks of llama.cpp's IQ4_NL, IQ4_XS, IQ3_XXS and IQ3_S (every byte random
except the F16 scale, which is drawn finite: normal values of several magnitudes, negatives,
subnormals and zero; any other byte is valid in these formats: every grid index, sign and scale
code exists), and gguf-py's numpy dequantization of them, which tests/unit/quant_iq_test.cpp and
quant_iq3_test.cpp compare with Kestrel's scalar dequantizers bit for bit. Nothing here uses
Kestrel's code.

It also writes iq4.gguf with gguf-py's GGUFWriter: the same blocks as two matrices,
"iq4_nl.weight" (rows of 256, 8 rows) and "iq4_xs.weight" (rows of 512, 8 rows), GGML type ids
20 and 23, general.file_type 30 (LLAMA_FTYPE_MOSTLY_IQ4_XS), so the test can check that Kestrel's
GGUF reader takes llama.cpp's type ids, shapes and sizes. iq3.gguf does the same for
"iq3_xxs.weight" and "iq3_s.weight" (rows of 512, 8 rows; type ids 18 and 21, general.file_type 26,
LLAMA_FTYPE_MOSTLY_IQ3_S).

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

# (file, type, blocks): every block is one row of E elements. New cases go last, so the random
# draws of the earlier ones (and their committed files) stay the same.
CASES = [("iq4_nl.bin", gguf.GGMLQuantizationType.IQ4_NL, 64),
         ("iq4_xs.bin", gguf.GGMLQuantizationType.IQ4_XS, 16),
         ("iq3_xxs.bin", gguf.GGMLQuantizationType.IQ3_XXS, 16),
         ("iq3_s.bin", gguf.GGMLQuantizationType.IQ3_S, 16)]
# (gguf file, general.file_type, fixture files whose blocks it holds as 8-row matrices)
GGUFS = [("iq4.gguf", gguf.LlamaFileType.MOSTLY_IQ4_XS, ("iq4_nl.bin", "iq4_xs.bin")),
         ("iq3.gguf", gguf.LlamaFileType.MOSTLY_IQ3_S, ("iq3_xxs.bin", "iq3_s.bin"))]


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


def cover_every_grid_entry(rng, qtype, raw):
    """Rewrites the grid indices of blocks 2.. (blocks 0 and 1 have d = +-0, so every value there
    is zero) so each of the 256 (IQ3_XXS) or 512 (IQ3_S) entries occurs at least once, in a random
    order: the fixtures then check every entry of Kestrel's grids against gguf-py's."""
    if qtype not in (gguf.GGMLQuantizationType.IQ3_XXS, gguf.GGMLQuantizationType.IQ3_S):
        return
    entries = 256 if qtype == gguf.GGMLQuantizationType.IQ3_XXS else 512
    count = raw.shape[0] - 2
    index = np.concatenate([np.arange(entries), rng.integers(0, entries, count * 64 - entries)])
    index = rng.permutation(index).reshape(count, 8, 8)
    raw[2:, 2:66] = (index & 0xff).reshape(count, 64)  # d, then qs[64]: the low 8 bits
    if entries == 512:  # IQ3_S: bit 8 of index k of sub-block j is bit k of qh[j]
        raw[2:, 66:74] = ((index >> 8) << np.arange(8)).sum(axis=2)


def main():
    rng = np.random.default_rng(20240518)
    tensors = {}
    for name, qtype, count in CASES:
        raw, block_size, block_bytes = make_blocks(rng, qtype, count)
        cover_every_grid_entry(rng, qtype, raw)
        values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == count * block_size
        path = os.path.join(OUT_DIR, name)
        with open(path, "wb") as f:
            f.write(b"IQFX")
            f.write(struct.pack("<5I", 1, int(qtype), count, block_bytes, block_size))
            f.write(raw.tobytes())
            f.write(values.astype("<f4").tobytes())
        print(f"{path}: {count} blocks of {qtype.name}, {np.count_nonzero(np.isfinite(values))} finite values")
        tensors[name] = (qtype, raw)
    for gguf_name, file_type, names in GGUFS:
        writer = gguf.GGUFWriter(os.path.join(OUT_DIR, gguf_name), "llama")
        writer.add_file_type(file_type)
        for name in names:
            qtype, raw = tensors[name]
            # 8 rows, shape from bytes
            writer.add_tensor(name.replace(".bin", ".weight"), raw.reshape(8, -1), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


if __name__ == "__main__":
    main()
