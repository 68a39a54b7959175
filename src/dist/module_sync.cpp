#include "gradus/dist/module_sync.h"

#include <sstream>
#include <vector>

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::dist {
namespace {

void broadcast_all(const std::vector<Tensor>& tensors, ProcessGroup& group, int root,
                   const char* label, std::vector<WorkPtr>& works) {
  for (const Tensor& t : tensors) works.push_back(group.broadcast(t.detach(), root, label));
}

// "name dtype d0,d1,...\n" per tensor (names hold no whitespace: module paths and state keys).
std::string describe(const std::map<std::string, Tensor>& tensors) {
  std::ostringstream text;
  for (const auto& [name, t] : tensors) {
    text << name << ' ' << dtype_name(t.dtype()) << ' ';
    for (int64_t d = 0; d < t.dim(); ++d) text << (d > 0 ? "," : "") << t.size(d);
    text << (t.dim() == 0 ? "-" : "") << '\n';
  }
  return text.str();
}

}  // namespace

std::map<std::string, Tensor> gather_named_tensors(ProcessGroup& group,
                                                   const std::map<std::string, Tensor>& mine,
                                                   int root) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> all;
  if (group.rank() != root) {
    const std::string text = describe(mine);
    Tensor length = tensor({static_cast<double>(text.size())}, {1}, {.dtype = DType::i64});
    group.send(length, root, 0, "named tensors: header size")->wait();
    Tensor bytes = empty({static_cast<int64_t>(text.size())}, {.dtype = DType::u8});
    std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
    if (!text.empty()) group.send(bytes, root, 0, "named tensors: header")->wait();
    for (const auto& [name, t] : mine) {
      group.send(t.detach().to(Device::cpu()).contiguous(), root, 0, name)->wait();
    }
    return all;
  }
  for (const auto& [name, t] : mine) all[name] = t.detach().to(Device::cpu()).contiguous();
  for (int source = 0; source < group.size(); ++source) {
    if (source == root) continue;
    Tensor length = empty({1}, {.dtype = DType::i64});
    group.recv(length, source, 0, "named tensors: header size")->wait();
    Tensor bytes = empty({length.data_ptr<int64_t>()[0]}, {.dtype = DType::u8});
    if (bytes.numel() > 0) group.recv(bytes, source, 0, "named tensors: header")->wait();
    std::istringstream lines(std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                         static_cast<size_t>(bytes.numel())));
    std::string name, dtype, dims;
    while (lines >> name >> dtype >> dims) {
      std::vector<int64_t> shape;
      std::istringstream sizes(dims == "-" ? "" : dims);
      for (std::string d; std::getline(sizes, d, ',');) shape.push_back(std::stoll(d));
      Tensor t = empty(shape, {.dtype = dtype_from_name(dtype)});
      group.recv(t, source, 0, name)->wait();
      GRADUS_CHECK(all.emplace(name, t).second, ValueError, "gather_named_tensors: '", name,
                   "' is held by rank ", source, " and by another rank");
    }
  }
  return all;
}

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
