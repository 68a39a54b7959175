// docs/guide.md, "Writing a module": a small CNN written as an nn::Module subclass.
//
//   build/examples/example_guide_custom_module
//
// Builds the model, prints its parameters (PyTorch state_dict names) and runs one batch through
// it in training and in eval mode.
#include <gradus/gradus.h>

#include <cstdio>

using namespace gradus;

// [guide:module]
// Conv -> ReLU -> max pool -> Linear -> ReLU -> dropout -> Linear, for 1x28x28 images.
class SmallNet : public nn::Module {
 public:
  explicit SmallNet(int64_t hidden = 128, double dropout_p = 0.25) : dropout_p_(dropout_p) {
    // Children and parameters are registered by name: the names become the state_dict keys
    // ("conv.weight", "fc1.bias", "temperature") that io::save_module writes.
    conv_ = register_module("conv",
                            std::make_shared<nn::Conv2d>(1, 16, 3, nn::ConvOptions{.padding = 1}));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(16 * 14 * 14, hidden));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(hidden, 10));
    // A parameter of our own: a learned divisor of the logits.
    temperature_ = register_parameter("temperature", ones({1}));
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = max_pool2d(relu((*conv_)(x)), {.kernel_size = {2, 2}});  // [N, 16, 14, 14]
    h = relu((*fc1_)(h.flatten(1)));
    h = dropout(h, dropout_p_, is_training());  // identity in eval mode
    return div((*fc2_)(h), temperature_);
  }

 private:
  double dropout_p_;
  std::shared_ptr<nn::Conv2d> conv_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
  Tensor temperature_;
};
// [guide:end]

int main() try {
  manual_seed(0);
  // [guide:module_use]
  auto model = std::make_shared<SmallNet>();
  for (const auto& [name, p] : model->named_parameters()) {
    std::printf("%-12s %s\n", name.c_str(), shape_str(p.sizes()).c_str());
  }
  std::printf("%lld parameters\n", static_cast<long long>(model->num_parameters()));
  Tensor logits = (*model)(randn({8, 1, 28, 28}));  // operator() runs hooks, then forward()
  // [guide:end]
  std::printf("logits %s\n", shape_str(logits.sizes()).c_str());
  // Dropout is random in training mode and off in eval mode: two eval passes agree exactly.
  model->eval();
  NoGradGuard no_grad;
  const Tensor x = randn({4, 1, 28, 28});
  const double diff = max(abs(sub((*model)(x), (*model)(x)))).item();
  std::printf("eval mode is deterministic: max difference %g\n", diff);
  return diff == 0.0 ? 0 : 1;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
