#include "dist/flat.h"

#include <map>
#include <utility>

#include "gradus/ops.h"

namespace gradus::dist::detail {

std::vector<FlatLayout> plan_flat_layouts(const std::vector<Tensor>& params,
                                          const std::vector<size_t>& order, int64_t first_cap_bytes,
                                          int64_t cap_bytes, int64_t align) {
  std::vector<FlatLayout> layouts;
  // The open layout of each (dtype, device), and whether it is that key's first.
  std::map<std::pair<int, std::string>, size_t> open;
  std::map<std::pair<int, std::string>, bool> had_first;
  for (size_t i : order) {
    const Tensor& p = params[i];
    const auto key = std::make_pair(static_cast<int>(p.dtype()), p.device().str());
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    auto it = open.find(key);
    if (it != open.end() && cap_bytes > 0) {
      const FlatLayout& l = layouts[it->second];
      const bool first = !had_first[key];
      const int64_t cap = first ? first_cap_bytes : cap_bytes;
      if ((l.numel * static_cast<int64_t>(p.element_size())) + bytes > cap) {
        had_first[key] = true;
        open.erase(it);
        it = open.end();
      }
    }
    if (it == open.end()) {
      FlatLayout l;
      l.dtype = p.dtype();
      l.device = p.device();
      layouts.push_back(l);
      it = open.emplace(key, layouts.size() - 1).first;
    }
    FlatLayout& l = layouts[it->second];
    l.params.push_back(i);
    l.offsets.push_back(l.numel);
    l.numel += p.numel();
  }
  for (FlatLayout& l : layouts) {
    const int64_t a = std::max<int64_t>(align, 1);
    l.padded_numel = (l.numel + a - 1) / a * a;
  }
  return layouts;
}

Tensor flat_view(const Tensor& flat, int64_t offset, const Shape& shape) {
  return flat.as_strided_raw(shape, contiguous_strides(shape), flat.offset() + offset);
}

Tensor allocate_flat(const FlatLayout& layout) {
  // Zeros, not empty: padding takes part in collectives and must hold finite values.
  return zeros({layout.padded_numel}, {layout.dtype, layout.device});
}

}  // namespace gradus::dist::detail
