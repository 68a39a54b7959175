#include "gradus/dist/ddp.h"

#include <bit>
#include <chrono>
#include <cstdint>
#include <sstream>

#include "dist/flat.h"
#include "gradus/autograd.h"
#include "gradus/dist/module_sync.h"
#include "gradus/ops.h"

namespace gradus::dist {

namespace {

// Every rank must hold the same model: compares the parameter count and each size.
void check_same_model(ProcessGroup& group, const std::vector<Tensor>& params) {
  int64_t count = static_cast<int64_t>(params.size()), numel = 0;
  uint64_t signature = 0;  // unsigned: the hash wraps by design
  for (const Tensor& p : params) {
    numel += p.numel();
    signature = signature * 1000003u + static_cast<uint64_t>(p.numel()) * 31u +
                static_cast<uint64_t>(p.dtype());
  }
  Tensor hi = from_vector(std::vector<int64_t>{count, numel, std::bit_cast<int64_t>(signature)},
                          {3}, {.dtype = DType::i64});
  Tensor lo = hi.clone();
  wait_all({group.all_reduce(hi, ReduceOp::max, "model signature"),
            group.all_reduce(lo, ReduceOp::min, "model signature")});
  const std::vector<int64_t> h = hi.to_vector<int64_t>(), l = lo.to_vector<int64_t>();
  GRADUS_CHECK(
      h == l, DistError, "DistributedDataParallel: the ranks hold different models: ", "rank ",
      group.rank(), " has ", count, " parameters with ", numel,
      " elements; across the ranks the counts range over [", l[0], ", ", h[0],
      "] and the elements over [", l[1], ", ", h[1], "]. Build the same model on every rank");
}

}  // namespace

// The gradient buckets of one DDP module and the bookkeeping of one backward pass.
class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::shared_ptr<ProcessGroup> group, std::vector<std::pair<std::string, Tensor>> named,
          const DDPOptions& options)
      : group_(std::move(group)), options_(options) {
    for (auto& [name, p] : named) {
      names_.push_back(name);
      params_.push_back(p);
    }
    std::vector<size_t> reverse;
    for (size_t i = params_.size(); i-- > 0;) reverse.push_back(i);
    layouts_ = detail::plan_flat_layouts(
        params_, reverse, static_cast<int64_t>(options.first_bucket_cap_mb * 1024 * 1024),
        static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024), 1);
    bucket_of_.resize(params_.size());
    offset_of_.resize(params_.size());
    for (size_t b = 0; b < layouts_.size(); ++b) {
      flats_.push_back(detail::allocate_flat(layouts_[b]));
      for (size_t k = 0; k < layouts_[b].params.size(); ++k) {
        bucket_of_[layouts_[b].params[k]] = b;
        offset_of_[layouts_[b].params[k]] = layouts_[b].offsets[k];
      }
    }
    pending_.assign(layouts_.size(), 0);
    works_.resize(layouts_.size());
    ready_.assign(params_.size(), false);
  }

  void register_hooks() {
    std::weak_ptr<Reducer> weak = weak_from_this();
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
        if (auto self = weak.lock()) self->on_grad_ready(i);
      });
    }
  }

  // Before a forward that will be followed by backward: gradients that exist (accumulated under
  // no_sync, or kept by zero_grad(set_to_none = false)) move into the buckets; counters reset.
  // A gradient that does not exist is not zeroed here: backward then hands the parameter a new
  // gradient, which on_grad_ready copies into the bucket once. Zeroing the bucket first would
  // make backward add into it instead: a memset plus a read-modify-write of every gradient,
  // which cost 25% of mlp-large's step on one thread (docs/performance.md).
  void prepare(bool sync) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor g = params_[i].grad();
      if (!g.defined()) continue;
      Tensor view = grad_view(i);
      if (g.raw_data() != view.raw_data()) {
        view.copy_(g);
        params_[i].set_grad(view);
      }
    }
    sync_ = sync;
    armed_ = true;
    callback_queued_ = false;
    next_launch_ = 0;
    for (size_t b = 0; b < layouts_.size(); ++b) {
      pending_[b] = static_cast<int64_t>(layouts_[b].params.size());
      works_[b].reset();
    }
    ready_.assign(params_.size(), false);
  }

  void on_grad_ready(size_t i) {
    if (!armed_ || !sync_) return;
    if (!callback_queued_) {
      callback_queued_ = true;
      std::weak_ptr<Reducer> weak = weak_from_this();
      autograd::queue_callback([weak] {
        if (auto self = weak.lock()) self->finish_backward();
      });
    }
    // A new gradient (or one a hook replaced): bring the value into the bucket.
    Tensor view = grad_view(i);
    Tensor g = params_[i].grad();
    if (g.defined() && g.raw_data() != view.raw_data()) {
      NoGradGuard no_grad;
      view.copy_(g);
      params_[i].set_grad(view);
    }
    if (ready_[i]) return;
    ready_[i] = true;
    if (--pending_[bucket_of_[i]] == 0 && options_.overlap) launch_ready();
  }

  std::vector<std::vector<std::string>> bucket_names() const {
    std::vector<std::vector<std::string>> out;
    for (const auto& l : layouts_) {
      out.emplace_back();
      for (size_t i : l.params) out.back().push_back(names_[i]);
    }
    return out;
  }

  DDPStats stats() const { return stats_; }

 private:
  Tensor grad_view(size_t i) const {
    return detail::flat_view(flats_[bucket_of_[i]], offset_of_[i], params_[i].sizes());
  }

  // Starts every complete bucket whose predecessors have started (same order on every rank).
  void launch_ready() {
    while (next_launch_ < layouts_.size() && pending_[next_launch_] == 0) {
      works_[next_launch_] = group_->all_reduce(flats_[next_launch_], ReduceOp::avg,
                                                "gradient bucket " + std::to_string(next_launch_));
      ++next_launch_;
    }
  }

  void finish_backward() {
    armed_ = false;
    std::vector<std::string> unused;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      if (!options_.find_unused_parameters) {
        unused.push_back(names_[i]);
        continue;
      }
      // Its gradient takes part as it is: what no_sync accumulated, else zero.
      if (!params_[i].grad().defined()) {
        NoGradGuard no_grad;
        Tensor view = grad_view(i);
        view.zero_();
        params_[i].set_grad(view);
      }
      ready_[i] = true;
      --pending_[bucket_of_[i]];
    }
    if (!unused.empty()) {
      std::ostringstream os;
      for (size_t k = 0; k < unused.size() && k < 8; ++k) os << (k ? ", " : "") << unused[k];
      if (unused.size() > 8) os << " and " << unused.size() - 8 << " more";
      throw DistError("DistributedDataParallel: " + std::to_string(unused.size()) +
                      " parameter(s) received no gradient in this backward pass on rank " +
                      std::to_string(group_->rank()) + ": " + os.str() +
                      ". Every parameter must take part in the loss, or construct the module "
                      "with find_unused_parameters = true");
    }
    launch_ready();
    const auto start = std::chrono::steady_clock::now();
    wait_all(works_);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats_.backward_passes += 1;
    stats_.buckets_reduced += static_cast<int64_t>(works_.size());
    stats_.wait_seconds += waited;
    stats_.last_wait_seconds = waited;
    for (WorkPtr& w : works_) w.reset();
  }

  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<detail::FlatLayout> layouts_;
  std::vector<Tensor> flats_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;
  std::vector<int64_t> pending_;
  std::vector<WorkPtr> works_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool armed_ = false;
  bool callback_queued_ = false;
  DDPStats stats_;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DDPOptions options)
    : module_(std::move(module)), options_(options) {
  GRADUS_CHECK(module_ != nullptr, ValueError, "DistributedDataParallel: the module is null");
  GRADUS_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0, ValueError,
               "DistributedDataParallel: bucket sizes must be positive (got bucket_cap_mb ",
               options.bucket_cap_mb, ", first_bucket_cap_mb ", options.first_bucket_cap_mb, ")");
  group_ = options.group ? options.group : default_group();
  register_module("module", module_);

  std::vector<std::pair<std::string, Tensor>> trainable;
  for (auto& [name, p] : module_->named_parameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  {
    std::vector<Tensor> all;
    for (auto& [name, p] : trainable) all.push_back(p);
    check_same_model(*group_, all);
  }
  // Every replica starts from rank 0's state.
  broadcast_module_state(*module_, *group_, 0);

  reducer_ = std::make_shared<Reducer>(group_, trainable, options_);
  reducer_->register_hooks();
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (is_training() && options_.broadcast_buffers) broadcast_buffers(*module_, *group_, 0);
  if (is_grad_enabled()) reducer_->prepare(sync_);
  return (*module_)(x);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.sync_) {
  ddp_.sync_ = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  ddp_.sync_ = previous_;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  return reducer_->bucket_names();
}

DDPStats DistributedDataParallel::stats() const {
  return reducer_->stats();
}

}  // namespace gradus::dist
