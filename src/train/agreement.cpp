#include "gradus/train/agreement.h"

#include <zlib.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "gradus/ops.h"

namespace gradus::train {

void check_ranks_agree(dist::ProcessGroup& group, const Settings& settings, const std::string& who,
                       const std::string& what) {
  if (group.size() <= 1) return;
  const std::string mine = nlohmann::json(settings).dump();
  // Two collectives whose sizes cannot differ between ranks: the longest text, then every
  // rank's text padded to it (one byte per int32: the MPI engine moves no bytes).
  Tensor length = tensor({static_cast<double>(mine.size())}, {1}, {.dtype = DType::i64});
  group.all_reduce(length, dist::ReduceOp::max, "settings length")->wait();
  const auto longest = static_cast<int64_t>(length.item());
  std::vector<int32_t> bytes(static_cast<size_t>(longest), 0);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  const Tensor input = from_vector<int32_t>(bytes, {longest}, {.dtype = DType::i32});
  const Tensor all = empty({group.size(), longest}, {.dtype = DType::i32});
  group.all_gather(all.reshape({-1}), input, "settings")->wait();
  const std::vector<int32_t> gathered = all.to_vector<int32_t>();

  std::vector<Settings> ranks(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    std::string text;
    for (int64_t i = 0; i < longest; ++i) {
      const int32_t c = gathered[static_cast<size_t>(r * longest + i)];
      if (c == 0) break;
      text.push_back(static_cast<char>(c));
    }
    ranks[static_cast<size_t>(r)] = nlohmann::json::parse(text).get<Settings>();
  }
  // Every key any rank has, in order; a key one rank lacks shows as "(absent)".
  std::map<std::string, bool> keys;
  for (const Settings& s : ranks) {
    for (const auto& [k, v] : s) keys[k] = true;
  }
  std::ostringstream differences;
  int count = 0;
  for (const auto& [key, unused] : keys) {
    auto value_of = [&](const Settings& s) {
      const auto it = s.find(key);
      return it == s.end() ? std::string("(absent)") : it->second;
    };
    bool same = true;
    for (const Settings& s : ranks) same = same && value_of(s) == value_of(ranks[0]);
    if (same) continue;
    if (++count > 8) continue;  // the first few name the problem
    differences << "\n  " << key << ":";
    for (int r = 0; r < group.size(); ++r) {
      differences << (r == 0 ? " " : ", ") << "rank " << r << " "
                  << value_of(ranks[static_cast<size_t>(r)]);
    }
  }
  GRADUS_CHECK(count == 0, ValueError, who, ": the ranks were not started with the same run (",
               what, "): ", count, " setting(s) differ; start every rank with the same options",
               differences.str());
}

std::string module_signature(const nn::Module& module) {
  std::string list;
  int64_t tensors = 0, elements = 0;
  auto add = [&](const std::vector<std::pair<std::string, Tensor>>& named) {
    for (const auto& [name, t] : named) {
      list += name + " " + shape_str(t.sizes()) + " " + dtype_name(t.dtype()) + "\n";
      ++tensors;
      elements += t.numel();
    }
  };
  add(module.named_parameters());
  add(module.named_buffers());
  const uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(list.data()), static_cast<uInt>(list.size()));
  char text[160];
  std::snprintf(text, sizeof text, "%lld tensors, %lld elements, crc32 %08lx",
                static_cast<long long>(tensors), static_cast<long long>(elements),
                static_cast<unsigned long>(crc));
  return text;
}

}  // namespace gradus::train
