#include "gradus/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "gradus/amp/autocast.h"
#include "gradus/autograd.h"
#include "gradus/data/dataset.h"
#include "gradus/ops.h"
#include "gradus/train/deferred_losses.h"
#include "gradus/train/step_graph.h"

namespace gradus::train {

Tensor Task::loss(nn::Module& model, const data::Example& batch) {
  return output_loss(model(model_input(batch)), batch.target);
}

Tensor Task::output_loss(const Tensor& /*output*/, const Tensor& /*target*/) {
  throw ValueError(
      "train: this Task defines no output_loss(output, target) (it overrides loss() as a whole), "
      "which a pipeline needs: it runs the model's forward itself, micro-batch by micro-batch");
}

// ------------------------------------------------------------------------- classification
ClassificationTask::ClassificationTask(std::shared_ptr<data::Dataset> held_out,
                                       int64_t eval_batch_size)
    : held_out_(std::move(held_out)), eval_batch_size_(std::max<int64_t>(eval_batch_size, 1)) {}

Tensor ClassificationTask::output_loss(const Tensor& output, const Tensor& target) {
  return cross_entropy(output, target);
}

std::map<std::string, double> ClassificationTask::evaluate(nn::Module& model) {
  if (held_out_ == nullptr || held_out_->size() == 0) return {};
  const Device device = model.parameters().empty() ? Device::cpu() : model.parameters()[0].device();
  double loss_sum = 0, correct = 0;
  const int64_t n = held_out_->size();
  for (int64_t begin = 0; begin < n; begin += eval_batch_size_) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(eval_batch_size_, n - begin)));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = begin + static_cast<int64_t>(i);
    data::Example batch = held_out_->get_batch(indices);
    batch.input = batch.input.to(device);
    const Tensor target = batch.target.to(device);
    const Tensor logits = model(model_input(batch));
    const auto count = static_cast<double>(indices.size());
    loss_sum += cross_entropy(logits, target).item() * count;
    correct += sum(eq(argmax(logits, -1), target.to(DType::i64))).item();
  }
  return {{"loss", loss_sum / static_cast<double>(n)},
          {"accuracy", correct / static_cast<double>(n)}};
}

// ------------------------------------------------------------------------------ trainer
namespace {
std::string number_text(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}
}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, const OptimizerFactory& make_optimizer,
                 std::shared_ptr<Task> task, const TrainerOptions& options,
                 std::unique_ptr<Strategy> strategy)
    : task_(std::move(task)),
      options_(options),
      strategy_(strategy != nullptr ? std::move(strategy) : make_strategy("local")),
      scaler_({.enabled = options_.amp == DType::f16}) {
  const char* who = options_.who.c_str();
  GRADUS_CHECK(model != nullptr && task_ != nullptr, ValueError, who,
               ": a Trainer needs a model and a Task");
  GRADUS_CHECK(options_.epochs >= 1, ValueError, who, ": epochs must be >= 1, got ",
               options_.epochs);
  GRADUS_CHECK(!options_.amp || *options_.amp == DType::bf16 || *options_.amp == DType::f16,
               ValueError, who, ": amp is bf16 or f16, got ", dtype_name(*options_.amp));
  GRADUS_CHECK(options_.accumulate >= 1, ValueError, who, ": accumulate must be >= 1, got ",
               options_.accumulate);
  GRADUS_CHECK(options_.accumulate == 1 || !options_.cuda_graph, ValueError, who,
               ": a CUDA-graph step cannot accumulate gradients over several batches (the graph "
               "replays one batch's step)");
  GRADUS_CHECK(std::isfinite(options_.max_grad_norm) && options_.max_grad_norm >= 0, ValueError,
               who, ": max_grad_norm must be finite and >= 0, got ", options_.max_grad_norm);
  GRADUS_CHECK(!scaler_.is_enabled() || strategy_->caps().loss_scaling, ValueError, who,
               ": f16 loss scaling needs gradients averaged before the step, which the '",
               strategy_->name(), "' strategy does not give (use ddp, or bf16 autocast)");
  GRADUS_CHECK(!options_.cuda_graph || strategy_->caps().graph_capture, ValueError, who,
               ": a CUDA-graph step is not supported by the '", strategy_->name(),
               "' strategy (each step exchanges values through the host)");
  GRADUS_CHECK(strategy_->pipeline() == nullptr || !scaler_.is_enabled(), ValueError, who,
               ": f16 loss scaling is not supported under a pipeline (each stage would decide on "
               "its own gradients whether to skip a step); bf16 autocast needs no scaler");
  GRADUS_CHECK(strategy_->pipeline() == nullptr || !options_.cuda_graph, ValueError, who,
               ": a CUDA-graph step is not supported under a pipeline (each step exchanges "
               "activations between ranks through the host)");
  GRADUS_CHECK(!options_.cuda_graph || !scaler_.is_enabled(), ValueError, who,
               ": a CUDA-graph step cannot use f16 loss scaling (the scaler decides on the host "
               "whether to skip each step; bf16 needs no scaler)");
  // The ranks agree on the run before setup's collectives (whose sizes depend on the model).
  Settings settings = options_.rank_agreement;
  settings["trainer.model"] = module_signature(*model);
  settings["trainer.strategy"] = strategy_->name();
  settings["trainer.amp"] = options_.amp ? dtype_name(*options_.amp) : "off";
  settings["trainer.max_grad_norm"] = number_text(options_.max_grad_norm);
  settings["trainer.accumulate"] = std::to_string(options_.accumulate);
  settings["trainer.cuda_graph"] = options_.cuda_graph ? "on" : "off";
  settings["trainer.epochs"] = std::to_string(options_.epochs);
  settings["trainer.stop_after_steps"] = std::to_string(options_.stop_after_steps);
  settings["trainer.checkpoint_dir"] = options_.checkpoints.dir;
  settings["trainer.checkpoint_every"] = std::to_string(options_.checkpoint_every);
  settings["trainer.resume"] = options_.checkpoints.resume ? "yes" : "no";
  settings["trainer.eval_every"] = std::to_string(options_.eval_every);
  check_ranks_agree(strategy_->run_group(), settings, who, "checked before training");
  strategy_->setup(std::move(model), make_optimizer);
}

Trainer::~Trainer() = default;

Tensor Trainer::train_step(const Tensor& input, const Tensor& target) {
  // A graph's gradients must stay where the capture found them: zeroed in place.
  strategy_->optimizer().zero_grad(/*set_to_none=*/!options_.cuda_graph);
  Tensor loss = forward_backward(data::Example{input, target}, 1, true);
  optimizer_step();
  return loss;
}

void Trainer::optimizer_step() {
  strategy_->step(scaler_, options_.max_grad_norm);
  if (dist::Pipeline* pipeline = strategy_->pipeline()) pipeline->broadcast_tied_parameters();
  scaler_.update();
}

Tensor Trainer::forward_backward(const data::Example& batch, int64_t parts, bool last) {
  strategy_->set_gradient_sync(last);
  strategy_->before_forward();
  const double share = 1.0 / static_cast<double>(parts);
  Tensor loss;
  if (dist::Pipeline* pipeline = strategy_->pipeline()) {
    // Forward and backward, micro-batch by micro-batch over the stages; every stage gets the
    // batch's loss. (Without the weight-cast cache: each micro-batch's backward runs through its
    // own casts, a shared one would be run through once per micro-batch.)
    amp::Autocast autocast(options_.amp.value_or(DType::bf16), options_.amp.has_value(),
                           /*cache_weights=*/false);
    const double value =
        pipeline->train_step(task_->model_input(batch), batch.target,
                             [this, parts, share](const Tensor& output, const Tensor& rows_target) {
                               const Tensor l = task_->output_loss(output, rows_target);
                               return parts > 1 ? mul(l, share) : l;
                             });
    loss = tensor({value * static_cast<double>(parts)}, {}, {.dtype = DType::f64});
    pipeline->reduce_tied_gradients();
  } else {
    {
      amp::Autocast autocast(options_.amp.value_or(DType::bf16), options_.amp.has_value());
      loss = task_->loss(strategy_->module(), batch);
    }
    // The loss itself unless f16 loss scaling is on, shared among the step's batches.
    scaler_.scale(parts > 1 ? mul(loss, share) : loss).backward();
  }
  return loss;
}

std::map<std::string, double> Trainer::evaluate() {
  NoGradGuard no_grad;
  amp::Autocast autocast(options_.amp.value_or(DType::bf16), options_.amp.has_value());
  const bool was_training = model().is_training();
  nn::Module& whole = strategy_->inference_module();
  whole.eval();
  std::map<std::string, double> metrics = task_->evaluate(whole);
  model().train(was_training);
  return metrics;
}

FitResult Trainer::fit(data::DataLoader& loader) {
  using Clock = std::chrono::steady_clock;
  const char* who = options_.who.c_str();
  // group: the data ranks (each holds a slice of the global batch); run: every rank of the run,
  // over which stops, resumes and settings are agreed (with tensor parallelism, the world).
  dist::ProcessGroup& group = strategy_->group();
  dist::ProcessGroup& run = strategy_->run_group();
  const bool writer = run.rank() == 0;
  // Optimizer steps per epoch: whole groups of `accumulate` batches (the rest are skipped).
  const int64_t accumulate = options_.accumulate;
  const int64_t steps_per_epoch = loader.size() / accumulate;
  const int64_t batches_used = steps_per_epoch * accumulate;
  // First the ranks agree on the data (a rank whose loader is empty while the others' is not
  // must not leave them waiting in a collective), then an empty loader is refused everywhere.
  check_ranks_agree(run,
                    {{"data.examples", std::to_string(loader.dataset().size())},
                     {"data.batch_size", std::to_string(loader.options().batch_size)},
                     {"data.batches_per_epoch", std::to_string(steps_per_epoch)}},
                    who, "checked before training");
  GRADUS_CHECK(steps_per_epoch > 0, ValueError, who, ": the data loader yields ", loader.size(),
               " batch(es) per epoch (dataset of ", loader.dataset().size(),
               " examples, batch size ", loader.options().batch_size, "), fewer than the ",
               accumulate, " one optimizer step accumulates");
  const std::vector<Tensor> params = model().parameters();
  const Device device = params.empty() ? Device::cpu() : params[0].device();
  GRADUS_CHECK(!options_.cuda_graph || device.is_cuda(), ValueError, who,
               ": a CUDA-graph step needs the model on a CUDA device; it is on ", device.str());
  if (options_.scheduler && scheduler_ == nullptr) {
    scheduler_ =
        options_.scheduler(optimizer(), steps_per_epoch * options_.epochs, steps_per_epoch);
  }
  CheckpointOptions ckpt = options_.checkpoints;
  if (ckpt.who == "train") ckpt.who = options_.who;
  ckpt.report = ckpt.report && writer;  // one rank reports for the world
  ckpt.tensor_parallel = strategy_->tensor_parallel();
  ckpt.pipeline = strategy_->pipeline();
  ckpt.full_parameters = [this] { return strategy_->full_parameters(); };
  const StartPoint start = find_start(ckpt, options_.config, model(), scaler_, optimizer(),
                                      scheduler_.get(), options_.check_config);
  // A replayed step reads its learning rate and step count from the device.
  if (options_.cuda_graph) optimizer().set_capturable(true);
  Checkpointer checkpoints(ckpt, model(), optimizer(), scheduler_.get(), scaler_, options_.config,
                           writer);
  check_ranks_agree(run,
                    {{"resume.step", std::to_string(start.step)},
                     {"resume.checkpoint", start.path.empty() ? "(none)" : start.path}},
                    who, "checked after resuming");
  if (!start.path.empty()) checkpoints.loaded(start.step, start.position, start.path);
  if (checkpoints.enabled()) install_stop_handlers();

  FitResult result;
  int64_t step = start.step;
  StepProfiler profiler(options_.profile, writer, device, options_.who);
  auto stop = [&](data::LoaderPosition next, const EpochProgress& progress, int signal) {
    profiler.finish();
    result.checkpoint = checkpoints.save(step, next, progress);
    checkpoints.finish();  // the stop's checkpoint is on disk before the run reports it
    result.checkpoint_times = checkpoints.times();
    result.stopped = true;
    result.stop_signal = signal;
    result.steps = step;
  };
  if (on_start) on_start(step);
  profiler.at_step(step);
  if (options_.stop_after_steps > 0 && step >= options_.stop_after_steps) {
    stop(start.position, start.progress, 0);
    return result;
  }
  // (With tensor parallelism every rank of a replica holds the replica's loss, so the mean over
  // the run is the mean over the data ranks.)
  const bool data_parallel = run.size() > 1;
  StepGraph graph(options_.cuda_graph, kGraphWarmupSteps, options_.who);
  const StepGraph::Step one_step = [this](const Tensor& input, const Tensor& target) {
    return train_step(input, target);
  };
  for (int64_t epoch = start.position.epoch; epoch < options_.epochs; ++epoch) {
    const bool resumed_epoch = epoch == start.position.epoch;
    loader.set_position(resumed_epoch ? start.position : data::LoaderPosition{epoch, 0});
    if (on_epoch_begin) on_epoch_begin(epoch);
    // Sums over the epoch's examples (restored mid-epoch, so a resumed run reports the same).
    EpochProgress progress = resumed_epoch ? start.progress : EpochProgress{};
    int64_t examples_here = 0;
    const Clock::time_point t0 = Clock::now();
    auto account = [&](const StepLoss& s, double value) {
      GRADUS_CHECK(std::isfinite(value), ValueError, who, ": the loss became ", value, " at step ",
                   s.step, " (epoch ", epoch + 1, ", learning rate ", s.lr,
                   "): training diverged; ", options_.divergence_hint);
      progress.loss_sum += value * static_cast<double>(s.samples);
      progress.samples += s.samples;
      progress.last_lr = s.lr;
      if (on_step) on_step({s.step, epoch, value, s.lr, s.samples});
    };
    DeferredLosses losses(device, options_.read_loss_every);
    int64_t in_step = 0;  // batches of the optimizer step accumulated so far
    Tensor accumulated;   // their losses' sum
    // (A run resumed after the epoch's last whole group has nothing left to train in it.)
    const bool epoch_done = resumed_epoch && start.position.batch >= batches_used;
    for (data::Example& batch : loader) {
      if (epoch_done) break;
      const double lr = optimizer().lr();
      Tensor loss;
      if (accumulate == 1) {
        loss = graph.run(batch.input, batch.target, one_step);
      } else {
        if (in_step == 0) optimizer().zero_grad();
        const Tensor part = forward_backward(batch, accumulate, in_step == accumulate - 1).detach();
        accumulated = in_step == 0 ? part.to(DType::f64) : add(accumulated, part.to(DType::f64));
        if (++in_step < accumulate) continue;
        in_step = 0;
        optimizer_step();
        loss = mul(accumulated, 1.0 / static_cast<double>(accumulate));
      }
      if (scheduler_) scheduler_->step();
      ++step;
      const data::LoaderPosition next = loader.position();
      // The global batch (each data rank holds an equal slice of each of its batches).
      const int64_t n = task_->examples(batch) * group.size() * accumulate;
      examples_here += n;
      // The stop decision: on a data-parallel run the one the ranks agreed on for this step.
      int stop_now = 0;
      if (data_parallel) {
        const StepAgreement agreed = agree_on_step(run, loss);
        account({step, lr, n, Tensor()}, agreed.loss);
        stop_now = agreed.stop_signal;
      } else {
        stop_now = stop_signal();
        losses.add({step, lr, n, loss.detach()});
        if (losses.due()) losses.flush(account);
      }
      profiler.at_step(step);
      if (on_batch_end) {
        const double running =
            progress.loss_sum / static_cast<double>(std::max<int64_t>(progress.samples, 1));
        on_batch_end({step, epoch, next, examples_here, running});
      }
      const bool epoch_ends = next.batch >= batches_used;
      if (options_.eval_every > 0 && step % options_.eval_every == 0 && !epoch_ends) {
        losses.flush(account);  // the losses up to this step, before its report
        EvalReport report{step, epoch, evaluate()};
        if (on_eval) on_eval(report);
      }
      if (options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0) {
        losses.flush(account);  // the checkpoint holds the epoch's loss sum so far
        result.checkpoint = checkpoints.save(step, next, progress);
      }
      if (options_.stop_after_steps > 0 && step >= options_.stop_after_steps) {
        losses.flush(account);
        stop(next, progress, 0);
        return result;
      }
      if (stop_now != 0) {
        losses.flush(account);
        stop(next, progress, stop_now);
        return result;
      }
      if (epoch_ends) break;  // (fewer than `accumulate` batches left)
    }
    losses.flush(account);
    EpochReport report;
    report.epoch = epoch;
    report.step = step;
    report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    report.train_loss =
        progress.loss_sum / static_cast<double>(std::max<int64_t>(progress.samples, 1));
    report.lr = progress.samples > 0 ? progress.last_lr : optimizer().lr();
    report.examples_per_s = static_cast<double>(examples_here) / std::max(report.seconds, 1e-9);
    report.eval = evaluate();
    result.last_epoch = report;
    if (on_epoch) on_epoch(report);
    if (options_.checkpoint_every == 0)
      result.checkpoint = checkpoints.save(step, {epoch + 1, 0}, {});
  }
  profiler.finish();
  // The final state (resuming a finished run finds nothing left to do).
  const std::string last =
      checkpoints.save(step, {std::max(options_.epochs, start.position.epoch), 0}, {});
  if (!last.empty()) result.checkpoint = last;
  checkpoints.finish();
  result.checkpoint_times = checkpoints.times();
  result.steps = step;
  return result;
}

}  // namespace gradus::train
