// The language model of `gradus train`, `generate` and `eval`: GPT-2- or Llama-shaped, described
// by the shape options, by a --save file's metadata, or by a Hugging Face directory's config.json.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "gradus/data/bpe_tokenizer.h"
#include "gradus/data/text.h"
#include "gradus/nn/gpt.h"
#include "gradus/nn/llama.h"

namespace gradus::cli {

struct LanguageModelSpec {
  std::string family = "gpt";  // "gpt" or "llama"
  nn::GPTConfig gpt;
  nn::LlamaConfig llama;

  int64_t context() const { return family == "gpt" ? gpt.block_size : llama.block_size; }
  int64_t vocab_size() const { return family == "gpt" ? gpt.vocab_size : llama.vocab_size; }
  // The one-process model, drawn from the current random state.
  std::shared_ptr<nn::Module> make() const;
  // A model from make() as layers for a pipeline (nn::gpt_layers or nn::llama_layers).
  nn::LayerSequence layers(const nn::Module& model) const;
  // "gpt (N parameters, L layers, H heads, width C, context T)" and the like.
  std::string describe(int64_t parameters) const;
  // --save's metadata: "gradus.model" and the family's config ("gradus.gpt_config" or
  // "gradus.llama_config").
  std::map<std::string, std::string> metadata() const;
};

// A model of `family` ("gpt" or "llama") from the shape options.
LanguageModelSpec spec_from_shape(const std::string& family, const GptShape& shape,
                                  int64_t vocab_size, double dropout = 0.0);
// The run's model from its options (--model, the shape options) and the data's vocabulary.
LanguageModelSpec spec_from_options(const TrainOptions& o, int64_t vocab_size);
// Whether `path` is a Hugging Face directory (a directory with config.json).
bool is_hf_directory(const std::string& path);
// The family and config of a Hugging Face directory (model_type llama or gpt2).
LanguageModelSpec spec_from_hf(const std::string& dir);

// How text becomes a language model's ids and back: the distinct bytes of a `--data text` run's
// file (data::CharVocab), or a byte-level BPE tokenizer (--tokenizer DIR).
class TextCodec {
 public:
  static TextCodec chars(data::CharVocab vocab);
  static TextCodec bpe(const std::string& dir);
  // The text's ids: uint16 when the vocabulary fits, else uint32.
  data::TokenArray encode(std::string_view text, int threads = 0) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t size() const;
  // --save's metadata entry that brings it back ("gradus.vocab_hex" or "gradus.tokenizer").
  std::map<std::string, std::string> metadata() const;
  // The tokenizer's directory (BPE only; empty for characters).
  const std::string& tokenizer_dir() const { return dir_; }

 private:
  std::optional<data::CharVocab> chars_;
  std::optional<data::BpeTokenizer> bpe_;
  std::string dir_;
};

// A trained model read back: a `gradus train --save` file or a Hugging Face directory.
struct LoadedLanguageModel {
  LanguageModelSpec spec;
  std::shared_ptr<nn::Module> model;
  // The text codec its run used: a --data text run's characters or its --tokenizer (its
  // metadata), or a Hugging Face directory's tokenizer.json.
  std::optional<TextCodec> codec;
};
LoadedLanguageModel load_language_model(const std::string& path, const char* who);

// --save-hf: a Hugging Face directory of the one-process model, with the tokenizer's files
// (tokenizer.json, vocab.json, merges.txt, tokenizer_config.json: those it has) when it has one.
void save_hf(const LanguageModelSpec& spec, const nn::Module& model, const std::string& dir,
             const std::string& tokenizer_dir = "");

std::string to_hex(const std::string& bytes);
// The bytes of a --data-file; IOError naming it (and `who`, the command) when it cannot be read.
std::string read_data_file(const std::string& path, const char* who);

}  // namespace gradus::cli
