#include "model/layers/dense.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "model/kernels/bf16_gemm.h"

namespace attn {
namespace {

void ExpectMatchesLinear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const torch::Tensor expected = torch::nn::functional::linear(x, w, b);
  const torch::Tensor got = Dense(x, w, b);
  ASSERT_EQ(got.sizes(), expected.sizes());
  // Sums of 160 unit-normal products reach |y| ~ 40; two summation orders
  // differ by a few 1e-5 there. A wrong element is off by O(1).
  EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-4))
      << "x " << x.sizes() << " max difference " << (got - expected).abs().max().item<float>();
}

// Row counts around the packed product's tiles and its slices of
// kDensePackedMaxRows rows (one, two and three slices, the last full or
// not), or without AVX2 on both sides of the switch between row-by-row
// matrix-vector products (1 to 6 rows) and OpenBLAS's matrix product, for a
// small weight and one larger than L2.
TEST(Dense, EqualsLinearForEveryRowCountAndWeightSize) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (int64_t out : {40, 4096}) {
    const torch::Tensor w = torch::randn({out, 160}), b = torch::randn({out});
    for (int64_t rows : {1, 2, 5, 6, 7, 12, 13, 32, 33, 64, 65, 200, 256, 257, 512, 600}) {
      ExpectMatchesLinear(torch::randn({rows, 160}), w, b);
      ExpectMatchesLinear(torch::randn({rows, 160}), w, {});
    }
  }
}

// Inference tensors keep no version counter, so Dense never packs them; one
// row of them takes the matrix-vector product.
TEST(Dense, InferenceWeightsTakeTheUnpackedPaths) {
  c10::InferenceMode inference;
  torch::manual_seed(8);
  const torch::Tensor w = torch::randn({40, 160}), b = torch::randn({40});
  ASSERT_TRUE(w.is_inference());
  for (int64_t rows : {1, 5}) {
    ExpectMatchesLinear(torch::randn({rows, 160}), w, b);
    ExpectMatchesLinear(torch::randn({rows, 160}), w, {});
  }
}

TEST(Dense, TakesBatchedAndStridedInputs) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const torch::Tensor w = torch::randn({48, 24}), b = torch::randn({48});
  ExpectMatchesLinear(torch::randn({3, 5, 24}), w, b);                  // [B, T, in]
  ExpectMatchesLinear(torch::randn({24, 7}).t(), w, b);                 // columns of a matrix
  ExpectMatchesLinear(torch::randn({6, 30}).narrow(1, 3, 24), w, b);    // rows with a gap
  ExpectMatchesLinear(torch::randn({300, 30}).narrow(1, 3, 24), w, b);  // in two slices
  ExpectMatchesLinear(torch::randn({5, 48}).t().narrow(0, 0, 24).t(), w.t().contiguous().t(), b);
}

TEST(Dense, AWeightWrittenInPlaceIsRepacked) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  torch::Tensor w = torch::randn({64, 32});
  const torch::Tensor x = torch::randn({8, 32});
  ExpectMatchesLinear(x, w, {});  // packs w
  w.mul_(-2.0f);
  ExpectMatchesLinear(x, w, {});
  w.copy_(torch::randn({64, 32}));
  ExpectMatchesLinear(x, w, {});
}

TEST(Dense, ANewWeightNeverReadsAnOldOnesPacking) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({4, 32});
  for (int i = 0; i < 20; ++i) {  // the allocator hands the same memory back
    const torch::Tensor w = torch::randn({64, 32});
    ExpectMatchesLinear(x, w, {});
  }
}

TEST(Dense, MismatchedShapesFailAsLinearDoes) {
  torch::NoGradGuard no_grad;
  EXPECT_THROW(Dense(torch::randn({4, 31}), torch::randn({64, 32})), c10::Error);
  EXPECT_THROW(Dense(torch::randn({4, 32}), torch::randn({64, 32}), torch::randn({63})),
               c10::Error);
}

// Every column of the kept tokens and the trailing columns of the others
// equal Linear's, whichever path the shapes take: whole panels of leading
// columns (skipped for the dropped tokens), a leading width inside a panel,
// and a transposed input (both computed in full).
TEST(Dense, LeadingColumnsForTheLastTokensEqualLinearWhereSpecified) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  torch::nn::Linear layer(48, 3 * 64);
  for (int64_t leading : {32, 64, 40}) {
    for (int64_t batch : {1, 3}) {
      for (int64_t keep : {0, 1, 13, 37}) {
        for (bool transposed : {false, true}) {
          const torch::Tensor x = transposed ? torch::randn({batch, 48, 37}).transpose(1, 2)
                                             : torch::randn({batch, 37, 48});
          const torch::Tensor expected =
              torch::nn::functional::linear(x, layer->weight, layer->bias);
          const torch::Tensor got = DenseLeadingColumnsForLast(x, layer, leading, keep);
          ASSERT_EQ(got.sizes(), expected.sizes());
          const auto trailing = [&](const torch::Tensor& y) {
            return y.narrow(2, leading, 192 - leading);
          };
          const auto kept = [&](const torch::Tensor& y) { return y.narrow(1, 37 - keep, keep); };
          EXPECT_TRUE(torch::allclose(trailing(got), trailing(expected), 1e-5, 1e-4))
              << "leading " << leading << " batch " << batch << " keep " << keep;
          EXPECT_TRUE(torch::allclose(kept(got), kept(expected), 1e-5, 1e-4))
              << "leading " << leading << " batch " << batch << " keep " << keep;
        }
      }
    }
  }
}

TEST(Dense, ProductsAutogradTracksKeepTheirGradients) {
  torch::manual_seed(7);
  const torch::Tensor w = torch::randn({16, 8}, torch::requires_grad());
  const torch::Tensor x = torch::randn({4, 8});
  Dense(x, w).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(w.grad(), x.sum(0).expand({16, 8})));
}

// QuantizeWeightInt8 writes the dequantised weights back, so the float
// paths compute with the same weights as the int8 copy; Dense multiplies
// that copy for every row count, rounding each row of activations to int8
// (kernels::Int8Gemm): within half an activation step of Linear over the
// written weight, |y - x W^T - b| <= (max |x| / 254) sum |W[o, :]|, and
// each row's result is the same whatever rows are batched with it.
TEST(DenseInt8, EveryRowCountIsWithinTheActivationsRoundingOfTheDequantisedProduct) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  const torch::Tensor original = torch::randn({96, 160}) * 0.05;
  torch::Tensor w = original.clone();
  const torch::Tensor b = torch::randn({96});
  const int64_t bytes = QuantizeWeightInt8(w);
  EXPECT_EQ(bytes, 96 * 160 + 96 * 4);
  ASSERT_TRUE(HasInt8Copy(w));
  // Within half a step of the original, per output channel.
  const torch::Tensor step = original.abs().amax(1, true) / 127;
  EXPECT_TRUE(((w - original).abs() <= step * 0.5 + 1e-7).all().item<bool>());
  EXPECT_FALSE(w.equal(original));
  const torch::Tensor row_sums = w.abs().sum(1).to(torch::kDouble);  // [96]
  const torch::Tensor lone = torch::randn({1, 160});
  const torch::Tensor lone_y = Dense(lone, w, b);
  for (int64_t rows : {1, 2, 3, 7, 32, 33, 300}) {
    SCOPED_TRACE(rows);
    const torch::Tensor x = torch::cat({torch::randn({rows - 1, 160}), lone});
    const torch::Tensor got = Dense(x, w, b).to(torch::kDouble);
    const torch::Tensor exact = torch::nn::functional::linear(
        x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
    const torch::Tensor bound =
        x.abs().amax(1, true).to(torch::kDouble) / 254 * row_sums.unsqueeze(0) * 1.0001 + 1e-5;
    EXPECT_TRUE(((got - exact).abs() <= bound).all().item<bool>())
        << "max excess " << ((got - exact).abs() - bound).max().item<double>();
    EXPECT_GT((got - exact).abs().max().item<double>(), 1e-5);  // the activations were rounded
    EXPECT_TRUE(Dense(x, w, b)[rows - 1].equal(lone_y[0]));     // whatever rows are beside it
    // Batched as [2, rows, 160], without a bias.
    const torch::Tensor two = torch::stack({x, x});
    EXPECT_TRUE(Dense(two, w, {}).select(0, 1).equal(Dense(x, w, {})));
  }
}

TEST(DenseInt8, AWeightWrittenAgainDropsItsInt8Copy) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  torch::Tensor w = torch::randn({40, 160});
  QuantizeWeightInt8(w);
  ASSERT_TRUE(HasInt8Copy(w));
  w.mul_(2.0);  // e.g. new weights loaded in place
  EXPECT_FALSE(HasInt8Copy(w));
  ExpectMatchesLinear(torch::randn({1, 160}), w, {});
  EXPECT_FALSE(HasInt8Copy(torch::randn({40, 160})));
}

TEST(DenseInt8, RefusesWhatItCannotQuantise) {
  torch::NoGradGuard no_grad;
  EXPECT_THROW(QuantizeWeightInt8(torch::randn({4, 4}, torch::kDouble)), c10::Error);
  EXPECT_THROW(QuantizeWeightInt8(torch::randn({16})), c10::Error);
  torch::Tensor with_nan = torch::randn({4, 4});
  with_nan[1][2] = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor before = with_nan.clone();
  EXPECT_THROW(QuantizeWeightInt8(with_nan), c10::Error);
  EXPECT_TRUE(torch::nan_to_num(with_nan).equal(torch::nan_to_num(before)));  // unchanged
  EXPECT_FALSE(HasInt8Copy(with_nan));
}

// QuantizeWeightBf16 writes the weights rounded to bf16 back, so every path
// computes with the same weights; Dense multiplies them by the activations
// rounded to bf16, with float32 sums (kernels::Bf16Gemm, or the float
// paths on rounded activations), so every row count is the float64 product
// of the written weights and the rounded activations to float32 summation
// error, and a row's result does not change with the rows batched beside
// it where the bf16 product runs.
TEST(DenseBf16, EveryRowCountIsTheProductOfTheRoundedWeightsAndActivations) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  const torch::Tensor original = torch::randn({96, 160}) * 0.05;
  torch::Tensor w = original.clone();
  const torch::Tensor b = torch::randn({96});
  EXPECT_EQ(QuantizeWeightBf16(w), 96 * 160 * 2);
  ASSERT_TRUE(HasBf16Copy(w));
  // Each value moved by at most half a bf16 step (2^-8 of its magnitude),
  // and now has 16 zero low bits.
  EXPECT_TRUE(((w - original).abs() <= original.abs() * std::ldexp(1.0, -8)).all().item<bool>());
  EXPECT_FALSE(w.equal(original));
  const torch::Tensor bits = w.view(torch::kInt);
  EXPECT_TRUE((bits.bitwise_and(0xFFFF) == 0).all().item<bool>());
  const torch::Tensor lone = torch::randn({1, 160});
  const torch::Tensor lone_y = Dense(lone, w, b);
  for (int64_t rows : {1, 2, 6, 7, 64, 256, 257, 300}) {
    SCOPED_TRACE(rows);
    const torch::Tensor x = torch::cat({torch::randn({rows - 1, 160}), lone});
    const torch::Tensor got = Dense(x, w, b).to(torch::kDouble);
    const torch::Tensor rounded_x = x.to(torch::kBFloat16).to(torch::kDouble);
    const torch::Tensor exact =
        torch::nn::functional::linear(rounded_x, w.to(torch::kDouble), b.to(torch::kDouble));
    EXPECT_LT((got - exact).abs().max().item<double>(), 2e-5);
    // The unrounded activations give a different product: the rounding did
    // happen.
    const torch::Tensor unrounded = torch::nn::functional::linear(
        x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
    EXPECT_GT((got - unrounded).abs().max().item<double>(), 1e-4);
    // Where the bf16 product runs (up to 6 rows, or every row count with
    // AVX-512), a row's floats do not depend on its neighbours.
    if (rows <= 6 || kernels::Bf16GemmRunsEveryRowCount()) {
      EXPECT_TRUE(Dense(x, w, b)[rows - 1].equal(lone_y[0]));
    }
  }
}

TEST(DenseBf16, AWeightWrittenAgainDropsItsBf16Copy) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(14);
  torch::Tensor w = torch::randn({40, 160});
  QuantizeWeightBf16(w);
  ASSERT_TRUE(HasBf16Copy(w));
  EXPECT_FALSE(HasInt8Copy(w));
  w.add_(0.001);  // e.g. new weights loaded in place
  EXPECT_FALSE(HasBf16Copy(w));
  ExpectMatchesLinear(torch::randn({1, 160}), w, {});
}

TEST(DenseBf16, RefusesWhatItCannotQuantise) {
  torch::NoGradGuard no_grad;
  for (Bf16Product product : {Bf16Product::kForDevice, Bf16Product::kLibTorch}) {
    SCOPED_TRACE(product == Bf16Product::kLibTorch ? "LibTorch's product" : "the kernels'");
    EXPECT_THROW(QuantizeWeightBf16(torch::randn({4, 4}, torch::kDouble), product), c10::Error);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()}) {
      torch::Tensor w = torch::randn({4, 4});
      w[1][2] = bad;
      const torch::Tensor before = w.clone();
      try {
        QuantizeWeightBf16(w, product);
        ADD_FAILURE() << bad << " was accepted";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what_without_backtrace()).find("at [1, 2]"), std::string::npos)
            << e.what_without_backtrace();
      }
      EXPECT_TRUE(torch::nan_to_num(w).equal(torch::nan_to_num(before)));  // unchanged
      EXPECT_FALSE(HasBf16Copy(w));
    }
  }
}

// The product a GPU runs (Bf16Product::kLibTorch, here on the CPU): the
// weights rounded exactly as the kernels round them (to nearest, ties to
// even), LibTorch's bf16 product of them and the rounded activations, its
// outputs rounded to bf16, then the float32 bias.
TEST(DenseBf16, LibTorchsProductRoundsTheWeightsAsTheKernelsDo) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(15);
  torch::Tensor original = torch::randn({48, 160}) * 0.05;
  // Ties: 1 + 2^-8 rounds down to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6.
  original[0][0] = 1.0f + std::ldexp(1.0f, -8);
  original[0][1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  torch::Tensor kernels_w = original.clone(), libtorch_w = original.clone();
  EXPECT_EQ(QuantizeWeightBf16(kernels_w), 48 * 160 * 2);
  EXPECT_EQ(QuantizeWeightBf16(libtorch_w, Bf16Product::kLibTorch), 48 * 160 * 2);
  ASSERT_TRUE(HasBf16Copy(libtorch_w));
  EXPECT_TRUE(libtorch_w.equal(kernels_w));
  EXPECT_EQ(libtorch_w[0][0].item<float>(), 1.0f);
  EXPECT_EQ(libtorch_w[0][1].item<float>(), 1.0f + std::ldexp(1.0f, -6));
  const torch::Tensor b = torch::randn({48});
  for (const torch::Tensor& x :
       {torch::randn({1, 160}), torch::randn({7, 160}), torch::randn({2, 5, 160})}) {
    SCOPED_TRACE(::testing::Message() << x.sizes());
    const torch::Tensor product = Dense(x, libtorch_w);
    // The outputs were rounded to bf16: 16 zero low bits.
    EXPECT_TRUE((product.view(torch::kInt).bitwise_and(0xFFFF) == 0).all().item<bool>());
    const torch::Tensor exact = torch::nn::functional::linear(
        x.to(torch::kBFloat16).to(torch::kDouble), libtorch_w.to(torch::kDouble));
    const torch::Tensor got = Dense(x, libtorch_w, b).to(torch::kDouble) - b.to(torch::kDouble);
    // Half a bf16 step of each output, plus float32 sums and the bias's add.
    EXPECT_TRUE((got - exact).abs().le(exact.abs() * std::ldexp(1.0, -8) + 1e-5).all().item<bool>())
        << (got - exact).abs().max().item<double>();
    EXPECT_GT((got - exact).abs().max().item<double>(), 1e-7) << "the outputs were rounded";
  }
}

// A weight that nothing but Dense multiplies gives up its float32 values:
// the parameter becomes its bf16 copy (the same memory), and Dense's
// results do not change.
TEST(DenseBf16, AWeightDropsItsFloatValuesForItsCopy) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(16);
  torch::Tensor w = torch::randn({48, 160}) * 0.05;
  const torch::Tensor b = torch::randn({48}), x = torch::randn({5, 160});
  EXPECT_THROW(DropFloatValues(w), c10::Error) << "no copy yet";
  QuantizeWeightBf16(w, Bf16Product::kLibTorch);
  const torch::Tensor rounded = w.clone(), before = Dense(x, w, b);
  const c10::TensorImpl* impl = w.unsafeGetTensorImpl();
  EXPECT_EQ(DropFloatValues(w), 48 * 160 * 4);
  EXPECT_EQ(w.unsafeGetTensorImpl(), impl) << "the same parameter";
  EXPECT_EQ(w.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(w.to(torch::kFloat).equal(rounded));
  EXPECT_TRUE(HasBf16Copy(w));
  EXPECT_TRUE(Dense(x, w, b).equal(before));
  EXPECT_EQ(DropFloatValues(w), 0) << "dropped before";
  EXPECT_EQ(QuantizeWeightBf16(w, Bf16Product::kLibTorch), 48 * 160 * 2) << "keeps its copy";
  torch::Tensor kernels_copy = torch::randn({48, 160});
  QuantizeWeightBf16(kernels_copy);
  EXPECT_THROW(DropFloatValues(kernels_copy), c10::Error) << "the CPU kernels' copy is packed";
}

}  // namespace
}  // namespace attn
