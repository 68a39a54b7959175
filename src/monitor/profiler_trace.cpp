// Profile -> Chrome trace JSON (the Trace Event Format that Perfetto and chrome://tracing read).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gradus/core/error.h"
#include "gradus/monitor/profiler.h"
#include "monitor/profiler_internal.h"

namespace gradus::monitor {

namespace detail {

void sort_for_nesting(std::vector<profiling::Event>& events) {
  std::stable_sort(events.begin(), events.end(),
                   [](const profiling::Event& a, const profiling::Event& b) {
                     if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
                     const int64_t da = a.end_ns - a.start_ns, db = b.end_ns - b.start_ns;
                     if (da != db) return da > db;
                     return a.depth < b.depth;
                   });
}

std::vector<int64_t> child_time_ns(const std::vector<profiling::Event>& events) {
  std::vector<int64_t> child(events.size(), 0);
  std::vector<size_t> open;  // indices of the events containing the current one
  for (size_t i = 0; i < events.size(); ++i) {
    const profiling::Event& e = events[i];
    while (!open.empty() && events[open.back()].end_ns <= e.start_ns) open.pop_back();
    if (!open.empty()) child[open.back()] += e.end_ns - e.start_ns;
    open.push_back(i);
  }
  return child;
}

std::optional<std::pair<int64_t, int64_t>> device_span(const profiling::SessionResult& session,
                                                       const profiling::Event& e) {
  if (!session.device_time || e.device_start < 0 || e.device_end < 0) return std::nullopt;
  const auto& marks = session.device_marks;
  if (static_cast<size_t>(e.device_end) >= marks.size()) return std::nullopt;
  const auto& a = marks[static_cast<size_t>(e.device_start)];
  const auto& b = marks[static_cast<size_t>(e.device_end)];
  if (a.ns < 0 || b.ns < a.ns) return std::nullopt;
  return std::make_pair(session.device_origin_ns + a.ns, session.device_origin_ns + b.ns);
}

}  // namespace detail

namespace {

using nlohmann::ordered_json;

constexpr int kPidCpu = 1, kPidComm = 2, kPidGpu = 3, kPidCounters = 4;

ordered_json metadata(const char* what, int pid, int64_t tid, const std::string& name) {
  ordered_json m = {{"name", what}, {"ph", "M"}, {"pid", pid}};
  if (tid >= 0) m["tid"] = tid;
  m["args"] = {{"name", name}};
  return m;
}

// Microseconds with nanosecond digits: Chrome's unit, without rounding nested events together.
double us(int64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

}  // namespace

std::string Profile::chrome_trace_json() const {
  const int64_t origin = session_.start_ns;
  ordered_json events = ordered_json::array();
  events.push_back(metadata("process_name", kPidCpu, -1, "CPU threads"));
  events.push_back(metadata("process_sort_index", kPidCpu, -1, ""));
  events.back()["args"] = {{"sort_index", 1}};

  bool any_comm = false;
  std::map<uint64_t, int64_t> stream_tid;  // GPU stream handle -> track
  ordered_json gpu_events = ordered_json::array();
  for (const auto& t : session_.threads) {
    events.push_back(metadata("thread_name", kPidCpu, t.tid, t.name));
    events.push_back(metadata("thread_sort_index", kPidCpu, t.tid, ""));
    events.back()["args"] = {{"sort_index", t.tid}};
    // The thread's spans in start order, a container before what it contains.
    struct Span {
      int64_t start, dur;
      ordered_json json;
    };
    std::vector<Span> spans;
    int64_t step_number = 0;
    for (const StepSpan& s : steps_) {
      ++step_number;
      if (s.tid != t.tid) continue;
      spans.push_back({s.start_ns,
                       s.end_ns - s.start_ns,
                       {{"name", "ProfilerStep#" + std::to_string(step_number)},
                        {"cat", "step"},
                        {"ph", "X"},
                        {"ts", us(s.start_ns - origin)},
                        {"dur", us(s.end_ns - s.start_ns)},
                        {"pid", kPidCpu},
                        {"tid", t.tid}}});
    }
    bool thread_comm = false;
    for (const profiling::Event& e : t.events) {
      const bool comm = e.kind == profiling::Activity::comm;
      ordered_json ev = {{"name", e.name},
                         {"cat", profiling::activity_name(e.kind)},
                         {"ph", "X"},
                         {"ts", us(e.start_ns - origin)},
                         {"dur", us(e.end_ns - e.start_ns)},
                         {"pid", comm ? kPidComm : kPidCpu},
                         {"tid", t.tid}};
      ordered_json args = ordered_json::object();
      if (e.detail >= 0 && static_cast<size_t>(e.detail) < t.details.size()) {
        args["shapes"] = t.details[static_cast<size_t>(e.detail)];
      }
      if (e.bytes >= 0) args["bytes"] = e.bytes;
      if (const auto d = detail::device_span(session_, e)) {
        const uint64_t stream = session_.device_marks[static_cast<size_t>(e.device_start)].stream;
        auto [it, added] = stream_tid.emplace(stream, static_cast<int64_t>(stream_tid.size() + 1));
        args["device_us"] = us(d->second - d->first);
        // Only the outermost scopes on the GPU track: nested ones measure the same kernels.
        if (e.depth == 0) {
          gpu_events.push_back({{"name", e.name},
                                {"cat", "gpu"},
                                {"ph", "X"},
                                {"ts", us(d->first - origin)},
                                {"dur", us(d->second - d->first)},
                                {"pid", kPidGpu},
                                {"tid", it->second}});
        }
      }
      if (!args.empty()) ev["args"] = std::move(args);
      spans.push_back({e.start_ns, e.end_ns - e.start_ns, std::move(ev)});
      thread_comm = thread_comm || comm;
    }
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.dur > b.dur;
    });
    for (Span& s : spans) events.push_back(std::move(s.json));
    if (thread_comm) {
      events.push_back(metadata("thread_name", kPidComm, t.tid, "collectives (" + t.name + ")"));
      any_comm = true;
    }
  }
  if (any_comm) events.push_back(metadata("process_name", kPidComm, -1, "Communication"));
  if (!stream_tid.empty()) {
    events.push_back(metadata("process_name", kPidGpu, -1, "GPU 0"));
    for (const auto& [stream, tid] : stream_tid) {
      char name[48];
      std::snprintf(name, sizeof name, "stream 0x%llx", static_cast<unsigned long long>(stream));
      events.push_back(metadata("thread_name", kPidGpu, tid, name));
    }
    // Device spans of one stream in time order (scopes of several threads interleave).
    std::vector<ordered_json> sorted(gpu_events.begin(), gpu_events.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const ordered_json& a, const ordered_json& b) {
                       return a["ts"].get<double>() < b["ts"].get<double>();
                     });
    for (auto& e : sorted) events.push_back(std::move(e));
  }
  if (!counters_.empty()) {
    events.push_back(metadata("process_name", kPidCounters, -1, "Device monitor"));
    for (const CounterSample& c : counters_) {
      events.push_back({{"name", c.name},
                        {"ph", "C"},
                        {"ts", us(std::max<int64_t>(c.time_ns - origin, 0))},
                        {"pid", kPidCounters},
                        {"args", {{c.series, c.value}}}});
    }
  }
  ordered_json trace = {{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ms"},
                        {"otherData",
                         {{"producer", "gradus profiler"},
                          {"steps", steps_.size()},
                          {"device_time", has_device_time()}}}};
  return trace.dump();
}

void Profile::write_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace_json();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  GRADUS_CHECK(out.good(), IOError, "profiler: cannot write the trace to '", path, "'");
  out << text << "\n";
  out.close();
  GRADUS_CHECK(!out.fail(), IOError, "profiler: writing the trace to '", path, "' failed");
}

}  // namespace gradus::monitor
