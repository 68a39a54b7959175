// balanced_gemm.h: plain float32 products cut between the threads by their measured speed.
#include "backend/cpu/balanced_gemm.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "backend/common/layout.h"
#include "backend/cpu/onednn_gemm.h"

#if GRADUS_HAS_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace gradus::backend::cpu {
namespace {

constexpr int64_t kQuantum = 16;         // block edges at multiples of 16 rows or columns
constexpr double kMinShare = 0.1;        // of an even share: every thread keeps work, so is timed
constexpr double kKeep = 0.5;            // weight of the old shares against a new measurement
constexpr int64_t kTimedWork = 1 << 22;  // products this small are not timed (timer noise)

// Each thread's share of the team's speed, from the products timed so far.
class Speeds {
 public:
  std::vector<double> shares(int threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(shares_.size()) != threads) shares_.assign(threads, 1.0 / threads);
    return shares_;
  }

  // Thread t computed sizes[t] rows (or columns) of one product in seconds[t].
  void record(const std::vector<int64_t>& sizes, const std::vector<double>& seconds) {
    const size_t threads = sizes.size();
    std::vector<double> rate(threads);
    double total = 0;
    for (size_t t = 0; t < threads; ++t) {
      if (sizes[t] <= 0 || !(seconds[t] > 0)) return;
      rate[t] = static_cast<double>(sizes[t]) / seconds[t];
      total += rate[t];
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (shares_.size() != threads) return;  // the team changed meanwhile
    const double floor = kMinShare / static_cast<double>(threads);
    double sum = 0;
    for (size_t t = 0; t < threads; ++t) {
      shares_[t] = std::max(floor, kKeep * shares_[t] + (1 - kKeep) * rate[t] / total);
      sum += shares_[t];
    }
    for (double& s : shares_) s /= sum;
  }

 private:
  std::mutex mutex_;
  std::vector<double> shares_;
};

Speeds& speeds() {
  static Speeds s;
  return s;
}

// Block edges over [0, extent) in proportion to shares, on multiples of kQuantum.
std::vector<int64_t> cut(int64_t extent, const std::vector<double>& shares) {
  const size_t parts = shares.size();
  std::vector<int64_t> edges(parts + 1, 0);
  double acc = 0;
  for (size_t t = 0; t + 1 < parts; ++t) {
    acc += shares[t];
    const auto edge =
        static_cast<int64_t>(std::llround(acc * static_cast<double>(extent) / kQuantum) * kQuantum);
    edges[t + 1] = std::clamp(edge, edges[t], extent);
  }
  edges[parts] = extent;
  return edges;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<double> balanced_gemm_shares(int threads) {
  return speeds().shares(threads);
}

void record_balanced_gemm_timing(const std::vector<int64_t>& sizes,
                                 const std::vector<double>& seconds) {
  speeds().record(sizes, seconds);
}

#if GRADUS_HAS_ONEDNN

namespace {

// given: the cut's shares (tests), or nullptr for the measured ones.
bool run(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args,
         const std::vector<double>* given) {
  static const bool enabled = [] {
    const char* env = std::getenv("GRADUS_BALANCED_GEMM");
    return env == nullptr || std::string_view(env) != "0";
  }();
  if (!enabled || !onednn_f32_gemm()) return false;
  if (out.dtype() != DType::f32 || a.dtype() != DType::f32 || b.dtype() != DType::f32) return false;
  if (args.bias != nullptr || args.activation != Activation::none) return false;
  const common::MatrixView va = common::matrix_view(a), vb = common::matrix_view(b),
                           vo = common::matrix_view(out);
  if (va.batch != 1 || vb.batch != 1 || vo.batch != 1) return false;
  common::BlasMatrix ma, mb, mo;
  if (!common::blas_matrix(va, ma) || !common::blas_matrix(vb, mb) ||
      !common::blas_matrix(vo, mo) || mo.transposed) {
    return false;
  }
  const int64_t m = vo.rows, n = vo.cols, k = args.trans_a ? va.rows : va.cols;
  if (k == 0 || m * n * k < onednn_f32_min_work()) return false;

  const bool ta = args.trans_a != ma.transposed, tb = args.trans_b != mb.transposed;
  const auto alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
  const auto* pa = static_cast<const float*>(a.raw_data());
  const auto* pb = static_cast<const float*>(b.raw_data());
  auto* pc = static_cast<float*>(out.raw_data());
  // Rows [begin, end) of C, or its columns: one single-threaded sgemm (sgemm runs on the calling
  // thread inside a parallel region). op(A)'s row r is A's row r, or column r of the stored A^T.
  const bool by_rows = m >= n;
  const auto block = [&](int64_t begin, int64_t end) {
    if (end <= begin) return true;
    const float* ab = by_rows ? pa + begin * (ta ? 1 : ma.ld) : pa;
    const float* bb = by_rows ? pb : pb + begin * (tb ? mb.ld : 1);
    float* cb = pc + begin * (by_rows ? mo.ld : 1);
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', by_rows ? end - begin : m,
                      by_rows ? n : end - begin, k, alpha, ab, ma.ld, bb, mb.ld, beta, cb,
                      mo.ld) == dnnl_success;
  };

  const int64_t extent = by_rows ? m : n;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int parts =
      static_cast<int>(std::clamp<int64_t>(extent / (2 * kQuantum), 1, int64_t{threads}));
  bool ok = true;
  if (parts == 1) {
    // One call on this thread alone: sgemm's own threading could split K.
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ok = block(0, extent);
    omp_set_num_threads(saved);
  } else {
    const bool timed = given == nullptr && parts == threads && m * n * k >= kTimedWork;
    if (given != nullptr && parts == threads && given->size() != static_cast<size_t>(threads)) {
      throw std::invalid_argument("balanced_sgemm: one share per thread of the team expected");
    }
    std::vector<double> shares(parts, 1.0 / parts);
    if (parts == threads) shares = given != nullptr ? *given : speeds().shares(threads);
    const std::vector<int64_t> edges = cut(extent, shares);
    std::vector<int64_t> sizes(parts);
    std::vector<double> seconds(parts, 0.0);
    std::vector<char> done(parts, 1);
    bool short_team = false;
#pragma omp parallel num_threads(parts)
    {
      const int t = omp_get_thread_num();
      if (omp_get_num_threads() != parts) {  // the runtime gave fewer threads: the first does all
        if (t == 0) {
          short_team = true;
          for (int p = 0; p < parts; ++p)
            done[p] = static_cast<char>(block(edges[p], edges[p + 1]));
        }
      } else {
        const auto start = std::chrono::steady_clock::now();
        done[t] = static_cast<char>(block(edges[t], edges[t + 1]));
        seconds[t] = seconds_since(start);
        sizes[t] = edges[t + 1] - edges[t];
      }
    }
    ok = std::all_of(done.begin(), done.end(), [](char d) { return d != 0; });
    if (ok && timed && !short_team) speeds().record(sizes, seconds);
  }
  if (!ok) throw std::runtime_error("balanced_sgemm: oneDNN's sgemm rejected its arguments");
  return true;
}

}  // namespace

bool balanced_sgemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) {
  return run(a, b, out, args, nullptr);
}

bool balanced_sgemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args,
                    const std::vector<double>& shares) {
  return run(a, b, out, args, &shares);
}

#else  // built without oneDNN

bool balanced_sgemm(const Tensor&, const Tensor&, const Tensor&, const GemmArgs&) {
  return false;
}

bool balanced_sgemm(const Tensor&, const Tensor&, const Tensor&, const GemmArgs&,
                    const std::vector<double>&) {
  return false;
}

#endif

}  // namespace gradus::backend::cpu
