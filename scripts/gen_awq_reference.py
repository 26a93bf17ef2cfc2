#!/usr/bin/env python3
"""Reference results for tests/unit/awq_test.cpp: AWQ's scale search and clipping search as AutoAWQ
runs them (awq/quantize/quantizer.py: _search_best_scale, _compute_best_clip), written straight in
numpy on the layers of gen_gptq_reference.py (same integer generator on both sides, so only the
results are committed), with the two changes Kestrel makes and documents in src/calib/awq.h:
"no scaling" is a candidate of the scale search, and a clip's error is measured with the group's
block of E[x x^T] over all tokens instead of 512 sampled tokens.

The MLP cases: the gate/up group's scale search with its error measured at the MLP's output
through a float down projection, (act(X G'^T) * (X U'^T)) D^T against the float MLP's (AutoAWQ's
module2inspect), SiLU and GELU.

Per case: the layers reading one input [tokens][cols] (their rows, types), optional GQA tying of
the channels (query heads sharing a kv head share a scale), duo scaling on or off, which layers are
clipped. Output: tests/data/awq/reference.json with the chosen ratio, the scales, the output errors
of the chosen scales and of plain rounding, the number of clipped groups, and each layer's bytes
after scaling, clipping and round-to-nearest (Kestrel's INT4 block layout, hex).

Run: .venv/bin/python scripts/gen_awq_reference.py
"""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_gptq_reference import Lcg, make_layer, rtn, dequantize, encode  # noqa: E402

N_GRID = 20
MAX_SHRINK = 0.5


def pseudo_quantize(w, group, symmetric):
    """Round-to-nearest on Kestrel's INT4 grid and back (float32 values)."""
    levels, grids = rtn(w.astype(np.float32), group, symmetric)
    return dequantize(levels, grids, group).astype(np.float32)


def layer_error(w, x, scales, group, symmetric):
    """|| X (Q(W diag s) / s - W)^T ||^2, the weights' arithmetic in float32 as Kestrel does it."""
    scaled = (w * scales[None, :]).astype(np.float32)
    q = pseudo_quantize(scaled, group, symmetric)
    d = (q / scales[None, :]).astype(np.float32) - w
    e = x.astype(np.float64) @ d.astype(np.float64).T
    return float(np.sum(e * e))


def tie(v, tying):
    if tying is None:
        return v
    n_head, n_head_kv, head_dim = tying
    per_kv = n_head // n_head_kv
    return v.reshape(n_head_kv, per_kv, head_dim).mean(axis=1).reshape(-1)


def untie(v, tying):
    if tying is None:
        return v
    n_head, n_head_kv, head_dim = tying
    per_kv = n_head // n_head_kv
    return np.repeat(v.reshape(n_head_kv, 1, head_dim), per_kv, axis=1).reshape(-1)


def mlp_output(gate, up, down, x, gelu):
    """(act(x G^T) * (x U^T)) D^T in double (AutoAWQ's module2inspect = the MLP)."""
    g = x.astype(np.float64) @ gate.astype(np.float64).T
    u = x.astype(np.float64) @ up.astype(np.float64).T
    if gelu:
        a = 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))
    else:
        a = g / (1.0 + np.exp(-g))
    return (a * u) @ down.astype(np.float64).T


def search_scales(layers, x, tying, duo, mlp=None):
    cols = x.shape[1]
    x_mean = np.abs(x.astype(np.float64)).mean(axis=0).astype(np.float32).astype(np.float64)
    w_sum = np.zeros(cols)
    rows = 0
    for w, group, _ in layers:
        a = np.abs(w).reshape(w.shape[0], cols // group, group)
        top = a.max(axis=2, keepdims=True)
        w_sum += (a / (top + np.float32(1e-6))).astype(np.float32).reshape(w.shape[0], cols).astype(np.float64).sum(0)
        rows += w.shape[0]
    w_mean = w_sum / rows
    x_t, w_t = tie(x_mean, tying), tie(w_mean, tying)

    def error(s):
        if mlp is None:
            return sum(layer_error(w, x, s, group, sym) for w, group, sym in layers)
        down, gelu = mlp
        rounded = [(pseudo_quantize((w * s[None, :]).astype(np.float32), group, sym) / s[None, :]).astype(np.float32)
                   for w, group, sym in layers]
        e = mlp_output(rounded[0], rounded[1], down, x, gelu) - reference
        return float(np.sum(e * e))

    if mlp is not None:
        reference = mlp_output(layers[0][0], layers[1][0], mlp[0], x, mlp[1])

    best = (error(np.ones(cols, dtype=np.float32)), -1, np.ones(cols, dtype=np.float32))
    unscaled = best[0]
    for grid in range(N_GRID):
        ratio = grid / N_GRID
        s = x_t ** ratio / (w_t ** (1.0 - ratio) + 1e-4) if duo else x_t ** ratio
        s = np.maximum(s, 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        s = untie(s, tying).astype(np.float32)
        loss = error(s)
        if loss < best[0]:
            best = (loss, grid, s)
    return best[1], best[2], best[0], unscaled


def clip(w, x, scales, group, symmetric):
    """Clamps each (row, group) of the scaled w in place to its best +-max|w| (1 - i/20)."""
    rows, cols = w.shape
    xs = x.astype(np.float64) / scales.astype(np.float64)[None, :]
    clipped = 0
    for b in range(cols // group):
        xg = xs[:, b * group:(b + 1) * group]
        h = xg.T @ xg / x.shape[0]
        for r in range(rows):
            wg = w[r, b * group:(b + 1) * group].copy()
            top = np.abs(wg).max()
            best = (np.inf, 0, wg)
            for step in range(int(MAX_SHRINK * N_GRID)):
                limit = np.float32(float(top) * (1.0 - step / N_GRID))
                c = np.clip(wg, -limit, limit).astype(np.float32)
                q = pseudo_quantize(c[None, :], group, symmetric)[0]
                d = q.astype(np.float64) - wg.astype(np.float64)
                err = float(d @ h @ d)
                if err < best[0]:
                    best = (err, step, c)
            if best[1] > 0:
                w[r, b * group:(b + 1) * group] = best[2]
                clipped += 1
    return clipped


CASES = [
    # name, [(rows, type, group, symmetric, clipped)], tying (n_head, n_head_kv, head_dim) or None, duo, seed
    ("two_layers_asym_g32", [(16, "INT4_ASYM_G32", 32, False, False), (8, "INT4_ASYM_G32", 32, False, True)],
     None, True, 101),
    ("gqa_tied_sym_g64", [(16, "INT4_SYM_G64", 64, True, True)], (8, 2, 32), True, 202),
    ("x_only_asym_g128", [(24, "INT4_ASYM_G128", 128, False, True)], None, False, 303),
]
COLS, TOKENS = 256, 512
# The gate/up group measured at the MLP's output: name, n_ff, type, group, symmetric, n_embd, gelu, seed
MLP_CASES = [
    ("mlp_silu_asym_g32", 64, "INT4_ASYM_G32", 32, False, 48, False, 404),
    ("mlp_gelu_sym_g64", 32, "INT4_SYM_G64", 64, True, 40, True, 505),
]


def main():
    cases = []
    for name, specs, tying, duo, seed in CASES:
        # Every layer from one generator stream: the input from the first call, the weights from each.
        total_rows = sum(s[0] for s in specs)
        w_all, x = make_layer(seed, total_rows, COLS, TOKENS, [])
        layers, r0 = [], 0
        for rows, _, group, sym, _ in specs:
            layers.append((w_all[r0:r0 + rows].copy(), group, sym))
            r0 += rows
        grid, scales, loss, unscaled = search_scales(layers, x, tying, duo)
        encoded, clipped = [], 0
        for (w, group, sym), spec in zip(layers, specs):
            w = (w * scales[None, :]).astype(np.float32)
            if spec[4]:
                clipped += clip(w, x, scales, group, sym)
            levels, grids = rtn(w, group, sym)
            encoded.append(encode(levels, grids, group, sym))
        cases.append({
            "name": name, "seed": seed, "duo_scaling": duo, "tying": list(tying) if tying else None,
            "layers": [{"rows": s[0], "type": s[1], "clip": s[4]} for s in specs],
            "grid": grid, "scales": [float(v) for v in scales], "loss": loss, "loss_unscaled": unscaled,
            "clipped": clipped, "encoded": encoded,
        })
        print(f"{name}: ratio {grid}/{N_GRID}, output error {loss:.6g} vs unscaled {unscaled:.6g}, "
              f"{clipped} groups clipped")
    mlp_cases = []
    for name, n_ff, dtype, group, sym, n_embd, gelu, seed in MLP_CASES:
        # gate and up from one stream (rows 0..n_ff-1 gate, then up), the down projection from seed + 1.
        w_all, x = make_layer(seed, 2 * n_ff, COLS, TOKENS, [])
        down, _ = make_layer(seed + 1, n_embd, n_ff, 1, [])
        layers = [(w_all[:n_ff].copy(), group, sym), (w_all[n_ff:].copy(), group, sym)]
        grid, scales, loss, unscaled = search_scales(layers, x, None, True, (down, gelu))
        mlp_cases.append({"name": name, "seed": seed, "n_ff": n_ff, "type": dtype, "n_embd": n_embd, "gelu": gelu,
                          "grid": grid, "scales": [float(v) for v in scales], "loss": loss,
                          "loss_unscaled": unscaled})
        print(f"{name}: ratio {grid}/{N_GRID}, MLP output error {loss:.6g} vs unscaled {unscaled:.6g}")
    out = pathlib.Path(__file__).resolve().parent.parent / "tests/data/awq/reference.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"cols": COLS, "tokens": TOKENS, "n_grid": N_GRID, "cases": cases,
                               "mlp_cases": mlp_cases}, indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
