// GPTQ (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers"): quantizes a weight matrix W [rows][cols] one column at a time onto a
// per-group integer grid, and after each column spreads its rounding error over the columns not
// yet quantized, weighted by the inverse of the layer's Hessian H = 2/n X^T X (X: the layer's
// calibration inputs [n][cols]), so that ||X W^T - X Q^T|| rather than ||W - Q|| is minimised.
//
// As in the reference implementation (and AutoGPTQ/GPTQModel): columns of H that no input ever
// touched are dead (weights zeroed), H is dampened by damp_percent x mean(diag H), the upper
// Cholesky factor U of H^-1 drives the updates, and columns are processed in lazy batches of
// block_size (the error of a batch reaches the later columns as one matrix product). With
// act_order the columns go in order of decreasing H diagonal (the most activated first) while
// every column keeps its original group's grid, computed from the unquantized weights before
// the permutation ("static groups"): the result is an ordinary per-group file that inference
// reads without any reordering. Without act_order a group's grid is chosen from the updated
// weights when its first column comes up.
//
// The grids are the target format's own, chosen by its own quantizer (calib/grid_format.h: the
// k-quants' importance-weighted one with half H's diagonal, the imatrix, as importance; Kestrel's INT4
// per-group formats' round-to-nearest), so with a diagonal H GPTQ gives that quantizer's bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace kestrel::calib {

// The dampening `kestrel quantize --method gptq` uses unless told: GPTQ's 0.01 when the calibration
// has at least 4 tokens per column of the widest matrix, else 0.1. With fewer, the Hessian of a
// wide matrix is estimated from too few tokens and GPTQ fits the calibration text instead of the
// model (measured, INT4 g128, 512-token chunks, docs/QUANTIZATION.md: Qwen2.5-Coder-1.5B, 16,384
// tokens for 8,960-wide ffn_down, mean KLD 0.0612 at 0.01 and 0.0472 at 0.1 against RTN's 0.0699;
// Qwen2.5-Coder-0.5B, 16,384 for 4,864, 0.0725 and 0.0737, level; Gemma 3 270M, 65,536 for 2,048,
// 0.1146 and 0.1200).
double default_gptq_damp(int64_t calibration_tokens, int64_t widest_columns);

struct GptqOptions {
  double damp_percent = 0.01;  // dampening: H += damp_percent * mean(diag H) * I
  bool act_order = true;       // columns by decreasing H diagonal, static groups
  bool keep_better = true;     // with the proxy losses measured: return whichever encoding has the
                               // lower one, GPTQ's or the format's own quantizer's
  int64_t block_size = 128;    // lazy batch width in columns: a multiple of the format's block
                               // (raised to it when smaller: Q4_K's 256)
};

struct GptqStats {
  double damp_used = 0.0;    // damp_percent after retries (doubled x10 while H is not positive definite)
  int64_t dead_columns = 0;  // columns no calibration input reached
  // Proxy losses sum_r (w_r - q_r)^T H (w_r - q_r) with the undampened H (what the layer's output
  // error is, over the calibration set), for GPTQ's result and for the format's own quantizer
  // (round-to-nearest; importance-weighted with the imatrix, half H's diagonal, for the k-quants); filled
  // when asked for (it costs as much as GPTQ itself).
  double proxy_loss = 0.0;
  double proxy_loss_baseline = 0.0;
  // The format's own quantizer had the lower output error, and its bytes were returned (only with
  // GptqOptions::keep_better): act-order's static grids, chosen before any error is spread, can
  // be too narrow for the updated weights.
  bool kept_baseline = false;
};

// True for the formats GPTQ can target (calib/grid_format.h's kGptqTargets: the k-quants Q2_K..Q6_K
// and Kestrel's INT4/INT3/INT2 per-group formats).
bool gptq_supports(DType type);

// The Hessian accumulator's product 2/n X^T X over every input it was shown: [cols][cols],
// row-major, symmetric.
struct Hessian {
  int64_t cols = 0;
  int64_t samples = 0;
  std::vector<double> h;
};

// Quantizes w [rows][cols] (row-major) to `type` and returns the encoded rows (rows x
// quant::row_bytes). Rows are independent and are split over the pool's threads. Throws if the
// type is not supported, cols is not a multiple of its group, or H is not positive definite even
// after dampening x1000.
std::vector<uint8_t> gptq_quantize(DType type, std::span<const float> w, int64_t rows, int64_t cols,
                                   const Hessian& hessian, const GptqOptions& options, ThreadPool& pool,
                                   GptqStats* stats = nullptr, bool measure_proxy_loss = false);

}  // namespace kestrel::calib
