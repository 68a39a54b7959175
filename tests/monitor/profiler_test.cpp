// Profiler: the Chrome trace of one MLP training step (well-formed events, every op and backward
// node once per call, nesting, per-thread tracks, monotonic timestamps), the summary's agreement
// with the trace, no-grad ops, shapes, counters, and that nothing is recorded when it is off.
#include "gradus/monitor/profiler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "autograd/node.h"
#include "gradus/data/dataloader.h"
#include "gradus/data/dataset.h"
#include "gradus/gradus.h"
#include "gradus/monitor/monitor.h"
#include "gradus/nn/layers.h"
#include "gradus/optim/sgd.h"
#include "monitor/monitor_test_util.h"

namespace gradus::monitor {
namespace {

using nlohmann::json;

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Profiler::available()) GTEST_SKIP() << "built with -DGRADUS_PROFILER=OFF";
  }
};

// The "X" events of a trace, checking every event's fields on the way.
std::vector<json> complete_events(const json& trace) {
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    EXPECT_TRUE(e["name"].is_string()) << e;
    EXPECT_TRUE(e["ph"].is_string()) << e;
    EXPECT_TRUE(e["pid"].is_number_integer()) << e;
    const std::string ph = e["ph"];
    if (ph == "X") {
      EXPECT_TRUE(e["tid"].is_number_integer()) << e;
      EXPECT_TRUE(e["cat"].is_string()) << e;
      EXPECT_TRUE(e["ts"].is_number() && e["ts"].get<double>() >= 0) << e;
      EXPECT_TRUE(e["dur"].is_number() && e["dur"].get<double>() >= 0) << e;
      out.push_back(e);
    } else if (ph == "M") {
      EXPECT_TRUE(e["args"].is_object()) << e;
    } else if (ph == "C") {
      EXPECT_TRUE(e["ts"].is_number()) << e;
      EXPECT_TRUE(e["args"].is_object() && !e["args"].empty()) << e;
      for (const auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << e;
    } else {
      ADD_FAILURE() << "unexpected phase " << e;
    }
  }
  return out;
}

// Multiset of backward node names reachable from `root` (each runs once in backward), as the
// profiler names them.
std::multiset<std::string> graph_nodes(const Tensor& root) {
  std::multiset<std::string> names;
  std::vector<autograd::Node*> stack{root.grad_fn().get()};
  std::set<autograd::Node*> seen{stack.back()};
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    const std::string name = n->name();
    names.insert(name[0] >= 'a' && name[0] <= 'z' ? name + "_backward" : name);
    for (const auto& e : n->next_edges) {
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  return names;
}

struct Mlp {
  nn::Linear fc1{8, 16}, fc2{16, 4};
  std::vector<Tensor> params() const { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias}; }
  Tensor loss(const Tensor& x, const Tensor& y) { return cross_entropy(fc2(relu(fc1(x))), y); }
};

// One training step under the profiler; returns the trace and the expected backward nodes.
struct StepTrace {
  Profile profile;
  json trace;
  std::multiset<std::string> backward_nodes;
};
StepTrace profile_one_step(ProfilerOptions options = {}) {
  manual_seed(0);
  Mlp mlp;
  optim::SGD sgd(mlp.params(), {.lr = 0.1});
  Tensor x = randn({4, 8});
  Tensor y = tensor({0, 1, 2, 3}, {4}, {.dtype = DType::i64});
  StepTrace out;
  Profiler prof(options);
  Tensor loss = mlp.loss(x, y);
  out.backward_nodes = graph_nodes(loss);
  loss.backward();
  sgd.step();
  prof.step();
  out.profile = prof.stop();
  out.trace = json::parse(out.profile.chrome_trace_json());
  return out;
}

uint32_t main_tid(const Profile& p) {
  return p.steps().at(0).tid;
}

TEST_F(ProfilerTest, OneTrainingStepHasEveryOpAndBackwardNodeOncePerCall) {
  StepTrace st = profile_one_step();
  const std::vector<json> events = complete_events(st.trace);
  const uint32_t tid = main_tid(st.profile);
  // The step's top-level scopes, in order: the model's four ops, backward, the optimizer.
  std::vector<std::string> top;
  for (const profiling::ThreadEvents& t : st.profile.threads()) {
    if (t.tid != tid) continue;
    for (const profiling::Event& e : t.events) {
      if (e.depth == 0) top.push_back(e.name);
    }
  }
  EXPECT_EQ(top, (std::vector<std::string>{"linear", "relu", "linear", "cross_entropy", "backward",
                                           "SGD.step"}));
  // Backward: exactly the graph's nodes, each once, all inside the "backward" scope.
  std::multiset<std::string> traced;
  double bw_start = -1, bw_end = -1;
  for (const json& e : events) {
    if (e["name"] == "backward") {
      bw_start = e["ts"].get<double>();
      bw_end = bw_start + e["dur"].get<double>();
    }
  }
  ASSERT_GE(bw_start, 0);
  for (const json& e : events) {
    if (e["cat"] != "backward" || e["name"] == "backward") continue;
    traced.insert(e["name"].get<std::string>());
    EXPECT_GE(e["ts"].get<double>(), bw_start);
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), bw_end + 1e-3);
  }
  EXPECT_EQ(traced, st.backward_nodes);
  EXPECT_EQ(st.backward_nodes.count("AccumulateGrad"), 4u);
  EXPECT_EQ(st.backward_nodes.count("linear_backward"), 2u);
  // Exactly one optimizer step and one profiled step.
  int sgd = 0, steps = 0;
  for (const json& e : events) {
    sgd += e["name"] == "SGD.step" && e["cat"] == "optimizer";
    steps += e["cat"] == "step";
  }
  EXPECT_EQ(sgd, 1);
  EXPECT_EQ(steps, 1);
}

TEST_F(ProfilerTest, EventsNestAndTimestampsIncreasePerTrack) {
  StepTrace st = profile_one_step();
  std::map<std::pair<int, int>, std::vector<json>> tracks;
  for (const json& e : complete_events(st.trace)) tracks[{e["pid"], e["tid"]}].push_back(e);
  ASSERT_FALSE(tracks.empty());
  for (const auto& [track, evs] : tracks) {
    std::vector<double> open_ends;  // ends of the events containing the current one
    double last_ts = -1;
    for (const json& e : evs) {
      const double ts = e["ts"], end = ts + e["dur"].get<double>();
      EXPECT_GE(ts, last_ts) << "track " << track.first << "/" << track.second << ": " << e;
      last_ts = ts;
      while (!open_ends.empty() && open_ends.back() <= ts) open_ends.pop_back();
      // A child ends within its parent (1 ns of rounding in the microsecond doubles).
      if (!open_ends.empty()) {
        EXPECT_LE(end, open_ends.back() + 1e-3) << e;
      }
      open_ends.push_back(end);
    }
  }
  // Something is nested: the step contains the ops.
  bool nested = false;
  for (const auto& t : st.profile.threads()) {
    for (const auto& e : t.events) nested = nested || e.depth > 0;
  }
  EXPECT_TRUE(nested);
}

TEST_F(ProfilerTest, SummaryTotalsMatchTheTrace) {
  StepTrace st = profile_one_step();
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, double>> from_trace;
  for (const json& e : complete_events(st.trace)) {
    if (e["cat"] == "step") continue;
    auto& [calls, total] = from_trace[{e["name"], e["cat"]}];
    ++calls;
    total += e["dur"].get<double>();
  }
  const std::vector<OpStats> rows = st.profile.key_averages();
  ASSERT_EQ(rows.size(), from_trace.size());
  double self_sum = 0;
  for (const OpStats& r : rows) {
    const auto it = from_trace.find({r.name, r.category});
    ASSERT_NE(it, from_trace.end()) << r.name;
    EXPECT_EQ(r.calls, it->second.first) << r.name;
    EXPECT_NEAR(r.total_us, it->second.second, 1e-3 * r.calls) << r.name;
    EXPECT_LE(r.self_us, r.total_us + 1e-9) << r.name;
    EXPECT_GE(r.self_us, 0) << r.name;
    self_sum += r.self_us;
  }
  // Self times partition the top-level scopes' time (one thread here).
  double top_total = 0;
  for (const auto& t : st.profile.threads()) {
    for (const auto& e : t.events) {
      if (e.depth == 0) top_total += static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    }
  }
  EXPECT_NEAR(self_sum, top_total, 1e-3 * st.profile.num_events());
  // The top-level scopes fit in the step: their percentages sum to at most 100.
  const json summary = json::parse(st.profile.summary_json());
  EXPECT_EQ(summary["steps"], 1);
  EXPECT_EQ(summary["ops"].size(), rows.size());
  EXPECT_LE(100.0 * top_total / st.profile.step_time_us(), 100.0 + 1e-6);
  const std::string table = st.profile.table();
  EXPECT_NE(table.find("linear"), std::string::npos) << table;
  EXPECT_NE(table.find("% of step"), std::string::npos) << table;
}

TEST_F(ProfilerTest, OpsOutsideAutogradAppear) {
  Tensor a = randn({3, 3}), b = randn({3, 3});
  Profiler prof;
  {
    NoGradGuard no_grad;
    Tensor c = add(a, b);
  }
  Tensor d = mul(a, b);  // no input requires grad: nothing recorded by autograd either
  Profile p = prof.stop();
  std::map<std::string, int> counts;
  for (const auto& t : p.threads()) {
    for (const auto& e : t.events) {
      if (e.kind == profiling::Activity::op) ++counts[e.name];
    }
  }
  EXPECT_EQ(counts["add"], 1);
  EXPECT_EQ(counts["mul"], 1);
}

TEST_F(ProfilerTest, AThreadGetsItsOwnTrack) {
  Tensor a = randn({3, 3});
  Profiler prof;
  Tensor on_main = exp(a);
  std::thread worker([&] {
    profiling::set_thread_name("worker under test");
    Tensor on_worker = sin(a);
  });
  worker.join();
  prof.step();
  Profile p = prof.stop();
  const json trace = json::parse(p.chrome_trace_json());
  int64_t exp_tid = -1, sin_tid = -1;
  for (const json& e : complete_events(trace)) {
    if (e["name"] == "exp") exp_tid = e["tid"];
    if (e["name"] == "sin") sin_tid = e["tid"];
  }
  ASSERT_GE(exp_tid, 0);
  ASSERT_GE(sin_tid, 0);
  EXPECT_NE(exp_tid, sin_tid);
  std::map<int64_t, std::string> names;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 1) {
      names[e["tid"]] = e["args"]["name"];
    }
  }
  EXPECT_EQ(names[sin_tid], "worker under test");
  EXPECT_EQ(names.count(exp_tid), 1u);
}

TEST_F(ProfilerTest, DataLoaderWorkersAndTheLoopAreRecorded) {
  auto ds = std::make_shared<data::TensorDataset>(randn({8, 2}), zeros({8}));
  data::DataLoaderOptions options;
  options.batch_size = 4;
  options.num_workers = 2;
  data::DataLoader loader(ds, options);
  Profiler prof;
  int batches = 0;
  for (auto& batch : loader) batches += batch.input.defined();
  Profile p = prof.stop();
  EXPECT_EQ(batches, 2);
  int next = 0, load = 0;
  std::set<std::string> load_threads;
  for (const auto& t : p.threads()) {
    for (const auto& e : t.events) {
      if (std::string(e.name) == "dataloader.next") ++next;
      if (std::string(e.name) == "dataloader.load") {
        ++load;
        load_threads.insert(t.name);
      }
    }
  }
  EXPECT_EQ(next, 2);
  EXPECT_EQ(load, 2);
  for (const std::string& name : load_threads) EXPECT_EQ(name.rfind("dataloader worker ", 0), 0u);
}

TEST_F(ProfilerTest, ShapesAndBytesOnlyWhenAsked) {
  for (bool shapes : {false, true}) {
    StepTrace st = profile_one_step({.record_shapes = shapes});
    bool found = false;
    for (const json& e : complete_events(st.trace)) {
      if (e["name"] != "linear" || found) continue;
      found = true;
      if (!shapes) {
        EXPECT_FALSE(e.contains("args")) << e;
        continue;
      }
      ASSERT_TRUE(e.contains("args")) << e;
      EXPECT_EQ(e["args"]["shapes"], "float32[4, 8], float32[16, 8], float32[16] -> float32[4, 16]")
          << e;
      EXPECT_EQ(e["args"]["bytes"], (4 * 8 + 16 * 8 + 16 + 4 * 16) * 4) << e;
    }
    EXPECT_TRUE(found);
  }
}

TEST_F(ProfilerTest, NothingIsRecordedWhenOff) {
  EXPECT_FALSE(profiling::active());
  Tensor a = randn({3, 3});
  Tensor before = exp(a);  // no profiler yet
  {
    Profiler prof;
    prof.stop();
  }
  Tensor between = sin(a);  // after a session
  EXPECT_FALSE(profiling::active());
  Profiler prof;
  Profile p = prof.stop();
  EXPECT_EQ(p.num_events(), 0u);
  EXPECT_TRUE(p.key_averages().empty());
}

TEST_F(ProfilerTest, OneAtATime) {
  Profiler prof;
  EXPECT_THROW(Profiler second, ValueError);
  EXPECT_NO_THROW(prof.stop());
  EXPECT_THROW(prof.stop(), ValueError);
}

TEST_F(ProfilerTest, MonitorReadingsBecomeCounterTracks) {
  DeviceMonitor mon({.interval = std::chrono::milliseconds(10), .nvml = false});
  Profiler prof({.monitor = &mon});
  Tensor a = randn({64, 64});
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(120);
  while (std::chrono::steady_clock::now() < until) a = tanh(matmul(a, a));
  Profile p = prof.stop();
  const json trace = json::parse(p.chrome_trace_json());
  complete_events(trace);  // checks the "C" events' fields too
  std::set<std::string> counters;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(counters.count("RSS (MiB)"), 1u);
  EXPECT_GE(p.counters().size(), 3u);
}

TEST_F(ProfilerTest, WritesTheTraceOrNamesThePath) {
  gradus::testing::ScratchDir dir;
  Profiler prof;
  Tensor a = exp(randn({2}));
  Profile p = prof.stop();
  const std::string path = (dir.path() / "t.json").string();
  p.write_chrome_trace(path);
  EXPECT_GT(std::filesystem::file_size(path), 10u);
  try {
    p.write_chrome_trace((dir.path() / "missing" / "t.json").string());
    FAIL() << "expected IOError";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradus::monitor
