#include "gradus/train/batch_finder.h"

#include <vector>

#include "gradus/amp/autocast.h"
#include "gradus/autograd.h"
#include "gradus/core/cuda.h"
#include "gradus/ops.h"

namespace gradus::train {

BatchSizeChoice choose_batch_size(const BatchSizeOptions& o) {
  GRADUS_CHECK(o.make_model && o.make_optimizer && o.task && o.make_batch, ValueError,
               "choose_batch_size: make_model, make_optimizer, task and make_batch are required");
  const PhiloxState rng = default_generator().state();  // restored below: the run is unchanged
  BatchSizeChoice choice;
  {
    std::shared_ptr<nn::Module> model = o.make_model();
    model->to(o.device);
    model->train();
    std::unique_ptr<optim::Optimizer> optimizer = o.make_optimizer(model->trainable_parameters());
    auto step = [&](int64_t rows) {
      data::Example batch = o.make_batch(rows);
      batch.input = batch.input.to(o.device);
      batch.target = batch.target.to(o.device);
      optimizer->zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast(o.amp.value_or(DType::bf16), o.amp.has_value());
        loss = o.task->loss(*model, batch);
      }
      loss.backward();
      optimizer->step();
      (void)loss.item();  // waits for the device: an asynchronous failure lands here
    };
    choice.search = find_batch_size(step, {.start = o.start, .max = o.max_per_rank});
  }
  default_generator().set_state(rng);
  if (o.device.is_cuda()) cuda::empty_cache();
  choice.per_rank = choice.search.batch_size;
  const int ranks = o.group ? o.group->size() : 1;
  if (ranks > 1) {
    Tensor t = from_vector(std::vector<int64_t>{choice.per_rank}, {1}, {.dtype = DType::i64});
    o.group->all_reduce(t, dist::ReduceOp::min, "batch size")->wait();
    choice.per_rank = t.to_vector<int64_t>()[0];
  }
  choice.global = choice.per_rank * ranks;
  return choice;
}

}  // namespace gradus::train
