// The importance matrix of a model: for every weight matrix, the sum over calibration tokens of
// each input channel's squared activation, and how many tokens were summed. Read and written in
// llama.cpp's imatrix GGUF format (general.type = "imatrix"; per matrix "NAME.in_sum2" F32
// [n_in, n_mat] and "NAME.counts" F32 [1, n_mat]; imatrix.datasets / chunk_count / chunk_size), so
// a file from `kestrel imatrix` works in llama-quantize and one from llama-imatrix in
// `kestrel quantize`. llama.cpp's older binary .dat format is read too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kestrel {

namespace gguf {
class GgufFile;
}

struct ImatrixEntry {
  std::vector<double> sum2;     // [n_mat][n_in]: sum of x_c^2 over the counted tokens
  std::vector<int64_t> counts;  // [n_mat]: tokens counted (n_mat > 1 only for MoE experts)
  int64_t n_in() const { return counts.empty() ? 0 : int64_t(sum2.size() / counts.size()); }
  // Per-channel mean of x^2 for matrix `mat`: the importance llama.cpp's quantizers weight by (all
  // 1 for a matrix with count 0: an expert no calibration token reached, as llama-quantize reads it).
  std::vector<float> mean(int64_t mat = 0) const;
};

struct ImportanceMatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight name, e.g. "blk.0.attn_q.weight"
  // Entries fit_imatrix made or changed, and how, in words (by weight name; not saved).
  std::map<std::string, std::string> derived;
  std::vector<std::string> datasets;
  int64_t chunk_count = 0;
  int64_t chunk_size = 0;
};

void save_imatrix(const ImportanceMatrix& m, const std::string& path);
// Either format; a clear error for anything else or a malformed file.
ImportanceMatrix load_imatrix(const std::string& path);
// `m` fitted to `model`: every entry must name a matrix of `model` with rows of n_in values (an
// imatrix made for another model is an error naming the first tensor that differs), and where the
// file gives one count for all the matrices of a 3-D tensor (llama.cpp's per-head attn_k_b and
// attn_v_b of latent attention; any 3-D tensor in its legacy .dat format) the count is shared out
// over them, so every entry has one count per matrix. The token embedding's entry is derived
// where `m` has none (add_token_embedding_importance).
ImportanceMatrix fit_imatrix(const ImportanceMatrix& m, const gguf::GgufFile& model, const std::string& imatrix_name);

// The token embedding's importance. A lookup has no input activations: llama-imatrix records no
// entry for it, `kestrel imatrix` only the input of a head tied to it (the embedding's role as the
// output head). Its row e goes first into a norm whose output is gamma * e / rms(e): an error d_c
// in channel c reaches the first layer's matrices as gamma_c d_c / rms(e), so gamma_c^2 is the
// channel's weight for the lookup (a floor of 1e-3 of the mean keeps every channel's error
// counted; gamma from "token_embd_norm.weight", else "blk.0.attn_norm.weight", F32 or F16 of n_embd
// values). Where `m` has no "token_embd.weight" entry, gamma^2 becomes it; where it has one and the
// model's head is tied (no output.weight), the entry is the head's and the two roles are summed,
// each scaled to mean 1 (on Gemma 3 270M's IQ4_NL embedding: mean KLD 0.0395 against 0.0451 with
// gamma^2 alone, 0.0417 with the head's alone; docs/QUANTIZATION.md); an entry of an untied model
// stays as it is. Returns what it did, in words (also in m.derived), or "" (nothing: no embedding,
// no such norm, an untied model's entry).
std::string add_token_embedding_importance(ImportanceMatrix& m, const gguf::GgufFile& model);

}  // namespace kestrel
