#include "evaluation.h"

#include <cmath>

#include "gradus/io/io.h"

namespace gradus::cli {

// A non-finite test loss is a failed run, not a result.
void check_finite_evaluation(const EvalResult& r, int64_t epoch) {
  GRADUS_CHECK(std::isfinite(r.loss), ValueError, "train: the test loss is ", r.loss,
               " after epoch ", epoch,
               ": the weights are not usable (training diverged: lower --lr or add "
               "--warmup-steps)");
}

// Never write non-finite weights as a result: names the first bad parameter.
void check_finite_parameters(const nn::Module& model, const std::string& what) {
  for (const auto& [name, t] : model.state_dict()) {
    const int64_t bad = io::count_nonfinite(t);
    GRADUS_CHECK(bad == 0, ValueError, "train: ", what, ": not written: '", name, "' holds ", bad,
                 " non-finite value(s) (training diverged: lower --lr)");
  }
}

}  // namespace gradus::cli
