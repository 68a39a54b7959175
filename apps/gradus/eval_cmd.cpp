// gradus eval: a trained model's loss on data. A language model (a `train --save` file or a
// Hugging Face directory): the mean next-token loss and perplexity over a token stream's
// consecutive windows (train::evaluate_language_model). An image model: loss and accuracy on the
// test split.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "evaluation.h"
#include "gradus/io/io.h"
#include "gradus/train/language_model_eval.h"
#include "language_model.h"
#include "train_setup.h"

namespace gradus::cli {
namespace {

data::TokenArray read_tokens(const EvalOptions& o, LoadedLanguageModel& lm) {
  GRADUS_CHECK(o.tokenizer.empty() || o.data == "text", ValueError,
               "eval: --tokenizer applies to --data text");
  GRADUS_CHECK(o.token_dtype == "uint16" || o.data == "tokens", ValueError,
               "eval: --token-dtype applies to --data tokens");
  if (o.data == "tokens") {
    return data::TokenArray::map_file(o.data_file, data::parse_token_width(o.token_dtype));
  }
  // --data text: the run's characters or tokenizer (the checkpoint's), or --tokenizer.
  if (!o.tokenizer.empty()) lm.codec = TextCodec::bpe(o.tokenizer);
  GRADUS_CHECK(lm.codec.has_value(), ValueError,
               "eval: --data text needs the character vocabulary or tokenizer of the run; ",
               o.checkpoint,
               " has neither: give --tokenizer DIR (or tokenize the text and give "
               "--data tokens)");
  return lm.codec->encode(read_data_file(o.data_file, "eval"));
}

void print_result(const nlohmann::ordered_json& j, bool json) {
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  for (const auto& [key, value] : j.items()) {
    if (value.is_number_float()) {
      std::printf("%s=%.6f\n", key.c_str(), value.get<double>());
    } else {
      std::printf("%s=%s\n", key.c_str(), value.dump().c_str());
    }
  }
}

int eval_language_model(const EvalOptions& o, Device device) {
  GRADUS_CHECK(o.data == "tokens" || o.data == "text", ValueError,
               "eval: a language model is evaluated on --data tokens or --data text, not ", o.data);
  GRADUS_CHECK(!o.data_file.empty(), ValueError, "eval: --data ", o.data,
               " needs --data-file FILE");
  LoadedLanguageModel lm = load_language_model(o.checkpoint, "eval");
  lm.model->to(device);
  const data::TokenArray tokens = read_tokens(o, lm);
  train::LanguageModelEvalOptions options;
  options.context = o.context > 0 ? o.context : lm.spec.context();
  GRADUS_CHECK(lm.spec.family != "gpt" || options.context <= lm.spec.context(), ValueError,
               "eval: --context ", options.context, " is longer than the GPT's (",
               lm.spec.context(), ")");
  options.batch_size = o.batch_size;
  options.device = device;
  options.autocast = amp_option(o.amp);
  const train::LanguageModelEval r = train::evaluate_language_model(*lm.model, tokens, options);
  nlohmann::ordered_json j{{"val_loss", r.loss},         {"perplexity", r.perplexity},
                           {"windows", r.windows},       {"tokens", r.tokens},
                           {"context", options.context}, {"model", lm.spec.family}};
  print_result(j, o.json);
  return 0;
}

int eval_image_model(const EvalOptions& o, Device device) {
  GRADUS_CHECK(o.data == "fashion-mnist" || o.data == "mnist", ValueError, "eval: --model ",
               o.model, " is evaluated on --data fashion-mnist or mnist, not ", o.data);
  GRADUS_CHECK(o.context == 0, ValueError, "eval: --context applies to language models");
  GRADUS_CHECK(o.data_file.empty() && o.tokenizer.empty() && o.token_dtype == "uint16", ValueError,
               "eval: --data-file, --tokenizer and --token-dtype apply to language models (an "
               "image model reads --data-dir)");
  std::shared_ptr<nn::Module> model = nn::make_model(o.model);
  io::load_module(*model, o.checkpoint);
  model->to(device);
  TrainOptions split;
  split.data = o.data;
  split.data_dir = o.data_dir;
  split.limit_test = o.limit;
  const bool flatten = o.model.rfind("mlp", 0) == 0;
  Evaluator evaluate(load_image_split(split, false), o.batch_size, device, 0, dist::default_group(),
                     flatten);
  const EvalResult r = evaluate(*model, amp_option(o.amp));
  nlohmann::ordered_json j{{"loss", r.loss}, {"accuracy", r.accuracy}, {"model", o.model}};
  print_result(j, o.json);
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, EvalOptions& o) {
  CLI::App* c = app.add_subcommand(
      "eval",
      "A trained model's loss: a language model's next-token loss and perplexity on a "
      "token file, an image model's loss and accuracy on the test split");
  c->add_option("--checkpoint", o.checkpoint,
                "A `gradus train --save` file, or a Hugging Face directory (Llama, GPT-2)")
      ->required()
      ->check(CLI::ExistingPath);
  c->add_option("--model", o.model,
                "Image models: which one the file holds (language models say it themselves)")
      ->check(CLI::IsMember(nn::model_names()));
  c->add_option("--data", o.data,
                "tokens (a nanoGPT .bin file), text (with the --save file's characters), "
                "fashion-mnist or mnist")
      ->check(CLI::IsMember({"tokens", "text", "fashion-mnist", "mnist"}))
      ->capture_default_str();
  c->add_option("--data-file", o.data_file, "--data tokens|text: the file");
  c->add_option("--data-dir", o.data_dir, "--data mnist|fashion-mnist: the IDX files' directory");
  c->add_option("--token-dtype", o.token_dtype,
                "--data tokens: the width of the file's ids (uint16, or uint32 as `gradus "
                "tokenize` writes for vocabularies above 65536 ids)")
      ->check(CLI::IsMember({"uint16", "uint32"}))
      ->capture_default_str();
  c->add_option("--tokenizer", o.tokenizer,
                "--data text: a byte-level BPE tokenizer's directory (default: the checkpoint's)")
      ->check(CLI::ExistingDirectory);
  c->add_option("--limit", o.limit, "Image models: the first N test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--context", o.context,
                "Language models: tokens per window (0: the model's context)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--batch-size", o.batch_size, "Windows (or images) per forward")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--amp", o.amp, "Evaluate under autocast: off or bf16")
      ->check(CLI::IsMember({"off", "bf16"}))
      ->capture_default_str();
  c->add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  c->add_option("--threads", o.threads, "CPU threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--json", o.json, "One JSON object instead of key=value lines");
}

int run_eval(const EvalOptions& o) {
  apply_threads(o.threads);
  const Device device = resolve_device(o.device);
  if (!o.model.empty()) return eval_image_model(o, device);
  GRADUS_CHECK(o.limit == 0, ValueError, "eval: --limit applies to image models (--model)");
  GRADUS_CHECK(o.data_dir.empty(), ValueError,
               "eval: --data-dir applies to image models (--model)");
  return eval_language_model(o, device);
}

}  // namespace gradus::cli
