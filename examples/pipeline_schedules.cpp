// GPipe vs 1F1B on a pipeline of world-size stages: per stage, the idle fraction of the step
// (1 - this stage's compute time / the slowest stage's step time: the time it was not computing
// while the pipeline ran) next to the theoretical bubble (p - 1) / (m + p - 1), the time it was
// blocked waiting for an activation or a gradient, and the peak tensor memory it held above the
// step's start (activations and received buffers; the gradients exist before the step).
//
//   OMP_NUM_THREADS=1 mpirun -np 4 build/examples/example_pipeline_schedules [width] [steps] [rows]
//
// rows: rows per micro-batch (256), so that activations, not the weight gradients' temporaries,
// dominate the memory a stage holds.
//
// Each stage gets the same amount of work (two Linear + ReLU pairs of width x width), so the
// stages are balanced and the bubble is the schedule's. Run it with one thread per rank and no
// more ranks than cores, or the ranks wait for the CPU instead of for each other.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gradus/gradus.h"

using namespace gradus;

namespace {

struct Row {
  double compute = 0, wait = 0, step = 0, peak_mib = 0;
  int in_flight = 0;
};

Row measure(int64_t width, int64_t rows_per_micro_batch, int m, dist::PipelineSchedule schedule,
            int steps) {
  const int p = dist::world_size();
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>();
  for (int s = 0; s < p; ++s) {
    for (int l = 0; l < 2; ++l) {
      model->push_back(std::make_shared<nn::Linear>(width, width));
      model->push_back(std::make_shared<nn::ReLU>());
    }
  }
  std::vector<int64_t> partition(static_cast<size_t>(p), 4);
  dist::Pipeline pipe(model, {.micro_batches = m, .schedule = schedule, .partition = partition});
  const int64_t rows = rows_per_micro_batch * m;
  const Tensor x = randn({rows, width});
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = i % width;
  const Tensor y = from_vector(labels, {rows}, {.dtype = DType::i64});
  auto loss = [](const Tensor& out, const Tensor& target) { return cross_entropy(out, target); };
  std::vector<Row> runs;
  for (int k = 0; k <= steps; ++k) {  // step 0 warms up
    for (const Tensor& t : pipe.parameters()) {
      if (t.grad().defined()) t.grad().zero_();
    }
    pipe.train_step(x, y, loss);
    const dist::PipelineStats& st = pipe.last_stats();
    if (k > 0) {
      runs.push_back({st.compute_seconds, st.wait_seconds, st.step_seconds,
                      static_cast<double>(st.peak_bytes) / (1 << 20), st.max_in_flight});
    }
  }
  // The median step by its slowest stage's time (the same step on every rank).
  Tensor steps_max = zeros({static_cast<int64_t>(runs.size())}, {.dtype = DType::f64});
  for (size_t i = 0; i < runs.size(); ++i)
    steps_max.narrow(0, static_cast<int64_t>(i), 1).fill_(runs[i].step);
  dist::default_group()->all_reduce(steps_max, dist::ReduceOp::max)->wait();
  const std::vector<double> longest = steps_max.to_vector<double>();
  for (size_t i = 0; i < runs.size(); ++i) runs[i].step = longest[i];
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return longest[a] < longest[b]; });
  return runs[order[order.size() / 2]];
}

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  const int64_t width = argc > 1 ? std::atoll(argv[1]) : 512;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t rows = argc > 3 ? std::atoll(argv[3]) : 256;
  const int p = dist::world_size();
  auto group = dist::default_group();
  if (dist::rank() == 0) {
    std::printf("p = %d stages, width %lld, %lld rows per micro-batch, median of %d steps\n", p,
                static_cast<long long>(width), static_cast<long long>(rows), steps);
    std::printf(
        "| schedule | m | stage | idle fraction | theory (p-1)/(m+p-1) | blocked fraction | "
        "step ms | peak MiB | micro-batches held |\n|---|---|---|---|---|---|---|---|---|\n");
  }
  for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
    for (int m : {1, 4, 8}) {
      const Row row = measure(width, rows, m, schedule, steps);
      // Rank 0 prints every stage's row.
      Tensor all = zeros({5 * static_cast<int64_t>(p)}, {.dtype = DType::f64});
      Tensor mine = from_vector(
          std::vector<double>{1.0 - row.compute / row.step, row.wait / row.step, row.step,
                              row.peak_mib, static_cast<double>(row.in_flight)},
          {5}, {.dtype = DType::f64});
      group->all_gather(all, mine)->wait();
      if (dist::rank() == 0) {
        const std::vector<double> v = all.to_vector<double>();
        for (int s = 0; s < p; ++s) {
          const double* r = v.data() + 5 * s;
          std::printf("| %s | %d | %d | %.3f | %.3f | %.3f | %.1f | %.2f | %d |\n",
                      dist::schedule_name(schedule), m, s, r[0], (p - 1.0) / (m + p - 1.0), r[1],
                      r[2] * 1e3, r[3], static_cast<int>(r[4]));
        }
      }
    }
  }
  return 0;
}
