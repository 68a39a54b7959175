#include "gradus/core/batch_size.h"

#include <algorithm>
#include <string>

#include "gradus/core/error.h"

namespace gradus {

BatchSizeResult find_batch_size(const std::function<void(int64_t)>& try_step,
                                const BatchSizeSearch& s) {
  GRADUS_CHECK(s.multiple >= 1 && s.start >= 1 && s.max >= s.start && s.margin > 0 && s.margin <= 1,
               ValueError,
               "find_batch_size: need 1 <= start <= max, multiple >= 1 and margin in "
               "(0, 1]");
  BatchSizeResult r;
  auto fits = [&](int64_t b) {
    bool ok = true;
    try {
      try_step(b);
    } catch (const OutOfMemoryError&) {
      ok = false;
    }
    r.tried.emplace_back(b, ok);
    return ok;
  };
  auto round_down = [&](int64_t b) {
    return std::max<int64_t>(s.multiple, b / s.multiple * s.multiple);
  };

  int64_t lo = 0, hi = 0;  // largest fit, smallest fail
  int64_t b = round_down(s.start);
  if (fits(b)) {
    lo = b;
    while (lo < s.max) {
      b = std::min(s.max, lo * 2);
      if (!fits(b)) {
        hi = b;
        break;
      }
      lo = b;
    }
  } else {
    hi = b;
    while (hi > s.multiple) {  // the start does not fit: halve down
      b = round_down(hi / 2);
      if (b >= hi) break;
      if (fits(b)) {
        lo = b;
        break;
      }
      hi = b;
    }
    if (lo == 0) {
      std::string tried;
      for (const auto& [size, ok] : r.tried)
        tried += (tried.empty() ? "" : ", ") + std::to_string(size);
      throw OutOfMemoryError("find_batch_size: not even a batch of " + std::to_string(hi) +
                             " fits in memory (tried " + tried + ")");
    }
  }
  for (int i = 0; hi != 0 && i < s.max_bisections && hi - lo > s.multiple; ++i) {
    const int64_t mid = round_down(lo + (hi - lo) / 2);
    if (mid <= lo) break;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  r.largest_fit = lo;
  r.smallest_fail = hi;
  // The margin is headroom below a size that failed; when none failed up to max, max it is.
  r.batch_size =
      hi == 0 ? lo : round_down(static_cast<int64_t>(static_cast<double>(lo) * s.margin));
  return r;
}

}  // namespace gradus
