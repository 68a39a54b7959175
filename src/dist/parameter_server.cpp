#include "gradus/dist/parameter_server.h"

#include "gradus/dist/module_sync.h"

#include "dist/flat.h"
#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::dist {

namespace {
constexpr int kGradientTag = 100;   // + layout index: worker -> server
constexpr int kParameterTag = 200;  // + layout index: server -> worker
}  // namespace

// One flat message per dtype/device: the gradients going in, the parameters going out.
struct ParameterServer::Layout {
  detail::FlatLayout plan;
  Tensor flat;                   // this rank's gradients (then the parameters on the way back)
  std::vector<Tensor> incoming;  // server: one receive buffer per worker
};

ParameterServer::ParameterServer(std::shared_ptr<nn::Module> model, optim::Optimizer& optimizer,
                                 ParameterServerOptions options)
    : model_(std::move(model)), optimizer_(optimizer), options_(options) {
  GRADUS_CHECK(model_ != nullptr, ValueError, "ParameterServer: the model is null");
  group_ = options.group ? options.group : default_group();
  GRADUS_CHECK(options.server >= 0 && options.server < group_->size(), ValueError,
               "ParameterServer: server rank ", options.server, " is outside the world of ",
               group_->size());
  params_ = model_->trainable_parameters();
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (detail::FlatLayout& plan : detail::plan_flat_layouts(params_, order, 0, 0, 1)) {
    auto l = std::make_unique<Layout>();
    l->plan = plan;
    l->flat = detail::allocate_flat(plan);
    if (is_server()) {
      for (int r = 0; r + 1 < group_->size(); ++r)
        l->incoming.push_back(detail::allocate_flat(plan));
    }
    layouts_.push_back(std::move(l));
  }
  broadcast_module_state(*model_, *group_, options.server);
}

ParameterServer::~ParameterServer() = default;

void ParameterServer::step(double max_grad_norm) {
  NoGradGuard no_grad;
  const int server = options_.server;
  const int size = group_->size();
  // Pack this rank's gradients.
  for (auto& l : layouts_) {
    for (size_t k = 0; k < l->plan.params.size(); ++k) {
      const Tensor& p = params_[l->plan.params[k]];
      Tensor view = detail::flat_view(l->flat, l->plan.offsets[k], p.sizes());
      if (p.grad().defined()) {
        view.copy_(p.grad());
      } else {
        view.zero_();
      }
    }
  }
  std::vector<WorkPtr> works;
  if (!is_server()) {
    for (size_t i = 0; i < layouts_.size(); ++i) {
      works.push_back(group_->send(layouts_[i]->flat, server, kGradientTag + static_cast<int>(i),
                                   "gradients to the parameter server"));
    }
    wait_all(works);
    works.clear();
    for (size_t i = 0; i < layouts_.size(); ++i) {
      works.push_back(group_->recv(layouts_[i]->flat, server, kParameterTag + static_cast<int>(i),
                                   "parameters from the parameter server"));
    }
    wait_all(works);
  } else {
    for (size_t i = 0; i < layouts_.size(); ++i) {
      int slot = 0;
      for (int r = 0; r < size; ++r) {
        if (r == server) continue;
        works.push_back(group_->recv(layouts_[i]->incoming[static_cast<size_t>(slot++)], r,
                                     kGradientTag + static_cast<int>(i),
                                     "gradients from worker " + std::to_string(r)));
      }
    }
    wait_all(works);
    works.clear();
    // Average in rank order (the same sum on every run), write the gradients, step.
    for (auto& l : layouts_) {
      Tensor sum;
      int slot = 0;
      for (int r = 0; r < size; ++r) {
        const Tensor& part = r == server ? l->flat : l->incoming[static_cast<size_t>(slot++)];
        sum = sum.defined() ? add(sum, part) : part.clone();
      }
      l->flat.copy_(mul(sum, 1.0 / size));
      for (size_t k = 0; k < l->plan.params.size(); ++k) {
        const Tensor& p = params_[l->plan.params[k]];
        p.set_grad(detail::flat_view(l->flat, l->plan.offsets[k], p.sizes()).clone());
      }
    }
    // The averaged gradients. (With tensor or pipeline parallelism, the servers of the tensor
    // ranks and stages are the ranks of one replica: its tensor and pipeline groups.)
    if (max_grad_norm > 0) {
      clip_grad_norm_model_parallel(params_, max_grad_norm, options_.model_parallel);
    }
    optimizer_.step();
    for (size_t i = 0; i < layouts_.size(); ++i) {
      Layout& l = *layouts_[i];
      for (size_t k = 0; k < l.plan.params.size(); ++k) {
        const Tensor& p = params_[l.plan.params[k]];
        detail::flat_view(l.flat, l.plan.offsets[k], p.sizes()).copy_(p.detach());
      }
      for (int r = 0; r < size; ++r) {
        if (r == server) continue;
        works.push_back(group_->send(l.flat, r, kParameterTag + static_cast<int>(i),
                                     "parameters to worker " + std::to_string(r)));
      }
    }
    wait_all(works);
    works.clear();
  }
  if (!is_server()) {
    for (auto& l : layouts_) {
      for (size_t k = 0; k < l->plan.params.size(); ++k) {
        Tensor p = params_[l->plan.params[k]].detach();
        p.copy_(detail::flat_view(l->flat, l->plan.offsets[k], p.sizes()));
        p.bump_version();
      }
    }
  }
  // BatchNorm statistics follow the server's.
  broadcast_buffers(*model_, *group_, server);
}

}  // namespace gradus::dist
