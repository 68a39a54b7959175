// docs/guide.md, "Language models and Hugging Face checkpoints": text through a byte-level BPE
// tokenizer, a small Llama trained a few AdamW steps on it, the loss and perplexity of a held-out
// stretch, and the model written as a directory transformers loads, then read back.
//
//   build/examples/example_guide_language_models TOKENIZER_DIR TEXT OUT_DIR
//
// Prints the evaluation before and after training, and checks that OUT_DIR reads back to the
// trained weights.
#include <gradus/gradus.h>
#include <gradus/train/language_model_eval.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using namespace gradus;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string tokenizer_dir = argv[1], text_path = argv[2], out = argv[3];
  manual_seed(0);
  // [guide:language_models]
  // Text to ids with a Hugging Face tokenizer.json (or GPT-2's vocab.json + merges.txt).
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::from_dir(tokenizer_dir);
  const std::vector<uint32_t> ids = tokenizer.encode_parallel(read_text(text_path));
  const data::TokenArray tokens(std::vector<uint16_t>(ids.begin(), ids.end()));  // < 65536 ids
  const auto [train_tokens, val_tokens] = data::split_train_val(tokens);

  // A small Llama: grouped-query attention (2 key/value heads for 4 query heads), SwiGLU, RoPE.
  nn::LlamaConfig config;
  config.vocab_size = tokenizer.vocab_size();
  config.block_size = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_kv_head = 2;
  config.n_embd = 64;
  config.ffn_hidden = nn::LlamaConfig::default_ffn_hidden(64, 32);
  auto model = std::make_shared<nn::Llama>(config);

  // Next-token loss over consecutive windows of 32 tokens, as `gradus eval` reports it.
  train::LanguageModelEvalOptions eval;
  eval.context = 32;
  const train::LanguageModelEval before = train::evaluate_language_model(*model, val_tokens, eval);

  optim::AdamW optimizer(model->parameters(), {.lr = 3e-3});
  data::ContextSampler batches(train_tokens, /*context=*/32, /*batch=*/8, /*seed=*/1);
  for (int step = 0; step < 30; ++step) {
    const auto [x, y] = batches.next();
    const Tensor logits = model->forward(x);
    cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1})).backward();
    optimizer.step();
    optimizer.zero_grad();
  }
  const train::LanguageModelEval after = train::evaluate_language_model(*model, val_tokens, eval);
  std::printf("val_loss %.4f -> %.4f, perplexity %.2f -> %.2f\n", before.loss, after.loss,
              before.perplexity, after.perplexity);

  // A directory that transformers' from_pretrained loads (config.json, model.safetensors), and
  // back: any LlamaForCausalLM directory reads the same way (config.json sets the shape).
  io::save_hf_llama(*model, out);
  const std::shared_ptr<nn::Llama> back = io::load_hf_llama(out);
  // [guide:end]
  const nn::StateDict a = model->state_dict(), b = back->state_dict();
  for (const auto& [name, t] : a.items()) {
    if (t.to_vector<double>() != b.at(name).to_vector<double>()) {
      std::printf("FAIL: %s differs after save_hf_llama -> load_hf_llama\n", name.c_str());
      return 1;
    }
  }
  std::printf("guide_language_models: %zu tensors read back bitwise; %s\n", a.items().size(),
              after.loss < before.loss ? "PASS" : "FAIL: training did not lower the loss");
  return after.loss < before.loss ? 0 : 1;
}
