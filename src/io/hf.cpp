// Hugging Face directories (gradus/io/hf.h): sharded weights, config.json, Llama both ways.
#include "gradus/io/hf.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "gradus/autograd.h"
#include "gradus/io/atomic_file.h"
#include "gradus/io/hf_gpt2.h"
#include "gradus/io/safetensors.h"

namespace gradus::io {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

nlohmann::json read_json(const std::string& path, const char* who) {
  std::ifstream in(path);
  GRADUS_CHECK(in.good(), IOError, who, ": cannot open ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(std::string(who) + ": " + path + " is not valid JSON: " + e.what());
  }
}

// A typed field of a config, with a default; ValueError naming the key when it has another type.
template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ValueError(path + ": \"" + key + "\" has the wrong type (" + j[key].dump() + ")");
  }
}

}  // namespace

std::string hf_model_type(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const nlohmann::json j = read_json(path, "hf_model_type");
  GRADUS_CHECK(j.is_object() && j.contains("model_type") && j["model_type"].is_string(), ValueError,
               "hf_model_type: ", path, " has no \"model_type\"");
  return j["model_type"].get<std::string>();
}

std::vector<std::pair<std::string, Tensor>> read_hf_weights(const std::string& dir) {
  const fs::path d(dir);
  GRADUS_CHECK(fs::is_directory(d), IOError, "read_hf_weights: ", dir, " is not a directory");
  if (!fs::exists(d / kIndexName)) {
    GRADUS_CHECK(fs::exists(d / "model.safetensors"), IOError, "read_hf_weights: ", dir,
                 " has neither model.safetensors nor ", kIndexName,
                 " (only safetensors checkpoints are read, not pytorch_model.bin)");
    return read_safetensors((d / "model.safetensors").string()).tensors;
  }
  const std::string index_path = (d / kIndexName).string();
  const nlohmann::json index = read_json(index_path, "read_hf_weights");
  GRADUS_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               IOError, "read_hf_weights: ", index_path, " has no \"weight_map\" object");
  std::map<std::string, std::string> where;  // tensor -> shard
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    GRADUS_CHECK(file.is_string(), IOError, "read_hf_weights: ", index_path, ": the shard of ",
                 name, " is not a file name");
    const std::string shard = file.get<std::string>();
    GRADUS_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), IOError,
                 "read_hf_weights: ", index_path, ": shard name \"", shard,
                 "\" must be a file in the directory");
    where[name] = shard;
    shards.insert(shard);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& shard : shards) {
    for (auto& [name, t] : read_safetensors((d / shard).string()).tensors) {
      auto it = where.find(name);
      GRADUS_CHECK(it != where.end() && it->second == shard, IOError, "read_hf_weights: ", shard,
                   " holds ", name, ", which ", index_path, " places ",
                   it == where.end() ? "nowhere" : "in " + it->second);
      out.emplace_back(name, t);
      where.erase(it);
    }
  }
  GRADUS_CHECK(where.empty(), IOError, "read_hf_weights: ", index_path, " names ", where.size(),
               " tensors its shards do not hold (e.g. ", where.empty() ? "" : where.begin()->first,
               " in ", where.empty() ? "" : where.begin()->second, ")");
  return out;
}

void write_hf_directory(const std::string& dir, const std::string& config_json,
                        const std::vector<std::pair<std::string, Tensor>>& weights,
                        const HfSaveOptions& o) {
  GRADUS_CHECK(o.max_shard_bytes > 0, ValueError,
               "write_hf_directory: max_shard_bytes must be positive, got ", o.max_shard_bytes);
  const fs::path d(dir);
  std::error_code ec;
  fs::create_directories(d, ec);
  GRADUS_CHECK(fs::is_directory(d), IOError, "write_hf_directory: cannot create ", dir, ": ",
               ec.message());
  // Shards in order, each closed before it would pass the limit (a tensor larger than the limit
  // gets a shard of its own, as in transformers).
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : weights) {
    const Tensor cast = o.dtype ? t.detach().to(*o.dtype) : t.detach();
    const int64_t bytes = cast.numel() * static_cast<int64_t>(dtype_size(cast.dtype()));
    if (!shards.back().empty() && shard_bytes + bytes > o.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, cast);
    shard_bytes += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((d / "model.safetensors").string(), shards[0], metadata);
    written.insert("model.safetensors");
  } else {
    nlohmann::json index{{"metadata", {{"total_size", total}}},
                         {"weight_map", nlohmann::json::object()}};
    const size_t n = shards.size();
    for (size_t i = 0; i < n; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, n);
      save_safetensors((d / name).string(), shards[i], metadata);
      written.insert(name);
      for (const auto& [tensor, t] : shards[i]) index["weight_map"][tensor] = name;
    }
    write_file_atomic((d / kIndexName).string(), index.dump(2) + "\n");
    written.insert(kIndexName);
  }
  // Weights of an earlier save that this one does not replace would be read with it.
  for (const auto& entry : fs::directory_iterator(d)) {
    const std::string f = entry.path().filename().string();
    const bool weights_file =
        f == kIndexName || (f.starts_with("model") && f.ends_with(".safetensors"));
    if (weights_file && !written.contains(f)) fs::remove(entry.path());
  }
  write_file_atomic((d / "config.json").string(), config_json);
}

// ------------------------------------------------------------------------------------------ Llama
nn::LlamaConfig read_hf_llama_config(const std::string& path) {
  const nlohmann::json j = read_json(path, "read_hf_llama_config");
  GRADUS_CHECK(j.is_object(), ValueError, "read_hf_llama_config: ", path, " is not an object");
  const std::string type = field<std::string>(j, "model_type", "llama", path);
  GRADUS_CHECK(type == "llama", ValueError, "read_hf_llama_config: ", path, ": model_type \"", type,
               "\" is not llama");
  nn::LlamaConfig c;
  c.vocab_size = field<int64_t>(j, "vocab_size", 32000, path);
  c.n_embd = field<int64_t>(j, "hidden_size", 4096, path);
  c.ffn_hidden = field<int64_t>(j, "intermediate_size", 11008, path);
  c.n_layer = field<int64_t>(j, "num_hidden_layers", 32, path);
  c.n_head = field<int64_t>(j, "num_attention_heads", 32, path);
  c.n_kv_head = field<int64_t>(j, "num_key_value_heads", c.n_head, path);
  c.head_dim = field<int64_t>(j, "head_dim", 0, path);
  if (c.head_dim * c.n_head == c.n_embd) c.head_dim = 0;  // the default, written explicitly
  c.block_size = field<int64_t>(j, "max_position_embeddings", 2048, path);
  c.rms_norm_eps = field<double>(j, "rms_norm_eps", 1e-6, path);
  c.tie_embeddings = field<bool>(j, "tie_word_embeddings", false, path);
  c.attention_bias = field<bool>(j, "attention_bias", false, path);
  c.mlp_bias = field<bool>(j, "mlp_bias", false, path);
  c.rope_theta = field<double>(j, "rope_theta", 10000.0, path);
  // transformers 5 keeps RoPE's settings in rope_parameters; earlier versions in rope_theta and
  // rope_scaling.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    GRADUS_CHECK(j[key].is_object(), ValueError, "read_hf_llama_config: ", path, ": \"", key,
                 "\" must be an object");
    const nlohmann::json& r = j[key];
    const std::string rope =
        field<std::string>(r, "rope_type", field<std::string>(r, "type", "default", path), path);
    GRADUS_CHECK(rope == "default", ValueError, "read_hf_llama_config: ", path, ": ", key,
                 " type \"", rope, "\" is not supported (only the default RoPE)");
    c.rope_theta = field<double>(r, "rope_theta", c.rope_theta, path);
  }
  const std::string act = field<std::string>(j, "hidden_act", "silu", path);
  GRADUS_CHECK(act == "silu", ValueError, "read_hf_llama_config: ", path, ": hidden_act \"", act,
               "\" is not supported (silu)");
  c.attention_dropout = 0.0;  // fine-tuning chooses its own
  try {
    c.validate();
  } catch (const ValueError& e) {
    throw ValueError(path + ": " + e.what());
  }
  return c;
}

void load_hf_llama_weights(nn::Llama& model, const std::string& dir) {
  nn::StateDict state;
  for (auto& [name, t] : read_hf_weights(dir)) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older versions saved
    // A LlamaModel (no head) exports without the "model." prefix.
    state.insert(name.starts_with("model.") || name == "lm_head.weight" ? name : "model." + name,
                 t);
  }
  // A tied head is not stored: it is the token embedding.
  if (model.config.tie_embeddings && !state.contains("lm_head.weight") &&
      state.contains("model.embed_tokens.weight")) {
    state.insert("lm_head.weight", state.at("model.embed_tokens.weight"));
  }
  NoGradGuard no_grad;
  model.load_state_dict(state, true);
}

std::shared_ptr<nn::Llama> load_hf_llama(const std::string& dir) {
  auto model =
      std::make_shared<nn::Llama>(read_hf_llama_config((fs::path(dir) / "config.json").string()));
  load_hf_llama_weights(*model, dir);
  return model;
}

std::string hf_torch_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      throw ValueError(std::string("save_hf: parameters of dtype ") + dtype_name(t) +
                       " have no transformers equivalent");
  }
}

namespace {
// The model's parameters under their names, the tied head left out.
std::vector<std::pair<std::string, Tensor>> weights_without(const nn::Module& model,
                                                            const std::string& tied_head) {
  std::vector<std::pair<std::string, Tensor>> out;
  const nn::StateDict state = model.state_dict();
  for (const auto& [name, t] : state.items()) {
    if (name != tied_head) out.emplace_back(name, t);
  }
  return out;
}
}  // namespace

void save_hf_llama(const nn::Llama& model, const std::string& dir, const HfSaveOptions& o) {
  const nn::LlamaConfig& c = model.config;
  const DType dtype = o.dtype.value_or(model.norm->weight.dtype());
  nlohmann::json j{{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"vocab_size", c.vocab_size},
                   {"hidden_size", c.n_embd},
                   {"intermediate_size", c.ffn_hidden},
                   {"num_hidden_layers", c.n_layer},
                   {"num_attention_heads", c.n_head},
                   {"num_key_value_heads", c.n_kv_head},
                   {"head_dim", c.head_size()},
                   {"max_position_embeddings", c.block_size},
                   {"rms_norm_eps", c.rms_norm_eps},
                   {"rope_theta", c.rope_theta},
                   {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
                   {"hidden_act", "silu"},
                   {"initializer_range", 0.02},
                   {"tie_word_embeddings", c.tie_embeddings},
                   {"attention_bias", c.attention_bias},
                   {"mlp_bias", c.mlp_bias},
                   {"attention_dropout", c.attention_dropout},
                   {"use_cache", true},
                   {"torch_dtype", hf_torch_dtype(dtype)}};
  write_hf_directory(dir, j.dump(2) + "\n",
                     weights_without(model, c.tie_embeddings ? "lm_head.weight" : ""), o);
}

std::shared_ptr<nn::Module> load_hf_causal_lm(const std::string& dir) {
  const std::string type = hf_model_type(dir);
  if (type == "llama") return load_hf_llama(dir);
  if (type == "gpt2") return load_hf_gpt2(dir);
  throw ValueError("load_hf_causal_lm: " + dir + "/config.json: model_type \"" + type +
                   "\" is not supported (llama, gpt2)");
}

}  // namespace gradus::io
