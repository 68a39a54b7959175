#include "gradus/train/checkpoints.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "gradus/io/io.h"
#include "gradus/ops.h"
#include "train/checkpoint_sets.h"
#include "train/host_copy.h"

namespace gradus::train {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

// Temp files "<ckpt>.tmp.<pid>" left by a writer that was killed mid-write (AtomicFile never
// renamed them). Only files of processes that no longer exist are removed.
int remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!io::is_atomic_temp_name(name)) continue;
    const long pid = std::strtol(name.substr(name.rfind('.') + 1).c_str(), nullptr, 10);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code ec2;
    if (fs::remove(e.path(), ec2)) ++removed;
  }
  return removed;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the process at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);   // the terminal closed: same as SIGTERM
  sigaction(SIGUSR1, &sa, nullptr);  // a scheduler's warning (Slurm: --signal=USR1@120)
}

int stop_signal() {
  return g_stop_signal;
}

void request_stop(int signal) {
  g_stop_signal = signal;
}

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "SIGTERM";
  }
}

StepAgreement agree_on_step(dist::ProcessGroup& group, const Tensor& loss) {
  const int mine = g_stop_signal;  // read once: what this rank contributes is what it decides on
  Tensor shared = tensor({loss.item(), static_cast<double>(mine), mine != 0 ? 1.0 : 0.0}, {3},
                         {.dtype = DType::f64});
  group.all_reduce(shared, dist::ReduceOp::sum, "loss")->wait();
  const std::vector<double> v = shared.to_vector<double>();
  StepAgreement agreed;
  agreed.loss = v[0] / group.size();
  if (v[2] > 0) {
    // The signal every requesting rank had (their sum over their count), else SIGTERM.
    const double each = v[1] / v[2];
    agreed.stop_signal =
        each == static_cast<double>(static_cast<int>(each)) &&
                (each == SIGINT || each == SIGTERM || each == SIGHUP || each == SIGUSR1)
            ? static_cast<int>(each)
            : SIGTERM;
    if (g_stop_signal == 0) g_stop_signal = agreed.stop_signal;
  }
  return agreed;
}

void store_epoch_progress(io::TrainingState& s, const EpochProgress& p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", p.loss_sum);  // hex float: exact
  s.extra["epoch_loss_sum"] = buf;
  s.extra["epoch_samples"] = std::to_string(p.samples);
  std::snprintf(buf, sizeof buf, "%a", p.last_lr);
  s.extra["epoch_last_lr"] = buf;
}

EpochProgress load_epoch_progress(const io::TrainingState& s) {
  EpochProgress p;
  auto number = [&](const char* key, double& out) {
    auto it = s.extra.find(key);
    if (it == s.extra.end()) return;
    char* end = nullptr;
    out = std::strtod(it->second.c_str(), &end);
    GRADUS_CHECK(!it->second.empty() && *end == '\0', IOError, "train: checkpoint metadata 'extra.",
                 key, "' is '", it->second, "', expected a number");
  };
  double samples = 0;
  number("epoch_loss_sum", p.loss_sum);
  number("epoch_samples", samples);
  number("epoch_last_lr", p.last_lr);
  GRADUS_CHECK(samples >= 0 && samples <= 9.0e15, IOError,
               "train: checkpoint metadata 'extra.epoch_samples' is ", samples,
               ", expected a non-negative count");
  p.samples = static_cast<int64_t>(samples);
  return p;
}

namespace {

// Each state tensor of a tensor-parallel model's optimizer shaped like its parameter's shard
// mapped through `map` (gather into, or take a shard of, one process's tensor). The parameters
// come in one process's order (TensorParallelModule), so the indices stay.
template <typename Map>
optim::OptimizerState map_parameter_states(const optim::OptimizerState& state,
                                           const optim::Optimizer& optimizer, Map map) {
  optim::OptimizerState out = state;
  const std::vector<Tensor> params = optimizer.all_params();
  for (auto& [key, t] : out.tensors) {  // (a std::map: the same order on every rank)
    size_t index = 0;
    std::string name;
    if (!optim::parse_state_key(key, index, name) || index >= params.size()) continue;
    t = map(params[index], t);
  }
  return out;
}

// Pipeline stages. An optimizer's state counts its parameters group by group ("state.I.*" and the
// "state.I.step" scalars, I over all_params(); "param_groups.G.num_params"). The whole model's
// optimizer, one process's, counts group G's parameters of every stage, in stage order (the
// stages hold consecutive layers), after all of group G - 1's. A stage without trainable
// parameters holds an optimizer over a placeholder (Strategy), which counts as none.
bool staged(const dist::Pipeline* pipeline) {
  return pipeline != nullptr && pipeline->num_stages() > 1;
}

// Where this stage's optimizer parameters go in the whole model's numbering.
class StageNumbering {
 public:
  StageNumbering(dist::Pipeline& pipeline, const nn::Module& stage,
                 const optim::Optimizer& optimizer) {
    std::set<const TensorImpl*> held;
    for (const Tensor& p : stage.parameters()) held.insert(p.impl());
    const size_t groups = optimizer.num_param_groups();
    local_counts_.assign(groups, 0);
    for (size_t g = 0; g < groups; ++g) {
      for (const Tensor& p : optimizer.params(g)) {
        const bool real = held.count(p.impl()) != 0;
        group_of_.push_back(real ? static_cast<int64_t>(g) : -1);
        position_.push_back(real ? local_counts_[g]++ : 0);
      }
    }
    dist::ProcessGroup& group = pipeline.group();
    const int stages = group.size(), me = pipeline.stage_index();
    Tensor all = zeros({stages}, {.dtype = DType::i64});
    group
        .all_gather(all, tensor({static_cast<double>(groups)}, {1}, {.dtype = DType::i64}),
                    "optimizer parameter groups per stage")
        ->wait();
    for (int s = 0; s < stages; ++s) {
      GRADUS_CHECK(all.data_ptr<int64_t>()[s] == static_cast<int64_t>(groups), ValueError,
                   "train: checkpoints of a pipeline need the same number of optimizer parameter "
                   "groups on every stage; stage ",
                   s, " has ", all.data_ptr<int64_t>()[s], ", stage ", me, " has ", groups);
    }
    std::vector<double> mine(local_counts_.begin(), local_counts_.end());
    Tensor counts = zeros({stages * static_cast<int64_t>(groups)}, {.dtype = DType::i64});
    if (groups > 0) {
      group
          .all_gather(counts, tensor(mine, {static_cast<int64_t>(groups)}, {.dtype = DType::i64}),
                      "optimizer parameters per stage")
          ->wait();
    }
    const int64_t* c = counts.data_ptr<int64_t>();
    totals_.assign(groups, 0);
    first_.assign(groups, 0);
    for (size_t g = 0; g < groups; ++g) {
      for (int s = 0; s < stages; ++s) {
        const int64_t n = c[static_cast<size_t>(s) * groups + g];
        totals_[g] += n;
        if (s < me) first_[g] += n;
      }
    }
  }
  // The whole model's index of local parameter i; -1 for a placeholder.
  int64_t global(size_t i) const {
    if (i >= group_of_.size() || group_of_[i] < 0) return -1;
    const auto g = static_cast<size_t>(group_of_[i]);
    int64_t before = 0;
    for (size_t h = 0; h < g; ++h) before += totals_[h];
    return before + first_[g] + position_[i];
  }
  // The local index of the whole model's parameter `index`; -1 when another stage holds it.
  int64_t local(int64_t index) const {
    for (size_t i = 0; i < group_of_.size(); ++i) {
      if (global(i) == index) return static_cast<int64_t>(i);
    }
    return -1;
  }
  const std::vector<int64_t>& totals() const { return totals_; }
  std::vector<int64_t> local_sizes(const optim::Optimizer& optimizer) const {
    std::vector<int64_t> sizes;
    for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
      sizes.push_back(static_cast<int64_t>(optimizer.params(g).size()));
    }
    return sizes;
  }

 private:
  std::vector<int64_t> group_of_, position_;  // per local parameter
  std::vector<int64_t> local_counts_, totals_, first_;
};

std::string with_index(const std::string& key, int64_t index) {
  size_t old = 0;
  std::string name;
  optim::parse_state_key(key, old, name);
  return "state." + std::to_string(index) + "." + name;
}

void set_group_sizes(optim::OptimizerState& state, const std::vector<int64_t>& sizes) {
  for (size_t g = 0; g < sizes.size(); ++g) {
    state.scalars["param_groups." + std::to_string(g) + ".num_params"] =
        static_cast<double>(sizes[g]);
  }
}

// Every stage's optimizer state gathered on stage 0 in the whole model's numbering (a collective
// over the pipeline group; the other stages' state is returned as it was).
optim::OptimizerState gather_stage_optimizers(optim::OptimizerState state, dist::Pipeline& pipeline,
                                              const nn::Module& stage,
                                              const optim::Optimizer& optimizer) {
  const StageNumbering numbering(pipeline, stage, optimizer);
  std::map<std::string, Tensor> per_parameter;  // tensors and step counts, renumbered
  auto renumber = [&](auto& items, auto as_tensor) {
    for (auto it = items.begin(); it != items.end();) {
      size_t index = 0;
      std::string name;
      if (!optim::parse_state_key(it->first, index, name)) {
        ++it;
        continue;
      }
      const int64_t whole = numbering.global(index);
      if (whole >= 0) per_parameter.emplace(with_index(it->first, whole), as_tensor(it->second));
      it = items.erase(it);
    }
  };
  renumber(state.tensors, [](const Tensor& t) { return t; });
  renumber(state.scalars, [](double v) { return tensor({v}, {}, {.dtype = DType::f64}); });
  per_parameter = dist::gather_named_tensors(pipeline.group(), per_parameter, 0);
  for (const auto& [key, t] : per_parameter) {
    if (key.ends_with(".step") && t.dim() == 0 && t.dtype() == DType::f64) {
      state.scalars[key] = t.item();
    } else {
      state.tensors[key] = t;
    }
  }
  set_group_sizes(state, numbering.totals());
  return state;
}

// This stage's part of the whole model's state in `state`, numbered as its optimizer counts.
void take_stage(io::TrainingState& state, dist::Pipeline& pipeline, const nn::Module& stage,
                const optim::Optimizer& optimizer) {
  const StageNumbering numbering(pipeline, stage, optimizer);
  nn::StateDict mine;  // (a name the checkpoint lacks fails the strict load, named)
  for (const auto& [name, t] : stage.state_dict()) {
    if (const Tensor* stored = state.model.find(pipeline.one_process_name(name))) {
      mine.insert(name, *stored);
    }
  }
  state.model = mine;
  auto keep_mine = [&](auto& items) {
    std::decay_t<decltype(items)> kept;
    for (const auto& [key, value] : items) {
      size_t index = 0;
      std::string name;
      if (!optim::parse_state_key(key, index, name)) {
        kept.emplace(key, value);
      } else if (const int64_t i = numbering.local(static_cast<int64_t>(index)); i >= 0) {
        kept.emplace(with_index(key, i), value);
      }
    }
    items = kept;
  };
  keep_mine(state.optimizer.tensors);
  keep_mine(state.optimizer.scalars);
  set_group_sizes(state.optimizer, numbering.local_sizes(optimizer));
}

}  // namespace

nn::StateDict full_model_state(nn::Module& held, dist::TensorParallelModule* split,
                               dist::Pipeline* pipeline) {
  nn::StateDict state = split != nullptr ? split->full_state_dict() : held.state_dict();
  if (!staged(pipeline)) return state;
  std::map<std::string, Tensor> named;
  for (const auto& [name, t] : state) named.emplace(pipeline->one_process_name(name), t);
  return dist::gather_named_tensors(pipeline->group(), named, 0);
}

Checkpointer::Checkpointer(CheckpointOptions options, nn::Module& model,
                           optim::Optimizer& optimizer, optim::LRScheduler* scheduler,
                           const amp::GradScaler& scaler, std::string config, bool writer)
    : options_(std::move(options)),
      model_(model),
      optimizer_(optimizer),
      scheduler_(scheduler),
      scaler_(scaler),
      config_(std::move(config)),
      writer_(writer) {
  if (!options_.sharded || !enabled()) return;
  sharded_optimizer_ = dynamic_cast<const dist::ZeroRedundancyOptimizer*>(&optimizer_);
  GRADUS_CHECK(sharded_optimizer_ != nullptr, ValueError, options_.who,
               ": sharded checkpoints need a sharded optimizer (dist::ZeroRedundancyOptimizer: "
               "zero1, zero2, fsdp); this run's is ",
               optimizer_.type_name());
  GRADUS_CHECK(options_.tensor_parallel == nullptr && !staged(options_.pipeline), ValueError,
               options_.who,
               ": sharded checkpoints are not written under tensor or pipeline parallelism yet "
               "(their checkpoints are consolidated)");
}

Checkpointer::~Checkpointer() {
  if (writing_.joinable()) writing_.join();
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The state's tensors as host copies of their own (host_copies).
void detach_to_host(io::TrainingState& s) {
  std::vector<Tensor> all;
  for (const auto& [name, t] : s.model) all.push_back(t);
  for (const auto& [key, t] : s.optimizer.tensors) all.push_back(t);
  for (const auto& [key, t] : s.extra_tensors) all.push_back(t);
  const std::vector<Tensor> copies = host_copies(all);
  size_t i = 0;
  nn::StateDict model;
  for (const auto& [name, t] : s.model) model.insert(name, copies[i++]);
  s.model = std::move(model);
  for (auto& [key, t] : s.optimizer.tensors) t = copies[i++];
  for (auto& [key, t] : s.extra_tensors) t = copies[i++];
}
}  // namespace

double Checkpointer::wait_for_write() {
  double waited = 0;
  if (writing_.joinable()) {
    const auto t0 = std::chrono::steady_clock::now();
    writing_.join();
    waited = seconds_since(t0);
    times_.write_seconds += write_seconds_;
  }
  if (write_error_) std::rethrow_exception(std::exchange(write_error_, nullptr));
  return waited;
}

void Checkpointer::finish() {
  times_.final_wait_seconds += wait_for_write();
}

std::string Checkpointer::save(int64_t step, data::LoaderPosition next,
                               const EpochProgress& progress) {
  if (!enabled()) return {};
  if (step == last_step_ && next == last_position_) return last_path_;
  const auto t0 = std::chrono::steady_clock::now();
  if (options_.sharded) return save_set(step, next, progress, t0);
  const FullParameters whole =
      options_.full_parameters ? options_.full_parameters() : FullParameters{};
  // A sharded optimizer's state_dict() gathers (a collective: every rank is here) the state one
  // unsharded optimizer would have, so the checkpoint resumes at any world size.
  io::TrainingState s = io::capture_training_state(model_, &optimizer_, step, scheduler_);
  // One process's model and optimizer state, gathered from the shards and the stages (every rank
  // is here).
  s.model = full_model_state(model_, options_.tensor_parallel, options_.pipeline);
  if (dist::TensorParallelModule* split = options_.tensor_parallel) {
    s.optimizer =
        map_parameter_states(s.optimizer, optimizer_, [split](const Tensor& p, const Tensor& t) {
          return t.sizes() == p.sizes() ? split->gather_shards(p, t) : t;
        });
  }
  if (staged(options_.pipeline)) {
    s.optimizer =
        gather_stage_optimizers(std::move(s.optimizer), *options_.pipeline, model_, optimizer_);
  }
  if (scaler_.is_enabled()) s.scaler = scaler_.state_dict();
  last_step_ = step;
  last_position_ = next;
  if (!writer_) return {};  // one rank writes for the world
  s.epoch = next.epoch;
  s.batch_index = next.batch;
  s.config = config_;
  store_epoch_progress(s, progress);
  ++times_.written;
  if (!options_.async) {
    last_path_ = io::save_checkpoint(options_.dir, step, s, options_.keep);
    const double took = seconds_since(t0);
    times_.blocked_seconds += took;
    times_.write_seconds += took;
    return last_path_;
  }
  // One write at a time, in step order (an earlier write's error stops the run here), and then
  // the copy: at most one copy of the state besides the live one. (The wait is part of the time
  // blocked, counted from t0.)
  wait_for_write();
  detach_to_host(s);
  last_path_ = (std::filesystem::path(options_.dir) / io::checkpoint_filename(step)).string();
  writing_ = std::thread([this, state = std::move(s), step] {
    const auto w0 = std::chrono::steady_clock::now();
    try {
      io::save_checkpoint(options_.dir, step, state, options_.keep);
    } catch (...) {
      write_error_ = std::current_exception();
    }
    write_seconds_ = seconds_since(w0);
  });
  times_.blocked_seconds += seconds_since(t0);
  return last_path_;
}

std::string Checkpointer::save_set(int64_t step, data::LoaderPosition next,
                                   const EpochProgress& progress,
                                   std::chrono::steady_clock::time_point t0) {
  // The previous set is complete first: every rank's write of it, and on rank 0 its index, which
  // waits for every rank's shard. The set's id is then agreed (a collective), so no rank can
  // start this set before rank 0 has finished the previous one (two sets of one step, as a run's
  // last checkpoint after its last step's, share file names: a shard overwritten before rank 0
  // saw it would leave rank 0 waiting for a shard of the previous set that no longer exists).
  // Then every rank writes its shard, and rank 0 the index once they all are.
  wait_for_write();
  sets::SetWrite set = sets::capture(*sharded_optimizer_, model_, step);
  if (scheduler_ != nullptr) set.index.scheduler = scheduler_->state_dict();
  if (scaler_.is_enabled()) set.index.scaler = scaler_.state_dict();
  set.index.epoch = next.epoch;
  set.index.batch_index = next.batch;
  set.index.config = config_;
  store_epoch_progress(set.index, progress);
  last_step_ = step;
  last_position_ = next;
  last_path_ = (std::filesystem::path(options_.dir) / io::checkpoint_filename(step)).string();
  ++times_.written;
  auto write_index = [this, step](const sets::SetWrite& w) {
    return io::save_checkpoint_index(options_.dir, step, w.index, w.id, w.sharded, w.ranges_by_rank,
                                     w.model_order, options_.keep);
  };
  if (!options_.async) {
    std::exception_ptr error;
    try {
      io::save_checkpoint_shard(options_.dir, step, set.rank, set.world, set.id, set.pieces);
    } catch (const Error&) {
      error = std::current_exception();
    }
    // Every rank learns whether every shard was written (the lowest failing rank is named); a
    // failing rank throws its own error.
    Tensor failed = tensor({error ? static_cast<double>(set.world - set.rank) : 0.0}, {1},
                           {.dtype = DType::f64});
    sharded_optimizer_->group()
        .all_reduce(failed, dist::ReduceOp::max, "checkpoint shards")
        ->wait();
    if (error) std::rethrow_exception(error);
    const int failing = static_cast<int>(failed.item());
    GRADUS_CHECK(failing == 0, IOError, options_.who, ": rank ", set.world - failing,
                 " could not write its shard of the checkpoint at step ", step,
                 "; the set was not written");
    if (set.rank == 0) write_index(set);
    const double took = seconds_since(t0);
    times_.blocked_seconds += took;
    times_.write_seconds += took;
    return last_path_;
  }
  sets::copy_to_host(set);
  writing_ = std::thread([this, set = std::move(set), step, write_index] {
    const auto w0 = std::chrono::steady_clock::now();
    try {
      io::save_checkpoint_shard(options_.dir, step, set.rank, set.world, set.id, set.pieces);
      if (set.rank == 0) {
        // The others' shards appear by atomic rename: their names are the barrier.
        const auto deadline = w0 + std::chrono::duration<double>(options_.shard_wait_seconds);
        std::vector<int> missing;
        while (!(missing = io::missing_checkpoint_shards(options_.dir, step, set.world, set.id))
                    .empty()) {
          GRADUS_CHECK(std::chrono::steady_clock::now() < deadline, IOError, options_.who,
                       ": the shard of rank ", missing.front(), " (", missing.size(),
                       " missing) of the checkpoint at step ", step, " did not appear within ",
                       options_.shard_wait_seconds, " s; the set was not written");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        write_index(set);
      }
    } catch (...) {
      write_error_ = std::current_exception();
    }
    write_seconds_ = seconds_since(w0);
  });
  times_.blocked_seconds += seconds_since(t0);
  return last_path_;
}

void Checkpointer::loaded(int64_t step, data::LoaderPosition position, std::string path) {
  last_step_ = step;
  last_position_ = position;
  last_path_ = std::move(path);
}

std::vector<std::string> note_config_difference(const std::string& stored,
                                                const std::string& current,
                                                const std::string& checkpoint_path) {
  if (stored.empty() || stored == current) return {};
  return {"the configuration stored in " + checkpoint_path + " differs from this run's"};
}

StartPoint find_start(const CheckpointOptions& o, const std::string& config, nn::Module& model,
                      amp::GradScaler& scaler, optim::Optimizer& optimizer,
                      optim::LRScheduler* scheduler, const ConfigCheck& check_config) {
  const char* who = o.who.c_str();
  // Progress lines from one rank only (the others resume the same way, silently).
  auto say = [&o](const char* format, auto... args) {
    if (o.report) std::fprintf(stderr, format, args...);
  };
  StartPoint start;
  if (o.dir.empty()) return start;
  const auto all = io::list_checkpoints(o.dir);
  if (!o.resume) {
    GRADUS_CHECK(all.empty(), ValueError, who, ": the checkpoint directory '", o.dir,
                 "' already holds ", all.size(),
                 " checkpoint(s) of a run (newest: ", all.empty() ? "" : all.back().second,
                 "); pass --resume to continue that run, or choose an empty --checkpoint-dir");
    return start;
  }
  const int stale = dist::rank() == 0 ? remove_stale_temp_files(o.dir) : 0;
  if (stale > 0) {
    say("%s: removed %d temp file(s) of interrupted checkpoint writes\n", who, stale);
  }
  const int orphans = dist::rank() == 0 ? io::remove_orphan_checkpoint_shards(o.dir) : 0;
  if (orphans > 0) {
    say("%s: removed %d shard file(s) of sharded checkpoints interrupted before their index\n", who,
        orphans);
  }
  // The newest checkpoint that loads and verifies (checksums, metadata, finite values); newer
  // ones that do not are named and skipped.
  std::optional<io::GoodCheckpoint> good;
  try {
    good = io::latest_good_checkpoint(o.dir);
  } catch (const io::UnusableCheckpointsError& e) {
    if (!o.resume_or_start) {
      throw IOError(std::string(who) + ": --resume: " + e.what() +
                    "\nInspect them with `gradus inspect FILE`; pass --resume-or-start to start "
                    "from step 0 anyway (the damaged files are kept)");
    }
    say("%s: --resume-or-start: %s\n%s: starting at step 0\n", who, e.what(), who);
    return start;
  }
  if (!good) {
    say("%s: --resume: no checkpoint in '%s' yet; starting at step 0\n", who, o.dir.c_str());
    return start;
  }
  for (const auto& [path, why] : good->skipped) {
    say("%s: --resume: skipping %s: %s\n", who, path.c_str(), why.c_str());
  }
  if (!good->skipped.empty()) {
    say("%s: --resume: falling back to %s, the newest good checkpoint\n", who, good->path.c_str());
  }
  const std::optional<std::string> latest = good->path;
  io::TrainingState& state = good->state;
  for (const std::string& note : check_config(state.config, config, *latest)) {
    say("%s: warning: %s\n", who, note.c_str());
  }
  // One process's state: this stage's part of it, this rank's shards of that, then restored as
  // this model's own (into the whole parameters of a sharded model, taken into its shards when
  // `whole` ends).
  const FullParameters whole = o.full_parameters ? o.full_parameters() : FullParameters{};
  if (staged(o.pipeline)) take_stage(state, *o.pipeline, model, optimizer);
  if (dist::TensorParallelModule* split = o.tensor_parallel) {
    split->load_full_state_dict(state.model);
    state.model = model.state_dict();
    state.optimizer = map_parameter_states(
        state.optimizer, optimizer, [split](const Tensor& p, const Tensor& full) {
          return split->is_shard(p) ? split->take_shard(p, full) : full;
        });
  }
  // (A sharded optimizer takes this rank's shard of the whole state.)
  io::restore_training_state(state, model, &optimizer, scheduler, /*restore_rng=*/true);
  if (scaler.is_enabled() && !state.scaler.empty()) scaler.load_state_dict(state.scaler);
  if (dist::rank() == 0) io::prune_checkpoints(o.dir, o.keep);
  start.step = state.step;
  start.position = {state.epoch, state.batch_index};
  start.progress = load_epoch_progress(state);
  start.path = *latest;
  say("%s: resuming from %s (step %lld, epoch %lld, batch %lld)\n", who, latest->c_str(),
      static_cast<long long>(start.step), static_cast<long long>(start.position.epoch + 1),
      static_cast<long long>(start.position.batch));
  return start;
}

}  // namespace gradus::train
