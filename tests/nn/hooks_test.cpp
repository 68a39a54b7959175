// Module calls with several inputs, and forward-pre / forward / full-backward hooks: order,
// replacement, removal, and backward hooks seeing the gradients autograd computes.
#include <gtest/gtest.h>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

// y = linear(x) with the features where mask == 0 zeroed: two inputs.
struct MaskedLinear : nn::Module {
  std::shared_ptr<nn::Linear> linear;
  MaskedLinear() { linear = register_module("linear", std::make_shared<nn::Linear>(4, 3)); }
  Tensor forward_multi(const std::vector<Tensor>& in) override {
    return mul((*linear)(in[0]), in[1]);
  }
  std::string type_name() const override { return "MaskedLinear"; }
};

TEST(ModuleCall, SeveralInputsReachForwardMulti) {
  manual_seed(fresh_seed());
  auto m = std::make_shared<MaskedLinear>();
  const Tensor x = random_tensor({2, 4}, fresh_seed(), -1, 1, DType::f32);
  const Tensor mask = from_vector(std::vector<float>{1, 0, 1, 0, 1, 1}, {2, 3});
  const Tensor y = (*m)(x, mask);
  EXPECT_TRUE(all_close(y, mul((*m->linear)(x), mask), 0, 0));
  EXPECT_EQ(y.to_vector<float>()[1], 0.0f);
  // A single-input module given two inputs names itself.
  nn::Linear lin(4, 3);
  try {
    lin(x, mask);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Linear: forward takes one input, got 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModuleHooks, ForwardHooksRunInOrderReplaceAndRemove) {
  manual_seed(fresh_seed());
  auto lin = std::make_shared<nn::Linear>(4, 3);
  const Tensor x = random_tensor({2, 4}, fresh_seed(), -1, 1, DType::f32);
  std::vector<std::string> order;
  nn::HookHandle pre = lin->register_forward_pre_hook(
      [&](nn::Module&, const std::vector<Tensor>& in) -> std::optional<std::vector<Tensor>> {
        order.push_back("pre");
        return std::vector<Tensor>{mul(in[0], 2.0)};  // doubles the input
      });
  nn::HookHandle post = lin->register_forward_hook([&](nn::Module& m, const std::vector<Tensor>& in,
                                                       const Tensor& out) -> std::optional<Tensor> {
    order.push_back("post:" + m.type_name());
    EXPECT_TRUE(all_close(in[0], mul(x, 2.0), 0, 0));  // sees the replaced input
    return add(out, 1.0);
  });
  const Tensor expected = add(linear(mul(x, 2.0), lin->weight, lin->bias), 1.0);
  EXPECT_TRUE(all_close((*lin)(x), expected, 0, 0));
  EXPECT_EQ(order, (std::vector<std::string>{"pre", "post:Linear"}));
  pre.remove();
  post.remove();
  post.remove();  // twice is harmless
  EXPECT_TRUE(all_close((*lin)(x), linear(x, lin->weight, lin->bias), 0, 0));
  EXPECT_EQ(order.size(), 2u);
}

TEST(ModuleHooks, FullBackwardHookSeesInputAndOutputGradients) {
  manual_seed(fresh_seed());
  auto first = std::make_shared<nn::Linear>(4, 5);
  auto second = std::make_shared<nn::Linear>(5, 3);
  nn::Sequential net({first, std::make_shared<nn::ReLU>(), second});
  std::vector<Tensor> second_in, second_out, first_in;
  int first_calls = 0, second_calls = 0;
  second->register_full_backward_hook(
      [&](nn::Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>& go) {
        ++second_calls;
        second_in = gi;
        second_out = go;
      });
  first->register_full_backward_hook(
      [&](nn::Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>&) {
        ++first_calls;
        first_in = gi;
      });
  const Tensor x = random_tensor({6, 4}, fresh_seed(), -1, 1, DType::f32);  // needs no grad
  const Tensor w = random_tensor({6, 3}, fresh_seed(), -1, 1, DType::f32);
  sum(mul(net(x), w)).backward();
  EXPECT_EQ(second_calls, 1);
  EXPECT_EQ(first_calls, 1);
  // dL/d(output of second) = w; dL/d(input of second) = w @ W2.
  ASSERT_EQ(second_out.size(), 1u);
  EXPECT_TRUE(all_close(second_out[0], w, 0, 0));
  ASSERT_EQ(second_in.size(), 1u);
  EXPECT_TRUE(all_close(second_in[0], matmul(w, second->weight.detach()), 1e-6, 1e-6));
  // The network input needs no gradient: the first layer's hook gets an undefined one.
  ASSERT_EQ(first_in.size(), 1u);
  EXPECT_FALSE(first_in[0].defined());
  // Hooks change nothing: the parameter gradients equal a run without them.
  const Tensor g2 = second->weight.grad().clone();
  second->zero_grad();
  Tensor h = relu(linear(x, first->weight, first->bias));
  sum(mul(linear(h, second->weight, second->bias), w)).backward();
  EXPECT_TRUE(all_close(second->weight.grad(), g2, 0, 0));
}

}  // namespace
}  // namespace gradus
