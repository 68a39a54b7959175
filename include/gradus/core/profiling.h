// The profiler's hooks: scopes that ops, the backward engine, optimizers, the data loader, copies
// and collectives open around their work, and the per-thread buffers they record into.
// gradus::monitor::Profiler (gradus/monitor/profiler.h) starts and stops recording and turns the
// events into a Chrome trace and a summary table; this header is what the layers below it need.
//
// It lives in core because every layer that is profiled (autograd, optim, data, dist) sits on
// core, while the monitor layer sits beside them. When nothing records, a scope costs one relaxed
// atomic load and a branch predicted not taken. Configuring with -DGRADUS_PROFILER=OFF turns the
// GRADUS_PROFILE_* macros into nothing (to measure that cost; the classes stay, recording nothing).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradus {
class Tensor;
}

namespace gradus::profiling {

// What a scope measures; the Chrome trace's "cat" and the summary's grouping.
enum class Activity : uint8_t {
  op,         // a forward op (any grad mode)
  backward,   // one autograd node's backward, or the whole backward pass
  optimizer,  // optimizer.step()
  data,       // fetching a batch (the loop waiting) or loading one (a worker)
  copy,       // host <-> device transfers
  comm,       // a collective: issue, and waiting for it
  step,       // one training step (Profiler::step())
  user,       // a user scope
};
const char* activity_name(Activity a);

namespace detail {
// Bit 0: record events; bit 1: emit NVTX ranges.
extern std::atomic<uint32_t> g_flags;
}  // namespace detail

inline bool active() noexcept {
  return detail::g_flags.load(std::memory_order_relaxed) != 0;
}
// Whether tensor shapes/bytes are kept (annotate_tensors).
bool recording_shapes() noexcept;

// Measures from construction to destruction. `name` must outlive the session (a literal); names
// built at run time go through set_name, which copies them.
class Scope {
 public:
  explicit Scope(Activity kind, const char* name = "") noexcept {
    if (__builtin_expect(active(), 0)) begin(kind, name);
  }
  ~Scope() {
    if (__builtin_expect(open_, 0)) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool recording() const noexcept { return open_; }
  void set_name(std::string_view name) noexcept;

 private:
  friend void annotate_tensors(const std::vector<Tensor>&, const Tensor*);
  void begin(Activity kind, const char* name) noexcept;
  void end() noexcept;

  bool open_ = false;
  bool nvtx_ = false;
  bool record_ = false;
  Activity kind_ = Activity::op;
  uint16_t depth_ = 0;
  uint32_t session_ = 0;
  const char* name_ = "";
  int64_t start_ns_ = 0;
  int32_t detail_ = -1;  // index of the shapes text in the thread's buffer
  int64_t bytes_ = -1;
  int32_t device_start_ = -1, device_end_ = -1;  // DeviceTimer marks
  Scope* parent_ = nullptr;
};

// Gives the innermost open scope of this thread the shapes, dtypes and bytes of these tensors (an
// op's inputs, then its output), when the session records shapes.
void annotate_tensors(const std::vector<Tensor>& inputs, const Tensor* output = nullptr);

// This thread's tid in ThreadEvents (registering the thread when it has not recorded yet).
uint32_t current_thread_id();

// Names this thread's track in the trace ("dataloader worker 1"); default "thread N".
void set_thread_name(std::string name);

// One finished scope.
struct Event {
  const char* name;
  int64_t start_ns;  // steady_clock
  int64_t end_ns;
  Activity kind;
  uint16_t depth;                    // open scopes around it on its thread
  int32_t detail;                    // index into ThreadEvents::details, -1 none
  int64_t bytes;                     // -1 when not recorded
  int32_t device_start, device_end;  // DeviceTimer marks, -1 none
};

struct ThreadEvents {
  uint32_t tid = 0;  // 1, 2, ... in the order threads first recorded
  int64_t os_tid = 0;
  std::string name;
  std::vector<Event> events;  // in order of completion (children before their parent)
  std::vector<std::string> details;
};

// Device time from events on the device's stream (the CUDA backend registers one).
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Synchronises and records the reference mark; false when no device can be timed.
  virtual bool begin_session() = 0;
  // Records a mark on the current stream of the current device; its id, or -1.
  virtual int32_t mark() noexcept = 0;
  struct Mark {
    int64_t ns = -1;  // after the reference mark; -1 when unknown
    uint64_t stream = 0;
  };
  // Waits for the marks recorded since begin_session and frees them.
  virtual std::vector<Mark> end_session() = 0;
};
void set_device_timer(DeviceTimer* timer);  // not owned; nullptr: none

struct SessionOptions {
  bool record_shapes = false;
  bool device_time = true;  // when a DeviceTimer is registered and can time
  bool nvtx = true;         // also NVTX ranges (builds with the NVTX header)
};
struct SessionResult {
  int64_t start_ns = 0, stop_ns = 0;
  std::vector<ThreadEvents> threads;  // threads that recorded, by tid
  bool device_time = false;
  int64_t device_origin_ns = 0;  // steady_clock time of the device reference mark
  std::vector<DeviceTimer::Mark> device_marks;
};
// One session at a time (throws ValueError when one is running). stop_session collects the
// events; scopes still open on other threads are dropped.
void start_session(const SessionOptions& options);
SessionResult stop_session();
bool session_running();
bool compiled_in();  // false in a -DGRADUS_PROFILER=OFF build
bool nvtx_available();
// NVTX ranges without recording (for Nsight Systems runs); also GRADUS_NVTX=1 at start-up.
void set_nvtx_only(bool on);

int64_t now_ns() noexcept;

}  // namespace gradus::profiling

#if GRADUS_PROFILER
#define GRADUS_PROFILE_CAT2(a, b) a##b
#define GRADUS_PROFILE_CAT(a, b) GRADUS_PROFILE_CAT2(a, b)
#define GRADUS_PROFILE_SCOPE(kind, name)                                          \
  ::gradus::profiling::Scope GRADUS_PROFILE_CAT(gradus_profile_scope_, __LINE__)( \
      ::gradus::profiling::Activity::kind, name)
// A scope whose name is computed (only when recording).
#define GRADUS_PROFILE_SCOPE_NAMED(kind, name_expr)                                             \
  ::gradus::profiling::Scope GRADUS_PROFILE_CAT(gradus_profile_scope_,                          \
                                                __LINE__)(::gradus::profiling::Activity::kind); \
  if (GRADUS_PROFILE_CAT(gradus_profile_scope_, __LINE__).recording())                          \
  GRADUS_PROFILE_CAT(gradus_profile_scope_, __LINE__).set_name(name_expr)
#define GRADUS_PROFILE_OP(name) GRADUS_PROFILE_SCOPE(op, name)
#define GRADUS_PROFILE_TENSORS(...)                         \
  do {                                                      \
    if (__builtin_expect(::gradus::profiling::active(), 0)) \
      ::gradus::profiling::annotate_tensors(__VA_ARGS__);   \
  } while (0)
#else
#define GRADUS_PROFILE_SCOPE(kind, name) static_cast<void>(0)
#define GRADUS_PROFILE_SCOPE_NAMED(kind, name_expr) static_cast<void>(0)
#define GRADUS_PROFILE_OP(name) static_cast<void>(0)
#define GRADUS_PROFILE_TENSORS(...) static_cast<void>(0)
#endif
