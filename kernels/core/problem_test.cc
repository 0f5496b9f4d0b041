#include "kernels/core/problem.h"

#include <cmath>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace coalesce {
namespace {

// Each change of one field of p makes a different problem; the unchanged
// copy is the same one, with the same hash.
template <typename P>
void ExpectEveryFieldCounts(const P& p,
                            const std::vector<std::function<void(P&)>>& edits) {
  const ProblemEq eq;
  const ProblemHash hash;
  const P copy = p;
  EXPECT_TRUE(eq(Problem(p), Problem(copy)));
  EXPECT_EQ(hash(Problem(p)), hash(Problem(copy)));
  for (size_t i = 0; i < edits.size(); ++i) {
    P q = p;
    edits[i](q);
    EXPECT_FALSE(eq(Problem(p), Problem(q))) << "edit " << i;
    EXPECT_NE(hash(Problem(p)), hash(Problem(q))) << "edit " << i;
  }
}

TEST(ProblemIdentityTest, EveryFieldOfEveryProblemCounts) {
  TransposeProblem t{DType::kFloat32, 2, 30, 50};
  ExpectEveryFieldCounts<TransposeProblem>(
      t, {[](auto& q) { q.dtype = DType::kBFloat16; },
          [](auto& q) { q.batch = 3; }, [](auto& q) { q.rows = 31; },
          [](auto& q) { q.cols = 51; }});
  GemmProblem g;
  g.m = 8;
  g.n = 16;
  g.k = 32;
  ExpectEveryFieldCounts<GemmProblem>(
      g,
      {[](auto& q) { q.dtype = DType::kFloat16; }, [](auto& q) { q.batch = 2; },
       [](auto& q) { q.m = 9; }, [](auto& q) { q.n = 17; },
       [](auto& q) { q.k = 33; }, [](auto& q) { q.trans_a = true; },
       [](auto& q) { q.trans_b = true; }, [](auto& q) { q.alpha = 2.0f; },
       [](auto& q) { q.beta = 0.5f; }, [](auto& q) { q.has_c = true; },
       [](auto& q) { q.allow_tf32 = true; }, [](auto& q) { q.stride_a = 256; },
       [](auto& q) { q.stride_b = 512; }, [](auto& q) { q.stride_c = 128; }});
  PermuteProblem p;
  p.in_shape = {2, 3, 4};
  p.perm = {0, 2, 1};
  ExpectEveryFieldCounts<PermuteProblem>(
      p, {[](auto& q) { q.dtype = DType::kFloat16; },
          [](auto& q) {
            q.in_shape = {2, 3, 5};
          },
          [](auto& q) {
            q.in_shape = {2, 3, 4, 1};
          },
          [](auto& q) {
            q.perm = {1, 0, 2};
          },
          [](auto& q) { q.kind = LayoutKind::kAosToSoa; }});
  GeluLnProblem l;
  l.rows = 16;
  l.hidden = 1024;
  ExpectEveryFieldCounts<GeluLnProblem>(
      l,
      {[](auto& q) { q.dtype = DType::kBFloat16; },
       [](auto& q) { q.rows = 17; }, [](auto& q) { q.hidden = 1025; },
       [](auto& q) { q.has_bias = true; },
       [](auto& q) { q.has_residual = true; },
       [](auto& q) { q.has_gamma = true; }, [](auto& q) { q.has_beta = true; },
       [](auto& q) { q.return_pre_norm = true; },
       [](auto& q) { q.approx = GeluApprox::kTanh; },
       [](auto& q) { q.eps = 1e-6f; }});
}

TEST(ProblemIdentityTest, OpsNeverMatchAndNanParametersMatchThemselves) {
  const ProblemEq eq;
  TransposeProblem t{DType::kFloat32, 1, 4, 4};
  GeluLnProblem l;
  l.rows = 4;
  l.hidden = 4;
  EXPECT_FALSE(eq(Problem(t), Problem(l)));
  GemmProblem g;
  g.m = g.n = g.k = 4;
  g.alpha = std::nanf("");
  EXPECT_TRUE(eq(Problem(g), Problem(g)));
  EXPECT_EQ(ProblemHash()(Problem(g)), ProblemHash()(Problem(g)));
  GemmProblem negative_zero = g;
  negative_zero.alpha = 0.0f;
  g.alpha = -0.0f;
  EXPECT_FALSE(eq(Problem(g), Problem(negative_zero)));  // bit for bit
}

}  // namespace
}  // namespace coalesce
