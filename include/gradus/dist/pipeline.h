// Pipeline parallelism: an nn::Sequential split into stages, one per rank of a group, that work
// on micro-batches in turn.
//
//   auto model = make_model();                       // the same whole model on every rank (seed)
//   dist::Pipeline pipe(model, {.micro_batches = 8, .schedule =
//   dist::PipelineSchedule::one_f_one_b}); optim::SGD opt(pipe.parameters(), {.lr = 0.1});  // this
//   stage's parameters only opt.zero_grad(); double loss = pipe.train_step(x, y, loss_fn);    //
//   every stage gets the batch's loss opt.step();
//
// Stage s (the group rank) keeps layers [first_layer, end_layer) of the model, by a partition
// given in layers per stage or balanced by parameter count. The batch's rows are cut into
// micro-batches; activations go forward and their gradients backward with asynchronous
// send/recv (a small header first, carrying shape, dtype and the random-stream position), while
// the next micro-batch's header is already awaited. Schedules:
//   gpipe  every forward, then every backward: a stage holds the activations of all m
//          micro-batches at its peak.
//   1f1b   PipeDream-flush: stage s runs p - s - 1 warm-up forwards, then alternates one forward
//          and one backward, then drains: it holds at most p - s micro-batches of activations.
// Both compute the same gradients, those of one process running the whole batch at once: the
// loss of a micro-batch is weighted by its share of the rows, and random draws (dropout) read the
// stream where the whole batch's draw would have put those rows (core/random.h's BatchSlice).
// Gradients accumulate over the micro-batches in the parameters' .grad; the caller zeroes them
// and steps its optimizer once per batch, as without a pipeline.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradus/core/random.h"
#include "gradus/dist/process_group.h"
#include "gradus/nn/container.h"

namespace gradus::dist {

enum class PipelineSchedule { gpipe, one_f_one_b };
const char* schedule_name(PipelineSchedule s);  // "gpipe" / "1f1b"
// "gpipe" or "1f1b"; ValueError naming the choices otherwise.
PipelineSchedule parse_schedule(const std::string& name);

// Layers per stage for `stages` contiguous stages of `model`, balancing the parameter count (the
// greedy split that minimises the largest stage). Every stage gets at least one layer;
// ValueError when the model has fewer layers than stages.
std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int stages);
// The same, balancing the measured forward + backward time of each layer on `sample` (run once
// to warm up, then timed `repeats` times; the median counts).
std::vector<int64_t> balance_by_time(const nn::Sequential& model, const Tensor& sample, int stages,
                                     int repeats = 3);

struct PipelineOptions {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  // Layers per stage (sums to the model's layer count, each >= 1); empty: balance_by_parameters.
  std::vector<int64_t> partition = {};
  // With data parallelism around the pipeline: this replica's first row in the global batch and
  // the global batch's rows (0: the batch given to train_step is the whole batch). Random draws
  // in train_step then match one process running the global batch (forward() draws as for its
  // own batch).
  int64_t global_row_offset = 0;
  int64_t global_rows = 0;
  // Where each layer sits in the model the sequence stands for (nn::gpt_layers' paths): a stage's
  // state name "i.rest" (layer i's "rest") is that model's "paths[i].rest". Empty: the
  // sequence's own names.
  std::vector<std::string> layer_paths = {};
};

// What the last train_step did on this stage.
struct PipelineStats {
  double step_seconds = 0;     // the whole train_step
  double compute_seconds = 0;  // forward and backward of this stage's layers (and the loss)
  double wait_seconds = 0;     // blocked waiting for an activation or a gradient to arrive
  // Tensor bytes held above the step's start at its peak (activations, received buffers, first
  // gradients), from host::memory_stats: CPU tensors only.
  size_t peak_bytes = 0;
  int max_in_flight = 0;  // micro-batches whose activations were held at once
  int micro_batches = 0;
};

class Pipeline {
 public:
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  // Every rank of `group` (nullptr: the world) passes the same model, built from the same seed;
  // this rank keeps its stage's layers (the others are released from this object's view). Throws
  // ValueError for a partition that does not match the model or the group, or micro_batches < 1.
  Pipeline(std::shared_ptr<nn::Sequential> model, PipelineOptions options,
           std::shared_ptr<ProcessGroup> group = nullptr);

  // Forward and backward of one batch through every stage. `input` is read on the first stage,
  // `target` (rows aligned with input's) on the last; elsewhere they may be undefined. `loss`
  // returns the mean loss of a micro-batch's output. Returns the batch's mean loss on every
  // stage. The batch must have at least micro_batches rows; they are cut as evenly as possible.
  double train_step(const Tensor& input, const Tensor& target, const LossFn& loss);
  // Forward only (no gradients), micro-batched: the output on the last stage, an undefined tensor
  // on the others.
  Tensor forward(const Tensor& input);

  int stage_index() const { return stage_; }
  int num_stages() const { return stages_; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  int64_t first_layer() const { return first_layer_; }
  int64_t end_layer() const { return end_layer_; }
  const std::vector<int64_t>& partition() const { return partition_; }
  // This stage's layers under their names in the whole model ("3", "4"), so state_dict() names
  // are the whole model's.
  nn::Sequential& stage() { return *stage_module_; }
  const std::shared_ptr<nn::Sequential>& stage_module() const { return stage_module_; }
  std::vector<Tensor> parameters() const { return stage_module_->parameters(); }
  // The name of this stage's state entry `stage_name` in the model the sequence stands for
  // (PipelineOptions::layer_paths; the name itself without them).
  std::string one_process_name(const std::string& stage_name) const;

  // Tied weights across stages (one tensor in layers of two stages: a GPT's token embedding and
  // its output head). Its first stage owns it: only there is it updated; the other stages' copy
  // (is_tied_copy) is left out of their optimizers. After the backward,
  // reduce_tied_gradients() adds the copies' gradients to the owner's (an all-reduce over the
  // pipeline group per tied tensor); after the update, broadcast_tied_parameters() hands the
  // owner's values to the copies. Neither communicates when nothing is tied.
  bool is_tied_copy(const Tensor& p) const;
  void reduce_tied_gradients();
  void broadcast_tied_parameters();
  const PipelineStats& last_stats() const { return stats_; }
  const PipelineOptions& options() const { return options_; }
  ProcessGroup& group() const { return *group_; }

 private:
  struct MicroBatch;
  class Mailbox;
  void run_forward(MicroBatch& mb, Mailbox& mail, const Tensor& input, const Tensor& target,
                   const LossFn* loss, bool grad);
  void run_backward(MicroBatch& mb, Mailbox& mail);
  // train_step (loss given) and forward (no loss): the loss and the last stage's output.
  std::pair<double, Tensor> run(const Tensor& input, const Tensor& target, const LossFn* loss);

  std::shared_ptr<nn::Sequential> stage_module_;
  PipelineOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  int stage_ = 0, stages_ = 1;
  int64_t first_layer_ = 0, end_layer_ = 0;
  std::vector<int64_t> partition_;
  PipelineStats stats_;
  void send(const Tensor& t, int dst, int tag, const char* label);
  // This step's sends not yet seen complete, with their tensors; all complete before it returns.
  std::vector<std::pair<WorkPtr, Tensor>> sends_;
  PhiloxState step_rng_;  // the random stream's position when the step started
  struct Tied {
    Tensor weight;  // this rank's object (every rank built the whole model)
    int owner = 0;  // the first stage holding it
    bool copy_here = false;
  };
  std::vector<Tied> tied_;  // in the model's order, the same list on every stage
};

// The whole pipeline as a module for inference: forward(x) runs Pipeline::forward (x is read on
// the first stage) and hands the last stage's output to every stage of the pipeline group (a
// broadcast), so code written for one model, an evaluator, runs unchanged on every rank.
// Its child is this stage's layers ("stage"). The pipeline must outlive it.
class PipelineModule : public nn::Module {
 public:
  explicit PipelineModule(Pipeline& pipeline) : pipeline_(pipeline) {
    register_module("stage", pipeline.stage_module());
  }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "PipelineModule"; }

 private:
  Pipeline& pipeline_;
};

// Averages each gradient of `params` over `group` (data parallelism around a pipeline or tensor-
// parallel stage): one all-reduce of a flat buffer per dtype. Parameters without a gradient get a
// zero one first, so every rank reduces the same buffer.
void average_gradients(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace gradus::dist
