// autograd::Function (gradus/autograd/function.h): user ops with a custom backward, recorded as a
// FunctionNode like every built-in op.
#include "gradus/autograd/function.h"

#include <mutex>
#include <set>

#include "autograd/node.h"
#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "gradus/ops.h"

namespace gradus::autograd {

struct FunctionContext::Saved {
  std::vector<SavedTensor> tensors;
};

void FunctionContext::save_for_backward(const TensorList& tensors) {
  if (!saved_) saved_ = std::make_shared<Saved>();
  saved_->tensors.clear();
  for (const Tensor& t : tensors) saved_->tensors.emplace_back(t);
}

TensorList FunctionContext::saved_tensors() const {
  TensorList out;
  if (!saved_) return out;
  for (const SavedTensor& s : saved_->tensors) out.push_back(s.defined() ? s.get() : Tensor());
  return out;
}

bool FunctionContext::needs_input_grad(size_t i) const {
  GRADUS_CHECK(i < needs_.size(), ValueError, "FunctionContext::needs_input_grad: input ", i,
               " of ", needs_.size());
  return needs_[i];
}

namespace {

// FunctionNode keeps its name as a const char*: user names are interned for the process.
const char* intern(const std::string& name) {
  static std::mutex mutex;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

}  // namespace

TensorList apply(const std::shared_ptr<Function>& fn, const TensorList& inputs) {
  GRADUS_CHECK(fn != nullptr, ValueError, "autograd::apply: the function is null");
  const std::string name = fn->name();
  GRADUS_PROFILE_SCOPE_NAMED(op, name);
  auto ctx = std::make_shared<FunctionContext>();
  const bool recording = any_requires_grad(inputs);
  ctx->needs_.resize(inputs.size());
  // What each input's gradient must look like (undefined inputs need none).
  struct InputKind {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<InputKind> kinds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    ctx->needs_[i] = recording && t.defined() && t.requires_grad();
    kinds.push_back(t.defined() ? InputKind{t.sizes(), t.dtype(), t.device()}
                                : InputKind{{}, DType::f32, Device::cpu()});
  }
  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn->forward(*ctx, inputs);
  }
  GRADUS_CHECK(!outputs.empty(), ValueError, name, ": forward returned no tensor");
  for (size_t i = 0; i < outputs.size(); ++i) {
    GRADUS_CHECK(outputs[i].defined(), ValueError, name, ": forward output ", i, " is undefined");
    // A fresh handle: an output that is an input (or a view of one) must not take over the
    // input's history.
    outputs[i] = outputs[i].detach();
  }
  if (!recording) return outputs;
  return record_multi(
      intern(name), std::move(outputs), inputs,
      [fn, ctx, name, kinds](const TensorList& grads, const NeedsGrad& needs) {
        TensorList out = fn->backward(*ctx, grads);
        GRADUS_CHECK(out.size() == kinds.size(), AutogradError, name, ": backward returned ",
                     out.size(), " gradient(s) for ", kinds.size(), " input(s)");
        for (size_t i = 0; i < out.size(); ++i) {
          if (!needs[i] || !out[i].defined()) {
            out[i] = Tensor();
            continue;
          }
          const InputKind& k = kinds[i];
          GRADUS_CHECK(out[i].sizes() == k.shape, ShapeError, name,
                       ": backward returned a gradient of shape ", shape_str(out[i].sizes()),
                       " for input ", i, " of shape ", shape_str(k.shape));
          GRADUS_CHECK(out[i].device() == k.device, DeviceError, name,
                       ": backward returned the gradient of input ", i, " on ",
                       out[i].device().str(), ", but the input is on ", k.device.str());
          if (out[i].dtype() != k.dtype) out[i] = out[i].to(k.dtype);
        }
        return out;
      });
}

}  // namespace gradus::autograd
