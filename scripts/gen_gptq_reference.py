#!/usr/bin/env python3
"""Reference results for tests/unit/gptq_test.cpp: GPTQ as the paper states it (Frantar et al.
2022, Algorithm 1, without lazy batches: every column's error is spread over all later columns at
once), written straight in numpy float64, on small layers whose weights and inputs both sides make
from the same integer generator (so only the results are committed).

The grid is Kestrel's INT4 per-group format (x = d*q + m asymmetric, x = d*(q-8) symmetric, d and m
rounded to F16 as stored, a group's d and m chosen as the format's round-to-nearest quantizer does);
act-order uses static groups (each column keeps its original group's grid, chosen from the
unquantized weights). Output: tests/data/gptq/reference.json with, per case, the encoded rows (hex,
Kestrel's block layout) and the proxy losses sum_r (w_r - q_r)^T H (w_r - q_r) of GPTQ and RTN.

Run: .venv/bin/python scripts/gen_gptq_reference.py
"""
import json
import pathlib

import numpy as np

MASK = (1 << 64) - 1


class Lcg:
    """Knuth's MMIX LCG; uniform() uses the top 53 bits. Mirrored in gptq_test.cpp."""

    def __init__(self, seed):
        self.state = seed & MASK

    def uniform(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & MASK
        return float(self.state >> 11) * (1.0 / 9007199254740992.0)

    def bell(self):
        # Irwin-Hall: three uniforms, centred; exact float64 ops, same on both sides.
        return (self.uniform() + self.uniform() + self.uniform() - 1.5) * 2.0


def make_layer(seed, rows, cols, tokens, dead):
    g = Lcg(seed)
    w = np.array([[g.bell() * 0.05 for _ in range(cols)] for _ in range(rows)], dtype=np.float64)
    # Some rows get an outlier weight, as real layers have.
    for r in range(0, rows, 5):
        w[r, (r * 7) % cols] = 0.4
    w = w.astype(np.float32)
    # Inputs with channel scales (a few channels 8x larger) and neighbour correlations:
    # x_c = s_c * (z_c + 0.6 z_{c-1} - 0.3 z_{c+2}) for fresh z per token; dead channels are 0.
    z = np.array([[g.bell() for _ in range(cols + 3)] for _ in range(tokens)], dtype=np.float64)
    scale = np.array([8.0 if c % 11 == 3 else 1.0 + (c % 5) * 0.25 for c in range(cols)])
    x = np.empty((tokens, cols), dtype=np.float64)
    for c in range(cols):
        x[:, c] = scale[c] * (z[:, c + 1] + 0.6 * z[:, c] - 0.3 * z[:, c + 3])
    x[:, dead] = 0.0
    return w, x.astype(np.float32)


def hessian(x):
    x64 = x.astype(np.float64)
    return 2.0 / x.shape[0] * (x64.T @ x64)


def f16(v):
    return np.float32(np.float16(np.float32(v)))


class Grid:
    def __init__(self, values, symmetric):
        values = values.astype(np.float32)
        self.symmetric = symmetric
        if symmetric:
            extreme = values[np.argmax(np.abs(values))]  # first of largest magnitude
            self.d = f16(np.float32(extreme) / np.float32(-8.0))
            self.m = np.float32(0.0)
        else:
            lo, hi = values.min(), values.max()
            self.d = f16((np.float32(hi) - np.float32(lo)) / np.float32(15.0))
            self.m = f16(lo)
        self.inverse = np.float32(1.0) / self.d if self.d != 0 else np.float32(0.0)

    def level(self, x):
        x = np.float32(x)
        if self.symmetric:
            return int(np.clip(np.rint(np.float32(x * self.inverse)), -8, 7)) + 8
        return int(np.clip(np.rint(np.float32(np.float32(x - self.m) * self.inverse)), 0, 15))

    def value(self, level):
        level = int(level)
        if self.symmetric:
            return float(np.float32(self.d * np.float32(level - 8)))
        return float(np.float32(np.float32(self.d * np.float32(level)) + self.m))


def gptq(w, h, group, symmetric, act_order, damp=0.01):
    rows, cols = w.shape
    w = w.astype(np.float64).copy()
    h = h.copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    grids = [[None] * (cols // group) for _ in range(rows)]
    if act_order:
        for r in range(rows):
            for b in range(cols // group):
                grids[r][b] = Grid(w[r, b * group:(b + 1) * group], symmetric)
        perm = np.argsort(-np.diag(h), kind="stable")
    else:
        perm = np.arange(cols)
    w = w[:, perm]
    h = h[np.ix_(perm, perm)]
    h[np.diag_indices(cols)] += damp * np.mean(np.diag(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: U^T U = H^-1
    levels = np.zeros((rows, cols), dtype=np.uint8)
    for i in range(cols):
        col = perm[i]
        for r in range(rows):
            if not act_order and i % group == 0:
                grids[r][col // group] = Grid(w[r, i:i + group], symmetric)
            grid = grids[r][col // group]
            level = grid.level(w[r, i])
            levels[r, col] = level
            e = (w[r, i] - grid.value(level)) / u[i, i]
            w[r, i + 1:] -= e * u[i, i + 1:]
    return levels, grids


def rtn(w, group, symmetric):
    rows, cols = w.shape
    levels = np.zeros((rows, cols), dtype=np.uint8)
    grids = [[None] * (cols // group) for _ in range(rows)]
    for r in range(rows):
        for b in range(cols // group):
            grid = Grid(w[r, b * group:(b + 1) * group], symmetric)
            grids[r][b] = grid
            for k in range(group):
                levels[r, b * group + k] = grid.level(w[r, b * group + k])
    return levels, grids


def dequantize(levels, grids, group):
    rows, cols = levels.shape
    out = np.zeros((rows, cols), dtype=np.float64)
    for r in range(rows):
        for c in range(cols):
            out[r, c] = grids[r][c // group].value(levels[r, c])
    return out


def encode(levels, grids, group, symmetric):
    out = bytearray()
    for r in range(levels.shape[0]):
        for b in range(levels.shape[1] // group):
            g = grids[r][b]
            out += np.float16(g.d).tobytes()
            if not symmetric:
                out += np.float16(g.m).tobytes()
            lv = levels[r, b * group:(b + 1) * group]
            out += bytes(int(lv[k]) | int(lv[k + group // 2]) << 4 for k in range(group // 2))
    return out.hex()


def proxy(w, q, h):
    e = w.astype(np.float64) - q
    return float(np.sum((e @ h) * e))


CASES = [
    # name, type, group, symmetric, act_order, seed, dead channels
    ("asym_g64_in_order", "INT4_ASYM_G64", 64, False, False, 11, []),
    ("sym_g128_act_order", "INT4_SYM_G128", 128, True, True, 22, []),
    ("asym_g32_act_order_dead", "INT4_ASYM_G32", 32, False, True, 33, [5, 100, 201]),
]
ROWS, COLS, TOKENS = 16, 256, 512


def main():
    cases = []
    for name, type_name, group, symmetric, act_order, seed, dead in CASES:
        w, x = make_layer(seed, ROWS, COLS, TOKENS, dead)
        h = hessian(x)
        levels, grids = gptq(w, h, group, symmetric, act_order)
        rtn_levels, rtn_grids = rtn(w, group, symmetric)
        cases.append({
            "name": name, "type": type_name, "act_order": act_order, "seed": seed, "dead": dead,
            "encoded": encode(levels, grids, group, symmetric),
            "rtn_encoded": encode(rtn_levels, rtn_grids, group, symmetric),
            "proxy_loss": proxy(w, dequantize(levels, grids, group), h),
            "proxy_loss_rtn": proxy(w, dequantize(rtn_levels, rtn_grids, group), h),
        })
        print(f"{name}: proxy loss GPTQ {cases[-1]['proxy_loss']:.6g}, RTN {cases[-1]['proxy_loss_rtn']:.6g}")
    out = pathlib.Path(__file__).resolve().parent.parent / "tests/data/gptq/reference.json"
    out.write_text(json.dumps({"rows": ROWS, "cols": COLS, "tokens": TOKENS, "damp": 0.01, "cases": cases},
                              indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
