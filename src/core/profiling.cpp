// The profiler's recording side: per-thread event buffers, the session, NVTX ranges.
#include "gradus/core/profiling.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "gradus/core/error.h"
#include "gradus/core/tensor.h"

#if GRADUS_HAS_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace gradus::profiling {

namespace detail {
std::atomic<uint32_t> g_flags{0};
}  // namespace detail

namespace {

constexpr uint32_t kRecord = 1, kNvtx = 2;

// One thread's events. Only its thread appends; the collector copies them out under the mutex,
// which the owner takes once per finished scope (uncontended: an atomic exchange each way).
struct ThreadBuffer {
  std::mutex mu;
  ThreadEvents data;
  std::unordered_set<std::string> names;  // interned run-time names (stable addresses)
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // every thread that ever recorded
  uint32_t next_tid = 1;
  bool running = false;
  SessionOptions options;
  int64_t start_ns = 0;
  DeviceTimer* timer = nullptr;
  bool device_time = false;
  int64_t device_origin_ns = 0;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

std::atomic<uint32_t> g_session{0};
std::atomic<bool> g_shapes{false};
std::atomic<DeviceTimer*> g_session_timer{nullptr};  // set while a session times the device
std::atomic<uint32_t> g_nvtx_only{0};

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local Scope* t_current = nullptr;
thread_local std::string t_pending_name;

ThreadBuffer& buffer() {
  if (!t_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    b->data.os_tid = static_cast<int64_t>(::syscall(SYS_gettid));
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    b->data.tid = r.next_tid++;
    if (!t_pending_name.empty()) {
      b->data.name = t_pending_name;
    } else if (b->data.os_tid == static_cast<int64_t>(::getpid())) {
      b->data.name = "main";
    } else {
      b->data.name = "thread " + std::to_string(b->data.os_tid);
    }
    r.buffers.push_back(b);
    t_buffer = std::move(b);
  }
  return *t_buffer;
}

bool nvtx_compiled() {
#if GRADUS_HAS_NVTX
  return true;
#else
  return false;
#endif
}

// GRADUS_NVTX=1: ranges for Nsight Systems from the first op on, without recording.
const bool g_nvtx_from_env = [] {
  const char* v = std::getenv("GRADUS_NVTX");
  if (v != nullptr && v[0] == '1' && nvtx_compiled()) {
    g_nvtx_only = 1;
    detail::g_flags.fetch_or(kNvtx);
  }
  return true;
}();

}  // namespace

const char* activity_name(Activity a) {
  switch (a) {
    case Activity::op:
      return "op";
    case Activity::backward:
      return "backward";
    case Activity::optimizer:
      return "optimizer";
    case Activity::data:
      return "data";
    case Activity::copy:
      return "copy";
    case Activity::comm:
      return "comm";
    case Activity::step:
      return "step";
    case Activity::user:
      return "user";
  }
  return "user";
}

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool recording_shapes() noexcept {
  return g_shapes.load(std::memory_order_relaxed);
}

bool compiled_in() {
#if GRADUS_PROFILER
  return true;
#else
  return false;
#endif
}

bool nvtx_available() {
  return nvtx_compiled();
}

void set_nvtx_only(bool on) {
  if (!nvtx_compiled()) return;
  g_nvtx_only = on ? 1 : 0;
  if (on) {
    detail::g_flags.fetch_or(kNvtx);
  } else if (!session_running() || !registry().options.nvtx) {
    detail::g_flags.fetch_and(~kNvtx);
  }
}

void Scope::begin(Activity kind, const char* name) noexcept {
  const uint32_t flags = detail::g_flags.load(std::memory_order_acquire);
  kind_ = kind;
  name_ = name;
  parent_ = t_current;
  depth_ = parent_ != nullptr ? static_cast<uint16_t>(parent_->depth_ + 1) : 0;
  open_ = true;
  t_current = this;
  if (flags & kRecord) {
    record_ = true;
    session_ = g_session.load(std::memory_order_acquire);
    if (DeviceTimer* timer = g_session_timer.load(std::memory_order_acquire)) {
      device_start_ = timer->mark();
    }
    start_ns_ = now_ns();
  }
#if GRADUS_HAS_NVTX
  // A computed name arrives through set_name, which pushes then.
  if ((flags & kNvtx) && name[0] != '\0') {
    nvtxRangePushA(name);
    nvtx_ = true;
  }
#endif
}

void Scope::set_name(std::string_view name) noexcept {
  if (!open_) return;
  try {
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    name_ = b.names.emplace(name).first->c_str();
  } catch (...) {
    name_ = "?";
  }
#if GRADUS_HAS_NVTX
  if (!nvtx_ && (detail::g_flags.load(std::memory_order_relaxed) & kNvtx)) {
    nvtxRangePushA(name_);
    nvtx_ = true;
  }
#endif
}

void Scope::end() noexcept {
  t_current = parent_;
#if GRADUS_HAS_NVTX
  if (nvtx_) nvtxRangePop();
#endif
  if (!record_) return;
  const int64_t end_ns = now_ns();
  if (DeviceTimer* timer = g_session_timer.load(std::memory_order_acquire)) {
    if (device_start_ >= 0) device_end_ = timer->mark();
  }
  try {
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    // A scope opened in an earlier session (or after stop) is not part of this one.
    if (session_ != g_session.load(std::memory_order_acquire) ||
        !(detail::g_flags.load(std::memory_order_relaxed) & kRecord)) {
      return;
    }
    b.data.events.push_back(
        {name_, start_ns_, end_ns, kind_, depth_, detail_, bytes_, device_start_, device_end_});
  } catch (...) {
    // Out of memory while profiling: lose the event, never the training step.
  }
}

void annotate_tensors(const std::vector<Tensor>& inputs, const Tensor* output) {
  Scope* s = t_current;
  if (s == nullptr || !s->record_ || !recording_shapes()) return;
  try {
    std::ostringstream text;
    int64_t bytes = 0;
    auto add = [&](const Tensor& t) {
      if (!t.defined()) {
        text << "[]";
        return;
      }
      text << dtype_name(t.dtype()) << shape_str(t.sizes());
      bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i > 0) text << ", ";
      add(inputs[i]);
    }
    if (output != nullptr) {
      text << " -> ";
      add(*output);
    }
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    b.data.details.push_back(text.str());
    s->detail_ = static_cast<int32_t>(b.data.details.size() - 1);
    s->bytes_ = bytes;
  } catch (...) {
  }
}

uint32_t current_thread_id() {
  return buffer().data.tid;
}

void set_thread_name(std::string name) {
  if (t_buffer) {
    std::lock_guard<std::mutex> lock(t_buffer->mu);
    t_buffer->data.name = std::move(name);
  } else {
    t_pending_name = std::move(name);  // used when the thread first records
  }
}

void set_device_timer(DeviceTimer* timer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.timer = timer;
}

bool session_running() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.running;
}

void start_session(const SessionOptions& options) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  GRADUS_CHECK(!r.running, ValueError,
               "profiler: a profiling session is already running (one at a time)");
  // Drop the buffers of threads that have exited; empty the others.
  std::vector<std::shared_ptr<ThreadBuffer>> live;
  for (auto& b : r.buffers) {
    if (b.use_count() == 1) continue;  // only the registry holds it: its thread has ended
    std::lock_guard<std::mutex> block(b->mu);
    b->data.events.clear();
    b->data.details.clear();
    live.push_back(b);
  }
  r.buffers = std::move(live);
  r.options = options;
  r.device_time = false;
  if (options.device_time && r.timer != nullptr && r.timer->begin_session()) {
    r.device_time = true;
    r.device_origin_ns = now_ns();
    g_session_timer.store(r.timer, std::memory_order_release);
  }
  g_shapes.store(options.record_shapes, std::memory_order_relaxed);
  g_session.fetch_add(1, std::memory_order_acq_rel);
  r.running = true;
  r.start_ns = now_ns();
  uint32_t flags = kRecord;
  if ((options.nvtx && nvtx_compiled()) || g_nvtx_only.load()) flags |= kNvtx;
  detail::g_flags.store(flags, std::memory_order_release);
}

SessionResult stop_session() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  GRADUS_CHECK(r.running, ValueError, "profiler: no profiling session is running");
  detail::g_flags.store(g_nvtx_only.load() ? kNvtx : 0, std::memory_order_release);
  g_session_timer.store(nullptr, std::memory_order_release);
  r.running = false;
  SessionResult result;
  result.start_ns = r.start_ns;
  result.stop_ns = now_ns();
  for (auto& b : r.buffers) {
    std::lock_guard<std::mutex> block(b->mu);
    if (b->data.events.empty()) continue;
    ThreadEvents copy;
    copy.tid = b->data.tid;
    copy.os_tid = b->data.os_tid;
    copy.name = b->data.name;
    copy.events = std::move(b->data.events);
    copy.details = std::move(b->data.details);
    b->data.events.clear();
    b->data.details.clear();
    result.threads.push_back(std::move(copy));
  }
  if (r.device_time) {
    result.device_time = true;
    result.device_origin_ns = r.device_origin_ns;
    result.device_marks = r.timer->end_session();
  }
  return result;
}

}  // namespace gradus::profiling
