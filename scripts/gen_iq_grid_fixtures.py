#!/usr/bin/env python3
"""Makes the dequantization fixtures of llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and
IQ1_M under tests/data/quant/ with gguf-py (run by hand; mirrors gen_iq_fixtures.py, same .bin format
"IQFX", read by tests/quant_fixture.h).

Blocks are random bytes made valid: the F16 d (IQ1_M: the four top nibbles of its scale words) is
drawn finite as in gen_iq_fixtures.py, and for IQ2_XXS, IQ2_XS, IQ2_S and IQ1_S group g of the file
(32 groups of 8 per block) takes grid index g mod (grid size), so every entry of iq2xxs_grid,
iq2xs_grid, iq2s_grid and iq1s_grid is decoded at least once; IQ1_M (iq1s_grid again) keeps random
indices. gguf-py's numpy dequantization of them is what tests/unit/quant_iq_grid_test.cpp compares
Kestrel's scalar dequantizers with, bit for bit.

With LLAMA_GGML_BASE=path/to/libggml-base.so set, it also checks that ggml's own
dequantize_row_iq* gives the same bits as gguf-py on these blocks (they did for llama.cpp 0.25.3's
ggml when these fixtures were made).

It also writes iq_grid.gguf with gguf-py's GGUFWriter: each fixture's blocks as an 8-row matrix
named like the file ("iq2_xxs.weight", ...), general.file_type 19 (LLAMA_FTYPE_MOSTLY_IQ2_XXS).

  /work/main/.venv/bin/python scripts/gen_iq_grid_fixtures.py     (gguf==0.19.0, numpy)
"""
import ctypes
import os
import struct

import numpy as np
import gguf
from gguf.quants import dequantize

from gen_iq_fixtures import OUT_DIR, random_f16_scales

T = gguf.GGMLQuantizationType
# (file, type, blocks, grid size or 0 for random indices)
CASES = [("iq2_xxs.bin", T.IQ2_XXS, 16, 256),
         ("iq2_xs.bin", T.IQ2_XS, 16, 512),
         ("iq2_s.bin", T.IQ2_S, 32, 1024),
         ("iq1_s.bin", T.IQ1_S, 64, 2048),
         ("iq1_m.bin", T.IQ1_M, 16, 0)]


def set_indices(qtype, raw, grid_size):
    """Group g of the file gets grid index g mod grid_size (layouts: src/quant/iq_grids.h)."""
    count = raw.shape[0]
    idx = (np.arange(count * 32) % grid_size).reshape(count, 8, 4)  # [block][sub-block][group]
    if qtype == T.IQ2_XXS:  # sub-block j: index bytes at 2 + 8j .. 2 + 8j + 3
        for j in range(8):
            raw[:, 2 + 8 * j:2 + 8 * j + 4] = idx[:, j, :]
    elif qtype == T.IQ2_XS:  # uint16 qs[4j + l] at 2 + 2 (4j + l): index in bits 0-8
        qs = raw[:, 2:66].copy().view(np.uint16).reshape(count, 8, 4)
        qs = (qs & np.uint16(0xfe00)) | idx.astype(np.uint16)
        raw[:, 2:66] = qs.reshape(count, 32).view(np.uint8)
    elif qtype == T.IQ2_S:  # qs[4j + l] low 8 bits, qh[j] bits 2l, 2l + 1 the top 2
        raw[:, 2:34] = (idx & 255).reshape(count, 32)
        qh = np.zeros((count, 8), dtype=np.uint8)
        for l in range(4):
            qh |= ((idx[:, :, l] >> 8) << (2 * l)).astype(np.uint8)
        raw[:, 66:74] = qh
    elif qtype == T.IQ1_S:  # qs[4j + l] low 8 bits, qh[j] bits 3l .. 3l + 2 the top 3
        raw[:, 2:34] = (idx & 255).reshape(count, 32)
        qh = raw[:, 34:50].copy().view(np.uint16) & np.uint16(0xf000)
        for l in range(4):
            qh |= ((idx[:, :, l] >> 8) << (3 * l)).astype(np.uint16)
        raw[:, 34:50] = qh.view(np.uint8)


def make_blocks(rng, qtype, count, grid_size):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (count, block_bytes), dtype=np.uint8)
    d = random_f16_scales(rng, count).view(np.uint16)
    if qtype == T.IQ1_M:  # d's bits 4w .. 4w + 3 are the top nibble of scale word w
        words = raw[:, 48:56].copy().view(np.uint16) & np.uint16(0x0fff)
        for w in range(4):
            words[:, w] |= ((d >> (4 * w)) & 15) << 12
        raw[:, 48:56] = words.view(np.uint8)
    else:
        raw[:, 0:2] = d.view(np.uint8).reshape(count, 2)
    if grid_size:
        set_indices(qtype, raw, grid_size)
    return raw, block_size, block_bytes


def check_with_ggml(qtype, raw, values):
    lib_path = os.environ.get("LLAMA_GGML_BASE")
    if not lib_path:
        return
    fn = getattr(ctypes.CDLL(lib_path), "dequantize_row_" + qtype.name.lower())
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    blocks = np.ascontiguousarray(raw)
    out = np.zeros(values.size, dtype=np.float32)
    fn(blocks.ctypes.data, out.ctypes.data, out.size)
    assert np.array_equal(out.view(np.uint32), values.view(np.uint32)), f"ggml and gguf-py differ on {qtype.name}"
    print(f"  ggml's dequantize_row_{qtype.name.lower()} agrees bit for bit")


def main():
    rng = np.random.default_rng(20250611)
    tensors = []
    for name, qtype, count, grid_size in CASES:
        raw, block_size, block_bytes = make_blocks(rng, qtype, count, grid_size)
        values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == count * block_size and np.all(np.isfinite(values))
        check_with_ggml(qtype, raw, values)
        path = os.path.join(OUT_DIR, name)
        with open(path, "wb") as f:
            f.write(b"IQFX")
            f.write(struct.pack("<5I", 1, int(qtype), count, block_bytes, block_size))
            f.write(raw.tobytes())
            f.write(values.astype("<f4").tobytes())
        print(f"{os.path.normpath(path)}: {count} blocks of {qtype.name}")
        tensors.append((name.replace(".bin", ".weight"), qtype, raw))
    writer = gguf.GGUFWriter(os.path.join(OUT_DIR, "iq_grid.gguf"), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_IQ2_XXS)
    for name, qtype, raw in tensors:
        writer.add_tensor(name, raw.reshape(8, -1), raw_dtype=qtype)  # 8 rows, shape from bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
