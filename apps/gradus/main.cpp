// gradus: train, benchmark and inspect from the command line.
//   gradus train [--model mlp|cnn] [--epochs E] ...   train on Fashion-MNIST
//   gradus bench --model mlp-large --batch-size 256    time training steps (one JSON line)
//   gradus info                                        version, build, BLAS, devices
//   gradus inspect FILE.safetensors [--json]           validate a file, list tensors + metadata
//   gradus monitor [--interval 1s] [--csv]             GPU and host readings, like nvidia-smi dmon
//   gradus plot run.jsonl ... -o out.png               loss/accuracy/throughput curves of runs
//   gradus tokenize --tokenizer DIR --input TEXT --output TOKENS.bin   BPE-encode a text file
// Exit codes: 0 success, 1 runtime error (message on stderr), 2 bad command line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <sstream>

#include "commands.h"
#include "gradus/core/device.h"
#include "gradus/core/error.h"
#include "gradus/dist/process_group.h"
#include "gradus/nn/models.h"
#include "gradus/train/strategy.h"
#include "profile_cmd.h"

namespace {

// --device values are checked while parsing, so a typo is a command-line error (exit code 2).
const CLI::Validator kDevice(
    [](std::string& text) -> std::string {
      try {
        (void)gradus::Device::parse(text);
        return {};
      } catch (const gradus::Error& e) {
        return e.what();
      }
    },
    "DEVICE");

// --dist: the training layer's data-parallel strategies (every registered one but "local"), and
// a help text listing them with what each does.
std::vector<std::string> dist_choices() {
  std::vector<std::string> names;
  for (const gradus::train::StrategyInfo& s : gradus::train::strategies()) {
    if (std::string(s.name) != "local") names.push_back(s.name);
  }
  return names;
}
// --gather-dtype and --reduce-dtype (train and bench --dist).
void add_communication_dtypes(CLI::App* c, std::string& gather, std::string& reduce) {
  c->add_option("--gather-dtype", gather,
                "--dist fsdp: gather each block's parameters in this dtype (bf16, f16: half the "
                "bytes; the block computes with the master weights rounded to it)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  c->add_option("--reduce-dtype", reduce,
                "--dist zero2|fsdp: reduce-scatter the gradients in this dtype (the master shards "
                "stay float32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
}

std::string dist_help(const std::string& what) {
  std::string text = what + ": ";
  for (const gradus::train::StrategyInfo& s : gradus::train::strategies()) {
    if (std::string(s.name) == "local") continue;
    if (text.back() != ' ') text += "; ";
    text += std::string(s.name) + " (" + s.description + ")";
  }
  return text;
}

// Number checks. CLI11's Range lets NaN through (every comparison with NaN is false) and prints
// its bounds as 309-digit numbers; these reject NaN and infinity and say plainly what is
// expected. A failed check is a command-line error (exit code 2).
std::string shown(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

CLI::Validator number_in(double lo, bool lo_open, double hi, const std::string& name) {
  const std::string expected = hi == HUGE_VAL ? (lo_open ? "> " : ">= ") + shown(lo)
                                              : std::string("in ") + (lo_open ? "(" : "[") +
                                                    shown(lo) + ", " + shown(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v)) {
          return "'" + text + "' is not a finite number (expected a number " + expected + ")";
        }
        if ((lo_open ? v <= lo : v < lo) || v > hi) {
          return "must be " + expected + " (got " + text + ")";
        }
        return {};
      },
      name);
}
const CLI::Validator kPositive = number_in(0, true, HUGE_VAL, "> 0");
const CLI::Validator kNonNegative = number_in(0, false, HUGE_VAL, ">= 0");
const CLI::Validator kFinitePositiveSeconds = number_in(0.1, false, 86400.0, "SECONDS");

// Unsigned options (--seed): "-1" would silently wrap to 18446744073709551615.
const CLI::Validator kUnsigned(
    [](std::string& text) -> std::string {
      if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) return {};
      return "'" + text + "' is not a non-negative integer";
    },
    "UINT");

// Sizes: a number of bytes with an optional unit (KiB, MiB, GiB, KB, MB, GB, K, M, G).
const CLI::Validator kByteSize(
    [](std::string& text) -> std::string {
      try {
        (void)gradus::cli::parse_byte_size(text);
        return {};
      } catch (const gradus::Error& e) {
        return e.what();
      }
    },
    "SIZE");

const CLI::Validator kPositiveIntegerOrAuto(
    [](std::string& text) -> std::string {
      if (text == "auto") return {};
      if (!text.empty() && text.size() < 16 &&
          text.find_first_not_of("0123456789") == std::string::npos && std::stoll(text) > 0) {
        return {};
      }
      return "'" + text + "' is not a positive integer or 'auto'";
    },
    "N|auto");

// The effective configuration of a subcommand in --config's TOML: each option given (flag or
// file) with the value the run uses, then each other option's stated default as a comment. Read
// back with --config it sets exactly the options given, so the same run follows, and an option
// that needs another (--checkpoint-every) is not set by its default.
std::string effective_config(const CLI::App& command) {
  auto value_text = [](const CLI::Option* opt, std::vector<std::string> values) {
    if (values.empty()) values = {opt->get_default_str()};  // an optional value left out
    // A repeated option keeps its last value unless it collects them (--freeze).
    if (opt->get_multi_option_policy() != CLI::MultiOptionPolicy::TakeAll) {
      values = {values.back()};
    }
    if (values.size() == 1 && opt->get_multi_option_policy() != CLI::MultiOptionPolicy::TakeAll) {
      return CLI::detail::convert_arg_for_ini(values[0]);
    }
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      list += (i > 0 ? ", " : "") + CLI::detail::convert_arg_for_ini(values[i]);
    }
    return list + "]";
  };
  std::string given = "# gradus train: the options given\n", defaults = "# and the defaults\n";
  for (const CLI::Option* opt : command.get_options()) {
    if (!opt->get_configurable() || opt->get_lnames().empty()) continue;  // --help, --config, ...
    const std::string& name = opt->get_lnames()[0];
    if (opt->count() > 0) {
      given += name + "=" + value_text(opt, opt->results()) + "\n";
    } else if (opt->get_expected_min() > 0 && !opt->get_default_str().empty()) {
      defaults += "# " + name + "=" + value_text(opt, {opt->get_default_str()}) + "\n";
    }
  }
  return given + defaults;
}

// `gradus train --config FILE`: the file's keys (the long option names; CLI11's TOML reader) become
// flags placed before the command line's own, so a flag given there wins (every train option takes
// its last value). Unknown keys are then refused by the parser like unknown flags. Returns the
// arguments to parse; a file that cannot be read is a gradus::Error naming it.
std::vector<std::string> expand_config(const std::vector<std::string>& args) {
  const auto train = std::find(args.begin(), args.end(), std::string("train"));
  if (train == args.end()) return args;
  std::vector<std::string> rest(train + 1, args.end());
  std::string file;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--config" && i + 1 < rest.size()) {
      file = rest[i + 1];
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i),
                 rest.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      break;
    }
    if (rest[i].starts_with("--config=")) {
      file = rest[i].substr(9);
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (file.empty()) return args;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(file);
  } catch (const CLI::Error& e) {
    throw gradus::IOError("train: --config " + file + ": " + e.what());
  }
  std::vector<std::string> out(args.begin(), train + 1);
  for (const CLI::ConfigItem& item : items) {
    // CLI11 reports a [section] header as an item of its own; sections are not options.
    if (item.name == "++" || item.name == "--") continue;
    GRADUS_CHECK(item.parents.empty() || (item.parents.size() == 1 && item.parents[0] == "default"),
                 gradus::ValueError, "train: --config ", file, ": [", item.parents[0], "] ",
                 item.name, ": sections are not read; write the options at the top level");
    for (const std::string& value : item.inputs) out.push_back("--" + item.name + "=" + value);
    if (item.inputs.empty()) out.push_back("--" + item.name);
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

using gradus::cli::BenchOptions;
using gradus::cli::TrainOptions;

void add_train(CLI::App& app, TrainOptions& o) {
  CLI::App* c = app.add_subcommand("train", "Train a model and report test accuracy");
  // A repeated option takes its last value, so scripts can append overrides to a base command.
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // (Expanded into flags before parsing: expand_config.)
  std::string config_file;
  c->add_option("--config", config_file,
                "Read options from a TOML file: keys are the long option names (batch-size = 128, "
                "model = \"gpt\"); command-line flags override it")
      ->configurable(false);
  c->add_flag("--print-config", o.print_config,
              "Print the effective configuration (--config's format) and exit without training")
      ->configurable(false);
  std::vector<std::string> models = gradus::nn::model_names();
  models.push_back("gpt");
  models.push_back("llama");
  c->add_option("--model", o.model,
                "Model: mlp, cnn, resnet20, resnet18 (images; also mlp-bench, mlp-large, "
                "cnn-bench), gpt or llama (text)")
      ->check(CLI::IsMember(models))
      ->capture_default_str();
  c->add_option("--data", o.data,
                "Dataset: fashion-mnist or mnist (images), text or tokens (--model gpt|llama)")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "text", "tokens"}))
      ->capture_default_str();
  gradus::cli::add_lm_train_options(*c, o);
  gradus::cli::add_augment_options(*c, o);
  gradus::cli::add_model_parallel_options(*c, o);
  gradus::cli::add_profile_options(*c, o);
  c->add_option("--data-dir", o.data_dir,
                "Directory with the four IDX files (default for fashion-mnist: "
                "/usr/share/datasets/fashion-mnist)");
  c->add_option("--dropout", o.dropout, "mlp: dropout probability after each hidden layer")
      ->check(number_in(0.0, false, 0.99, "RANGE"))
      ->capture_default_str();
  c->add_option("--init-from", o.init_from,
                "Start from these weights (a .safetensors file with the model's state_dict "
                "names, e.g. an earlier run's --save, or for gpt/llama a Hugging Face directory, "
                "whose config.json sets the shape); with --freeze, fine-tunes the rest")
      ->check(CLI::ExistingPath);
  c->add_option("--freeze", o.freeze,
                "Freeze the parameters whose names start with PREFIX (e.g. features. or 0.; "
                "repeatable): no gradient, no update, batch norms under them kept in eval mode")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--amp", o.amp,
                "Mixed precision: bf16 or f16 runs matmul/linear/conv in 16 bits and keeps "
                "losses, norms and reductions in float32 (weights stay float32); f16 adds "
                "dynamic loss scaling")
      ->check(CLI::IsMember({"off", "bf16", "f16"}))
      ->capture_default_str();
  c->add_option("--grad-checkpoint", o.grad_checkpoint,
                "Activation checkpointing: keep only every Nth layer's input and recompute the "
                "rest in backward (less memory, more compute; N=1 when given alone)")
      ->expected(0, 1)
      ->default_str("1")
      ->check(kPositive);
  c->add_option("--memory-limit", o.memory_limit,
                "Most memory CPU tensors may hold (e.g. 1GiB); above it an allocation fails "
                "with an out-of-memory error, as on a full GPU")
      ->check(kByteSize);
  c->add_option("--epochs", o.epochs, "Passes over the training set")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option_function<std::string>(
       "--batch-size",
       [&o](const std::string& v) {
         o.batch_size_auto = v == "auto";
         if (!o.batch_size_auto) o.batch_size = std::stoll(v);
       },
       "Examples per step (the global batch with --dist; default 128), or auto: the largest "
       "that fits in memory (GPU, or --memory-limit on the CPU), found by trying steps")
      ->check(kPositiveIntegerOrAuto);
  c->add_option("--lr", o.lr, "Peak learning rate")->check(kPositive)->capture_default_str();
  c->add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  c->add_option("--momentum", o.momentum, "SGD momentum")
      ->check(number_in(0.0, false, 1.0, "RANGE"))
      ->capture_default_str();
  c->add_option("--weight-decay", o.weight_decay,
                "Weight decay (default: 0 for sgd and adam, 0.01 for adamw)")
      ->check(kNonNegative);
  c->add_option("--scheduler", o.scheduler, "LR schedule per step: none, cosine or step")
      ->check(CLI::IsMember({"none", "cosine", "step"}))
      ->capture_default_str();
  c->add_option("--warmup-steps", o.warmup_steps, "Linear LR warm-up steps")
      ->check(kNonNegative)
      ->capture_default_str();
  c->add_option("--step-epochs", o.step_epochs,
                "step scheduler: epochs between LR drops (0: a third of --epochs)")
      ->check(kNonNegative);
  c->add_option("--step-gamma", o.step_gamma, "step scheduler: LR factor per drop")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--seed", o.seed, "Seed for initialisation, shuffling and dropout")
      ->check(kUnsigned)
      ->capture_default_str();
  c->add_option("--device", o.device, "auto, cpu, cuda or cuda:N")
      ->check(kDevice)
      ->capture_default_str();
  c->add_option("--threads", o.threads, "CPU threads (0: all)")
      ->check(kNonNegative)
      ->capture_default_str();
  c->add_option("--workers", o.workers, "Data-loading threads (0: load in the training thread)")
      ->check(kNonNegative)
      ->capture_default_str();
  CLI::Option* metrics =
      c->add_option("--metrics", o.metrics, "Append one JSON line per epoch to this file");
  c->add_option("--log-every", o.log_every,
                "Also append {\"step\", \"loss\", ...} to --metrics every N steps (losses "
                "printed exactly, for comparing runs)")
      ->check(kPositive)
      ->needs(metrics);
  c->add_option("--grad-accum", o.grad_accum,
                "Gradient accumulation: N batches of --batch-size per optimizer step (steps, "
                "--iters, schedules and checkpoints count optimizer steps)")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--read-loss-every", o.read_loss_every,
                "Read the step losses back from the device every N steps (default: 20 on a GPU, "
                "1 on a CPU; and before checkpoints, stops and evaluations)")
      ->check(kPositive);
  c->add_option("--limit-train", o.limit_train, "Use only the first N training examples")
      ->check(kPositive);
  c->add_option("--limit-test", o.limit_test, "Use only the first N test examples")
      ->check(kPositive);
  c->add_flag("--no-progress", o.no_progress, "Do not draw the progress bar");
  // Reliability: checkpoints, exact resume, debugging switches (docs/reliability.md).
  CLI::Option* dir = c->add_option(
      "--checkpoint-dir", o.checkpoint_dir,
      "Write crash-safe checkpoints (model, optimizer, scheduler, RNG, data position) here");
  c->add_option("--checkpoint-every", o.checkpoint_every,
                "Steps between checkpoints (0: at the end of each epoch)")
      ->check(kNonNegative)
      ->capture_default_str()
      ->needs(dir);
  c->add_option("--keep-checkpoints", o.keep_checkpoints,
                "Keep the newest K complete checkpoints (0: all)")
      ->check(kNonNegative)
      ->capture_default_str()
      ->needs(dir);
  c->add_flag("--async-checkpoint", o.async_checkpoint,
              "Write each checkpoint on a background thread while training continues (the state "
              "is copied to host memory first; the next checkpoint waits for the previous)")
      ->needs(dir);
  c->add_option("--checkpoint-format", o.checkpoint_format,
                "sharded: each rank writes its own shard of the parameters and optimizer state "
                "plus an index (no rank gathers the model); consolidated: one file of one "
                "process's state; auto: sharded under --dist zero1|zero2|fsdp without --tp/--pp")
      ->check(CLI::IsMember({"auto", "sharded", "consolidated"}))
      ->capture_default_str()
      ->needs(dir);
  c->add_flag("--resume", o.resume,
              "Continue from the newest good checkpoint in --checkpoint-dir (checksums verified; "
              "damaged newer ones are skipped; from scratch when there is none, an error when "
              "all are damaged); the run configuration must match")
      ->needs(dir);
  c->add_flag("--resume-or-start", o.resume_or_start,
              "Like --resume, but start from step 0 when every checkpoint is damaged")
      ->needs(dir);
  c->add_option("--save", o.save,
                "Write the final weights to this .safetensors file (PyTorch state_dict names)");
  c->add_option("--stop-after-steps", o.stop_after_steps,
                "Stop cleanly (with a checkpoint) once this many steps have run in total")
      ->check(kPositive);
  c->add_flag("--detect-anomaly", o.detect_anomaly,
              "Check every op's outputs and gradients for NaN/Inf and name the op (slow)");
  c->add_flag("--deterministic", o.deterministic,
              "Forbid nondeterministic kernels (CUDA atomics); the CPU is always deterministic");
  c->add_flag("--cuda-graph", o.cuda_graph,
              "Capture the training step as a CUDA graph after warm-up and replay it (fixed "
              "shapes; a step that cannot be captured runs as usual, with the reason printed)");
  c->add_option("--dist", o.dist, dist_help("Data-parallel training over the ranks of mpirun/srun"))
      ->check(CLI::IsMember(dist_choices()));
  c->add_option("--dist-timeout", o.dist_timeout,
                "Seconds a rank waits on a collective before the job stops, naming the rank "
                "that stopped answering")
      ->check(kFinitePositiveSeconds)
      ->capture_default_str();
  add_communication_dtypes(c, o.gather_dtype, o.reduce_dtype);
  c->add_option("--lr-scaling", o.lr_scaling,
                "linear: lr x batch-size / --lr-reference-batch (use with --warmup-steps)")
      ->check(CLI::IsMember({"none", "linear"}))
      ->capture_default_str();
  c->add_option("--lr-reference-batch", o.lr_reference_batch,
                "The batch size --lr was tuned for (--lr-scaling linear)")
      ->check(kPositive)
      ->capture_default_str();
}

void add_inspect(CLI::App& app, gradus::cli::InspectOptions& o) {
  CLI::App* c = app.add_subcommand(
      "inspect", "Validate a .safetensors file (or checkpoint) and list its tensors and metadata");
  c->add_option("file", o.path, "The .safetensors file")->required();
  c->add_flag("--json", o.json, "Print one JSON object instead of a table");
  c->add_flag("--values", o.values, "Also read the data and count NaN/Inf in each float tensor");
  c->add_option("--compare", o.compare,
                "Compare with another file of the same tensors: each tensor's relative "
                "difference ||a - b|| / ||a|| and the largest (exit code 1 when names or shapes "
                "differ)");
}

void add_bench(CLI::App& app, BenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "bench", "Time full training steps (forward, loss, backward, Adam) or an SGEMM");
  c->add_option("--model", o.model,
                "mlp (784-128-10), mlp-large (784-1024-1024-10), cnn, resnet20, resnet18, gpt "
                "or llama")
      ->check(CLI::IsMember({"mlp", "mlp-large", "cnn", "resnet20", "resnet18", "gpt", "llama"}))
      ->capture_default_str();
  gradus::cli::add_gpt_shape_options(*c, o.gpt);
  gradus::cli::add_llama_shape_options(*c, o.gpt);
  c->add_option("--vocab-size", o.vocab_size, "--model gpt|llama: vocabulary size")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--batch-size", o.batch_size, "Examples per step")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--steps", o.steps, "Timed steps per repeat")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--warmup", o.warmup, "Untimed steps first")
      ->check(kNonNegative)
      ->capture_default_str();
  c->add_option("--repeats", o.repeats, "Repeat the timing; the median step time is reported")
      ->check(kPositive)
      ->capture_default_str();
  c->add_option("--threads", o.threads, "CPU threads (0: all)")
      ->check(kNonNegative)
      ->capture_default_str();
  c->add_option("--device", o.device, "auto, cpu, cuda or cuda:N")
      ->check(kDevice)
      ->capture_default_str();
  c->add_option("--gemm", o.gemm, "Instead of a model, time an NxN matmul (GFLOP/s)")
      ->check(kPositive);
  c->add_option("--amp", o.amp,
                "Time the step under autocast: bf16 or f16 (f16 with loss scaling), as "
                "`gradus train --amp`")
      ->check(CLI::IsMember({"off", "bf16", "f16"}))
      ->capture_default_str();
  c->add_flag("--cuda-graph", o.cuda_graph,
              "Time the step replayed as a CUDA graph (as `gradus train --cuda-graph`)");
  c->add_option("--gemm-dtype", o.gemm_dtype, "dtype of the --gemm operands: f32, bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  c->add_option("--seed", o.seed, "Seed of the random inputs")
      ->check(kUnsigned)
      ->capture_default_str();
  c->add_flag("--compare-devices", o.compare_devices,
              "Time mlp@100, mlp-large@256 and cnn@64 on the CPU and on every GPU (a table)");
  c->add_flag("--roofline", o.roofline,
              "Measure GEMM FLOP/s per dtype and copy bandwidth as fractions of the device's "
              "theoretical peaks (--gemm N sets the size; default 2048 on the CPU, 8192 on a GPU)");
  c->add_option("--dist", o.dist,
                dist_help("Time the global data-parallel step over the ranks of mpirun/srun "
                          "(--batch-size is the global batch)"))
      ->check(CLI::IsMember(dist_choices()));
  c->add_option("--dist-timeout", o.dist_timeout, "Seconds a rank waits on a collective")
      ->check(kFinitePositiveSeconds)
      ->capture_default_str();
  add_communication_dtypes(c, o.gather_dtype, o.reduce_dtype);
  c->add_flag("--no-prefetch", o.no_prefetch,
              "--dist zero2|fsdp: start each block's all-gather only when the block runs (to "
              "measure what prefetching hides)");
  c->add_flag("--no-overlap", o.no_overlap,
              "--dist ddp: all-reduce the gradients only after backward (to measure overlap)");
  c->add_option("--bucket-cap-mb", o.bucket_cap_mb, "--dist ddp: gradient bucket size in MB")
      ->check(number_in(0.001, false, 4096.0, "RANGE"))
      ->capture_default_str();
}

// Prints a run's fatal error; on one rank of several, also ends the whole job (the other ranks
// would otherwise wait for this one until their timeout).
void report_error_and_end_job(const char* message) {
  if (gradus::dist::is_initialized() && gradus::dist::world_size() > 1) {
    std::fprintf(stderr, "gradus: error on rank %d of %d: %s\n", gradus::dist::rank(),
                 gradus::dist::world_size(), message);
    gradus::dist::abort_job(1);
  }
  std::fprintf(stderr, "gradus: error: %s\n", message);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradus: a C++ deep-learning training framework", "gradus"};
  app.set_version_flag("--version", std::string("gradus ") + GRADUS_VERSION);
  app.require_subcommand(1);
  TrainOptions train;
  BenchOptions bench;
  add_train(app, train);
  add_bench(app, bench);
  gradus::cli::InspectOptions inspect;
  add_inspect(app, inspect);
  bool info_json = false;
  app.add_subcommand("info", "Version, build options, CPU, BLAS, GPUs (peak FLOP/s, bandwidth)")
      ->add_flag("--json", info_json, "Print one JSON object");
  gradus::cli::MonitorOptions monitor;
  gradus::cli::add_monitor_command(app, monitor);
  gradus::cli::PlotOptions plot;
  gradus::cli::add_plot_command(app, plot);
  gradus::cli::GenerateOptions generate;
  gradus::cli::add_generate_command(app, generate);
  gradus::cli::EvalOptions eval;
  gradus::cli::add_eval_command(app, eval);
  gradus::cli::TokenizeOptions tokenize;
  gradus::cli::add_tokenize_command(app, tokenize);
  try {
    std::vector<std::string> args;
    try {
      args = expand_config(std::vector<std::string>(argv, argv + argc));
    } catch (const gradus::Error& e) {
      std::fprintf(stderr, "gradus: error: %s\n", e.what());
      return 2;
    }
    // CLI11 parses a reversed vector of the arguments after the program's name.
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the error
    return rc == 0 ? 0 : 2;
  }
  try {
    if (app.got_subcommand("train")) {
      for (const CLI::Option* opt : app.get_subcommand("train")->get_options()) {
        if (opt->count() > 0 && !opt->get_lnames().empty() && opt->get_configurable()) {
          train.given.insert(opt->get_lnames()[0]);
        }
      }
      if (train.print_config) {
        // Every option with its value, defaults included: a file --config reads back.
        std::printf("%s", effective_config(*app.get_subcommand("train")).c_str());
        return 0;
      }
      return gradus::cli::run_train(train);
    }
    if (app.got_subcommand("bench")) return gradus::cli::run_bench(bench);
    if (app.got_subcommand("inspect")) return gradus::cli::run_inspect(inspect);
    if (app.got_subcommand("monitor")) return gradus::cli::run_monitor(monitor);
    if (app.got_subcommand("plot")) return gradus::cli::run_plot(plot);
    if (app.got_subcommand("generate")) return gradus::cli::run_generate(generate);
    if (app.got_subcommand("eval")) return gradus::cli::run_eval(eval);
    if (app.got_subcommand("tokenize")) return gradus::cli::run_tokenize(tokenize);
    return gradus::cli::run_info(info_json);
  } catch (const std::bad_alloc&) {
    // (From the C++ library, not a tensor: the message would be a bare "std::bad_alloc".)
    report_error_and_end_job(
        "out of memory: the C++ library could not allocate (under an address-space limit, "
        "`ulimit -v`, raise it; otherwise free memory or use a smaller --batch-size)");
    return 1;
  } catch (const std::exception& e) {  // gradus::Error and anything else: never an abort
    report_error_and_end_job(e.what());
    return 1;
  }
}
