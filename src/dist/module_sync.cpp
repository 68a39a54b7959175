#include "gradus/dist/module_sync.h"

#include <vector>

#include "gradus/autograd.h"

namespace gradus::dist {
namespace {

void broadcast_all(const std::vector<Tensor>& tensors, ProcessGroup& group, int root,
                   const char* label, std::vector<WorkPtr>& works) {
  for (const Tensor& t : tensors) works.push_back(group.broadcast(t.detach(), root, label));
}

}  // namespace

void broadcast_module_state(const nn::Module& module, ProcessGroup& group, int root) {
  if (group.size() == 1) return;
  NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  broadcast_all(module.parameters(), group, root, "initial parameters", works);
  broadcast_all(module.buffers(), group, root, "initial buffers", works);
  wait_all(works);
}

void broadcast_buffers(const nn::Module& module, ProcessGroup& group, int root) {
  if (group.size() == 1) return;
  NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  broadcast_all(module.buffers(), group, root, "buffers", works);
  wait_all(works);
}

}  // namespace gradus::dist
