// gradus train --model gpt: a GPT language model on a text file (characters) or a nanoGPT .bin
// token file, trained for --iters steps with AdamW (weight decay on matrices and embeddings only,
// as nanoGPT), a linear warm-up then a cosine decay to --min-lr, gradient clipping, and the mean
// validation loss over --eval-iters fixed batches every --eval-every steps and at the end. The
// last line of stdout is "val_loss=<value>". gradus generate samples from the --save file, whose
// metadata holds the model's shape and the vocabulary.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "deferred_losses.h"
#include "evaluation.h"
#include "gradus/gradus.h"
#include "profile_cmd.h"
#include "run_monitor.h"
#include "step_graph.h"
#include "timing.h"
#include "train_outputs.h"

namespace gradus::cli {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GRADUS_CHECK(in.good(), IOError, "train: cannot open --data-file ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string from_hex(const std::string& hex) {
  GRADUS_CHECK(hex.size() % 2 == 0, ValueError, "generate: malformed vocabulary in the checkpoint");
  auto nibble = [](char c) {
    GRADUS_CHECK(std::isxdigit(static_cast<unsigned char>(c)), ValueError,
                 "generate: malformed vocabulary in the checkpoint");
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  }
  return out;
}

nlohmann::json config_json(const nn::GPTConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
          {"n_head", c.n_head},         {"n_embd", c.n_embd},         {"bias", c.bias}};
}

nn::GPTConfig config_from_json(const nlohmann::json& j) {
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

// nanoGPT's schedule: linear warm-up to lr over `warmup` steps, then a half cosine to min_lr at
// `total` steps.
double lr_at(int64_t step, const TrainOptions& o) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / (o.warmup_steps + 1);
  if (step >= o.iters) return o.min_lr;
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, o.iters - o.warmup_steps));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

Tensor lm_loss(nn::GPT& model, const Tensor& x, const Tensor& y) {
  const Tensor logits = model(x);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

}  // namespace

int run_train_lm(const TrainOptions& o) {
  apply_threads(o.threads);
  const Device device = resolve_device(o.device);
  manual_seed(o.seed);
  GRADUS_CHECK(o.data == "text" || o.data == "tokens", ValueError,
               "train: --model gpt trains on --data text or --data tokens, not ", o.data);
  GRADUS_CHECK(!o.data_file.empty(), ValueError, "train: --model gpt needs --data-file FILE");
  GRADUS_CHECK(o.dist.empty(), ValueError, "train: --dist is not supported with --model gpt yet");
  GRADUS_CHECK(o.iters > 0 && o.eval_every > 0 && o.eval_iters > 0, ValueError,
               "train: --iters, --eval-every and --eval-iters must be positive");

  data::CharVocab vocab;
  data::TokenArray tokens;
  int64_t vocab_size = o.vocab_size;
  if (o.data == "text") {
    const std::string text = read_file(o.data_file);
    vocab = data::CharVocab::from_text(text);
    tokens = data::TokenArray(vocab.encode(text));
    vocab_size = vocab.size();
  } else {
    tokens = data::TokenArray::map_file(o.data_file);
    const int64_t needed = tokens.max_token_plus_one();
    if (vocab_size == 0) vocab_size = needed;
    GRADUS_CHECK(vocab_size >= needed, ValueError, "train: --vocab-size ", vocab_size,
                 " is smaller than the file's largest token + 1 (", needed, ")");
  }
  const auto [train_tokens, val_tokens] = data::split_train_val(tokens);
  data::ContextSampler train_batches(train_tokens, o.gpt.context, o.batch_size, o.seed);
  data::ContextSampler val_batches(val_tokens, o.gpt.context, o.batch_size, o.seed + 1);

  nn::GPTConfig config;
  config.vocab_size = vocab_size;
  config.block_size = o.gpt.context;
  config.n_layer = o.gpt.layers;
  config.n_head = o.gpt.heads;
  config.n_embd = o.gpt.width;
  config.dropout = o.dropout;
  nn::GPT model(config);
  model.to(device);

  // Weight decay on matrices and embeddings, none on biases and LayerNorms (nanoGPT's groups).
  optim::AdamWOptions decay;
  decay.lr = o.lr;
  decay.betas = {0.9, o.beta2};
  decay.weight_decay = o.weight_decay < 0 ? 0.1 : o.weight_decay;
  optim::AdamWOptions no_decay = decay;
  no_decay.weight_decay = 0;
  std::vector<Tensor> matrices, vectors;
  for (const Tensor& p : model.trainable_parameters())
    (p.dim() >= 2 ? matrices : vectors).push_back(p);
  optim::AdamW optimizer({{matrices, decay}, {vectors, no_decay}});
  const std::optional<DType> amp = amp_option(o.amp);
  GRADUS_CHECK(amp != DType::f16, ValueError,
               "train: --model gpt supports --amp bf16 (f16 needs loss scaling, not wired here)");
  GRADUS_CHECK(!o.cuda_graph || device.is_cuda(), ValueError,
               "train: --cuda-graph needs a CUDA device, and the run is on ", device.str(),
               " (--device ", o.device, ")");
  // A replayed step reads its learning rate and step counts from the device.
  if (o.cuda_graph) optimizer.set_capturable(true);

  std::printf(
      "train: gpt (%lld parameters, %lld layers, %lld heads, width %lld, context %lld) on "
      "%s: %lld train / %lld val tokens, vocabulary %lld, device %s\n",
      static_cast<long long>(model.num_parameters()), static_cast<long long>(config.n_layer),
      static_cast<long long>(config.n_head), static_cast<long long>(config.n_embd),
      static_cast<long long>(config.block_size), o.data_file.c_str(),
      static_cast<long long>(train_tokens.size()), static_cast<long long>(val_tokens.size()),
      static_cast<long long>(vocab_size), device.str().c_str());
  MetricsFile metrics(o.metrics);
  check_save_path(o.save, true);
  TrainingProfiler profiler(o.profile, o.profile_steps, true, device);  // --profile
  // GPU (or process CPU) use for the progress lines, and per-interval figures with the energy for
  // the metrics lines (run_monitor.h).
  const std::unique_ptr<monitor::DeviceMonitor> device_monitor =
      make_run_monitor(device, std::chrono::seconds(1));

  // The same val_batches windows at every evaluation, so the curve compares like with like.
  auto evaluate = [&] {
    NoGradGuard no_grad;
    model.eval();
    val_batches.set_position(0);
    Tensor total;  // summed where the losses are: one read at the end, not one per batch
    for (int64_t i = 0; i < o.eval_iters; ++i) {
      amp::Autocast autocast(amp.value_or(DType::bf16), amp.has_value());
      const auto [x, y] = val_batches.next(device);
      const Tensor l = lm_loss(model, x, y).to(DType::f64);
      total = total.defined() ? add(total, l) : l;
    }
    model.train();
    return total.item() / static_cast<double>(o.eval_iters);
  };

  model.train();
  const auto run_start = Clock::now();
  double val_loss = NAN, window_loss = 0;
  int64_t window_steps = 0;
  DeferredLosses losses(device, o.read_loss_every);
  auto window_start = Clock::now();
  profiler.at_step(0);
  StepGraph step_graph(o.cuda_graph, kGraphWarmupSteps, "gradus train");
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    // A graph's gradients must stay where the capture found them: zeroed in place.
    optimizer.zero_grad(/*set_to_none=*/!o.cuda_graph);
    Tensor loss;
    {
      amp::Autocast autocast(amp.value_or(DType::bf16), amp.has_value());
      loss = lm_loss(model, x, y);
    }
    loss.backward();
    if (o.grad_clip > 0) optim::clip_grad_norm(model.trainable_parameters(), o.grad_clip);
    optimizer.step();
    return loss;
  };
  for (int64_t step = 0; step < o.iters; ++step) {
    const double lr = lr_at(step, o);
    optimizer.set_lr(lr);  // capturable: written to the device, outside any graph
    const auto [x, y] = train_batches.next(device);
    const Tensor loss = step_graph.run(x, y, train_step);
    profiler.at_step(step + 1);
    losses.add({step, lr, o.batch_size, loss.detach()});
    const bool last = step + 1 == o.iters;
    const bool eval_now = (step + 1) % o.eval_every == 0 || last;
    if (losses.due() || eval_now) {
      losses.flush([&](const StepLoss& s, double l) {
        GRADUS_CHECK(std::isfinite(l), ValueError, "train: the loss became ", l, " at step ",
                     s.step);
        window_loss += l;
        ++window_steps;
      });
    }
    if (eval_now) {
      const double seconds = ms_since(window_start) / 1e3;
      const double tokens_per_s =
          static_cast<double>(window_steps * o.batch_size * o.gpt.context) / seconds;
      val_loss = evaluate();
      const double train_loss = window_loss / static_cast<double>(window_steps);
      const std::string usage = monitor::progress_text(device_monitor->latest());
      std::printf("step %lld: train_loss %.4f val_loss=%.4f lr %.2e %.0f tokens/s%s%s\n",
                  static_cast<long long>(step + 1), train_loss, val_loss, lr, tokens_per_s,
                  usage.empty() ? "" : "  ", usage.c_str());
      std::fflush(stdout);
      metrics.write({{"step", step + 1},
                     {"train_loss", train_loss},
                     {"val_loss", val_loss},
                     {"lr", lr},
                     {"tokens_per_s", tokens_per_s},
                     {"elapsed_s", ms_since(run_start) / 1e3},
                     // Since the previous line: utilisation, peaks, energy (null: unmeasured).
                     {"monitor", monitor_json(device_monitor->take_window())}});
      window_loss = 0;
      window_steps = 0;
      window_start = Clock::now();
    }
  }
  profiler.finish();
  if (!o.save.empty()) {
    check_finite_parameters(model, "--save " + o.save);
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"gradus.model", "gpt"},
                                               {"gradus.gpt_config", config_json(config).dump()}};
    if (o.data == "text") meta["gradus.vocab_hex"] = to_hex(vocab.to_string());
    io::save_module(model, o.save, meta);
    std::printf("saved %s\n", o.save.c_str());
  }
  std::printf("val_loss=%.4f\n", val_loss);
  return 0;
}

void add_gpt_shape_options(CLI::App& c, GptShape& g) {
  const auto positive = CLI::PositiveNumber;
  c.add_option("--context", g.context, "gpt: context length (block size)")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--layers", g.layers, "gpt: transformer blocks")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--heads", g.heads, "gpt: attention heads")->check(positive)->capture_default_str();
  c.add_option("--width", g.width, "gpt: embedding width (a multiple of --heads)")
      ->check(positive)
      ->capture_default_str();
}

void add_lm_train_options(CLI::App& c, TrainOptions& o) {
  add_gpt_shape_options(c, o.gpt);
  c.add_option("--data-file", o.data_file,
               "--data text: a text file (byte vocabulary); --data tokens: a nanoGPT .bin file");
  c.add_option("--vocab-size", o.vocab_size, "--data tokens: vocabulary (0: largest token + 1)")
      ->check(CLI::NonNegativeNumber);
  c.add_option("--iters", o.iters, "gpt: optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.add_option("--eval-every", o.eval_every, "gpt: steps between validation losses")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.add_option("--eval-iters", o.eval_iters, "gpt: validation batches per evaluation")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.add_option("--min-lr", o.min_lr, "gpt: the cosine schedule's final learning rate")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c.add_option("--beta2", o.beta2, "gpt: AdamW's beta2")
      ->check(CLI::Range(0.0, 0.99999))
      ->capture_default_str();
  c.add_option("--grad-clip", o.grad_clip, "gpt: max gradient norm (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* c = app.add_subcommand("generate", "Sample text from a GPT trained with --save");
  c->add_option("--checkpoint", o.checkpoint, "The --save file of `gradus train --model gpt`")
      ->required();
  c->add_option("--prompt", o.prompt, "Text to continue")->capture_default_str();
  c->add_option("--tokens", o.tokens, "Characters to sample")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--temperature", o.temperature, "Softmax temperature (> 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--top-k", o.top_k, "Sample among the k likeliest (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
  c->add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
}

int run_generate(const GenerateOptions& o) {
  const io::SafetensorsHeader header = io::read_safetensors_header(o.checkpoint);
  auto meta = [&](const char* key) -> const std::string* {
    const auto it = header.metadata.find(key);
    return it == header.metadata.end() ? nullptr : &it->second;
  };
  GRADUS_CHECK(meta("gradus.gpt_config") != nullptr, ValueError, "generate: ", o.checkpoint,
               " is not a `gradus train --model gpt --save` file (no gradus.gpt_config metadata)");
  GRADUS_CHECK(meta("gradus.vocab_hex") != nullptr, ValueError, "generate: ", o.checkpoint,
               " has no character vocabulary (trained on --data tokens?)");
  const nn::GPTConfig config = config_from_json(nlohmann::json::parse(*meta("gradus.gpt_config")));
  const data::CharVocab vocab = data::CharVocab::from_string(from_hex(*meta("gradus.vocab_hex")));
  const Device device = resolve_device(o.device);
  nn::GPT model(config);
  io::load_module(model, o.checkpoint);
  model.to(device);
  const std::vector<uint16_t> ids = vocab.encode(o.prompt);
  GRADUS_CHECK(!ids.empty(), ValueError, "generate: --prompt is empty");
  const std::vector<int64_t> wide(ids.begin(), ids.end());
  const Tensor prompt =
      from_vector<int64_t>(wide, {1, static_cast<int64_t>(wide.size())}, {.dtype = DType::i64})
          .to(device);
  Generator gen(o.seed);
  nn::GenerateOptions g;
  g.max_new_tokens = o.tokens;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.generator = &gen;
  const Tensor out = model.generate(prompt, g);
  std::printf("%s\n", vocab.decode(out.reshape({-1}).to_vector<int64_t>()).c_str());
  return 0;
}

}  // namespace gradus::cli
