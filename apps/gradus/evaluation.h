// gradus train's evaluation on the test set and its finiteness checks (train.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gradus/amp/autocast.h"
#include "gradus/data/data.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"

namespace gradus::cli {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
};

// Evaluates on the test set. With several data ranks every rank evaluates its contiguous slice of
// it and the sums are all-reduced over them, so evaluation takes 1/size of the time and every
// rank gets the result of the whole set. (The ranks of one replica, its stages and tensor ranks,
// evaluate the same slice together.) flatten: the model takes [N, features].
class Evaluator {
 public:
  Evaluator(const std::shared_ptr<data::TensorDataset>& test_set, int64_t batch_size, Device device,
            int workers, std::shared_ptr<dist::ProcessGroup> data_ranks, bool flatten)
      : group_(std::move(data_ranks)), flatten_(flatten) {
    std::shared_ptr<data::TensorDataset> mine = test_set;
    if (group_->size() > 1) {
      const int64_t n = test_set->size(), rank = group_->rank(), size = group_->size();
      const int64_t begin = n * rank / size, end = n * (rank + 1) / size;
      mine = std::make_shared<data::TensorDataset>(
          test_set->inputs().slice(0, begin, end).contiguous(),
          test_set->targets().slice(0, begin, end).contiguous());
    }
    if (mine->size() > 0) {
      loader_ = std::make_unique<data::DataLoader>(
          mine, data::DataLoaderOptions{
                    .batch_size = batch_size, .device = device, .num_workers = workers});
    }
  }

  // amp: evaluate under the same autocast as training.
  EvalResult operator()(nn::Module& model, std::optional<DType> amp) {
    NoGradGuard no_grad;
    amp::Autocast autocast(amp.value_or(DType::bf16), amp.has_value());
    model.eval();
    double loss_sum = 0, correct = 0, count = 0;
    CrossEntropyOptions summed;
    summed.reduction = Reduction::sum;
    if (loader_) {
      loader_->set_epoch(0);
      for (data::Example& batch : *loader_) {
        const Tensor logits = model(flatten_ ? batch.input.flatten(1) : batch.input);
        loss_sum += cross_entropy(logits, batch.target, summed).item();
        correct += eq(argmax(logits, 1), batch.target).sum().item();
        count += static_cast<double>(batch.target.size(0));
      }
    }
    model.train();
    if (group_->size() > 1) {
      Tensor sums = tensor({loss_sum, correct, count}, {3}, {.dtype = DType::f64});
      group_->all_reduce(sums, dist::ReduceOp::sum, "evaluation sums")->wait();
      const std::vector<double> v = sums.to_vector<double>();
      loss_sum = v[0];
      correct = v[1];
      count = v[2];
    }
    return {loss_sum / std::max(count, 1.0), correct / std::max(count, 1.0)};
  }

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  bool flatten_;
  std::unique_ptr<data::DataLoader> loader_;
};

// A non-finite test loss is a failed run, not a result (ValueError naming the epoch).
void check_finite_evaluation(const EvalResult& r, int64_t epoch);
// Never write non-finite weights as a result: names the first bad parameter.
void check_finite_parameters(const nn::Module& model, const std::string& what);

}  // namespace gradus::cli
