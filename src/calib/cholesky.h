// Dense factorizations GPTQ needs, in double and shared out over the thread pool: its Hessians
// reach 8960 x 8960 (a 1.5B model's ffn_down), where one thread's Cholesky and triangular
// inverse took most of GPTQ's time.
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include "core/thread_pool.h"

namespace kestrel::calib {

// In place: the lower triangle of the symmetric `a` [n][n] becomes L with L L^T = a (only the
// lower triangle is read; the strict upper triangle is scratch afterwards). Right-looking in blocks of
// `block` columns: the diagonal block factored, the panel below it solved and the trailing lower
// triangle updated, both over the pool. False (a partly overwritten) if a is not positive definite.
bool cholesky_lower_in_place(Eigen::MatrixXd& a, ThreadPool& pool, int64_t block = 128);

// x = L^-1 for the lower triangular L held in the lower triangle of `l` (its strict upper triangle
// ignored); x's strict upper triangle is zero. Block column j of the inverse: X_jj = L_jj^-1, then
// X_ij = -L_ii^-1 (L_i,[j,i) X_[j,i),j) for each block row i below; the block columns on the pool.
void lower_triangular_inverse(const Eigen::MatrixXd& l, Eigen::MatrixXd& x, ThreadPool& pool, int64_t block = 128);

}  // namespace kestrel::calib
