// gradus train: a classifier on (Fashion-)MNIST with a seeded loader, a per-step LR schedule, a
// progress bar, per-epoch evaluation and JSONL metrics. The last line of stdout is
// "test_accuracy=<value>" so scripts can read the result.
//
// Checkpoints (--checkpoint-dir): the whole training state (model, optimizer, scheduler, RNG,
// data-loader position, step, the epoch's running loss and the run configuration) is written
// atomically every --checkpoint-every steps, at the end of the run, on --stop-after-steps and on
// SIGINT/SIGTERM. --resume continues from the newest complete one; on the CPU the resumed run is
// bitwise identical to an uninterrupted one (same losses, same final weights) for the same
// thread count. See docs/reliability.md.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "batch_finder.h"
#include "commands.h"
#include "evaluation.h"
#include "gradus/core/cuda.h"
#include "gradus/core/determinism.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
#include "gradus/nn/models.h"
#include "gradus/optim/optim.h"
#include "gradus/train/save_model.h"
#include "gradus/train/strategy.h"
#include "gradus/train/trainer.h"
#include "profile_cmd.h"
#include "progress.h"
#include "run_monitor.h"
#include "run_state.h"
#include "timing.h"
#include "train_augment.h"
#include "train_checkpoints.h"
#include "train_outputs.h"
#include "train_parallel.h"
#include "train_setup.h"

namespace gradus::cli {

namespace {

// The image-classification task (MNIST-style datasets; every nn::make_model model).
int run_train_images(const TrainOptions& options);

// What `gradus train` can do: the first task that accepts the options runs them. A new task is
// one entry here; a new model of an existing task is one registration in its factory
// (nn::make_model for images).
struct TrainTask {
  const char* name;
  bool (*accepts)(const TrainOptions&);
  int (*run)(const TrainOptions&);
};
constexpr TrainTask kTrainTasks[] = {
    {"language-model", [](const TrainOptions& o) { return o.model == "gpt" || o.model == "llama"; },
     run_train_lm},
    {"image-classification", [](const TrainOptions&) { return true; }, run_train_images},
};

}  // namespace

int run_train(const TrainOptions& options) {
  // Launch mistakes that would train several unrelated runs side by side, refused up front.
  const dist::LaunchEnvironment launch = dist::launch_environment();
  GRADUS_CHECK(!launch.srun_without_pmi, ValueError, "train: srun started ", launch.processes,
               " tasks without a PMI to join them (each would be a world of one training "
               "alone); launch with `srun --mpi=pmix`");
  GRADUS_CHECK(launch.processes == 1 || !options.dist.empty() || options.tp > 1 || options.pp > 1,
               ValueError, "train: ", launch.processes,
               " processes were launched but no parallel option was given: each would train "
               "the whole run alone. Add --dist ddp|zero1|fsdp (or --tp/--pp), or launch one "
               "process");
  // The pipeline's own options, for every task.
  GRADUS_CHECK(options.pp > 1 || !options.given.count("micro-batches"), ValueError,
               "train: --micro-batches cuts a pipeline's batch; it needs --pp > 1");
  GRADUS_CHECK(options.pp > 1 || !options.given.count("schedule"), ValueError,
               "train: --schedule orders a pipeline's micro-batches; it needs --pp > 1");
  for (const TrainTask& task : kTrainTasks) {
    if (task.accepts(options)) return task.run(options);
  }
  throw ValueError("train: no task accepts --model " + options.model);
}

namespace {

// Image classification as the training layer's task: cross-entropy for training, the CLI's
// Evaluator (the test set, sharded over the data ranks) for the epoch's evaluation. An MLP's
// input is flattened here (nn::MLP flattens in its own forward, which a pipeline's stages skip).
class ImageTask : public train::ClassificationTask {
 public:
  ImageTask(Evaluator evaluate, std::optional<DType> amp, bool flatten)
      : evaluate_(std::move(evaluate)), amp_(amp), flatten_(flatten) {}
  Tensor model_input(const data::Example& batch) override {
    return flatten_ ? batch.input.flatten(1) : batch.input;
  }
  std::map<std::string, double> evaluate(nn::Module& model) override {
    last_ = evaluate_(model, amp_);
    return {{"loss", last_.loss}, {"accuracy", last_.accuracy}};
  }
  const EvalResult& last() const { return last_; }

 private:
  Evaluator evaluate_;
  std::optional<DType> amp_;
  bool flatten_;
  EvalResult last_;
};

int run_train_images(const TrainOptions& options) {
  const auto run_start = Clock::now();
  refuse_options_not_in(options, "image classification",
                        {"model",
                         "data",
                         "data-dir",
                         "augment",
                         "augment-padding",
                         "profile",
                         "profile-steps",
                         "dropout",
                         "init-from",
                         "freeze",
                         "amp",
                         "grad-checkpoint",
                         "memory-limit",
                         "epochs",
                         "batch-size",
                         "lr",
                         "optimizer",
                         "momentum",
                         "weight-decay",
                         "scheduler",
                         "warmup-steps",
                         "step-epochs",
                         "step-gamma",
                         "seed",
                         "device",
                         "threads",
                         "workers",
                         "metrics",
                         "log-every",
                         "read-loss-every",
                         "limit-train",
                         "limit-test",
                         "no-progress",
                         "checkpoint-dir",
                         "checkpoint-every",
                         "keep-checkpoints",
                         "async-checkpoint",
                         "checkpoint-format",
                         "resume",
                         "resume-or-start",
                         "save",
                         "stop-after-steps",
                         "detect-anomaly",
                         "deterministic",
                         "cuda-graph",
                         "dist",
                         "dist-timeout",
                         "gather-dtype",
                         "reduce-dtype",
                         "lr-scaling",
                         "lr-reference-batch",
                         "grad-clip",
                         "grad-accum",
                         "tp",
                         "pp",
                         "micro-batches",
                         "schedule"});
  TrainOptions o = options;
  if (o.resume_or_start) o.resume = true;
  apply_threads(o.threads);
  // --dist, --tp, --pp: join the world first (every rank runs this same function; each data
  // replica on its share of each batch, the model split over its --tp x --pp ranks).
  const bool model_parallel = o.tp > 1 || o.pp > 1;
  const bool distributed = !o.dist.empty() || model_parallel;
  GRADUS_CHECK(!o.cuda_graph || !model_parallel, ValueError,
               "train: --cuda-graph is not supported with --tp/--pp (each step exchanges "
               "activations between ranks through the host)");
  const dist::World world =
      distributed ? dist::init({.timeout_seconds = o.dist_timeout}) : dist::World{};
  const bool lead = world.rank == 0;  // logs, metrics, checkpoints and --save
  GRADUS_CHECK(world.size % (o.tp * o.pp) == 0, ValueError, "train: --tp ", o.tp, " --pp ", o.pp,
               " need a multiple of ", o.tp * o.pp,
               " ranks (launch under mpirun/srun); this world has ", world.size);
  const dist::ParallelGroups groups =
      dist::make_parallel_groups({.tensor = o.tp, .pipeline = o.pp});
  const int data_ranks = groups.layout.data;
  GRADUS_CHECK(o.batch_size_auto || o.batch_size % data_ranks == 0, ValueError,
               "train: --batch-size ", o.batch_size,
               " (the global batch) does not divide over the ", data_ranks,
               " data-parallel replica(s); use a multiple of ", data_ranks);
  GRADUS_CHECK(!o.batch_size_auto || !model_parallel, ValueError,
               "train: --batch-size auto is not supported with --tp/--pp (the finder sizes one "
               "process's step)");
  GRADUS_CHECK(o.pp == 1 || o.amp != "f16", ValueError,
               "train: --amp f16 is not supported with --pp (each stage would decide on its own "
               "gradients whether to skip a step); --amp bf16 needs no loss scaling");
  Device device = resolve_device(o.device);
  // Each rank of a host uses its own GPU (dist::init made it the current device).
  if (distributed && device.is_cuda()) device = Device::cuda(cuda::current_device());
  if (!o.memory_limit.empty()) host::set_memory_limit(parse_byte_size(o.memory_limit));
  manual_seed(o.seed);
  set_deterministic(o.deterministic);
  if (o.detect_anomaly) set_detect_anomaly(true);

  // Fail on an unwritable metrics file or --save path before spending time on training.
  MetricsFile metrics(lead ? o.metrics : "");
  check_save_path(o.save, lead);
  // --profile: checked now, run by the Trainer.
  const train::ProfileOptions profile = profile_options(o.profile, o.profile_steps, lead);
  // One writer per checkpoint directory, for the whole run (released by the kernel at exit).
  std::unique_ptr<io::DirectoryLock> checkpoint_lock;
  if (!o.checkpoint_dir.empty() && lead) {
    checkpoint_lock = std::make_unique<io::DirectoryLock>(o.checkpoint_dir);
    io::probe_writable_directory(o.checkpoint_dir, "train: --checkpoint-dir", true);
  }

  check_image_data_options(o);
  // How the model and its optimizer spread over the data ranks (gradus/train/strategy.h; ddp by
  // default when a layout leaves several); what it cannot do is refused here, naming the option.
  const std::string strategy_name = !o.dist.empty() ? o.dist : (data_ranks > 1 ? "ddp" : "local");
  const train::StrategyCaps caps = train::make_strategy(strategy_name)->caps();
  // --cuda-graph replays a step recorded on a GPU; the exchanges of a distributed step and the
  // f16 scaler's overflow check are host decisions a replay could not repeat.
  GRADUS_CHECK(!o.cuda_graph || device.is_cuda(), ValueError,
               "train: --cuda-graph needs a CUDA device, and the run is on ", device.str(),
               " (--device ", o.device, ")");
  GRADUS_CHECK(!o.cuda_graph || caps.graph_capture, ValueError,
               "train: --cuda-graph is not supported with --dist ", o.dist,
               " (each step exchanges values through the host)");
  GRADUS_CHECK(!o.cuda_graph || o.amp != "f16", ValueError,
               "train: --cuda-graph is not supported with --amp f16 (the loss scaler decides on "
               "the host whether to skip each step; --amp bf16 needs no scaler)");

  // --amp f16 scales the loss; the scaler's skip decision needs the same gradients on every rank,
  // which averaging them before the step gives.
  GRADUS_CHECK(o.amp != "f16" || caps.loss_scaling, ValueError, "train: --amp f16 with --dist ",
               o.dist,
               " is not supported (loss scaling needs all-reduced gradients: use --dist ddp, or "
               "--amp bf16, which needs no loss scaling)");
  const std::optional<DType> amp_dtype = amp_option(o.amp);
  GRADUS_CHECK(o.dropout == 0 || o.model == "mlp", ValueError,
               "train: --dropout is only supported for --model mlp (got --model ", o.model, ")");
  auto build_model = [&] {
    std::shared_ptr<nn::Module> m = build_image_model(o, groups);
    m->to(device);
    m->train();
    for (const std::string& prefix : o.freeze) m->freeze(prefix, /*keep_norm_eval=*/true);
    if (o.grad_checkpoint > 0 && o.pp == 1) {  // (a pipeline's stage checkpoints its layers)
      auto* seq = dynamic_cast<nn::Sequential*>(m.get());
      GRADUS_CHECK(seq != nullptr, ValueError,
                   "train: --grad-checkpoint needs a Sequential model; ", o.model, " is not one");
      seq->checkpoint_every(o.grad_checkpoint);
    }
    return m;
  };
  std::shared_ptr<nn::Module> model = build_model();
  if (!o.init_from.empty()) {
    // Weights from an earlier run's --save (or any safetensors file with this model's names):
    // every name must match, so a file for another model is an error, not a partial load.
    // Under --tp each split layer takes its slice.
    if (o.tp > 1) {
      dist::TensorParallelLayers(model, groups.tensor)
          .load_full_state_dict(io::load_safetensors(o.init_from));
    } else {
      io::load_module(*model, o.init_from);
    }
    if (lead) {
      std::fprintf(stderr, "gradus train: --init-from %s: loaded %zu tensors\n",
                   o.init_from.c_str(), model->state_dict().size());
    }
  }
  for (const std::string& prefix : o.freeze) {
    if (lead) std::fprintf(stderr, "gradus train: --freeze %s: frozen\n", prefix.c_str());
  }
  // The data after the model (a bad model option, --freeze PREFIX, fails before the dataset is
  // read) and before the batch-size finder: the examples held in memory count against a
  // --memory-limit, so the finder must size the step in what they leave.
  std::shared_ptr<data::TensorDataset> train_set = load_image_split(o, /*train=*/true);
  std::shared_ptr<data::TensorDataset> test_set = load_image_split(o, /*train=*/false);
  if (o.batch_size_auto) {
    o.batch_size = auto_batch_size(
        {.make_model = build_model,
         .make_optimizer = [&](std::vector<Tensor> p) { return make_optimizer(o, o.lr, p); },
         .example_shape = {1, 28, 28},
         .classes = 10,
         .device = device,
         .world_size = distributed ? world.size : 1,
         // No larger than the training set (Fashion-MNIST and MNIST have 60,000 examples).
         .max_per_rank = std::max<int64_t>(
             16, (o.limit_train > 0 ? std::min<int64_t>(o.limit_train, 60000) : 60000) /
                     (distributed ? world.size : 1)),
         .resume = o.resume,
         .checkpoint_dir = o.checkpoint_dir,
         .amp = amp_dtype});
  }
  // --lr-scaling linear: the rule for large global batches (Goyal et al.), with --warmup-steps.
  const double lr = o.lr_scaling == "linear" ? o.lr * static_cast<double>(o.batch_size) /
                                                   static_cast<double>(o.lr_reference_batch)
                                             : o.lr;
  // An incomplete last batch is dropped at every world size (N ranks cannot share it equally),
  // so one command trains the same at any world size.
  data::DataLoader train_loader(train_set, {.batch_size = o.batch_size,
                                            .shuffle = true,
                                            .seed = o.seed,
                                            .drop_last = true,
                                            .device = device,
                                            .num_workers = o.workers,
                                            .rank = groups.data_rank,
                                            .world_size = data_ranks,
                                            .transform = augment_transform(o, *train_set, lead)});
  // Evaluation: every rank its slice of the test set under --dist (the sums all-reduced), in
  // batches of 500 unless memory is the constraint: the batch-size finder and --memory-limit size
  // a training step, which a no-grad forward of the same batch never exceeds; 500 might.
  const int64_t eval_batch = o.batch_size_auto || !o.memory_limit.empty()
                                 ? o.batch_size
                                 : std::max<int64_t>(o.batch_size, 500);
  const bool flatten = o.model.rfind("mlp", 0) == 0;
  auto task = std::make_shared<ImageTask>(
      Evaluator(test_set, eval_batch, device, o.workers, groups.data, flatten), amp_dtype, flatten);
  const int64_t steps_per_epoch = train_loader.size();

  // The run is the training layer's Trainer (gradus/train/trainer.h) configured by the options.
  train::TrainerOptions run;
  run.epochs = o.epochs;
  run.amp = amp_dtype;
  // (--grad-clip's default belongs to the language model: images clip only when asked.)
  run.max_grad_norm = o.given.count("grad-clip") ? o.grad_clip : 0.0;
  run.accumulate = o.grad_accum;
  run.cuda_graph = o.cuda_graph;
  run.read_loss_every = o.read_loss_every;
  run.stop_after_steps = o.stop_after_steps;
  run.checkpoints = checkpoint_options(o);
  run.checkpoint_every = o.checkpoint_every;
  run.config = run_config_json(o, get_num_threads(), device.str());
  run.check_config = check_resume_config;
  run.rank_agreement = rank_settings(run.config);
  run.profile = profile;
  run.scheduler = [&o](optim::Optimizer& opt, int64_t total_steps, int64_t per_epoch) {
    return make_scheduler(o, opt, total_steps, per_epoch);
  };
  run.who = "gradus train";
  run.divergence_hint =
      "lower --lr or add --warmup-steps; --detect-anomaly names the op that produced it";
  const train::StrategyOptions layout_options = image_layout_options(o, model, groups, lead);
  dist::Pipeline* const pipeline = layout_options.pipeline.get();
  train::Trainer trainer(
      model, [&](std::vector<Tensor> p) { return make_optimizer(o, lr, std::move(p)); }, task, run,
      train::make_strategy(strategy_name, layout_options));
  amp::GradScaler& scaler = trainer.scaler();

  const RunLayout layout{.world = world.size,
                         .data = data_ranks,
                         .pipeline = o.pp,
                         .tensor = o.tp,
                         .strategy = trainer.strategy().name()};
  if (lead) std::fprintf(stderr, "gradus train: %s\n", layout_text(layout).c_str());
  if (lead) {
    std::fprintf(
        stderr,
        "gradus train: model %s (%lld parameters), %s %lld train / %lld test examples, "
        "device %s, %d threads, %s lr %g, batch %lld, %d epochs%s%s%s%s\n",
        o.model.c_str(), static_cast<long long>(model->num_parameters()), o.data.c_str(),
        static_cast<long long>(train_set->size()), static_cast<long long>(test_set->size()),
        device.str().c_str(), get_num_threads(), o.optimizer.c_str(), lr,
        static_cast<long long>(o.batch_size), o.epochs, o.deterministic ? ", deterministic" : "",
        amp_dtype ? (", --amp " + o.amp).c_str() : "",
        o.detect_anomaly ? ", anomaly detection on" : "",
        distributed ? (", over " + std::to_string(world.size) + " rank(s) (" + world.launcher +
                       "), " + std::to_string(o.batch_size / data_ranks) + " examples per replica")
                          .c_str()
                    : "");
  }
  if (!lead) std::freopen("/dev/null", "w", stdout);  // one voice: rank 0 reports

  // Peak bytes held by tensors on the training device since the epoch began.
  auto epoch_peak = [&]() -> size_t {
    return device.is_cuda() ? cuda::memory_stats(device.index()).peak_allocated
                            : host::memory_stats().peak_allocated_bytes;
  };
  // GPU (or process CPU) use for the progress line, and per-epoch figures with the energy for
  // the metrics line (run_monitor.h); the lead only.
  const std::unique_ptr<monitor::DeviceMonitor> device_monitor =
      lead ? train::make_device_monitor(device, std::chrono::seconds(1)) : nullptr;
  std::optional<Progress> bar;
  double first_loss = -1;  // for the divergence warning
  bool warned_growth = false;
  trainer.on_epoch_begin = [&](int64_t epoch) {
    train_loader.reset_stats();  // the epoch's wait for data
    if (device.is_cuda()) {
      cuda::reset_peak_memory_stats(device.index());
    } else {
      host::reset_peak_memory();
    }
    bar.emplace("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs),
                steps_per_epoch, !o.no_progress && lead);
  };
  trainer.on_step = [&](const train::StepReport& s) {
    if (first_loss < 0) first_loss = s.loss;
    if (!warned_growth && first_loss > 0 && s.loss > 1000 * first_loss) {
      warned_growth = true;
      std::fprintf(stderr,
                   "gradus train: warning: the loss grew from %.4g (first step) to %.4g at step "
                   "%lld: training is diverging; lower --lr (now %g)\n",
                   first_loss, s.loss, static_cast<long long>(s.step), s.lr);
    }
    if (o.log_every > 0 && s.step % o.log_every == 0) {
      metrics.write({{"step", s.step}, {"epoch", s.epoch + 1}, {"loss", s.loss}, {"lr", s.lr}});
    }
  };
  double idle_sum = 0;  // under a pipeline: the fraction of each step this stage waited
  int64_t idle_steps = 0;
  trainer.on_batch_end = [&](const train::BatchEnd& b) {
    if (pipeline != nullptr) {
      const dist::PipelineStats& st = pipeline->last_stats();
      idle_sum += 1.0 - st.compute_seconds / std::max(st.step_seconds, 1e-12);
      ++idle_steps;
    }
    bar->set_data_wait(train_loader.stats().wait_seconds);
    if (device_monitor) bar->set_monitor_text(monitor::progress_text(device_monitor->latest()));
    bar->update(b.next.batch, b.running_loss, b.examples_in_epoch, epoch_peak());
  };
  EvalResult result;
  trainer.on_epoch = [&](const train::EpochReport& r) {
    bar->finish();
    result = task->last();
    check_finite_evaluation(result, r.epoch + 1);
    const double epoch_seconds = bar->elapsed_seconds();
    const size_t peak = epoch_peak();  // the most memory tensors held during the epoch
    const data::LoaderStats loader_stats = train_loader.stats();
    std::printf(
        "epoch %lld/%d train_loss %.4f test_loss %.4f test_accuracy %.4f (%.1f s, %.0f "
        "samples/s, lr %.3g, peak memory %.1f MiB%s)\n",
        static_cast<long long>(r.epoch + 1), o.epochs, r.train_loss, result.loss, result.accuracy,
        epoch_seconds, r.examples_per_s, r.lr, static_cast<double>(peak) / (1 << 20),
        data_wait_text(loader_stats, r.seconds).c_str());
    std::fflush(stdout);
    nlohmann::ordered_json line = {{"epoch", r.epoch + 1},
                                   {"train_loss", r.train_loss},
                                   {"test_loss", result.loss},
                                   {"test_accuracy", result.accuracy},
                                   {"epoch_seconds", epoch_seconds},
                                   {"samples_per_s", r.examples_per_s},
                                   {"data_wait_s", loader_stats.wait_seconds},
                                   {"lr", r.lr},
                                   {"peak_memory_bytes", peak},
                                   {"step", r.step},
                                   {"elapsed_s", ms_since(run_start) / 1e3},
                                   {"model", o.model},
                                   {"device", device.str()},
                                   {"layout", layout_json(layout)}};
    if (amp_dtype) line["amp"] = o.amp;
    if (pipeline != nullptr) {
      line["pipeline_idle_fraction"] =
          idle_sum / static_cast<double>(std::max<int64_t>(idle_steps, 1));
      idle_sum = 0;
      idle_steps = 0;
    }
    if (scaler.is_enabled()) {
      line["loss_scale"] = scaler.get_scale();
      line["skipped_steps"] = scaler.skipped_steps();  // since the start of this process
      std::fprintf(stderr, "gradus train: loss scale %g, %lld step(s) skipped on overflow\n",
                   scaler.get_scale(), static_cast<long long>(scaler.skipped_steps()));
    }
    // The epoch's readings (training and evaluation): utilisation, peaks, energy (null when
    // nothing measures it). Last, so tests/reliability can strip it with the timings.
    if (device_monitor) line["monitor"] = monitor_json(device_monitor->take_window());
    metrics.write(line);
  };

  const train::FitResult fit = trainer.fit(train_loader);
  if (fit.stopped) return report_stop(fit, lead);
  report_checkpoint_times(fit, lead);
  if (!fit.last_epoch) {  // resumed after the last epoch
    task->evaluate(trainer.strategy().inference_module());
    result = task->last();
    check_finite_evaluation(result, o.epochs);
  }
  if (!o.save.empty() && !model_parallel) {
    // Written from data rank 0 as the parameters are gathered (fsdp: a block at a time).
    train::save_model(trainer.strategy(), o.save, {{"format", "pt"}, {"gradus.model", o.model}});
    if (lead) std::fprintf(stderr, "gradus train: wrote the final weights to %s\n", o.save.c_str());
  } else if (!o.save.empty()) {
    // The one-process model under its names: the layout's shards and stages gathered (a
    // collective; fsdp's whole parameters while `gathered` lives), loaded into the model one
    // process builds.
    const train::FullParameters gathered = trainer.strategy().full_parameters();
    const nn::StateDict full =
        train::full_model_state(trainer.model(), layout_options.tensor_parallel.get(), pipeline);
    if (lead) {
      TrainOptions one_process = o;
      one_process.tp = 1;
      std::shared_ptr<nn::Module> whole = build_image_model(one_process, {});
      whole->load_state_dict(full);
      check_finite_parameters(*whole, "--save " + o.save);
      io::save_module(*whole, o.save, {{"format", "pt"}, {"gradus.model", o.model}});
      std::fprintf(stderr, "gradus train: wrote the final weights to %s\n", o.save.c_str());
    }
  }
  std::printf("test_accuracy=%.4f\n", result.accuracy);
  return 0;
}

}  // namespace

}  // namespace gradus::cli
