// The language models of the CLI (language_model.h).
#include "language_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gradus/io/io.h"

namespace gradus::cli {
namespace {

nlohmann::json gpt_json(const nn::GPTConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
          {"n_head", c.n_head},         {"n_embd", c.n_embd},         {"bias", c.bias}};
}

nn::GPTConfig gpt_from_json(const nlohmann::json& j) {
  nn::GPTConfig c;
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.block_size = j.at("block_size").get<int64_t>();
  c.n_layer = j.at("n_layer").get<int64_t>();
  c.n_head = j.at("n_head").get<int64_t>();
  c.n_embd = j.at("n_embd").get<int64_t>();
  c.bias = j.at("bias").get<bool>();
  c.dropout = 0.0;
  return c;
}

nlohmann::json llama_json(const nn::LlamaConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"block_size", c.block_size},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_kv_head", c.n_kv_head},
          {"n_embd", c.n_embd},
          {"ffn_hidden", c.ffn_hidden},
          {"head_dim", c.head_dim},
          {"rms_norm_eps", c.rms_norm_eps},
          {"rope_theta", c.rope_theta},
          {"tie_embeddings", c.tie_embeddings},
          {"attention_bias", c.attention_bias},
          {"mlp_bias", c.mlp_bias}};
}

nn::LlamaConfig llama_from_json(const nlohmann::json& j) {
  nn::LlamaConfig c;
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.block_size = j.at("block_size").get<int64_t>();
  c.n_layer = j.at("n_layer").get<int64_t>();
  c.n_head = j.at("n_head").get<int64_t>();
  c.n_kv_head = j.at("n_kv_head").get<int64_t>();
  c.n_embd = j.at("n_embd").get<int64_t>();
  c.ffn_hidden = j.at("ffn_hidden").get<int64_t>();
  c.head_dim = j.at("head_dim").get<int64_t>();
  c.rms_norm_eps = j.at("rms_norm_eps").get<double>();
  c.rope_theta = j.at("rope_theta").get<double>();
  c.tie_embeddings = j.at("tie_embeddings").get<bool>();
  c.attention_bias = j.at("attention_bias").get<bool>();
  c.mlp_bias = j.at("mlp_bias").get<bool>();
  return c;
}

std::string from_hex(const std::string& hex, const char* who) {
  GRADUS_CHECK(hex.size() % 2 == 0, ValueError, who, ": malformed vocabulary in the checkpoint");
  auto nibble = [who](char c) {
    GRADUS_CHECK(std::isxdigit(static_cast<unsigned char>(c)), ValueError, who,
                 ": malformed vocabulary in the checkpoint");
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  }
  return out;
}

}  // namespace

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

TextCodec TextCodec::chars(data::CharVocab vocab) {
  TextCodec c;
  c.chars_ = std::move(vocab);
  return c;
}

TextCodec TextCodec::bpe(const std::string& dir) {
  TextCodec c;
  c.bpe_ = data::BpeTokenizer::from_dir(dir);
  c.dir_ = std::filesystem::absolute(dir).string();
  return c;
}

data::TokenArray TextCodec::encode(std::string_view text, int threads) const {
  if (chars_) return data::TokenArray(chars_->encode(text));
  std::vector<uint32_t> ids = bpe_->encode_parallel(text, threads);
  if (bpe_->vocab_size() > 65536) return data::TokenArray(std::move(ids));
  return data::TokenArray(std::vector<uint16_t>(ids.begin(), ids.end()));  // half the memory
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const {
  return chars_ ? chars_->decode(ids) : bpe_->decode(ids);
}

int64_t TextCodec::size() const {
  return chars_ ? chars_->size() : bpe_->vocab_size();
}

std::map<std::string, std::string> TextCodec::metadata() const {
  if (chars_) return {{"gradus.vocab_hex", to_hex(chars_->to_string())}};
  return {{"gradus.tokenizer", dir_}};
}

std::string read_data_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  GRADUS_CHECK(in.good(), IOError, who, ": cannot open --data-file ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<nn::Module> LanguageModelSpec::make() const {
  if (family == "gpt") return std::make_shared<nn::GPT>(gpt);
  return std::make_shared<nn::Llama>(llama);
}

nn::LayerSequence LanguageModelSpec::layers(const nn::Module& model) const {
  if (family == "gpt") return nn::gpt_layers(dynamic_cast<const nn::GPT&>(model));
  return nn::llama_layers(dynamic_cast<const nn::Llama&>(model));
}

std::string LanguageModelSpec::describe(int64_t parameters) const {
  if (family == "gpt") {
    return detail::str_cat("gpt (", parameters, " parameters, ", gpt.n_layer, " layers, ",
                           gpt.n_head, " heads, width ", gpt.n_embd, ", context ", gpt.block_size,
                           ")");
  }
  return detail::str_cat("llama (", parameters, " parameters, ", llama.n_layer, " layers, ",
                         llama.n_head, " heads, ", llama.n_kv_head, " kv heads, width ",
                         llama.n_embd, ", ffn ", llama.ffn_hidden, ", context ", llama.block_size,
                         ")");
}

std::map<std::string, std::string> LanguageModelSpec::metadata() const {
  if (family == "gpt")
    return {{"gradus.model", "gpt"}, {"gradus.gpt_config", gpt_json(gpt).dump()}};
  return {{"gradus.model", "llama"}, {"gradus.llama_config", llama_json(llama).dump()}};
}

LanguageModelSpec spec_from_shape(const std::string& family, const GptShape& shape,
                                  int64_t vocab_size, double dropout) {
  LanguageModelSpec spec;
  spec.family = family;
  if (family == "gpt") {
    spec.gpt = gpt_config(shape, vocab_size, dropout);
    return spec;
  }
  GRADUS_CHECK(family == "llama", ValueError, "no language model \"", family, "\" (gpt, llama)");
  nn::LlamaConfig& c = spec.llama;
  c.vocab_size = vocab_size;
  c.block_size = shape.context;
  c.n_layer = shape.layers;
  c.n_head = shape.heads;
  c.n_kv_head = shape.kv_heads > 0 ? shape.kv_heads : shape.heads;
  c.n_embd = shape.width;
  c.ffn_hidden =
      shape.ffn_width > 0 ? shape.ffn_width : nn::LlamaConfig::default_ffn_hidden(shape.width, 32);
  c.rope_theta = shape.rope_theta;
  c.tie_embeddings = shape.tie_embeddings;
  c.attention_dropout = dropout;
  c.validate();
  return spec;
}

LanguageModelSpec spec_from_options(const TrainOptions& o, int64_t vocab_size) {
  return spec_from_shape(o.model, o.gpt, vocab_size, o.dropout);
}

bool is_hf_directory(const std::string& path) {
  return std::filesystem::is_directory(path) &&
         std::filesystem::exists(std::filesystem::path(path) / "config.json");
}

LanguageModelSpec spec_from_hf(const std::string& dir) {
  const std::string type = io::hf_model_type(dir);
  const std::string config = (std::filesystem::path(dir) / "config.json").string();
  LanguageModelSpec spec;
  if (type == "llama") {
    spec.family = "llama";
    spec.llama = io::read_hf_llama_config(config);
  } else if (type == "gpt2") {
    spec.family = "gpt";
    spec.gpt = io::read_hf_gpt2_config(config);
  } else {
    throw ValueError(config + ": model_type \"" + type + "\" is not supported (llama, gpt2)");
  }
  return spec;
}

LoadedLanguageModel load_language_model(const std::string& path, const char* who) {
  LoadedLanguageModel out;
  if (is_hf_directory(path)) {
    out.spec = spec_from_hf(path);
    out.model = io::load_hf_causal_lm(path);
    const std::filesystem::path d(path);
    if (std::filesystem::exists(d / "tokenizer.json") ||
        (std::filesystem::exists(d / "vocab.json") && std::filesystem::exists(d / "merges.txt"))) {
      out.codec = TextCodec::bpe(path);
    }
    return out;
  }
  GRADUS_CHECK(std::filesystem::is_regular_file(path), IOError, who, ": ", path,
               " is neither a `gradus train --save` file nor a Hugging Face directory "
               "(config.json and model.safetensors)");
  const io::SafetensorsHeader header = io::read_safetensors_header(path);
  auto meta = [&](const char* key) -> const std::string* {
    const auto it = header.metadata.find(key);
    return it == header.metadata.end() ? nullptr : &it->second;
  };
  if (meta("gradus.llama_config") != nullptr) {
    out.spec.family = "llama";
    out.spec.llama = llama_from_json(nlohmann::json::parse(*meta("gradus.llama_config")));
  } else if (meta("gradus.gpt_config") != nullptr) {
    out.spec.gpt = gpt_from_json(nlohmann::json::parse(*meta("gradus.gpt_config")));
  } else {
    throw ValueError(std::string(who) + ": " + path +
                     " is not a `gradus train --model gpt|llama --save` file (no "
                     "gradus.gpt_config or gradus.llama_config metadata)");
  }
  if (meta("gradus.vocab_hex") != nullptr) {
    out.codec =
        TextCodec::chars(data::CharVocab::from_string(from_hex(*meta("gradus.vocab_hex"), who)));
  } else if (meta("gradus.tokenizer") != nullptr &&
             std::filesystem::is_directory(*meta("gradus.tokenizer"))) {
    out.codec = TextCodec::bpe(*meta("gradus.tokenizer"));
  }
  out.model = out.spec.make();
  io::load_module(*out.model, path);
  return out;
}

void save_hf(const LanguageModelSpec& spec, const nn::Module& model, const std::string& dir,
             const std::string& tokenizer_dir) {
  if (spec.family == "gpt") {
    io::save_hf_gpt2(dynamic_cast<const nn::GPT&>(model), dir);
  } else {
    io::save_hf_llama(dynamic_cast<const nn::Llama&>(model), dir);
  }
  if (tokenizer_dir.empty()) return;
  // transformers' AutoTokenizer reads these beside the weights.
  for (const char* file : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                           "special_tokens_map.json"}) {
    const std::filesystem::path from = std::filesystem::path(tokenizer_dir) / file;
    if (!std::filesystem::exists(from)) continue;
    std::ifstream in(from, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    io::write_file_atomic((std::filesystem::path(dir) / file).string(), bytes.str());
  }
}

}  // namespace gradus::cli
