// Activation checkpointing (gradus/autograd.h): a FunctionNode whose backward recomputes the
// segment and runs a nested backward pass through it. The engine is reentrant (each pass keeps its
// own state), so the nested pass accumulates the segment's parameter gradients like any backward
// and hands the input gradients back to the outer pass.
#include "autograd/node.h"
#include "gradus/autograd.h"
#include "gradus/core/random.h"
#include "ops/autocast.h"

namespace gradus {

namespace {
thread_local int t_recompute_depth = 0;  // checkpoint segments being recomputed on this thread
}

bool in_checkpoint_recompute() {
  return t_recompute_depth > 0;
}

using autograd::TensorList;

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs, const std::vector<Tensor>& params) {
  GRADUS_CHECK(static_cast<bool>(fn), ValueError, "checkpoint: the function is empty");
  if (!is_grad_enabled()) return fn(inputs);
  const PhiloxState rng = default_generator().state();
  const ops::AutocastState autocast = ops::autocast_state();
  Tensor out;
  {
    NoGradGuard no_grad;  // nothing inside fn is recorded: its activations die with it
    out = fn(inputs);
  }
  GRADUS_CHECK(out.defined(), ValueError, "checkpoint: the function returned an undefined tensor");
  const size_t n_inputs = inputs.size();
  TensorList edges = inputs;
  edges.insert(edges.end(), params.begin(), params.end());
  return autograd::record(
      "checkpoint", out, edges,
      [fn, inputs, n_inputs, rng, autocast](const TensorList& g, const autograd::NeedsGrad& needs) {
        // Fresh leaves standing for the inputs, so the nested pass stops at them.
        std::vector<Tensor> leaves;
        for (size_t i = 0; i < n_inputs; ++i) {
          Tensor d = inputs[i].detach();
          if (needs[i]) d.set_requires_grad(true);
          leaves.push_back(d);
        }
        Tensor again;
        {
          EnableGradGuard enable;
          // The forward's autocast state, without the parameter-cast cache: casts made now must
          // belong to this nested graph.
          amp::Autocast same_autocast(autocast.dtype, autocast.enabled, false);
          // Replay forward's random draws, then (however fn ends) give the stream back its
          // current position and leave the recomputation.
          struct Recomputing {
            PhiloxState now = default_generator().state();
            Recomputing() { ++t_recompute_depth; }
            ~Recomputing() {
              --t_recompute_depth;
              default_generator().set_state(now);
            }
          } recomputing;
          default_generator().set_state(rng);
          again = fn(leaves);
        }
        GRADUS_CHECK(again.defined() && again.requires_grad(), AutogradError,
                     "checkpoint: the recomputed output does not require grad: the function's "
                     "result depends on no input or parameter that requires grad");
        backward({again}, {g[0]});
        TensorList grads(needs.size());
        for (size_t i = 0; i < n_inputs; ++i) {
          if (needs[i]) grads[i] = leaves[i].grad();
        }
        return grads;  // the parameters' gradients were accumulated by the nested pass
      });
}

}  // namespace gradus
