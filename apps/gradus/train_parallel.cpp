// gradus train --pp M [--micro-batches K] [--schedule gpipe|1f1b] [--tp N]: image classification
// with the model split over ranks, the ranks left over data-parallel.
//
// The world is laid out as data x pipeline x tensor (dist::make_parallel_groups). Every rank
// builds the whole model from the seed (so every layout starts from the one-process weights),
// keeps its stage's layers (dist::Pipeline) and, with --tp, the MLP's hidden layers are split
// Megatron-style (column- then row-parallel). Each data-parallel replica trains on its share of
// the global batch; gradients are averaged over the replicas before the optimizer step. The
// losses printed and written are those of the global batch, as in one process.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "evaluation.h"
#include "gradus/core/cuda.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
#include "gradus/nn/models.h"
#include "gradus/train/strategy.h"
#include "progress.h"
#include "timing.h"
#include "train_augment.h"
#include "train_outputs.h"
#include "train_setup.h"

namespace gradus::cli {

namespace {

// What this task does not do (yet): refused up front rather than ignored.
void check_supported(const TrainOptions& o) {
  auto refuse = [](bool bad, const char* what) {
    GRADUS_CHECK(!bad, ValueError, "train: ", what,
                 " is not supported with --tp/--pp (model-parallel training)");
  };
  refuse(!o.checkpoint_dir.empty() || o.resume || o.resume_or_start, "--checkpoint-dir/--resume");
  refuse(o.amp != "off", "--amp");
  refuse(o.grad_checkpoint > 0, "--grad-checkpoint");
  refuse(o.batch_size_auto, "--batch-size auto");
  refuse(!o.init_from.empty(), "--init-from");
  refuse(!o.freeze.empty(), "--freeze");
  refuse(!o.profile.empty(), "--profile");
  refuse(o.stop_after_steps > 0, "--stop-after-steps");
  refuse(o.cuda_graph, "--cuda-graph (each step exchanges activations between ranks)");
}

// The model, whole on every rank; with --tp the MLP's two hidden layers are split over the tensor
// group (same names and, from the same seed, the same weights as nn::MLP).
std::shared_ptr<nn::Sequential> build_model(const TrainOptions& o,
                                            const dist::ParallelGroups& groups) {
  if (o.tp > 1) {
    GRADUS_CHECK(o.model == "mlp" && o.dropout == 0, ValueError,
                 "train: --tp splits the hidden layers of --model mlp (without --dropout); got "
                 "--model ",
                 o.model);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(
        std::make_shared<dist::ColumnParallelLinear>(28 * 28, 256, true, false, groups.tensor));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<dist::RowParallelLinear>(256, 128, true, true, groups.tensor));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10));
    return m;
  }
  std::shared_ptr<nn::Module> m =
      o.dropout > 0 ? std::make_shared<nn::MLP>(std::vector<int64_t>{28 * 28, 256, 128, 10}, "relu",
                                                o.dropout)
                    : nn::make_model(o.model);
  auto seq = std::dynamic_pointer_cast<nn::Sequential>(m);
  GRADUS_CHECK(seq != nullptr, ValueError, "train: --pp splits a sequence of layers; --model ",
               o.model, " is not one");
  return seq;
}

}  // namespace

void add_model_parallel_options(CLI::App& train, TrainOptions& o) {
  train
      .add_option("--tp", o.tp,
                  "Tensor-parallel ranks: split the MLP's hidden layers over this many ranks "
                  "(under mpirun; the ranks left over are data-parallel)")
      ->check(CLI::Range(1, 1 << 20));
  train
      .add_option("--pp", o.pp,
                  "Pipeline stages: split the model's layers over this many ranks (under mpirun)")
      ->check(CLI::Range(1, 1 << 20));
  train
      .add_option("--micro-batches", o.micro_batches,
                  "--pp: micro-batches each replica's batch is cut into")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  train.add_option("--schedule", o.schedule, "--pp: pipeline schedule")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))
      ->capture_default_str();
}

int run_train_model_parallel(const TrainOptions& options) {
  const auto run_start = Clock::now();
  const TrainOptions& o = options;
  refuse_options_not_in(
      o, "model-parallel image classification (--tp/--pp)",
      {"model", "data", "data-dir", "augment", "augment-padding", "dropout", "epochs", "batch-size",
       "lr", "optimizer", "momentum", "weight-decay", "scheduler", "warmup-steps", "step-epochs",
       "step-gamma", "seed", "device", "threads", "workers", "metrics", "limit-train", "limit-test",
       "no-progress", "save", "dist", "dist-timeout", "tp", "pp", "micro-batches", "schedule",
       // refused below, each with its own reason
       "checkpoint-dir", "checkpoint-every", "resume", "resume-or-start", "amp", "grad-checkpoint",
       "init-from", "freeze", "profile", "stop-after-steps", "cuda-graph"});
  check_supported(o);
  check_image_data_options(o);
  apply_threads(o.threads);
  const dist::World world = dist::init({.timeout_seconds = o.dist_timeout});
  GRADUS_CHECK(world.size % (o.tp * o.pp) == 0, ValueError, "train: --tp ", o.tp, " --pp ", o.pp,
               " need a multiple of ", o.tp * o.pp,
               " ranks (launch under mpirun/srun); this world "
               "has ",
               world.size);
  const dist::ParallelGroups groups =
      dist::make_parallel_groups({.tensor = o.tp, .pipeline = o.pp});
  const int dp = groups.layout.data;
  GRADUS_CHECK(o.batch_size % dp == 0, ValueError, "train: --batch-size ", o.batch_size,
               " must divide over the ", dp, " data-parallel replica(s)");
  const int64_t local_batch = o.batch_size / dp;
  GRADUS_CHECK(local_batch >= o.micro_batches, ValueError, "train: each replica's batch of ",
               local_batch, " examples cannot be cut into --micro-batches ", o.micro_batches);
  const bool lead = world.rank == 0;
  Device device = resolve_device(o.device);
  if (device.is_cuda()) device = Device::cuda(cuda::current_device());
  manual_seed(o.seed);
  MetricsFile metrics(lead ? o.metrics : "");
  check_save_path(o.save, lead);

  std::shared_ptr<nn::Sequential> model = build_model(o, groups);
  const bool flatten = o.model.rfind("mlp", 0) == 0;  // MLP flattens in its own forward
  model->to(device);
  model->train();
  dist::Pipeline pipe(model,
                      {.micro_batches = o.micro_batches,
                       .schedule = dist::parse_schedule(o.schedule),
                       .global_row_offset = groups.data_rank * local_batch,
                       .global_rows = o.batch_size},
                      groups.pipeline);
  // How the data ranks share a stage's update: ddp (the default) averages the gradients after
  // each backward (dist::average_gradients: one bucket per step, the pipeline's backward being
  // per micro-batch); ps and zero1 are the training layer's strategies over the data group,
  // applied to this stage's layers (the parameter server on data rank 0, or the optimizer state
  // sharded over the data ranks).
  const std::string strategy_name = o.dist.empty() ? "ddp" : o.dist;
  std::unique_ptr<train::Strategy> strategy;
  optim::Optimizer* optimizer = nullptr;
  std::unique_ptr<optim::Optimizer> own_optimizer;
  if (!pipe.parameters().empty()) {
    if (strategy_name == "ddp") {
      own_optimizer = make_optimizer(o, o.lr, pipe.parameters());
      optimizer = own_optimizer.get();
    } else {
      strategy = train::make_strategy(strategy_name, {.group = groups.data});
      // The stage's layers, kept alive by the whole model they belong to.
      strategy->setup(std::shared_ptr<nn::Module>(model, &pipe.stage()),
                      [&](std::vector<Tensor> p) { return make_optimizer(o, o.lr, std::move(p)); });
      optimizer = &strategy->optimizer();
    }
  }
  amp::GradScaler no_scaling({.enabled = false});

  auto train_set = load_image_split(o, /*train=*/true);
  auto test_set = load_image_split(o, /*train=*/false);
  // An incomplete last batch is dropped at every world size (as the other tasks do), so no
  // batch is ever smaller than --micro-batches can cut.
  data::DataLoader loader(train_set, {.batch_size = o.batch_size,
                                      .shuffle = true,
                                      .seed = o.seed,
                                      .drop_last = true,
                                      .device = device,
                                      .num_workers = o.workers,
                                      .rank = groups.data_rank,
                                      .world_size = dp,
                                      .transform = augment_transform(o, *train_set, lead)});
  const int64_t steps_per_epoch = loader.size();
  std::shared_ptr<optim::LRScheduler> scheduler;
  if (optimizer)
    scheduler = make_scheduler(o, *optimizer, steps_per_epoch * o.epochs, steps_per_epoch);
  std::fprintf(stderr,
               "gradus train: model %s split as %s: stage %d of %d holds layers [%lld, %lld) (%lld "
               "parameters), %d micro-batches (%s), batch %lld (%lld per replica)\n",
               o.model.c_str(), groups.describe().c_str(), pipe.stage_index(), pipe.num_stages(),
               static_cast<long long>(pipe.first_layer()), static_cast<long long>(pipe.end_layer()),
               static_cast<long long>(pipe.stage().num_parameters()), o.micro_batches,
               o.schedule.c_str(), static_cast<long long>(o.batch_size),
               static_cast<long long>(local_batch));
  // Batch norm inside a pipeline normalises each micro-batch with its own statistics (as GPipe
  // does), so it trains differently from one process on the whole batch: say so.
  bool has_batch_norm = false;
  for (const auto& [name, m] : model->named_modules()) {
    has_batch_norm = has_batch_norm || dynamic_cast<nn::BatchNorm2d*>(m.get()) != nullptr;
  }
  if (lead && has_batch_norm && o.micro_batches > 1) {
    std::fprintf(stderr,
                 "gradus train: note: --model %s has batch norm, which normalises each of the %d "
                 "micro-batches with its own statistics (as GPipe does): the run differs from one "
                 "process on the whole batch\n",
                 o.model.c_str(), o.micro_batches);
  }
  const RunLayout layout{.world = world.size,
                         .data = dp,
                         .pipeline = o.pp,
                         .tensor = o.tp,
                         .strategy = dp > 1 || strategy_name != "ddp" ? strategy_name : "local"};
  if (lead) std::fprintf(stderr, "gradus train: %s\n", layout_text(layout).c_str());
  if (!lead) std::freopen("/dev/null", "w", stdout);

  auto loss_fn = [](const Tensor& out, const Tensor& target) { return cross_entropy(out, target); };
  auto prepare = [&](const Tensor& x) { return flatten ? x.flatten(1) : x; };
  int64_t step = 0;
  double test_accuracy = 0;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    pipe.stage().train();
    Progress bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs),
                 steps_per_epoch, !o.no_progress && lead);
    double loss_sum = 0, idle_sum = 0;
    int64_t samples = 0, batches = 0;
    for (data::Example& batch : loader) {
      if (optimizer) optimizer->zero_grad();
      Tensor loss = tensor({pipe.train_step(prepare(batch.input), batch.target, loss_fn)}, {1},
                           {.dtype = DType::f64});
      if (strategy) {
        strategy->step(no_scaling);  // averaged (server or reduce-scatter), one update
      } else {
        dist::average_gradients(pipe.parameters(), *groups.data);
        if (optimizer) optimizer->step();
      }
      if (scheduler) scheduler->step();
      groups.data->all_reduce(loss, dist::ReduceOp::avg, "loss")->wait();
      const double value = loss.item();
      GRADUS_CHECK(std::isfinite(value), ValueError, "train: the loss became ", value, " at step ",
                   step + 1, ": training diverged; lower --lr");
      ++step;
      ++batches;
      loss_sum += value * static_cast<double>(o.batch_size);
      samples += o.batch_size;
      const dist::PipelineStats& st = pipe.last_stats();
      idle_sum += 1.0 - st.compute_seconds / std::max(st.step_seconds, 1e-12);
      bar.update(loader.position().batch, loss_sum / static_cast<double>(samples), samples / dp,
                 host::memory_stats().peak_allocated_bytes);
    }
    bar.finish();
    const double train_seconds = bar.elapsed_seconds();

    // Evaluation: the test set through the pipeline of each replica (the last stage scores it),
    // then shared with every rank.
    pipe.stage().eval();
    double test_loss_sum = 0, correct = 0;
    {
      NoGradGuard no_grad;
      const int64_t n = test_set->size(), eval_batch = std::max<int64_t>(o.batch_size, 500);
      for (int64_t begin = 0; begin < n; begin += eval_batch) {
        const int64_t rows = std::min(eval_batch, n - begin);
        std::vector<int64_t> indices(static_cast<size_t>(rows));
        for (int64_t i = 0; i < rows; ++i) indices[static_cast<size_t>(i)] = begin + i;
        data::Example ex = test_set->get_batch(indices);
        const Tensor out = pipe.forward(prepare(ex.input.to(device)));
        if (pipe.is_last()) {
          const Tensor target = ex.target.to(device);
          test_loss_sum += cross_entropy(out, target).item() * static_cast<double>(rows);
          correct += eq(argmax(out, 1), target).sum().item();
        }
      }
      Tensor scores = tensor({test_loss_sum, correct}, {2}, {.dtype = DType::f64});
      pipe.group().broadcast(scores, pipe.num_stages() - 1, "test scores")->wait();
      test_loss_sum = scores.to_vector<double>()[0];
      correct = scores.to_vector<double>()[1];
    }
    const double test_loss = test_loss_sum / static_cast<double>(test_set->size());
    test_accuracy = correct / static_cast<double>(test_set->size());
    const double train_loss = loss_sum / static_cast<double>(std::max<int64_t>(samples, 1));
    const double idle = idle_sum / static_cast<double>(std::max<int64_t>(batches, 1));
    const double samples_per_s = static_cast<double>(samples) / std::max(train_seconds, 1e-9);
    std::printf(
        "epoch %d/%d train_loss %.4f test_loss %.4f test_accuracy %.4f (%.1f s, %.0f samples/s, "
        "stage 0 idle %.1f%%)\n",
        epoch + 1, o.epochs, train_loss, test_loss, test_accuracy, bar.elapsed_seconds(),
        samples_per_s, 100 * idle);
    std::fflush(stdout);
    metrics.write({{"epoch", epoch + 1},
                   {"train_loss", train_loss},
                   {"test_loss", test_loss},
                   {"test_accuracy", test_accuracy},
                   {"epoch_seconds", bar.elapsed_seconds()},
                   {"samples_per_s", samples_per_s},
                   {"pipeline_idle_fraction", idle},
                   {"step", step},
                   {"elapsed_s", ms_since(run_start) / 1e3},
                   {"model", o.model},
                   {"layout", layout_json(layout)},
                   {"device", device.str()}});
  }
  if (!o.save.empty()) {
    // The one-process weights on rank 0, under the one-process names: each tensor-parallel
    // layer's full weights gathered over its tensor group (every stage does so for every such
    // layer, a collective in its own group, so the shapes are known everywhere), then each
    // tensor broadcast over the pipeline group from the stage that trained it.
    std::vector<int> owner_of_layer;
    for (int s = 0; s < pipe.num_stages(); ++s) {
      for (int64_t l = 0; l < pipe.partition()[static_cast<size_t>(s)]; ++l) {
        owner_of_layer.push_back(s);
      }
    }
    std::vector<std::pair<std::string, Tensor>> whole;
    const auto layers = model->named_children();
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& [layer, module] = layers[l];
      nn::StateDict part;
      if (auto* column = dynamic_cast<dist::ColumnParallelLinear*>(module.get())) {
        part = column->full_state_dict();
      } else if (auto* row = dynamic_cast<dist::RowParallelLinear*>(module.get())) {
        part = row->full_state_dict();
      } else {
        part = module->state_dict();
      }
      for (const auto& [name, t] : part) {
        const Tensor full = t.detach().contiguous();
        pipe.group().broadcast(full, owner_of_layer[l], layer + "." + name)->wait();
        whole.emplace_back(layer + "." + name, full);
      }
    }
    if (lead) {
      for (const auto& [name, t] : whole) {
        const int64_t bad = t.numel() - static_cast<int64_t>(sum(isfinite(t)).item());
        GRADUS_CHECK(bad == 0, ValueError, "train: --save ", o.save, ": not written: '", name,
                     "' holds ", bad, " non-finite value(s) (training diverged: lower --lr)");
      }
      io::save_safetensors(o.save, whole, {{"format", "pt"}, {"gradus.model", o.model}});
      std::fprintf(stderr, "gradus train: wrote the final weights to %s\n", o.save.c_str());
    }
  }
  std::printf("test_accuracy=%.4f\n", test_accuracy);
  return 0;
}

}  // namespace gradus::cli
