#!/usr/bin/env python3
"""Importance-weighted squared error of quantized files' tensors against their base.

    quant_weighted_error.py BASE.gguf IMATRIX.gguf CAND1.gguf [CAND2.gguf ...] [--type Q3_K]

For every tensor of the first candidate in --type that has an imatrix entry: the error of each
candidate, sum over rows and columns of importance_c (w - w')^2 (importance = mean x^2, as
llama.cpp's imatrix holds it), and the same with llama.cpp's quantizers' weights
importance_c sqrt(sigma^2 + w^2) (sigma^2 twice the super-block's mean square), each relative to
the first candidate; then the totals. Dequantization is gguf-py's (an independent reference).
Used for the Q3_K_M comparison with llama-quantize in docs/QUANTIZATION.md. Needs numpy and
gguf (the pinned versions of scripts/gen_prequant_fixtures.py).
"""
import argparse

import numpy as np
import gguf
from gguf.quants import dequantize


def load_importance(path):
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    out = {}
    for name, t in tensors.items():
        if name.endswith('.in_sum2'):
            base = name[:-len('.in_sum2')]
            count = float(np.array(tensors[base + '.counts'].data).reshape(-1)[0])
            out[base] = np.array(t.data, dtype=np.float64).reshape(-1) / count
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('base')
    ap.add_argument('imatrix')
    ap.add_argument('candidates', nargs='+')
    ap.add_argument('--type', default='Q3_K')
    a = ap.parse_args()
    qtype = gguf.GGMLQuantizationType[a.type]
    importance = load_importance(a.imatrix)
    base = {t.name: t for t in gguf.GGUFReader(a.base).tensors}
    cands = [{t.name: t for t in gguf.GGUFReader(p).tensors} for p in a.candidates]
    total = np.zeros((len(cands), 2))
    for name, t0 in cands[0].items():
        if t0.tensor_type != qtype or name not in importance:
            continue
        x = dequantize(base[name].data, base[name].tensor_type).astype(np.float64)
        x = x.reshape(-1, x.shape[-1])
        imp = importance[name]
        blocks = x.reshape(x.shape[0], -1, 256)
        sigma2 = 2.0 * (blocks ** 2).mean(-1, keepdims=True)
        llama_w = (imp.reshape(1, -1, 256) * np.sqrt(sigma2 + blocks ** 2)).reshape(x.shape)
        row = np.zeros((len(cands), 2))
        for k, c in enumerate(cands):
            y = dequantize(c[name].data, c[name].tensor_type).astype(np.float64).reshape(x.shape)
            e2 = (x - y) ** 2
            row[k] = [(e2 * imp).sum(), (e2 * llama_w).sum()]
        total += row
        print(name, 'importance:', ' '.join('%.4f' % (row[k, 0] / row[0, 0]) for k in range(len(cands))),
              ' llama weights:', ' '.join('%.4f' % (row[k, 1] / row[0, 1]) for k in range(len(cands))))
    print('TOTAL importance:', ' '.join('%.4f' % v for v in total[:, 0] / total[0, 0]),
          ' llama weights:', ' '.join('%.4f' % v for v in total[:, 1] / total[0, 1]))


if __name__ == '__main__':
    main()
