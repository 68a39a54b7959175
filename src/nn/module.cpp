// nn::Module: registration, traversal, state dicts, modes, placement and printing.
#include "gradus/nn/module.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <set>
#include <sstream>
#include <typeinfo>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define GRADUS_HAVE_CXXABI 1
#endif

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::nn {

// ------------------------------------------------------------------------------------ StateDict
StateDict::StateDict(const std::map<std::string, Tensor>& items) {
  for (const auto& [k, v] : items) insert(k, v);
}

StateDict::StateDict(std::vector<Item> items) {
  for (auto& [k, v] : items) insert(k, v);
}

StateDict::StateDict(std::initializer_list<Item> items) {
  for (const auto& [k, v] : items) insert(k, v);
}

void StateDict::insert(const std::string& name, const Tensor& t) {
  GRADUS_CHECK(index_.count(name) == 0, ValueError, "StateDict: duplicate key \"", name, "\"");
  index_.emplace(name, items_.size());
  items_.emplace_back(name, t);
}

const Tensor& StateDict::at(const std::string& name) const {
  const Tensor* t = find(name);
  GRADUS_CHECK(t != nullptr, ValueError, "StateDict: no key \"", name, "\" (", items_.size(),
               " keys)");
  return *t;
}

const Tensor* StateDict::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

// --------------------------------------------------------------------------------- registration
Tensor Module::forward(const Tensor&) {
  throw Error(detail::str_cat(type_name(), ": forward() is not implemented for this module"));
}

void Module::check_new_name(const std::string& name, const char* what) const {
  const std::string type = type_name();
  GRADUS_CHECK(!name.empty(), ValueError, what, ": empty name in ", type);
  GRADUS_CHECK(name.find('.') == std::string::npos, ValueError, what, ": name \"", name, "\" in ",
               type, " must not contain '.' (dots separate hierarchy levels)");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  GRADUS_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), ValueError, what, ": \"",
               name, "\" is already registered in ", type);
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "register_parameter");
  GRADUS_CHECK(t.defined(), ValueError, "register_parameter: \"", name, "\" in ", type_name(),
               " is an undefined tensor (leave optional parameters unregistered instead)");
  if (!t.is_leaf()) t = t.detach();
  if (is_floating(t.dtype())) t.set_requires_grad(requires_grad);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "register_buffer");
  GRADUS_CHECK(t.defined(), ValueError, "register_buffer: \"", name, "\" in ", type_name(),
               " is an undefined tensor");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  GRADUS_CHECK(module != nullptr, ValueError, "register_module: \"", name, "\" in ", type_name(),
               " is a null module");
  GRADUS_CHECK(module.get() != this, ValueError, "register_module: a module cannot contain itself");
  children_.emplace_back(name, std::move(module));
}

std::shared_ptr<Module> Module::replace_module(const std::string& name,
                                               std::shared_ptr<Module> module) {
  GRADUS_CHECK(module != nullptr, ValueError, "replace_module: \"", name, "\" in ", type_name(),
               ": the replacement is a null module");
  for (auto& [n, child] : children_) {
    if (n == name) {
      std::shared_ptr<Module> old = std::move(child);
      child = std::move(module);
      return old;
    }
  }
  throw ValueError("replace_module: " + type_name() + " has no submodule \"" + name + "\"");
}

// ------------------------------------------------------------------------------------ traversal
void Module::collect(const std::string& prefix, bool params, bool buffers, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_)
    child->collect(prefix + n + ".", params, buffers, true, out);
}

namespace {
// Keeps the first occurrence of every tensor (tied weights are listed once).
std::vector<std::pair<std::string, Tensor>> dedup(std::vector<std::pair<std::string, Tensor>> in) {
  std::set<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& item : in)
    if (seen.insert(item.second.impl()).second) out.push_back(std::move(item));
  return out;
}

std::vector<Tensor> values(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& item : named) out.push_back(item.second);
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, false, recurse, out);
  return dedup(std::move(out));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  return values(named_parameters(recurse));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, true, recurse, out);
  return dedup(std::move(out));
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  return values(named_buffers(recurse));
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& item : children_) out.push_back(item.second);
  return out;
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [n, c] : children_)
    if (n == name) return c;
  return nullptr;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::shared_ptr<Module> self = weak_from_this().lock();
  // A module not owned by a shared_ptr (e.g. on the stack) is returned as a non-owning alias.
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::set<const Module*> seen;
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> visit =
      [&](const std::string& prefix, const std::shared_ptr<Module>& m) {
        if (!seen.insert(m.get()).second) return;
        out.emplace_back(prefix, m);
        for (const auto& [n, c] : m->children_) visit(prefix.empty() ? n : prefix + "." + n, c);
      };
  visit("", self);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& item : named_modules()) out.push_back(std::move(item.second));
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (const auto& item : children_) item.second->apply(fn);
}

// ---------------------------------------------------------------------------------------- state
StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, true, true, out);
  return StateDict(std::move(out));
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  NoGradGuard no_grad;
  const StateDict own = state_dict();
  LoadResult result;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  for (const auto& [name, dst] : own) {
    const Tensor* src = state.find(name);
    if (src == nullptr) {
      result.missing_keys.push_back(name);
    } else if (!src->defined()) {
      result.mismatched_keys.push_back(name + ": the checkpoint's tensor is undefined");
    } else if (src->sizes() != dst.sizes()) {
      result.mismatched_keys.push_back(name + ": checkpoint " + shape_str(src->sizes()) +
                                       " vs model " + shape_str(dst.sizes()));
    } else {
      copies.emplace_back(dst, *src);
    }
  }
  for (const auto& [name, t] : state)
    if (!own.contains(name)) result.unexpected_keys.push_back(name);

  if (strict && !result.ok()) {
    std::ostringstream msg;
    msg << "load_state_dict: error(s) loading the state dict into " << type_name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      msg << "\n  " << what << " (" << keys.size() << "): ";
      for (size_t i = 0; i < keys.size(); ++i) msg << (i ? ", " : "") << '"' << keys[i] << '"';
    };
    list("missing keys", result.missing_keys);
    list("unexpected keys", result.unexpected_keys);
    for (const auto& m : result.mismatched_keys) msg << "\n  shape mismatch for " << m;
    if (result.missing_keys.empty() && result.unexpected_keys.empty()) throw ShapeError(msg.str());
    throw ValueError(msg.str());
  }
  // copy_ casts dtype and moves across devices; the destination handles stay the same.
  for (auto& [dst, src] : copies) dst.copy_(src);
  return result;
}

// ---------------------------------------------------------------------------- modes & placement
Module& Module::train(bool on) {
  training_ = on && !keep_eval_;
  on_train(training_);
  for (const auto& item : children_) item.second->train(on);
  return *this;
}

void Module::convert(const std::function<Tensor(const Tensor&)>& fn) {
  NoGradGuard no_grad;
  std::vector<Tensor> all = parameters();
  for (const Tensor& b : buffers()) all.push_back(b);
  std::set<const TensorImpl*> seen;
  for (Tensor& t : all) {
    if (!seen.insert(t.impl()).second) continue;
    Tensor moved = fn(t.detach());
    if (!moved.defined()) continue;  // nothing to do for this tensor
    const Tensor grad = t.grad();
    if (grad.defined()) t.set_grad(Tensor());
    t.set_data(moved);
    if (grad.defined()) {
      Tensor g = fn(grad.detach());
      t.set_grad(g.defined() ? g : grad);
    }
  }
}

Module& Module::to(Device device) {
  convert([device](const Tensor& t) { return t.device() == device ? Tensor() : t.to(device); });
  return *this;
}

Module& Module::to(DType dtype) {
  GRADUS_CHECK(is_floating(dtype), DTypeError,
               "Module::to: modules can only be cast to a "
               "floating dtype, got ",
               dtype_name(dtype));
  convert([dtype](const Tensor& t) {
    return (!is_floating(t.dtype()) || t.dtype() == dtype) ? Tensor() : t.to(dtype);
  });
  return *this;
}

Module& Module::to(Device device, DType dtype) {
  to(device);
  return to(dtype);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

void Module::freeze() {
  for (Tensor& p : parameters()) p.set_requires_grad(false);
}

void Module::unfreeze() {
  for (Tensor& p : parameters())
    if (is_floating(p.dtype())) p.set_requires_grad(true);
}

namespace {

bool has_prefix(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0;
}

// The top-level names of a module's parameters ("features.", "classifier.", ...), for errors.
std::string top_level_names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> tops;
  for (const auto& [name, p] : named) {
    const std::string top = name.substr(0, name.find('.') + 1);
    if (std::find(tops.begin(), tops.end(), top) == tops.end()) tops.push_back(top);
  }
  std::string out;
  for (size_t i = 0; i < tops.size() && i < 12; ++i) out += (i ? ", " : "") + tops[i];
  return out;
}

}  // namespace

int64_t Module::freeze(const std::string& prefix, bool keep_norm_eval) {
  const auto named = named_parameters();
  int64_t matched = 0;
  for (const auto& [name, p] : named) {
    if (!has_prefix(name, prefix)) continue;
    Tensor t = p;
    t.set_requires_grad(false);
    ++matched;
  }
  GRADUS_CHECK(matched > 0, ValueError, "freeze: no parameter name starts with '", prefix,
               "' (this module's parameters start with: ", top_level_names(named), ")");
  if (keep_norm_eval) {
    for (auto& [name, m] : named_modules()) {
      const std::string tn = m->type_name();
      if (tn.find("BatchNorm") == std::string::npos) continue;
      if (!has_prefix(name + ".", prefix) && !has_prefix(name, prefix)) continue;
      m->keep_eval_ = true;
      m->train(false);
    }
  }
  return matched;
}

int64_t Module::unfreeze(const std::string& prefix) {
  const auto named = named_parameters();
  int64_t matched = 0;
  for (const auto& [name, p] : named) {
    if (!has_prefix(name, prefix) || !is_floating(p.dtype())) continue;
    Tensor t = p;
    t.set_requires_grad(true);
    ++matched;
  }
  GRADUS_CHECK(matched > 0, ValueError, "unfreeze: no parameter name starts with '", prefix,
               "' (this module's parameters start with: ", top_level_names(named), ")");
  for (auto& [name, m] : named_modules()) {
    if (m->keep_eval_ && (has_prefix(name + ".", prefix) || has_prefix(name, prefix))) {
      m->keep_eval_ = false;
    }
  }
  return matched;
}

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : trainable_only ? trainable_parameters() : parameters()) n += p.numel();
  return n;
}

// ------------------------------------------------------------------------------------- printing
std::string Module::type_name() const {
  std::string name = typeid(*this).name();
#ifdef GRADUS_HAVE_CXXABI
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) name = demangled;
  std::free(demangled);
#endif
  // Drop namespaces (but not those inside template arguments).
  const size_t angle = name.find('<');
  const size_t colon = name.rfind("::", angle == std::string::npos ? std::string::npos : angle);
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name;
}

namespace {
// PyTorch's _addindent: every line but the first is indented.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  const std::string pad(static_cast<size_t>(spaces), ' ');
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : s) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  lines.push_back(cur);
  return lines;
}
}  // namespace

std::string Module::repr() const {
  const std::string extra = extra_repr();
  std::vector<std::string> lines;
  if (!extra.empty()) lines = split_lines(extra);
  const size_t extra_count = lines.size();
  for (const auto& [n, c] : children_) lines.push_back("(" + n + "): " + add_indent(c->repr(), 2));
  std::string out = type_name() + "(";
  if (!lines.empty()) {
    if (extra_count == 1 && children_.empty()) {
      out += lines[0];
    } else {
      for (const auto& line : lines) out += "\n  " + line;
      out += "\n";
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << m.repr();
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: scientific when exp < -4 or exp >= 16.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (!s.empty() && s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp >= 0) {
    const size_t int_digits = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_digits) {
      out = digits + std::string(int_digits - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    }
  } else {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return sign + out;
}

}  // namespace gradus::nn
