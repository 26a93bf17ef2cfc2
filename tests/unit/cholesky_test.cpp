// The blocked, pool-shared Cholesky and triangular inverse GPTQ uses (calib/cholesky.h) against
// Eigen's own one-thread LLT and a plain triangular solve, on random SPD matrices whose sizes are
// not multiples of the block (and one smaller than a block).
#include <gtest/gtest.h>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "calib/cholesky.h"
#include "core/thread_pool.h"

namespace kestrel {
namespace {

Eigen::MatrixXd random_spd(int64_t n, unsigned seed) {
  std::srand(seed);
  const Eigen::MatrixXd x = Eigen::MatrixXd::Random(n, n + 37);
  Eigen::MatrixXd a = x * x.transpose() / double(n);
  a.diagonal().array() += 0.01;
  return a;
}

TEST(BlockedCholesky, MatchesEigensLltAndItsInverse) {
  ThreadPool pool(2);
  for (int64_t n : {1, 50, 128, 300, 517}) {
    const Eigen::MatrixXd a = random_spd(n, unsigned(n));
    const Eigen::MatrixXd want = Eigen::LLT<Eigen::MatrixXd>(a).matrixL();
    Eigen::MatrixXd got = a;
    ASSERT_TRUE(calib::cholesky_lower_in_place(got, pool, 64)) << n;
    const Eigen::MatrixXd lower = got.triangularView<Eigen::Lower>();
    EXPECT_LT((lower - want).norm(), 1e-12 * want.norm()) << n;
    Eigen::MatrixXd inverse;
    calib::lower_triangular_inverse(got, inverse, pool, 64);  // reads got's lower triangle only
    Eigen::MatrixXd want_inverse = Eigen::MatrixXd::Identity(n, n);
    want.triangularView<Eigen::Lower>().solveInPlace(want_inverse);
    EXPECT_LT((inverse - want_inverse).norm(), 1e-10 * want_inverse.norm()) << n;
    EXPECT_EQ(Eigen::MatrixXd(inverse.triangularView<Eigen::StrictlyUpper>()).norm(), 0.0) << n;
  }
}

TEST(BlockedCholesky, RefusesAMatrixThatIsNotPositiveDefinite) {
  ThreadPool pool(2);
  Eigen::MatrixXd a = random_spd(300, 7);
  a(200, 200) = -1.0;  // a pivot in the second block goes negative
  EXPECT_FALSE(calib::cholesky_lower_in_place(a, pool, 64));
}

}  // namespace
}  // namespace kestrel
