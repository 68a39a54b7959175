// gradus train --model gpt: a GPT language model on a text file (characters) or a nanoGPT .bin
// token file, trained for --iters steps with AdamW (weight decay on matrices and embeddings only,
// as nanoGPT), a linear warm-up then a cosine decay to --min-lr, gradient clipping, and the mean
// validation loss over --eval-iters fixed batches every --eval-every steps and at the end. The
// last line of stdout is "val_loss=<value>". gradus generate samples from the --save file, whose
// metadata holds the model's shape and the vocabulary.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "evaluation.h"
#include "gradus/core/cuda.h"
#include "gradus/core/determinism.h"
#include "gradus/dist/dist.h"
#include "gradus/dist/tensor_parallel_gpt.h"
#include "gradus/dist/tensor_parallel_llama.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
#include "gradus/train/save_model.h"
#include "gradus/train/strategy.h"
#include "gradus/train/trainer.h"
#include "language_model.h"
#include "profile_cmd.h"
#include "run_monitor.h"
#include "run_state.h"
#include "timing.h"
#include "train_checkpoints.h"
#include "train_outputs.h"
#include "train_setup.h"

namespace gradus::cli {
namespace {

// nanoGPT's schedule: linear warm-up to lr over `warmup` steps, then a half cosine to min_lr at
// `total` steps.
double lr_at(int64_t step, const TrainOptions& o) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / (o.warmup_steps + 1);
  if (step >= o.iters) return o.min_lr;
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, o.iters - o.warmup_steps));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

// nanoGPT's schedule as the Trainer's scheduler (lr_at per step; its state is the step count).
class GptSchedule : public optim::LRScheduler {
 public:
  GptSchedule(optim::Optimizer& optimizer, const TrainOptions& o) : LRScheduler(optimizer), o_(o) {
    initial_step();
  }
  double lr_at(int64_t step, double) const override { return cli::lr_at(step, o_); }
  const char* type_name() const override { return "GptSchedule"; }

 private:
  TrainOptions o_;
};

// The training windows as a dataset for the Trainer's loader: example i is row i % batch of the
// global batch i / batch that one seeded ContextSampler draws, so every rank's loader, asking
// for its rows of each global batch, trains the same run at any world size.
class WindowBatches : public data::Dataset {
 public:
  WindowBatches(data::TokenArray tokens, int64_t context, int64_t batch, uint64_t seed,
                int64_t batches)
      : sampler_(std::move(tokens), context, batch, seed), batch_(batch), batches_(batches) {}
  int64_t size() const override { return batch_ * batches_; }
  data::Example get(int64_t index) const override {
    const data::Example b = get_batch({index});
    return {b.input.reshape({-1}), b.target.reshape({-1})};
  }
  data::Example get_batch(const std::vector<int64_t>& indices) const override {
    const int64_t first = indices.front(), n = static_cast<int64_t>(indices.size());
    const int64_t step = first / batch_, row = first % batch_;
    GRADUS_CHECK(row + n <= batch_ && indices.back() == first + n - 1, IndexError,
                 "train: the language model's batches are rows of one global batch");
    sampler_.set_position(step);
    const auto [x, y] = sampler_.next();
    return {x.slice(0, row, row + n), y.slice(0, row, row + n)};
  }

 private:
  mutable data::ContextSampler sampler_;
  int64_t batch_, batches_;
};

// Language modelling as the Trainer's task: the next-token loss, and the mean validation loss
// over the same eval_iters windows every time (each rank its rows; the mean over the ranks is the
// one-process loss).
class LanguageModelTask : public train::Task {
 public:
  // group: the data-parallel ranks (the validation loss is their mean). vocab_group: the ranks
  // the model's vocabulary is split over by --tp (its logits are slices, and so is the loss
  // computation); nullptr when it is not split.
  LanguageModelTask(data::ContextSampler val, int64_t eval_iters, int64_t rows, int64_t first_row,
                    Device device, std::shared_ptr<dist::ProcessGroup> group,
                    std::shared_ptr<dist::ProcessGroup> vocab_group)
      : val_(std::move(val)),
        eval_iters_(eval_iters),
        rows_(rows),
        first_row_(first_row),
        device_(device),
        group_(std::move(group)),
        vocab_group_(std::move(vocab_group)) {}
  // (Under a pipeline, the last stage's output for its rows.)
  Tensor output_loss(const Tensor& logits, const Tensor& y) override {
    const Tensor flat = logits.reshape({-1, logits.size(-1)});
    if (vocab_group_)
      return dist::vocab_parallel_cross_entropy(flat, y.reshape({-1}), vocab_group_);
    return cross_entropy(flat, y.reshape({-1}));
  }
  std::map<std::string, double> evaluate(nn::Module& model) override {
    val_.set_position(0);
    Tensor total;  // summed where the losses are: one read at the end, not one per batch
    for (int64_t i = 0; i < eval_iters_; ++i) {
      const auto [x, y] = val_.next(device_);
      const Tensor l = output_loss(model(x.slice(0, first_row_, first_row_ + rows_)),
                                   y.slice(0, first_row_, first_row_ + rows_))
                           .to(DType::f64);
      total = total.defined() ? add(total, l) : l;
    }
    Tensor mean =
        tensor({total.item() / static_cast<double>(eval_iters_)}, {1}, {.dtype = DType::f64});
    if (group_->size() > 1) group_->all_reduce(mean, dist::ReduceOp::avg, "val loss")->wait();
    return {{"loss", mean.item()}};
  }

 private:
  data::ContextSampler val_;
  int64_t eval_iters_, rows_, first_row_;
  Device device_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<dist::ProcessGroup> vocab_group_;
};

}  // namespace

int run_train_lm(const TrainOptions& o) {
  refuse_options_not_in(
      o, "language modelling",
      {"model", "data", "data-file", "vocab-size", "context", "layers", "heads", "width", "iters",
       "eval-every", "eval-iters", "min-lr", "beta2", "grad-clip", "lr", "warmup-steps",
       "weight-decay", "batch-size", "seed", "device", "threads", "metrics",
       // the language model shows no progress bar: --no-progress asks for what it does
       "no-progress", "dropout", "amp", "profile", "profile-steps", "cuda-graph", "read-loss-every",
       "save", "dist", "dist-timeout", "gather-dtype", "reduce-dtype", "checkpoint-dir",
       "checkpoint-every", "keep-checkpoints", "async-checkpoint", "checkpoint-format", "resume",
       "resume-or-start", "stop-after-steps", "freeze", "init-from", "memory-limit",
       "deterministic", "detect-anomaly", "optimizer", "scheduler", "tp", "pp", "micro-batches",
       "schedule", "grad-accum", "kv-heads", "ffn-width", "rope-theta", "save-hf", "tokenizer",
       "grad-checkpoint", "tie-embeddings", "token-dtype"});
  const std::string lm = "--model " + o.model;
  GRADUS_CHECK(!o.given.count("optimizer") || o.optimizer == "adamw", ValueError, "train: ", lm,
               " trains with AdamW (nanoGPT's parameter groups); --optimizer ", o.optimizer,
               " is not supported with it");
  GRADUS_CHECK(!o.given.count("scheduler") || o.scheduler == "cosine", ValueError, "train: ", lm,
               " follows a linear warm-up then a cosine decay to --min-lr; --scheduler ",
               o.scheduler, " is not supported with it");
  for (const char* llama_only : {"kv-heads", "ffn-width", "rope-theta", "tie-embeddings"}) {
    GRADUS_CHECK(
        o.model == "llama" || !o.given.count(llama_only), ValueError, "train: --", llama_only,
        " applies to --model llama, not ", lm,
        std::string(llama_only) == "tie-embeddings" ? " (the GPT's head is always tied)" : "");
  }
  // A Hugging Face directory sets the model's family and shape (its config.json).
  const bool init_from_hf = !o.init_from.empty() && is_hf_directory(o.init_from);
  for (const char* shape :
       {"layers", "heads", "width", "kv-heads", "ffn-width", "rope-theta", "tie-embeddings"}) {
    GRADUS_CHECK(!init_from_hf || !o.given.count(shape), ValueError, "train: --", shape,
                 " cannot change the shape of --init-from ", o.init_from,
                 " (a Hugging Face directory: its config.json sets the shape)");
  }
  GRADUS_CHECK(o.tp == 1 || o.grad_checkpoint == 0, ValueError,
               "train: --grad-checkpoint is not supported with --tp (the tensor-parallel blocks "
               "exchange activations inside their forward)");
  GRADUS_CHECK(o.pp == 1 || !o.cuda_graph, ValueError,
               "train: --cuda-graph is not supported with --pp (each step exchanges activations "
               "between ranks through the host)");
  if (o.tp > 1) {
    GRADUS_CHECK(!o.cuda_graph, ValueError,
                 "train: --cuda-graph is not supported with --tp (the tensor-parallel layers "
                 "exchange activations through MPI inside the step)");
    GRADUS_CHECK(o.dropout == 0, ValueError, "train: --dropout ", o.dropout,
                 " is not supported with --tp (the split attention cannot draw the one-process "
                 "dropout); give --dropout 0");
  }
  GRADUS_CHECK(!o.given.count("token-dtype") || o.data == "tokens", ValueError,
               "train: --token-dtype applies to --data tokens (the width of the file's ids)");
  GRADUS_CHECK(!o.given.count("vocab-size") || o.data == "tokens", ValueError,
               "train: --vocab-size applies to --data tokens; the vocabulary of --data text is "
               "the file's bytes");
  TrainOptions run = o;
  if (run.resume_or_start) run.resume = true;
  apply_threads(run.threads);
  // --dist: every data rank runs this function on its rows of each global batch; --tp N / --pp M:
  // each replica is N (M) ranks that split the model (and see the same rows).
  const bool distributed = !run.dist.empty() || run.tp > 1 || run.pp > 1;
  const dist::World world =
      distributed ? dist::init({.timeout_seconds = run.dist_timeout}) : dist::World{};
  const bool lead = world.rank == 0;  // logs, metrics, checkpoints and --save
  GRADUS_CHECK(world.size % (run.tp * run.pp) == 0, ValueError, "train: --tp ", run.tp, " --pp ",
               run.pp, " need a multiple of ", run.tp * run.pp,
               " ranks (launch under mpirun/srun); this world has ", world.size);
  const dist::ParallelGroups groups =
      dist::make_parallel_groups({.tensor = run.tp, .pipeline = run.pp});
  const int data_ranks = groups.layout.data, data_rank = groups.data_rank;
  Device device = resolve_device(run.device);
  if (distributed && device.is_cuda()) device = Device::cuda(cuda::current_device());
  if (!run.memory_limit.empty()) host::set_memory_limit(parse_byte_size(run.memory_limit));
  manual_seed(run.seed);
  set_deterministic(run.deterministic);
  if (run.detect_anomaly) set_detect_anomaly(true);
  GRADUS_CHECK(run.data == "text" || run.data == "tokens", ValueError, "train: ", lm,
               " trains on --data text or --data tokens, not ", run.data);
  GRADUS_CHECK(!run.data_file.empty(), ValueError, "train: ", lm, " needs --data-file FILE");
  GRADUS_CHECK(run.iters > 0 && run.eval_every > 0 && run.eval_iters > 0, ValueError,
               "train: --iters, --eval-every and --eval-iters must be positive");
  GRADUS_CHECK(run.batch_size % data_ranks == 0, ValueError, "train: --batch-size ", run.batch_size,
               " (the global batch) does not divide over the ", data_ranks,
               " data-parallel rank(s); use a multiple of ", data_ranks);
  const std::string strategy_name =
      !run.dist.empty() ? run.dist : (data_ranks > 1 ? "ddp" : "local");
  // What the strategy supports decides what is refused before the data is read (the strategy
  // itself is made once the model is, which it may need to know: --tp).
  const train::StrategyCaps caps = train::make_strategy(strategy_name)->caps();
  const std::optional<DType> amp = amp_option(run.amp);
  GRADUS_CHECK(amp != DType::f16, ValueError, "train: ", lm,
               " supports --amp bf16 (f16 needs loss scaling, not wired here)");
  GRADUS_CHECK(!run.cuda_graph || device.is_cuda(), ValueError,
               "train: --cuda-graph needs a CUDA device, and the run is on ", device.str(),
               " (--device ", run.device, ")");
  GRADUS_CHECK(!run.cuda_graph || caps.graph_capture, ValueError,
               "train: --cuda-graph is not supported with --dist ", run.dist,
               " (each step exchanges values through the host)");
  // ZeRO-1 shards one flat group: nanoGPT's two groups (decay on matrices only) cannot be kept.
  const double weight_decay = run.weight_decay < 0 ? 0.1 : run.weight_decay;
  GRADUS_CHECK(!caps.sharded_optimizer_state || weight_decay == 0, ValueError, "train: --dist ",
               run.dist, " shards the optimizer as one parameter group, and ", lm,
               " decays only its matrices (AdamW weight decay ", weight_decay,
               "): give --weight-decay 0 or use --dist ddp|ps");

  GRADUS_CHECK(run.tokenizer.empty() || run.data == "text", ValueError,
               "train: --tokenizer applies to --data text (a --data tokens file is already ids)");
  // --data text: the file's bytes as the vocabulary, or a BPE tokenizer's ids: --tokenizer, or
  // else that of a Hugging Face --init-from directory (its ids are the ones the model knows).
  std::string tokenizer = run.tokenizer;
  if (tokenizer.empty() && init_from_hf && run.data == "text") {
    const std::filesystem::path d(run.init_from);
    GRADUS_CHECK(
        std::filesystem::exists(d / "tokenizer.json") || std::filesystem::exists(d / "vocab.json"),
        ValueError, "train: --data text with --init-from ", run.init_from,
        " needs the ids its model was trained on: give --tokenizer DIR (the directory "
        "has no tokenizer.json)");
    tokenizer = run.init_from;
  }
  std::optional<TextCodec> codec;
  data::TokenArray tokens;
  int64_t vocab_size = run.vocab_size;
  if (run.data == "text") {
    const std::string text = read_data_file(run.data_file, "train");
    codec = tokenizer.empty() ? TextCodec::chars(data::CharVocab::from_text(text))
                              : TextCodec::bpe(tokenizer);
    tokens = codec->encode(text, get_num_threads());
    vocab_size = codec->size();
  } else {
    tokens = data::TokenArray::map_file(run.data_file, data::parse_token_width(run.token_dtype));
    const int64_t needed = tokens.max_token_plus_one();
    if (vocab_size == 0) vocab_size = needed;
    GRADUS_CHECK(vocab_size >= needed, ValueError, "train: --vocab-size ", vocab_size,
                 " is smaller than the file's largest token + 1 (", needed, ")");
  }
  LanguageModelSpec spec;
  if (init_from_hf) {
    spec = spec_from_hf(run.init_from);
    GRADUS_CHECK(!o.given.count("model") || o.model == spec.family, ValueError, "train: --model ",
                 o.model, " differs from --init-from ", run.init_from, " (a ", spec.family, ")");
    GRADUS_CHECK(vocab_size <= spec.vocab_size(), ValueError, "train: the data's vocabulary (",
                 vocab_size, ") is larger than --init-from ", run.init_from, "'s (",
                 spec.vocab_size(), ")");
    GRADUS_CHECK(spec.family != "gpt" || run.gpt.context <= spec.context(), ValueError,
                 "train: --context ", run.gpt.context, " is longer than --init-from ",
                 run.init_from, "'s (", spec.context(), ")");
    vocab_size = spec.vocab_size();
    run.model = spec.family;
  } else {
    spec = spec_from_options(run, vocab_size);
  }
  run.vocab_size = vocab_size;  // (the run configuration holds the one used)
  const auto [train_tokens, val_tokens] = data::split_train_val(tokens);
  const int64_t rows = run.batch_size / data_ranks, first_row = data_rank * rows;

  GRADUS_CHECK(rows >= run.micro_batches, ValueError, "train: each replica's batch of ", rows,
               " windows cannot be cut into --micro-batches ", run.micro_batches);

  std::shared_ptr<nn::Module> model;
  // --tp: the model's splits (the GPT's own class; the Llama's projections swapped for
  // column/row-parallel ones). Either returns its vocabulary slice of the logits.
  std::shared_ptr<dist::TensorParallelGPT> tensor_parallel_gpt;
  std::shared_ptr<dist::TensorParallelModule> tensor_parallel;
  train::StrategyOptions strategy_options{.group = groups.data};
  strategy_options.gather_dtype = communication_dtype("--gather-dtype", run.gather_dtype, run.dist);
  strategy_options.reduce_dtype = communication_dtype("--reduce-dtype", run.reduce_dtype, run.dist);
  if (run.tp > 1 && spec.family == "gpt") {
    tensor_parallel_gpt = std::make_shared<dist::TensorParallelGPT>(spec.gpt, groups.tensor);
    model = tensor_parallel_gpt;
    tensor_parallel = tensor_parallel_gpt;
  } else if (run.tp > 1) {
    model = dist::tensor_parallel_llama(spec.llama, groups.tensor);
    tensor_parallel = std::make_shared<dist::TensorParallelLayers>(model, groups.tensor);
  } else {
    model = spec.make();
  }
  strategy_options.tensor_parallel = tensor_parallel;
  model->to(device);
  if (!run.init_from.empty() && tensor_parallel) {
    // One process's weights, read into one process's model, then this rank's slices of them
    // (the generator put back: the one-process run draws no second model).
    const PhiloxState rng = default_generator().state();
    const std::shared_ptr<nn::Module> whole =
        init_from_hf ? load_language_model(run.init_from, "train").model : spec.make();
    default_generator().set_state(rng);
    if (!init_from_hf) io::load_module(*whole, run.init_from);
    tensor_parallel->load_full_state_dict(whole->state_dict());
    if (lead) std::fprintf(stderr, "gradus train: --init-from %s: loaded\n", run.init_from.c_str());
  } else if (!run.init_from.empty()) {
    if (init_from_hf) {
      NoGradGuard no_grad;
      model->load_state_dict(load_language_model(run.init_from, "train").model->state_dict());
    } else {
      io::load_module(*model, run.init_from);
    }
    if (lead) std::fprintf(stderr, "gradus train: --init-from %s: loaded\n", run.init_from.c_str());
  }
  for (const std::string& prefix : run.freeze) model->freeze(prefix, /*keep_norm_eval=*/true);
  // --grad-checkpoint N: every N blocks are one segment recomputed in backward.
  if (auto* gpt = dynamic_cast<nn::GPT*>(model.get())) gpt->checkpoint_every = run.grad_checkpoint;
  if (auto* llama = dynamic_cast<nn::Llama*>(model.get())) {
    llama->checkpoint_every = run.grad_checkpoint;
  }
  if (run.pp > 1) {
    // --pp: the model as a sequence of layers (its modules and weights), cut into stages; state
    // names stay the model's (layer_paths), and a head's tied embedding is owned by stage 0.
    const nn::LayerSequence layers =
        tensor_parallel_gpt ? tensor_parallel_gpt->layers() : spec.layers(*model);
    strategy_options.pipeline = std::make_shared<dist::Pipeline>(
        layers.layers,
        dist::PipelineOptions{.micro_batches = run.micro_batches,
                              .schedule = dist::parse_schedule(run.schedule),
                              .global_row_offset = first_row,
                              .global_rows = run.batch_size,
                              .layer_paths = layers.paths},
        groups.pipeline);
    const dist::Pipeline& pipe = *strategy_options.pipeline;
    std::fprintf(stderr, "gradus train: stage %d of %d holds layers [%lld, %lld) of the %s\n",
                 pipe.stage_index(), pipe.num_stages(), static_cast<long long>(pipe.first_layer()),
                 static_cast<long long>(pipe.end_layer()), spec.family.c_str());
    model = layers.layers;
    // --grad-checkpoint N: every N of this stage's layers are one recomputed segment.
    if (run.grad_checkpoint > 0)
      strategy_options.pipeline->stage().checkpoint_every(run.grad_checkpoint);
    // With --tp as well: this stage's part of the split model, as the split model says.
    if (tensor_parallel) {
      strategy_options.tensor_parallel = std::make_shared<dist::TensorParallelLayers>(
          strategy_options.pipeline->stage_module(), *tensor_parallel);
    }
  }
  std::unique_ptr<train::Strategy> strategy = train::make_strategy(strategy_name, strategy_options);

  // AdamW with weight decay on matrices and embeddings, none on biases and LayerNorms (nanoGPT's
  // groups), over the parameters this rank updates.
  optim::AdamWOptions decay;
  decay.lr = run.lr;
  decay.betas = {0.9, run.beta2};
  decay.weight_decay = weight_decay;
  optim::AdamWOptions no_decay = decay;
  no_decay.weight_decay = 0;
  auto make_adamw = [&](std::vector<Tensor> params) {
    // Without weight decay the groups are one: the parameters keep the model's order, which is
    // the order a sharded optimizer numbers its state in, so checkpoints resume across them.
    if (weight_decay == 0) {
      return std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup<optim::AdamWOptions>>{{std::move(params), no_decay}});
    }
    std::vector<Tensor> matrices, vectors;
    for (const Tensor& p : params) (p.dim() >= 2 ? matrices : vectors).push_back(p);
    // A pipeline's stages all hold both groups (checkpoints number each group over the stages):
    // a stage without matrices or vectors keeps a placeholder there that never gets a gradient.
    for (std::vector<Tensor>* group : {&matrices, &vectors}) {
      if (run.pp > 1 && group->empty()) group->push_back(zeros({1}).set_requires_grad(true));
    }
    std::vector<optim::ParamGroup<optim::AdamWOptions>> groups;
    if (!matrices.empty()) groups.push_back({matrices, decay});
    if (!vectors.empty()) groups.push_back({vectors, no_decay});
    return std::make_unique<optim::AdamW>(groups);
  };

  // The run is the training layer's Trainer: one epoch of --iters global batches.
  // (--iters counts optimizer steps: each takes --grad-accum batches.)
  auto windows = std::make_shared<WindowBatches>(train_tokens, run.gpt.context, run.batch_size,
                                                 run.seed, run.iters * run.grad_accum);
  data::DataLoader train_loader(windows, {.batch_size = run.batch_size,
                                          .device = device,
                                          .rank = data_rank,
                                          .world_size = data_ranks});
  auto task = std::make_shared<LanguageModelTask>(
      data::ContextSampler(val_tokens, run.gpt.context, run.batch_size, run.seed + 1),
      run.eval_iters, rows, first_row, device, groups.data,
      tensor_parallel ? groups.tensor : nullptr);
  train::TrainerOptions options;
  options.epochs = 1;
  options.amp = amp;
  options.max_grad_norm = run.grad_clip;
  options.accumulate = run.grad_accum;
  options.cuda_graph = run.cuda_graph;
  options.read_loss_every = run.read_loss_every;
  options.stop_after_steps = run.stop_after_steps;
  options.checkpoints = checkpoint_options(run);
  options.checkpoint_every = run.checkpoint_every;
  options.eval_every = run.eval_every;
  options.config = run_config_json(run, get_num_threads(), device.str());
  options.check_config = check_resume_config;
  options.rank_agreement = rank_settings(options.config);
  options.profile = profile_options(run.profile, run.profile_steps, lead);  // --profile
  options.scheduler = [&run](optim::Optimizer& opt, int64_t, int64_t) {
    return std::make_shared<GptSchedule>(opt, run);
  };
  options.who = "gradus train";
  options.divergence_hint = "lower --lr or raise --warmup-steps";
  train::Trainer trainer(model, make_adamw, task, options, std::move(strategy));
  const RunLayout layout{.world = world.size,
                         .data = data_ranks,
                         .pipeline = run.pp,
                         .tensor = run.tp,
                         .strategy = trainer.strategy().name()};

  if (lead) {
    std::printf("train: %s on %s: %lld train / %lld val tokens, vocabulary %lld, device %s, %s\n",
                spec.describe(model->num_parameters()).c_str(), run.data_file.c_str(),
                static_cast<long long>(train_tokens.size()),
                static_cast<long long>(val_tokens.size()), static_cast<long long>(vocab_size),
                device.str().c_str(), layout_text(layout).c_str());
  }
  MetricsFile metrics(lead ? run.metrics : "");
  check_save_path(run.save, lead);
  std::unique_ptr<io::DirectoryLock> checkpoint_lock;
  if (!run.checkpoint_dir.empty() && lead) {
    checkpoint_lock = std::make_unique<io::DirectoryLock>(run.checkpoint_dir);
    io::probe_writable_directory(run.checkpoint_dir, "train: --checkpoint-dir", true);
  }
  // GPU (or process CPU) use for the progress lines, and per-interval figures with the energy for
  // the metrics lines (run_monitor.h).
  const std::unique_ptr<monitor::DeviceMonitor> device_monitor =
      lead ? train::make_device_monitor(device, std::chrono::seconds(1)) : nullptr;
  if (!lead) std::freopen("/dev/null", "w", stdout);  // one voice: rank 0 reports

  const auto run_start = Clock::now();
  double val_loss = NAN, window_loss = 0, last_lr = 0;
  int64_t window_steps = 0;
  auto window_start = Clock::now();
  trainer.on_start = [&](int64_t steps_done) { window_start = Clock::now(); };
  trainer.on_step = [&](const train::StepReport& s) {
    window_loss += s.loss;
    ++window_steps;
    last_lr = s.lr;
  };
  // A validation line: every --eval-every steps and at the end.
  auto report = [&](int64_t step, const std::map<std::string, double>& eval) {
    const double seconds = ms_since(window_start) / 1e3;
    const double tokens_per_s =
        static_cast<double>(window_steps * run.batch_size * run.gpt.context) / seconds;
    val_loss = eval.at("loss");
    const double train_loss = window_loss / static_cast<double>(std::max<int64_t>(window_steps, 1));
    const std::string usage =
        device_monitor ? monitor::progress_text(device_monitor->latest()) : std::string();
    std::printf("step %lld: train_loss %.4f val_loss=%.4f lr %.2e %.0f tokens/s%s%s\n",
                static_cast<long long>(step), train_loss, val_loss, last_lr, tokens_per_s,
                usage.empty() ? "" : "  ", usage.c_str());
    std::fflush(stdout);
    nlohmann::ordered_json line = {{"step", step},
                                   {"train_loss", train_loss},
                                   {"val_loss", val_loss},
                                   {"lr", last_lr},
                                   {"tokens_per_s", tokens_per_s},
                                   {"elapsed_s", ms_since(run_start) / 1e3},
                                   {"layout", layout_json(layout)}};
    // Since the previous line: utilisation, peaks, energy (null: unmeasured).
    if (device_monitor) line["monitor"] = monitor_json(device_monitor->take_window());
    metrics.write(line);
    window_loss = 0;
    window_steps = 0;
    window_start = Clock::now();
  };
  trainer.on_eval = [&](const train::EvalReport& r) { report(r.step, r.eval); };
  trainer.on_epoch = [&](const train::EpochReport& r) { report(r.step, r.eval); };

  const train::FitResult fit = trainer.fit(train_loader);
  if (fit.stopped) return report_stop(fit, lead);
  report_checkpoint_times(fit, lead);
  if (std::isnan(val_loss)) {  // resumed after the last step
    NoGradGuard no_grad;
    nn::Module& whole_model = trainer.strategy().inference_module();
    whole_model.eval();
    val_loss = task->evaluate(whole_model).at("loss");
    whole_model.train();
  }
  // --save without tensor or pipeline parallelism: written from data rank 0 as the parameters
  // are gathered (fsdp: a block at a time).
  std::map<std::string, std::string> meta = spec.metadata();
  meta["format"] = "pt";
  if (codec) meta.merge(codec->metadata());
  const bool streamed = !run.save.empty() && !tensor_parallel && run.pp == 1;
  if (streamed) {
    train::save_model(trainer.strategy(), run.save, meta);
    if (lead) std::printf("saved %s\n", run.save.c_str());
  }
  // Otherwise, and --save-hf: the one-process model (under --tp gathered from the ranks' slices,
  // under --pp from the stages: a collective; under fsdp its whole parameters while `gathered`
  // lives).
  const bool whole_needed = !run.save_hf.empty() || (!run.save.empty() && !streamed);
  const train::FullParameters gathered =
      whole_needed ? trainer.strategy().full_parameters() : train::FullParameters{};
  std::shared_ptr<nn::Module> whole = model;
  if (whole_needed && (tensor_parallel || run.pp > 1)) {
    const nn::StateDict full = train::full_model_state(
        trainer.model(), trainer.strategy().tensor_parallel(), trainer.strategy().pipeline());
    if (lead) {
      whole = spec.make();
      whole->load_state_dict(full);
    }
  }
  if (whole_needed && lead) check_finite_parameters(*whole, "--save " + run.save + run.save_hf);
  if (!run.save.empty() && !streamed && lead) {
    io::save_module(*whole, run.save, meta);
    std::printf("saved %s\n", run.save.c_str());
  }
  if (!run.save_hf.empty() && lead) {
    save_hf(spec, *whole, run.save_hf, codec ? codec->tokenizer_dir() : "");
    std::printf("saved %s (Hugging Face)\n", run.save_hf.c_str());
  }
  std::printf("val_loss=%.4f\n", val_loss);
  return 0;
}

nn::GPTConfig gpt_config(const GptShape& shape, int64_t vocab_size, double dropout) {
  nn::GPTConfig config;
  config.vocab_size = vocab_size;
  config.block_size = shape.context;
  config.n_layer = shape.layers;
  config.n_head = shape.heads;
  config.n_embd = shape.width;
  config.dropout = dropout;
  return config;
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

void add_llama_shape_options(CLI::App& c, GptShape& g) {
  c.add_option("--kv-heads", g.kv_heads,
               "llama: key/value heads (grouped-query attention; divides --heads; 0: --heads)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c.add_option("--ffn-width", g.ffn_width,
               "llama: the SwiGLU MLP's width (0: 2/3 of 4 --width, rounded up to 32)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c.add_option("--rope-theta", g.rope_theta, "llama: the base of the rotary embeddings")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.add_flag("--tie-embeddings", g.tie_embeddings,
             "llama: the output head shares the token embedding's weight (as the small Llama 3.2 "
             "models; the GPT's is always tied)");
}

void add_lm_train_options(CLI::App& c, TrainOptions& o) {
  add_gpt_shape_options(c, o.gpt);
  add_llama_shape_options(c, o.gpt);
  c.add_option("--tokenizer", o.tokenizer,
               "--data text: encode with this byte-level BPE tokenizer (a directory with "
               "tokenizer.json, or vocab.json + merges.txt) instead of the file's bytes")
      ->check(CLI::ExistingDirectory);
  c.add_option("--save-hf", o.save_hf,
               "gpt, llama: write the trained model as a Hugging Face directory (config.json, "
               "model.safetensors) that transformers' from_pretrained loads");
  c.add_option("--data-file", o.data_file,
               "--data text: a text file (byte vocabulary); --data tokens: a nanoGPT .bin file");
  c.add_option("--token-dtype", o.token_dtype,
               "--data tokens: the width of the file's ids (uint16 as nanoGPT's; uint32 as "
               "`gradus tokenize` writes for vocabularies above 65536 ids)")
      ->check(CLI::IsMember({"uint16", "uint32"}))
      ->capture_default_str();
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
  CLI::App* c =
      app.add_subcommand("generate", "Sample text from a language model trained with --save");
  c->add_option("--checkpoint", o.checkpoint,
                "The --save file of `gradus train --model gpt|llama`, or a Hugging Face directory")
      ->required();
  c->add_option("--tokenizer", o.tokenizer,
                "A byte-level BPE tokenizer's directory (default: the checkpoint's own)")
      ->check(CLI::ExistingDirectory);
  c->add_option("--prompt", o.prompt, "Text to continue")->capture_default_str();
  c->add_option("--tokens", o.tokens, "Tokens to sample")
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
  LoadedLanguageModel loaded = load_language_model(o.checkpoint, "generate");
  if (!o.tokenizer.empty()) loaded.codec = TextCodec::bpe(o.tokenizer);
  GRADUS_CHECK(loaded.codec.has_value(), ValueError, "generate: ", o.checkpoint,
               " has neither a character vocabulary nor a tokenizer (trained on --data tokens?): "
               "give --tokenizer DIR");
  const TextCodec& vocab = *loaded.codec;
  const Device device = resolve_device(o.device);
  nn::Module& model = *loaded.model;
  model.to(device);
  const data::TokenArray ids = vocab.encode(o.prompt);
  GRADUS_CHECK(ids.size() > 0, ValueError, "generate: --prompt is empty");
  std::vector<int64_t> wide(static_cast<size_t>(ids.size()));
  for (int64_t i = 0; i < ids.size(); ++i) wide[static_cast<size_t>(i)] = ids[i];
  const Tensor prompt =
      from_vector<int64_t>(wide, {1, static_cast<int64_t>(wide.size())}, {.dtype = DType::i64})
          .to(device);
  Generator gen(o.seed);
  nn::GenerateOptions g;
  g.max_new_tokens = o.tokens;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.generator = &gen;
  const Tensor out = nn::generate(model, loaded.spec.context(), prompt, g);
  std::printf("%s\n", vocab.decode(out.reshape({-1}).to_vector<int64_t>()).c_str());
  return 0;
}

}  // namespace gradus::cli
