// The decode step's rows checked once for every layer
// (model/mixers/step_rows.h).
#include "model/mixers/step_rows.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::Int64s;

std::string CheckSlotsError(int64_t pool_rows, const torch::Tensor& slots, int64_t batch) {
  try {
    CheckSlots(pool_rows, slots, batch);
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  return "";
}

TEST(StepRows, CheckSlotsNamesWhatIsWrong) {
  EXPECT_EQ(Int64s(CheckSlots(4, torch::tensor({3, 0}), 2)), Int64s(torch::tensor({3, 0})));
  EXPECT_TRUE(torch::equal(CheckSlots(4, torch::Tensor(), 3), torch::arange(3)));
  EXPECT_NE(CheckSlotsError(4, torch::tensor({1, 4}), 2).find("slot 4 out of range [0, 4)"),
            std::string::npos);
  EXPECT_NE(CheckSlotsError(4, torch::tensor({2, 1, 2}), 3).find("slot 2 appears twice"),
            std::string::npos);
  EXPECT_NE(CheckSlotsError(4, torch::tensor({1}), 2).find("slots must be int64 [2]"),
            std::string::npos);
  EXPECT_NE(CheckSlotsError(2, torch::Tensor(), 3).find("batch of 3 sequences"), std::string::npos);
}

// Within a step, the host ids stand for the device copy: RowsOn returns that
// very tensor (no copy, so no wait on a GPU); nested steps restore the outer
// one; outside any step RowsOn copies.
TEST(StepRows, HostIdsMapToTheStepsDeviceCopy) {
  const torch::Tensor host = torch::tensor({2, 0}), copy = host.clone();
  EXPECT_EQ(StepRows::Current(), nullptr);
  {
    const StepRows outer(host, copy);
    EXPECT_EQ(StepRows::Current(), &outer);
    EXPECT_TRUE(outer.Names(host));
    EXPECT_TRUE(outer.Names(copy));
    EXPECT_FALSE(outer.Names(host.clone()));
    EXPECT_TRUE(RowsOn(host, torch::kCPU).is_same(copy));
    {
      const torch::Tensor other = torch::tensor({1});
      const StepRows inner(other, other);
      EXPECT_FALSE(RowsOn(host, torch::kCPU).is_same(copy));
    }
    EXPECT_EQ(StepRows::Current(), &outer);
  }
  EXPECT_EQ(StepRows::Current(), nullptr);
  const torch::Tensor moved = RowsOn(host, torch::kCPU);
  EXPECT_TRUE(torch::equal(moved, host));
}

// A model's step checks its rows itself, once, and its layers take them as
// they are: the errors name the slot, as each layer's check did.
TEST(StepRows, TheModelsStepChecksTheRowsOnce) {
  torch::manual_seed(5);
  CausalLm model(testing::TinyConfig(MixerKind::kRwkv7));
  model->eval();
  torch::NoGradGuard no_grad;
  LmState pool = model->initial_state(3, torch::kCPU);
  const torch::Tensor logits = model->step(torch::tensor({1, 2}), torch::tensor({2, 0}), pool);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, model->config().vocab_size}));
  EXPECT_EQ(Int64s(pool.length()), (std::vector<int64_t>{1, 0, 1}));
  try {
    model->step(torch::tensor({1, 2}), torch::tensor({2, 2}), pool);
    ADD_FAILURE() << "a slot twice was taken";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("slot 2 appears twice"),
              std::string::npos);
  }
  EXPECT_EQ(Int64s(pool.length()), (std::vector<int64_t>{1, 0, 1})) << "a refused step ran";
}

// The pool's lengths are read once a call, by the first layer that asks,
// and kept apart from the layers' own, which advance in place.
// Only the rows of a step whose caller checked their room (a CUDA graph's
// capture) spare the layers their check, on the thread that runs it.
TEST(StepRows, OnlyACallerCheckedStepsRowsSkipTheRoomCheck) {
  const torch::Tensor rows = torch::tensor({int64_t{2}, int64_t{0}});
  const torch::Tensor others = torch::tensor({int64_t{2}, int64_t{0}});
  EXPECT_FALSE(StepRows::RoomCheckedByCaller(rows)) << "no step";
  {
    const StepRows step(rows, rows);
    EXPECT_FALSE(StepRows::RoomCheckedByCaller(rows)) << "the layers check";
  }
  const StepRows step(rows, rows, StepRows::Capacity::kCallerChecked);
  EXPECT_TRUE(StepRows::RoomCheckedByCaller(rows));
  EXPECT_FALSE(StepRows::RoomCheckedByCaller(others)) << "equal ids, another tensor";
  EXPECT_FALSE(StepRows::RoomCheckedByCaller(torch::Tensor()));
  bool elsewhere = true;
  std::thread([&] { elsewhere = StepRows::RoomCheckedByCaller(rows); }).join();
  EXPECT_FALSE(elsewhere) << "another thread";
}

TEST(StepRows, HostLengthsAreReadOnceAndKeptApart) {
  const torch::Tensor ids = torch::tensor({int64_t{1}});
  const StepRows rows(ids, ids);
  torch::Tensor length = torch::tensor({int64_t{3}, int64_t{5}});
  EXPECT_EQ(Int64s(rows.HostLengths(length)), (std::vector<int64_t>{3, 5}));
  length.add_(1);
  EXPECT_EQ(Int64s(rows.HostLengths(length)), (std::vector<int64_t>{3, 5}));
}

std::string PrefillError(CausalLm& model, const torch::Tensor& tokens, const torch::Tensor& rows,
                         LmState& pool) {
  try {
    model->prefill(tokens, pool, rows);
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  return "";
}

// A prefill checks its rows once for every layer, and its layers check the
// room and the common start on lengths read once: the errors are each
// layer's, and a refused prefill changes nothing.
TEST(StepRows, TheModelsPrefillChecksTheRowsOnce) {
  torch::manual_seed(5);
  LmConfig config = testing::TinyConfig(MixerKind::kMhaAlibi);
  config.max_context = 8;
  CausalLm model(config);
  model->eval();
  torch::NoGradGuard no_grad;
  LmState pool = model->initial_state(3, torch::kCPU);
  const torch::Tensor three = torch::tensor({{1, 2, 3}, {4, 5, 6}});
  model->prefill(three, pool, torch::tensor({2, 0}));
  EXPECT_EQ(Int64s(pool.length()), (std::vector<int64_t>{3, 0, 3}));
  EXPECT_NE(PrefillError(model, three, torch::tensor({2, 2}), pool).find("slot 2 appears twice"),
            std::string::npos);
  EXPECT_NE(PrefillError(model, three, torch::tensor({2, 1}), pool)
                .find("prefill needs every sequence of the batch at the same length"),
            std::string::npos);
  const torch::Tensor six = torch::ones({1, 6}, torch::kLong);
  EXPECT_NE(PrefillError(model, six, torch::tensor({0}), pool)
                .find("holds at most 8 tokens per sequence; a sequence at 3 cannot take 6 more"),
            std::string::npos);
  EXPECT_EQ(Int64s(pool.length()), (std::vector<int64_t>{3, 0, 3})) << "a refused prefill ran";
  for (const MixerState& layer : pool.layers) {
    EXPECT_EQ(Int64s(layer.length), (std::vector<int64_t>{3, 0, 3}));
  }
}

}  // namespace
}  // namespace attn
