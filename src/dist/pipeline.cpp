#include "gradus/dist/pipeline.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "gradus/autograd.h"
#include "gradus/core/cuda.h"
#include "gradus/core/host_memory.h"
#include "gradus/core/random.h"
#include "gradus/ops.h"

namespace gradus::dist {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The header that precedes each activation: enough for the receiver to allocate it, to know
// which rows of the batch it holds, and to continue the random stream where the sender's stage
// left it.
enum HeaderField : int64_t {
  kDType = 0,
  kNDim,
  kDims,  // kMaxDims entries
  kMaxDims = 7,
  kSeed = kDims + kMaxDims,
  kOffset,
  kMicroBatch,
  kRowBegin,
  kBatchRows,
  kOnCuda,  // the activation is a CUDA tensor (moved to this rank's current CUDA device on arrival)
  kHeaderLength
};
constexpr int kHeaderTag = 0, kActivationTag = 1, kGradientTag = 2;

// Activations and their gradients travel through the host over MPI, also from and to GPUs. NCCL
// runs a communicator's point-to-point operations in issue order on one stream, so a stage whose
// receive of a gradient was queued before its peer's matching send, while the peer waits in a
// receive of the next activation, would deadlock; the schedules issue exactly such crossing orders
// (GPipe's sends of every activation against the backward's receives). The MPI engine progresses
// any order. Grouped NCCL send/recv pairs (Megatron's batch_isend_irecv) are the faster way.
Tensor to_host(const Tensor& t) {
  return t.is_cuda() ? t.to(Device::cpu()) : t;
}

Tensor new_header() {
  return zeros({kHeaderLength}, {.dtype = DType::i64});
}

// Minimises the largest stage's cost over contiguous splits of `costs` into `stages` non-empty
// parts (dynamic programming over prefixes; models have at most a few hundred layers).
std::vector<int64_t> balance(const std::vector<double>& costs, int stages, const char* who) {
  const int n = static_cast<int>(costs.size());
  GRADUS_CHECK(stages >= 1, ValueError, who, ": the number of stages must be >= 1, got ", stages);
  GRADUS_CHECK(n >= stages, ValueError, who, ": the model has ", n, " layer(s), fewer than the ",
               stages, " pipeline stages (every stage needs at least one layer)");
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[static_cast<size_t>(i)];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest possible largest cost splitting the first i layers into s stages.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<size_t>(n) + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {
        const double c = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (c < best[s][i]) {
          best[s][i] = c;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<int64_t> sizes(static_cast<size_t>(stages));
  for (int s = stages, i = n; s >= 1; --s) {
    const int j = cut[s][i];
    sizes[static_cast<size_t>(s) - 1] = i - j;
    i = j;
  }
  return sizes;
}

std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> layers_of(
    const nn::Sequential& model) {
  return model.named_children();
}

}  // namespace

const char* schedule_name(PipelineSchedule s) {
  return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

PipelineSchedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  throw ValueError("pipeline schedule '" + name + "' is not one of: gpipe, 1f1b");
}

std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int stages) {
  std::vector<double> costs;
  for (const auto& [name, layer] : layers_of(model)) {
    double n = 0;
    for (const Tensor& p : layer->parameters()) n += static_cast<double>(p.numel());
    costs.push_back(n);
  }
  return balance(costs, stages, "balance_by_parameters");
}

std::vector<int64_t> balance_by_time(const nn::Sequential& model, const Tensor& sample, int stages,
                                     int repeats) {
  GRADUS_CHECK(repeats >= 1, ValueError, "balance_by_time: repeats must be >= 1, got ", repeats);
  std::vector<double> costs;
  Tensor x = sample.detach();
  for (const auto& [name, layer] : layers_of(model)) {
    std::vector<double> times;
    Tensor out;
    for (int r = 0; r <= repeats; ++r) {  // the first run warms up and is not counted
      Tensor in = x.detach();
      in.set_requires_grad(is_floating(x.dtype()));
      const Clock::time_point t0 = Clock::now();
      out = layer->forward(in);
      if (out.requires_grad()) backward({out}, {ones_like(out)});
      if (r > 0) times.push_back(seconds_since(t0));
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                     times.end());
    costs.push_back(times[times.size() / 2]);
    x = out.detach();
  }
  for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
  return balance(costs, stages, "balance_by_time");
}

// ------------------------------------------------------------------------------ construction

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, PipelineOptions options,
                   std::shared_ptr<ProcessGroup> group)
    : options_(std::move(options)), group_(group ? std::move(group) : default_group()) {
  GRADUS_CHECK(model != nullptr, ValueError, "Pipeline: the model is null");
  GRADUS_CHECK(options_.micro_batches >= 1, ValueError,
               "Pipeline: micro_batches must be >= 1, got ", options_.micro_batches);
  GRADUS_CHECK(options_.global_rows >= 0 && options_.global_row_offset >= 0, ValueError,
               "Pipeline: global_rows and global_row_offset must be >= 0");
  stage_ = group_->rank();
  stages_ = group_->size();
  const auto layers = layers_of(*model);
  partition_ =
      options_.partition.empty() ? balance_by_parameters(*model, stages_) : options_.partition;
  GRADUS_CHECK(static_cast<int>(partition_.size()) == stages_, ValueError,
               "Pipeline: the partition ", "has ", partition_.size(),
               " stage(s), but the pipeline group has ", stages_, " rank(s)");
  int64_t total = 0;
  for (size_t s = 0; s < partition_.size(); ++s) {
    GRADUS_CHECK(partition_[s] >= 1, ValueError, "Pipeline: stage ", s, " of the partition has ",
                 partition_[s], " layer(s); every stage needs at least one");
    total += partition_[s];
  }
  GRADUS_CHECK(total == static_cast<int64_t>(layers.size()), ValueError,
               "Pipeline: the partition covers ", total, " layer(s), but the model has ",
               layers.size());
  for (int s = 0; s < stage_; ++s) first_layer_ += partition_[static_cast<size_t>(s)];
  end_layer_ = first_layer_ + partition_[static_cast<size_t>(stage_)];
  stage_module_ = std::make_shared<nn::Sequential>();
  for (int64_t i = first_layer_; i < end_layer_; ++i) {
    stage_module_->push_back(layers[static_cast<size_t>(i)].first,
                             layers[static_cast<size_t>(i)].second);
  }
  stage_module_->train(model->is_training());
  GRADUS_CHECK(options_.layer_paths.empty() || options_.layer_paths.size() == layers.size(),
               ValueError, "Pipeline: ", options_.layer_paths.size(),
               " layer paths for a model of ", layers.size(), " layers");
  // Tensors in layers of two stages.
  std::vector<int> stage_of_layer;
  for (size_t st = 0; st < partition_.size(); ++st) {
    for (int64_t l = 0; l < partition_[st]; ++l) stage_of_layer.push_back(static_cast<int>(st));
  }
  std::map<const TensorImpl*, size_t> seen;  // -> index in tied_ or the first layer's entry
  std::vector<std::pair<Tensor, int>> first_stage;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (const Tensor& p : layers[l].second->parameters()) {
      const auto [it, fresh] = seen.emplace(p.impl(), first_stage.size());
      if (fresh) {
        first_stage.emplace_back(p, stage_of_layer[l]);
        continue;
      }
      const int owner = first_stage[it->second].second;
      if (owner == stage_of_layer[l]) continue;
      auto known =
          std::find_if(tied_.begin(), tied_.end(), [&](const Tied& t) { return t.weight.same(p); });
      if (known == tied_.end()) {
        tied_.push_back({p, owner, false});
        known = tied_.end() - 1;
      }
      if (stage_of_layer[l] == stage_) known->copy_here = true;
    }
  }
}

std::string Pipeline::one_process_name(const std::string& stage_name) const {
  if (options_.layer_paths.empty()) return stage_name;
  const size_t dot = stage_name.find('.');
  const std::string layer = stage_name.substr(0, dot);
  const size_t index = static_cast<size_t>(std::stoull(layer));
  GRADUS_CHECK(index < options_.layer_paths.size(), ValueError, "Pipeline: '", stage_name,
               "' is not a name of the pipeline's layers");
  return options_.layer_paths[index] + (dot == std::string::npos ? "" : stage_name.substr(dot));
}

bool Pipeline::is_tied_copy(const Tensor& p) const {
  return std::any_of(tied_.begin(), tied_.end(), [&](const Tied& t) {
    return t.copy_here && t.owner != stage_ && t.weight.same(p);
  });
}

void Pipeline::reduce_tied_gradients() {
  NoGradGuard no_grad;
  for (const Tied& t : tied_) {
    // Every stage takes part; those without a gradient of it add zeros.
    const Tensor g =
        t.weight.grad().defined() ? t.weight.grad().contiguous() : zeros_like(t.weight.detach());
    group_->all_reduce(g, ReduceOp::sum, "tied weight gradient")->wait();
    // The owner's optimizer steps on the sum; a copy's gradient is spent (no optimizer zeroes it).
    t.weight.set_grad(stage_ == t.owner ? g : Tensor());
  }
}

void Pipeline::broadcast_tied_parameters() {
  NoGradGuard no_grad;
  for (const Tied& t : tied_) {
    group_->broadcast(t.weight.detach(), t.owner, "tied weight")->wait();
    t.weight.bump_version();
  }
}

// ------------------------------------------------------------------------------ messages

// One micro-batch as this stage sees it.
struct Pipeline::MicroBatch {
  int index = 0;
  int64_t row_begin = 0, rows = 0;
  Tensor input;           // what the stage's first layer got (a leaf needing grad after stage 0)
  Tensor output;          // the stage's output; on the last stage, the weighted loss
  Tensor gradient;        // the output's gradient, arriving from the next stage
  WorkPtr gradient_work;  // its receive
  double loss = 0;
};

// The activations arriving from the previous stage, one header ahead: the header of micro-batch
// j + 1 is awaited while j is computed, and its data receive is posted as soon as that header
// is there, so the transfer overlaps this stage's compute.
class Pipeline::Mailbox {
 public:
  Mailbox(ProcessGroup& group, int source, double* wait_seconds)
      : group_(group), source_(source), wait_seconds_(wait_seconds) {}

  void expect(int index) {
    Incoming& in = incoming_[index];
    in.header = new_header();
    in.header_work = group_.recv(in.header, source_, kHeaderTag, "pipeline header");
  }

  // Posts the data receives whose headers have arrived (never blocks).
  void poll() {
    for (auto& [index, in] : incoming_) {
      if (in.data_work) continue;
      if (!in.header_work->is_completed()) break;  // headers arrive in order
      post_data(index, in);
    }
  }

  // The header and the data of micro-batch `index`, waiting for them if needed.
  std::pair<Tensor, Tensor> take(int index) {
    auto it = incoming_.find(index);
    GRADUS_CHECK(it != incoming_.end(), ValueError, "Pipeline: micro-batch ", index,
                 " was never expected (an internal schedule error)");
    Incoming in = std::move(it->second);
    incoming_.erase(it);
    timed_wait(in.header_work);
    if (!in.data_work) post_data(index, in);
    timed_wait(in.data_work);
    if (in.on_cuda) in.data = in.data.to(Device::cuda(cuda::current_device()));
    return {in.header, in.data};
  }

  void timed_wait(const WorkPtr& work) {
    if (work->is_completed()) {
      work->wait();  // rethrows a failure
      return;
    }
    const Clock::time_point t0 = Clock::now();
    work->wait();
    *wait_seconds_ += seconds_since(t0);
  }

 private:
  struct Incoming {
    Tensor header, data;
    WorkPtr header_work, data_work;
    bool on_cuda = false;
  };

  void post_data(int index, Incoming& in) {
    in.header_work->wait();
    const int64_t* h = in.header.data_ptr<int64_t>();
    GRADUS_CHECK(h[kMicroBatch] == index, DistError, "Pipeline: stage ", source_ + 1,
                 " expected micro-batch ", index, " from stage ", source_, " and got ",
                 h[kMicroBatch], " (the stages disagree on the number of micro-batches)");
    GRADUS_CHECK(h[kNDim] >= 0 && h[kNDim] <= kMaxDims && h[kDType] >= 0 &&
                     h[kDType] <= static_cast<int64_t>(DType::boolean),
                 DistError, "Pipeline: a malformed activation header arrived from stage ", source_);
    Shape shape(h + kDims, h + kDims + h[kNDim]);
    in.on_cuda = h[kOnCuda] != 0;
    in.data = empty(shape, {.dtype = static_cast<DType>(h[kDType])});  // through the host
    in.data_work = group_.recv(in.data, source_, kActivationTag, "pipeline activation");
  }

  ProcessGroup& group_;
  int source_;
  double* wait_seconds_;
  std::map<int, Incoming> incoming_;
};

// ------------------------------------------------------------------------------ the schedule

namespace {

struct Action {
  bool forward;
  int micro_batch;
};

// The order in which stage `s` of `p` runs the forwards and backwards of `m` micro-batches.
std::vector<Action> schedule_of(PipelineSchedule schedule, int s, int p, int m, bool grad) {
  std::vector<Action> actions;
  if (!grad || schedule == PipelineSchedule::gpipe) {
    for (int j = 0; j < m; ++j) actions.push_back({true, j});
    if (grad) {
      for (int j = 0; j < m; ++j) actions.push_back({false, j});
    }
    return actions;
  }
  // 1F1B: warm up with the forwards that fill the pipeline below this stage, then alternate.
  const int warmup = std::min(p - s - 1, m);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) actions.push_back({true, next_forward});
  while (next_forward < m) {
    actions.push_back({true, next_forward++});
    actions.push_back({false, next_backward++});
  }
  while (next_backward < m) actions.push_back({false, next_backward++});
  return actions;
}

}  // namespace

void Pipeline::run_forward(MicroBatch& mb, Mailbox& mail, const Tensor& input, const Tensor& target,
                           const LossFn* loss, bool grad) {
  Generator& gen = default_generator();
  PhiloxState rng = step_rng_;  // the first stage starts where the step started
  int64_t batch_rows = 0;
  if (is_first()) {
    batch_rows = input.size(0);
    mb.input = input.narrow(0, mb.row_begin, mb.rows);
  } else {
    auto [header, data] = mail.take(mb.index);
    const int64_t* h = header.data_ptr<int64_t>();
    rng = {static_cast<uint64_t>(h[kSeed]), static_cast<uint64_t>(h[kOffset])};
    mb.row_begin = h[kRowBegin];
    batch_rows = h[kBatchRows];
    mb.input = data;
    if (grad && is_floating(data.dtype())) mb.input.set_requires_grad(true);
    mb.rows = mb.input.dim() > 0 ? mb.input.size(0) : 0;
  }
  mail.poll();
  const Clock::time_point t0 = Clock::now();
  // Every micro-batch starts this stage's draws at the same stream position; BatchSlice makes
  // each draw cover the whole (global) batch and read this micro-batch's rows of it.
  gen.set_state(rng);
  // Training: this replica's rows of the global batch. forward(): the batch itself.
  const bool global = loss != nullptr && options_.global_rows > 0;
  const int64_t global_rows = global ? options_.global_rows : batch_rows;
  const int64_t row_offset = global ? options_.global_row_offset : 0;
  {
    std::optional<NoGradGuard> no_grad;
    if (!grad) no_grad.emplace();
    BatchSliceGuard slice({row_offset + mb.row_begin, mb.rows, global_rows});
    mb.output = stage_module_->forward(mb.input);
  }
  const PhiloxState rng_after = gen.state();
  if (is_last()) {
    if (loss != nullptr) {
      const double share = static_cast<double>(mb.rows) / static_cast<double>(batch_rows);
      Tensor l = (*loss)(mb.output, target.narrow(0, mb.row_begin, mb.rows));
      GRADUS_CHECK(l.numel() == 1, ValueError,
                   "Pipeline::train_step: the loss function must return one value, got ",
                   shape_str(l.sizes()));
      mb.output = mul(l, share);
      mb.loss = l.item<double>() * share;
    }
    stats_.compute_seconds += seconds_since(t0);
    return;
  }
  stats_.compute_seconds += seconds_since(t0);
  const Tensor data = mb.output.detach().contiguous();
  GRADUS_CHECK(data.dim() <= kMaxDims, ValueError, "Pipeline: stage ", stage_, "'s output has ",
               data.dim(), " dimensions; at most ", kMaxDims, " can be sent");
  Tensor header = new_header();
  int64_t* h = header.data_ptr<int64_t>();
  h[kDType] = static_cast<int64_t>(data.dtype());
  h[kNDim] = data.dim();
  for (int64_t d = 0; d < data.dim(); ++d) h[kDims + d] = data.size(d);
  h[kSeed] = static_cast<int64_t>(rng_after.seed);
  h[kOffset] = static_cast<int64_t>(rng_after.offset);
  h[kMicroBatch] = mb.index;
  h[kRowBegin] = mb.row_begin;
  h[kBatchRows] = batch_rows;
  h[kOnCuda] = data.is_cuda() ? 1 : 0;
  send(header, stage_ + 1, kHeaderTag, "pipeline header");
  send(to_host(data), stage_ + 1, kActivationTag, "pipeline activation");
  if (grad) {
    // The gradient of this output will come back: post its receive now.
    mb.gradient = empty(data.sizes(), {.dtype = data.dtype()});  // through the host
    mb.gradient_work = group_->recv(mb.gradient, stage_ + 1, kGradientTag, "pipeline gradient");
  }
}

void Pipeline::run_backward(MicroBatch& mb, Mailbox& mail) {
  if (!is_last()) mail.timed_wait(mb.gradient_work);
  mail.poll();
  const Clock::time_point t0 = Clock::now();
  if (is_last()) {
    backward({mb.output}, {});
  } else if (mb.output.requires_grad()) {
    backward({mb.output}, {mb.gradient.to(mb.output.device())});
  }
  stats_.compute_seconds += seconds_since(t0);
  if (!is_first()) {
    Tensor g = mb.input.requires_grad() ? mb.input.grad() : Tensor();
    if (!g.defined()) g = zeros_like(mb.input);  // the stage did not use its input
    g = g.contiguous();
    send(to_host(g), stage_ - 1, kGradientTag, "pipeline gradient");
  }
  // The activations of this micro-batch are no longer needed.
  mb.input = Tensor();
  mb.output = Tensor();
  mb.gradient = Tensor();
}

void Pipeline::send(const Tensor& t, int dst, int tag, const char* label) {
  // A sent tensor lives until its send completed; completed sends are let go at once, so the
  // memory a stage holds is what its schedule needs, not every message of the step.
  for (size_t i = 0; i < sends_.size();) {
    if (sends_[i].first->is_completed()) {
      sends_[i].first->wait();  // rethrows a failure
      sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  sends_.emplace_back(group_->send(t, dst, tag, label), t);
}

double Pipeline::train_step(const Tensor& input, const Tensor& target, const LossFn& loss) {
  GRADUS_CHECK(static_cast<bool>(loss), ValueError, "Pipeline::train_step: no loss function");
  return run(input, target, &loss).first;
}

Tensor Pipeline::forward(const Tensor& input) {
  return run(input, Tensor(), nullptr).second;
}

std::pair<double, Tensor> Pipeline::run(const Tensor& input, const Tensor& target,
                                        const LossFn* loss) {
  const Clock::time_point step_start = Clock::now();
  const int m = options_.micro_batches;
  const bool grad = loss != nullptr && is_grad_enabled();
  stats_ = {};
  stats_.micro_batches = m;
  sends_.clear();
  host::reset_peak_memory();
  const size_t start_bytes = host::memory_stats().allocated_bytes;

  // The first stage knows the batch's rows and the last the target's: agree on both before any
  // activation moves, so a bad batch is refused on every stage at once instead of leaving the
  // others waiting for messages that never come.
  Tensor sizes = from_vector(
      std::vector<int64_t>{is_first() && input.defined() && input.dim() > 0 ? input.size(0) : 0,
                           is_last() && target.defined() && target.dim() > 0 ? target.size(0) : 0},
      {2}, {.dtype = DType::i64});
  group_->all_reduce(sizes, ReduceOp::max, "pipeline batch size")->wait();
  const int64_t n = sizes.to_vector<int64_t>()[0], target_rows = sizes.to_vector<int64_t>()[1];
  GRADUS_CHECK(n >= m, ValueError, "Pipeline: the batch has ", n, " row(s), fewer than the ", m,
               " micro-batches (the first stage's input: ",
               is_first() && input.defined() ? shape_str(input.sizes()) : std::string("elsewhere"),
               ")");
  GRADUS_CHECK(loss == nullptr || target_rows == n, ValueError, "Pipeline::train_step: the ",
               "target has ", target_rows, " row(s) on the last stage, the batch ", n);

  step_rng_ = default_generator().state();
  std::vector<MicroBatch> mbs(static_cast<size_t>(m));
  for (int j = 0; j < m; ++j) mbs[static_cast<size_t>(j)].index = j;
  if (is_first()) {
    int64_t begin = 0;
    for (int j = 0; j < m; ++j) {
      MicroBatch& mb = mbs[static_cast<size_t>(j)];
      mb.row_begin = begin;
      mb.rows = n / m + (j < n % m ? 1 : 0);
      begin += mb.rows;
    }
  }
  Mailbox mail(*group_, stage_ - 1, &stats_.wait_seconds);
  if (!is_first()) {
    for (int j = 0; j < std::min(m, 2); ++j) mail.expect(j);
  }
  int in_flight = 0, expected = std::min(m, 2);
  std::vector<Tensor> outputs;  // forward(): the last stage's outputs
  for (const Action& a : schedule_of(options_.schedule, stage_, stages_, m, grad)) {
    MicroBatch& mb = mbs[static_cast<size_t>(a.micro_batch)];
    if (a.forward) {
      run_forward(mb, mail, input, target, loss, grad);
      if (!is_first() && expected < m) mail.expect(expected++);
      if (!grad) {
        if (is_last()) outputs.push_back(mb.output);
        mb.output = Tensor();
        mb.input = Tensor();
        continue;
      }
      stats_.max_in_flight = std::max(stats_.max_in_flight, ++in_flight);
    } else {
      run_backward(mb, mail);
      --in_flight;
    }
  }
  const Clock::time_point sends_start = Clock::now();
  std::vector<WorkPtr> pending;
  for (const auto& [work, tensor] : sends_) pending.push_back(work);
  wait_all(pending);
  stats_.wait_seconds += seconds_since(sends_start);
  sends_.clear();

  // The last stage knows the loss and where the random stream ends: every stage continues from
  // there, so the next step (and anything else drawing) stays in step across the ranks.
  double total_loss = 0;
  for (const MicroBatch& mb : mbs) total_loss += mb.loss;
  const PhiloxState rng = default_generator().state();
  Tensor shared = from_vector(
      std::vector<int64_t>{std::bit_cast<int64_t>(total_loss), static_cast<int64_t>(rng.seed),
                           static_cast<int64_t>(rng.offset)},
      {3}, {.dtype = DType::i64});
  group_->broadcast(shared, stages_ - 1, "pipeline loss")->wait();
  const std::vector<int64_t> v = shared.to_vector<int64_t>();
  default_generator().set_state({static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[2])});
  const size_t peak = host::memory_stats().peak_allocated_bytes;
  stats_.peak_bytes = peak > start_bytes ? peak - start_bytes : 0;
  stats_.step_seconds = seconds_since(step_start);
  Tensor out;
  if (is_last() && !outputs.empty()) out = cat(outputs, 0);
  return {std::bit_cast<double>(v[0]), out};
}

// ------------------------------------------------------------------------------ data parallel

Tensor PipelineModule::forward(const Tensor& x) {
  Tensor out = pipeline_.forward(x);
  ProcessGroup& group = pipeline_.group();
  if (group.size() == 1) return out;
  // The output's dtype and shape first (only the last stage knows them), then its values.
  constexpr int kMaxDims = 8;
  const int last = pipeline_.num_stages() - 1;
  Tensor header = zeros({kMaxDims + 2}, {.dtype = DType::i64});
  if (pipeline_.is_last()) {
    GRADUS_CHECK(out.dim() <= kMaxDims, ValueError, "PipelineModule: the output has ", out.dim(),
                 " dimensions; at most ", kMaxDims, " are handed to the other stages");
    int64_t* h = header.data_ptr<int64_t>();
    h[0] = static_cast<int64_t>(out.dtype());
    h[1] = out.dim();
    for (int64_t d = 0; d < out.dim(); ++d) h[2 + d] = out.size(d);
  }
  group.broadcast(header, last, "pipeline output header")->wait();
  if (!pipeline_.is_last()) {
    const int64_t* h = header.data_ptr<int64_t>();
    const Shape shape(h + 2, h + 2 + h[1]);
    const std::vector<Tensor> params = pipeline_.parameters();
    const Device device = x.defined()      ? x.device()
                          : params.empty() ? Device::cpu()
                                           : params[0].device();
    out = empty(shape, {.dtype = static_cast<DType>(h[0]), .device = device});
  } else {
    out = out.contiguous();
  }
  group.broadcast(out, last, "pipeline output")->wait();
  return out;
}

void average_gradients(const std::vector<Tensor>& params, ProcessGroup& group) {
  if (group.size() == 1) return;
  std::map<std::pair<DType, std::string>, std::vector<Tensor>> by_kind;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) p.set_grad(zeros_like(p));
    by_kind[{p.dtype(), p.device().str()}].push_back(p);
  }
  NoGradGuard no_grad;
  for (auto& [kind, list] : by_kind) {
    std::vector<Tensor> flat_parts;
    for (const Tensor& p : list) flat_parts.push_back(p.grad().reshape({-1}));
    Tensor flat = cat(flat_parts, 0).contiguous();
    group.all_reduce(flat, ReduceOp::avg, "averaged gradients")->wait();
    int64_t offset = 0;
    for (const Tensor& p : list) {
      p.grad().copy_(flat.narrow(0, offset, p.numel()).reshape(p.sizes()));
      offset += p.numel();
    }
  }
}

}  // namespace gradus::dist
