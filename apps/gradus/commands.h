// The subcommands of the gradus CLI. Each run_* returns the process exit code and throws
// gradus::Error on failure (main prints it and exits with 1).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradus/core/dtype.h"
#include "gradus/data/mnist.h"
#include "gradus/nn/gpt.h"

namespace CLI {
class App;
}

namespace gradus::cli {

// The GPT's shape (--model gpt in train and bench).
struct GptShape {
  int64_t context = 64;  // block size
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;
  // --model llama only (train): grouped-query attention, the SwiGLU width, RoPE's base.
  int64_t kv_heads = 0;   // 0: --heads
  int64_t ffn_width = 0;  // 0: 2/3 of 4 --width, rounded up to a multiple of 32
  double rope_theta = 10000.0;
  bool tie_embeddings = false;  // the output head shares the token embedding's weight
};

struct TrainOptions {
  std::string model = "mlp";
  std::string data = "fashion-mnist";
  std::string data_dir;  // empty: data::kDefaultFashionMnistDir for fashion-mnist
  int epochs = 10;
  int64_t batch_size = 128;
  bool batch_size_auto = false;  // --batch-size auto: the largest that fits (batch_finder.cpp)
  double lr = 1e-3;
  std::string optimizer = "adam";
  double momentum = 0.9;  // sgd
  // sgd/adam: L2 added to the gradient; adamw: decoupled. < 0: the optimizer's default.
  double weight_decay = -1.0;
  std::string scheduler = "cosine";
  int64_t warmup_steps = 0;
  double step_gamma = 0.1;  // step scheduler: lr *= gamma every step_epochs epochs
  int step_epochs = 0;      // 0: a third of the epochs
  uint64_t seed = 0;
  std::string device = "auto";
  int threads = 0;  // 0: OpenMP's default
  int workers = 1;
  std::string metrics;  // JSONL file, appended
  int64_t limit_train = -1;
  int64_t limit_test = -1;
  bool no_progress = false;
  std::string profile;        // --profile: Chrome trace file (profile_cmd.h)
  std::string profile_steps;  // --profile-steps A:B
  double dropout = 0.0;       // mlp only: dropout after each hidden activation
  // Parameter-name prefixes to freeze (no gradient, not updated; batch norms under them stay in
  // eval mode), e.g. "features." or "0.".
  std::vector<std::string> freeze;
  std::string init_from;  // safetensors weights to start from (e.g. an earlier run's --save)
  // Mixed precision: "off", "bf16" or "f16" (autocast; f16 adds dynamic loss scaling).
  std::string amp = "off";
  int64_t grad_checkpoint = 0;  // > 0: recompute activations in segments of this many layers
  std::string memory_limit;  // "" or a size ("1GiB", "512MiB", "2e9"): CPU tensors may hold at most
  // Reliability (docs/reliability.md).
  std::string checkpoint_dir;     // empty: no checkpoints
  int64_t checkpoint_every = 0;   // steps between checkpoints (0: only at the end of each epoch)
  int keep_checkpoints = 3;       // newest complete checkpoints kept (0: all)
  bool async_checkpoint = false;  // write checkpoints on a background thread
  std::string checkpoint_format = "auto";  // auto, sharded or consolidated
  bool resume = false;           // continue from the newest good checkpoint in checkpoint_dir
  bool resume_or_start = false;  // resume; when every checkpoint is damaged, start at step 0
  std::string save;              // final weights as safetensors (PyTorch state_dict names)
  int64_t log_every = 0;         // > 0: a {"step","loss"} line in the metrics file every N steps
  int64_t grad_accum = 1;        // batches per optimizer step (gradient accumulation)
  int64_t read_loss_every = 0;   // steps between reads of the losses (0: 20 on a GPU, 1 on a CPU)
  int64_t stop_after_steps = 0;  // > 0: checkpoint and stop after this many steps (in total)
  bool detect_anomaly = false;
  bool deterministic = false;
  bool cuda_graph = false;       // capture the step once and replay it (step_graph.h)
  bool augment = false;          // --augment: crop, flip, normalise on the device (train_augment.h)
  int64_t augment_padding = -1;  // -1: 2 for 28x28 images, 4 for 32x32
  // Data parallelism (docs/design.md, "Distributed"): "" (one process), ddp, ps or zero1.
  // batch_size is the global batch in every mode; each rank trains on its share.
  std::string dist;
  double dist_timeout = 60.0;  // seconds any rank waits on a collective before giving up
  // --dist fsdp: the dtype parameters are gathered in; zero2|fsdp: the dtype gradients are
  // reduce-scattered in ("" = the parameters'; train::StrategyOptions).
  std::string gather_dtype;
  std::string reduce_dtype;
  // Model parallelism (train_parallel.h): the world is data x pipeline (pp) x tensor (tp).
  int tp = 1;
  int pp = 1;
  int micro_batches = 1;
  std::string schedule = "1f1b";
  std::string lr_scaling = "none";  // linear: lr * batch_size / lr_reference_batch
  int64_t lr_reference_batch = 128;
  // Language modelling (--model gpt, --data text|tokens; train_lm.cpp).
  GptShape gpt;
  std::string data_file;   // the text (--data text) or nanoGPT .bin tokens (--data tokens)
  int64_t vocab_size = 0;  // --data tokens: 0 = the file's largest token + 1
  std::string token_dtype = "uint16";  // --data tokens: the width of the file's ids
  int64_t iters = 2000;                // optimizer steps
  int64_t eval_every = 250;            // steps between validation losses
  int64_t eval_iters = 20;             // validation batches per evaluation
  double min_lr = 1e-4;                // the cosine schedule's floor
  double beta2 = 0.99;                 // AdamW's second-moment decay
  double grad_clip = 1.0;              // max global gradient norm (0: off)
  std::string save_hf;                 // a Hugging Face directory of the trained language model
  std::string tokenizer;               // --data text: a byte-level BPE tokenizer's directory
  bool print_config = false;  // --print-config: print the effective options as TOML and exit
  // The long names of the options given (command line or --config), without dashes: a task
  // refuses any of them it would not honour (refuse_options_not_in).
  std::set<std::string> given;
};
int run_train(const TrainOptions& o);
int run_train_lm(const TrainOptions& o);
// --tp, --pp, --micro-batches, --schedule (train_parallel.cpp).
void add_model_parallel_options(CLI::App& train, TrainOptions& o);

struct GenerateOptions {
  std::string checkpoint;  // a --save file of `gradus train --model gpt|llama`, or a HF directory
  std::string tokenizer;   // overrides the checkpoint's own
  std::string prompt = "\n";
  int64_t tokens = 300;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
  std::string device = "auto";
};
// Prints the prompt followed by the sampled continuation.
int run_generate(const GenerateOptions& o);
// The language-model flags of `train` and the `generate` subcommand (train_lm.cpp).
void add_lm_train_options(CLI::App& train, TrainOptions& o);
// --augment and --augment-padding (train_augment.cpp).
void add_augment_options(CLI::App& train, TrainOptions& o);
void add_gpt_shape_options(CLI::App& command, GptShape& shape);
// --kv-heads, --ffn-width, --rope-theta (--model llama).
void add_llama_shape_options(CLI::App& command, GptShape& shape);
// The GPT of a shape and vocabulary (train, bench and bench --dist build the same one).
nn::GPTConfig gpt_config(const GptShape& shape, int64_t vocab_size, double dropout = 0.0);
void add_generate_command(CLI::App& app, GenerateOptions& o);

struct EvalOptions {
  std::string checkpoint;  // a --save file or a Hugging Face directory
  std::string model;       // image models: which one (language models name themselves)
  std::string data = "tokens";
  std::string data_file, data_dir;
  std::string tokenizer;               // --data text: overrides the checkpoint's own
  std::string token_dtype = "uint16";  // --data tokens: the width of the file's ids
  int64_t limit = 0;                   // image models: the first N test images
  int64_t context = 0;                 // 0: the model's context
  int64_t batch_size = 8;
  std::string amp = "off";
  std::string device = "auto";
  int threads = 0;
  bool json = false;
};
// Prints val_loss= and perplexity= (a language model) or loss= and accuracy= (an image model).
int run_eval(const EvalOptions& o);
void add_eval_command(CLI::App& app, EvalOptions& o);

struct InspectOptions {
  std::string path;
  bool json = false;    // one JSON object instead of a table
  bool values = false;  // also read the data and count NaN/Inf per floating tensor
  std::string compare;  // another file: relative differences per tensor (run_compare)
};
// Validates a safetensors file (exit code 1 with the reason when it is invalid) and lists its
// tensors and metadata; for a gradus checkpoint also the step and data position.
int run_inspect(const InspectOptions& o);

struct BenchOptions {
  std::string model = "mlp";
  int64_t batch_size = 128;
  int steps = 50;
  int warmup = 5;
  int repeats = 1;
  int threads = 0;
  std::string device = "auto";
  int64_t gemm = 0;  // > 0: time an NxN GEMM instead of a model
  std::string gemm_dtype = "f32";
  std::string amp = "off";  // off, bf16 or f16: the step under autocast (f16 with loss scaling)
  bool cuda_graph = false;  // time the step replayed as a CUDA graph (step_graph.h)
  uint64_t seed = 0;
  bool compare_devices = false;  // the three bench models on the CPU and every GPU, as a table
  bool roofline = false;         // GEMM FLOP/s per dtype and copy bandwidth against the peaks
  // --dist ddp|ps|zero1: the global step of data-parallel training over the ranks of mpirun;
  // batch_size is the global batch (bench_dist.cpp).
  std::string dist;
  double dist_timeout = 60.0;
  bool no_overlap = false;   // ddp: all-reduce every bucket after backward
  bool no_prefetch = false;  // zero2, fsdp: gather each block only when it runs
  std::string gather_dtype;  // fsdp: as TrainOptions
  std::string reduce_dtype;  // zero2, fsdp
  double bucket_cap_mb = 25.0;
  GptShape gpt;             // --model gpt: batch_size sequences of gpt.context tokens
  int64_t vocab_size = 65;  // --model gpt (tinyshakespeare's characters)
};
int run_bench(const BenchOptions& o);
// gradus bench --roofline (roofline.cpp).
int bench_roofline(const BenchOptions& o, Device device);
int run_bench_dist(const BenchOptions& o);

// json: one JSON object (build, CPU, GPUs with theoretical peaks, MPI/NCCL versions).
int run_info(bool json = false);

struct MonitorOptions {
  std::string interval = "1s";  // "500ms", "2s", "1m"
  int64_t count = 0;            // readings to print; 0: until Ctrl-C
  bool csv = false;
  int pid = 0;  // > 0: also this process's CPU use and RSS
  std::string nvml_library;
};
// A table of GPU (NVML) and host readings (monitor_cmd.cpp); without NVML, the host columns.
int run_monitor(const MonitorOptions& o);
void add_monitor_command(CLI::App& app, MonitorOptions& o);

struct PlotOptions {
  std::vector<std::string> inputs;  // metrics JSONL files written by `gradus train --metrics`
  std::string output;               // .png or .svg
  std::string x = "step";           // step, epoch or time
};
// Draws loss, accuracy, throughput, memory, GPU use and power of several runs (plot.cpp).
int run_plot(const PlotOptions& o);
void add_plot_command(CLI::App& app, PlotOptions& o);

struct TokenizeOptions {
  std::string tokenizer;  // a directory (tokenizer.json, or vocab.json + merges.txt) or a .json
  std::string input;      // the text
  std::string output;     // the token file
  int threads = 0;        // 0: one per CPU
  std::string dtype = "auto";  // auto, uint16 or uint32
  bool no_progress = false;
};
// Encodes a text file with a byte-level BPE tokenizer into a nanoGPT token file (tokenize_cmd.cpp).
int run_tokenize(const TokenizeOptions& o);
void add_tokenize_command(CLI::App& app, TokenizeOptions& o);

// Shared by the commands: applies --threads (0 keeps the default) and resolves --device,
// checking that a requested CUDA device exists.
void apply_threads(int threads);
// A number followed by one of `units` (suffix -> multiplier; "" for a bare number): the number
// times the unit's multiplier, or nullopt when either part is not recognised or it is not finite.
std::optional<double> number_with_unit(
    const std::string& text, std::initializer_list<std::pair<std::string_view, double>> units);
// "1GiB", "512MiB", "1.5G", "2e9" -> bytes (> 0, finite); ValueError naming the text otherwise.
size_t parse_byte_size(const std::string& text);
Device resolve_device(const std::string& name);
// --amp: nullopt for "off", else the autocast dtype ("bf16", "f16"; CLI11 checked the value).
std::optional<DType> amp_option(const std::string& value);
// --gather-dtype, --reduce-dtype: nullopt for "", else the dtype; ValueError unless the strategy
// communicates in it (gather: fsdp; reduce: zero2, fsdp), naming the option.
std::optional<DType> communication_dtype(const std::string& option, const std::string& value,
                                         const std::string& dist);

}  // namespace gradus::cli
