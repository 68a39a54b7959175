// Training checkpoints: round trip of every field, keep-last-K, latest_checkpoint's choice among
// temp files and corrupt files, a SIGKILL at random moments of a save loop, and an exact resume
// of a real model + optimizer + scheduler.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "gradus/io/io.h"
#include "io/io_test_util.h"

namespace gradus::testing {
namespace {

using io::TrainingState;

// Random finite values (a checkpoint with NaN or Inf is refused), bit-exact in every dtype.
Tensor finite_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  return random_tensor(shape, seed, -3.0, 3.0, DType::f64).to(dtype);
}

TrainingState make_state(uint64_t seed) {
  TrainingState s;
  s.step = 1234;
  nn::StateDict model;
  model.insert("layers.0.weight", finite_tensor({4, 3}, DType::f32, seed));
  model.insert("layers.0.bias", finite_tensor({4}, DType::f32, seed + 1));
  model.insert("bn.num_batches_tracked", random_raw_tensor({}, DType::i64, seed + 2));
  model.insert("emb.weight", finite_tensor({5, 2}, DType::bf16, seed + 3));
  s.model = model;
  s.optimizer.type = "Adam";
  s.optimizer.tensors["state.0.exp_avg"] = finite_tensor({4, 3}, DType::f32, seed + 4);
  s.optimizer.tensors["state.0.exp_avg_sq"] = finite_tensor({4, 3}, DType::f32, seed + 5);
  s.optimizer.scalars = {{"state.0.step", 17},
                         {"param_groups.0.lr", 0.001},
                         {"param_groups.0.beta1", 0.9},
                         {"param_groups.0.eps", 1e-8},
                         {"param_groups.0.odd", 1.0 / 3.0},
                         {"param_groups.0.max", std::numeric_limits<double>::infinity()},
                         {"param_groups.0.min", -std::numeric_limits<double>::infinity()}};
  s.scheduler = {{"last_epoch", 5}, {"base_lr.0", 0.1}};
  s.scaler = {{"scale", 65536.0}, {"growth_tracker", 17}};
  s.rng = {0xFEDCBA9876543210ull ^ seed, 0xFFFFFFFFFFFFFFF0ull};
  s.epoch = 3;
  s.batch_index = 41;
  s.config = R"({"model": "mlp", "lr": 0.001, "note": "ünïcode"})";
  s.extra = {{"git", "abc123"}, {"host", ""}};
  s.extra_tensors["ema.weight"] = finite_tensor({2, 2}, DType::f64, seed + 6);
  return s;
}

using Checkpoint = IoTest;

TEST_F(Checkpoint, FilenameIsZeroPaddedStep) {
  EXPECT_EQ(io::checkpoint_filename(42), "ckpt-0000000042.safetensors");
  EXPECT_EQ(io::checkpoint_filename(0), "ckpt-0000000000.safetensors");
  EXPECT_EQ(io::checkpoint_filename(12345678901), "ckpt-12345678901.safetensors");
  EXPECT_THROW(io::checkpoint_filename(-1), ValueError);
}

TEST_F(Checkpoint, EveryFieldRoundTrips) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  TrainingState s = make_state(seed);
  const std::string written = io::save_checkpoint(path("run"), 1234, s);
  if (const char* out = std::getenv("GRADUS_IO_EXPORT_DIR")) {  // for tools/check_safetensors.py
    io::save_checkpoint(out, 1234, s);
  }
  EXPECT_EQ(written, path("run/ckpt-0000001234.safetensors"));
  TrainingState r = io::load_checkpoint(written);

  EXPECT_EQ(r.step, 1234);
  ASSERT_EQ(r.model.keys(), s.model.keys());  // state_dict order is kept
  for (const auto& [k, t] : s.model) {
    EXPECT_EQ(r.model.at(k).dtype(), t.dtype()) << k;
    EXPECT_EQ(r.model.at(k).sizes(), t.sizes()) << k;
    EXPECT_EQ(tensor_bytes(r.model.at(k)), tensor_bytes(t)) << k;
  }
  EXPECT_EQ(r.optimizer.type, "Adam");
  ASSERT_EQ(r.optimizer.tensors.size(), 2u);
  for (const auto& [k, t] : s.optimizer.tensors) {
    EXPECT_EQ(tensor_bytes(r.optimizer.tensors.at(k)), tensor_bytes(t)) << k;
  }
  EXPECT_EQ(r.optimizer.scalars, s.optimizer.scalars);  // exact, including 1/3 and +-inf
  EXPECT_EQ(r.scheduler, s.scheduler);
  EXPECT_EQ(r.scaler, s.scaler);
  EXPECT_EQ(r.rng.seed, s.rng.seed);
  EXPECT_EQ(r.rng.offset, s.rng.offset);
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.batch_index, 41);
  EXPECT_EQ(r.config, s.config);
  EXPECT_EQ(r.extra, s.extra);
  ASSERT_EQ(r.extra_tensors.size(), 1u);
  EXPECT_EQ(tensor_bytes(r.extra_tensors.at("ema.weight")),
            tensor_bytes(s.extra_tensors.at("ema.weight")));

  // It is a plain safetensors file: prefixed tensor names and string metadata.
  io::SafetensorsFile f = io::read_safetensors(written);
  EXPECT_TRUE(f.contains("model.layers.0.weight"));
  EXPECT_TRUE(f.contains("optim.state.0.exp_avg"));
  EXPECT_TRUE(f.contains("extra.ema.weight"));
  EXPECT_EQ(f.metadata.at("format"), "gradus.checkpoint");
  EXPECT_EQ(f.metadata.at("step"), "1234");
  EXPECT_EQ(f.metadata.at("extra.git"), "abc123");
}

TEST_F(Checkpoint, NaNScalarsRoundTrip) {
  TrainingState s;
  s.scaler = {{"nan", std::nan("")}};
  io::save_checkpoint(path("d"), 1, s);
  TrainingState r = io::load_checkpoint(*io::latest_checkpoint(path("d")));
  EXPECT_TRUE(std::isnan(r.scaler.at("nan")));
  EXPECT_TRUE(r.optimizer.type.empty());
  EXPECT_EQ(r.model.size(), 0u);
}

TEST_F(Checkpoint, KeepLastK) {
  TrainingState s = make_state(fresh_seed());
  const std::string d = path("ck");
  for (int step = 1; step <= 7; ++step) io::save_checkpoint(d, step * 100, s, 3);
  auto steps = [&] {
    std::vector<int64_t> out;
    for (const auto& [step, p] : io::list_checkpoints(d)) out.push_back(step);
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{500, 600, 700}));
  io::save_checkpoint(d, 800, s, 0);  // 0 keeps everything
  EXPECT_EQ(steps(), (std::vector<int64_t>{500, 600, 700, 800}));
  io::save_checkpoint(d, 900, s, 1);
  EXPECT_EQ(steps(), (std::vector<int64_t>{900}));
  // Saving an older step (a run restarted from an earlier checkpoint) never deletes the new file.
  io::save_checkpoint(d, 1000, s, 0);
  io::save_checkpoint(d, 50, s, 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{50, 1000}));
  // Nothing but checkpoints was left behind (no temp files).
  EXPECT_EQ(
      std::distance(std::filesystem::directory_iterator(d), std::filesystem::directory_iterator()),
      2);
  // A corrupt file with a higher step neither counts towards K nor gets deleted.
  write_bytes(d + "/ckpt-0000005000.safetensors", {1, 2, 3});
  io::save_checkpoint(d, 1100, s, 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{1000, 1100, 5000}));
  EXPECT_EQ(io::latest_checkpoint(d), d + "/ckpt-0000001100.safetensors");
}

TEST_F(Checkpoint, LatestSkipsTempFilesCorruptFilesAndForeignFiles) {
  const std::string d = path("ck");
  EXPECT_FALSE(io::latest_checkpoint(d).has_value());  // no directory
  std::filesystem::create_directories(d);
  EXPECT_FALSE(io::latest_checkpoint(d).has_value());  // empty directory

  TrainingState s = make_state(fresh_seed());
  io::save_checkpoint(d, 10, s);
  const std::string p20 = io::save_checkpoint(d, 20, s);
  EXPECT_EQ(io::latest_checkpoint(d), p20);
  const std::vector<uint8_t> good = read_bytes(p20);

  // A write killed half way: only the temp file exists (truncated), never the final name.
  std::vector<uint8_t> half(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  write_bytes(d + "/ckpt-0000000030.safetensors.tmp.4242", half);
  write_bytes(d + "/ckpt-0000000031.safetensors.tmp.4243", good);  // even a complete temp file
  EXPECT_EQ(io::latest_checkpoint(d), p20);
  // A truncated file under a final name (e.g. copied by a non-atomic tool), a file with a
  // flipped header byte, an empty file, and a valid safetensors file that is not a checkpoint.
  write_bytes(d + "/ckpt-0000000040.safetensors", half);
  std::vector<uint8_t> flipped = good;
  flipped[8] = '[';  // the header no longer starts with '{'
  write_bytes(d + "/ckpt-0000000041.safetensors", flipped);
  write_bytes(d + "/ckpt-0000000042.safetensors", {});
  io::save_safetensors(d + "/ckpt-0000000043.safetensors", {{"w", s.model.at("layers.0.bias")}});
  // Names that are not checkpoints at all.
  write_bytes(d + "/ckpt-abc.safetensors", good);
  write_bytes(d + "/ckpt-0000000099.safetensors.bak", good);
  std::filesystem::create_directories(d + "/ckpt-0000000098.safetensors");
  EXPECT_EQ(io::latest_checkpoint(d), p20);
  EXPECT_EQ(io::load_checkpoint(*io::latest_checkpoint(d)).step, 20);

  // load_checkpoint itself explains what is wrong with the bad ones.
  try {
    io::load_checkpoint(d + "/ckpt-0000000043.safetensors");
    ADD_FAILURE();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("not a gradus checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::load_checkpoint(d + "/ckpt-0000000040.safetensors"), IOError);
}

// A child process saves checkpoints in a loop (keep_last_k = 2) and is SIGKILLed at a random
// moment; the newest complete checkpoint must always load, with the data of its own step.
TEST_F(Checkpoint, SigkillDuringSaveLeavesALoadableCheckpoint) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // ~8 MB per checkpoint, so a kill lands inside a write most of the time.
  TrainingState s;
  s.model.insert("big", empty({1 << 21}, {DType::f32, Device::cpu()}));
  s.model.insert("small", empty({3}, {DType::i64, Device::cpu()}));
  auto fill = [&](int64_t step) {
    float* b = static_cast<float*>(s.model.at("big").raw_data());
    std::fill(b, b + (1 << 21), static_cast<float>(step));
    int64_t* sm = static_cast<int64_t*>(s.model.at("small").raw_data());
    sm[0] = sm[1] = sm[2] = step;
  };
  int killed_mid_write = 0;
  for (int round = 0; round < 6; ++round) {
    const std::string d = path("kill" + std::to_string(round));
    std::filesystem::create_directories(d);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest, no threads of its own; only raw fills and file writes.
      for (int64_t step = 1;; ++step) {
        fill(step);
        s.step = step;
        try {
          io::save_checkpoint(d, step, s, 2);
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    // Parent: wait for the first checkpoint, then kill at a random moment.
    const auto t0 = std::chrono::steady_clock::now();
    while (io::list_checkpoints(d).empty() &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with status " << status;

    std::optional<std::string> latest = io::latest_checkpoint(d);
    ASSERT_TRUE(latest.has_value()) << "round " << round;
    TrainingState r = io::load_checkpoint(*latest);
    ASSERT_GE(r.step, 1);
    const Tensor& big = r.model.at("big");
    const float* b = static_cast<const float*>(big.raw_data());
    for (int64_t i = 0; i < big.numel(); i += 4099) {
      ASSERT_EQ(b[i], static_cast<float>(r.step)) << "round " << round << " element " << i;
    }
    EXPECT_EQ(b[big.numel() - 1], static_cast<float>(r.step));
    EXPECT_EQ(
        tensor_bytes(r.model.at("small")),
        tensor_bytes(from_vector<int64_t>({r.step, r.step, r.step}, {3}, {.dtype = DType::i64})));
    // keep_last_k = 2, plus at most one more if the kill fell between rename and pruning.
    EXPECT_LE(io::list_checkpoints(d).size(), 3u);
    // Whatever else is there is a temp file that latest_checkpoint ignored.
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp.") != std::string::npos) {
        EXPECT_TRUE(io::is_atomic_temp_name(name)) << name;
        ++killed_mid_write;
      }
    }
  }
  // Informational: how often the kill landed inside a write (the interesting case).
  std::cout << "[   INFO   ] " << killed_mid_write << " of 6 kills left a partial temp file\n";
}

// Every tensor and the metadata carry a CRC-32: one flipped bit anywhere in a tensor's data is
// detected by verify_checkpoint and load_checkpoint, naming the tensor.
TEST_F(Checkpoint, FlippedBitInAnyTensorIsDetectedAndNamed) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::string d = path("ck");
  const std::string p = io::save_checkpoint(d, 7, make_state(seed));
  EXPECT_TRUE(io::verify_checkpoint(p).empty());
  const std::vector<uint8_t> good = read_bytes(p);
  const io::SafetensorsHeader h = io::read_safetensors_header(p);
  int detected = 0;
  for (const io::SafetensorsEntry& e : h.entries) {
    if (e.end == e.begin) continue;
    std::vector<uint8_t> bad = good;
    const uint64_t at = h.data_start + e.begin + rng() % (e.end - e.begin);
    bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    write_bytes(p, bad);
    const std::vector<std::string> problems = io::verify_checkpoint(p);
    ASSERT_FALSE(problems.empty()) << e.name;
    bool named = false;
    for (const std::string& why : problems)
      named |= why.find("'" + e.name + "'") != std::string::npos;
    EXPECT_TRUE(named) << e.name << ": " << problems[0];
    try {
      io::load_checkpoint(p);
      ADD_FAILURE() << e.name;
    } catch (const IOError& err) {
      EXPECT_NE(std::string(err.what()).find(e.name), std::string::npos) << err.what();
    }
    ++detected;
  }
  EXPECT_EQ(detected, static_cast<int>(h.entries.size()));  // every tensor has bytes
}

// A metadata value changed (the JSON still valid) is detected by the metadata CRC-32.
TEST_F(Checkpoint, ChangedMetadataIsDetected) {
  const std::string d = path("ck");
  const std::string p = io::save_checkpoint(d, 7, make_state(fresh_seed()));
  const io::SafetensorsFile f = io::read_safetensors(p);
  int detected = 0;
  for (const auto& [key, value] : f.metadata) {
    std::map<std::string, std::string> meta = f.metadata;
    std::string changed = value;
    const size_t digit = changed.find_first_of("0123456789");
    if (digit == std::string::npos) {
      changed += " ";
    } else {
      changed[digit] = static_cast<char>(changed[digit] ^ 1);  // '4' <-> '5'
    }
    meta[key] = changed;
    io::save_safetensors(p, f.tensors, meta);
    EXPECT_FALSE(io::verify_checkpoint(p).empty()) << "metadata '" << key << "' changed unnoticed";
    EXPECT_THROW(io::load_checkpoint(p), IOError) << key;
    ++detected;
  }
  EXPECT_GE(detected, 12);
}

TEST_F(Checkpoint, NonFiniteTensorsAreNeverWritten) {
  const std::string d = path("ck");
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    TrainingState s = make_state(fresh_seed());
    Tensor m = s.optimizer.tensors.at("state.0.exp_avg").clone();
    static_cast<float*>(m.raw_data())[5] = static_cast<float>(bad);
    s.optimizer.tensors["state.0.exp_avg"] = m;
    try {
      io::save_checkpoint(d, 3, s);
      ADD_FAILURE() << "saved a checkpoint holding " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("optim.state.0.exp_avg"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(io::list_checkpoints(d).empty());
  }
}

TEST_F(Checkpoint, LatestGoodFallsBackAndRefusesWhenNoneIsGood) {
  const std::string d = path("ck");
  EXPECT_FALSE(io::latest_good_checkpoint(d).has_value());
  TrainingState s = make_state(fresh_seed());
  const std::string p10 = io::save_checkpoint(d, 10, s);
  const std::string p20 = io::save_checkpoint(d, 20, s);
  const std::string p30 = io::save_checkpoint(d, 30, s);
  auto damage = [&](const std::string& p) {
    std::vector<uint8_t> b = read_bytes(p);
    b[b.size() - 3] ^= 0x40;  // in the last tensor's data
    write_bytes(p, b);
  };
  damage(p30);
  std::optional<io::GoodCheckpoint> g = io::latest_good_checkpoint(d);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->path, p20);
  EXPECT_EQ(g->state.step, 20);
  ASSERT_EQ(g->skipped.size(), 1u);
  EXPECT_EQ(g->skipped[0].first, p30);
  damage(p20);
  damage(p10);
  try {
    io::latest_good_checkpoint(d);
    ADD_FAILURE() << "three damaged checkpoints were accepted";
  } catch (const io::UnusableCheckpointsError& e) {
    EXPECT_EQ(e.skipped().size(), 3u);
  }
}

// One writer per directory: a second lock is refused with the holder's pid; the kernel releases
// the lock with the holder.
TEST_F(Checkpoint, DirectoryLockAdmitsOneWriter) {
  const std::string d = path("locked");
  {
    io::DirectoryLock first(d);
    try {
      io::DirectoryLock second(d);
      ADD_FAILURE() << "a second lock on " << d << " was granted";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos)
          << e.what();
    }
  }
  io::DirectoryLock again(d);  // released with `first`
  EXPECT_THROW(io::probe_writable_directory("/proc", "test", false), IOError);
  io::probe_writable_directory(d, "test", false);
}

// A holder that has died but not yet let go (a zombie whose other threads are still exiting, as a
// run killed with SIGKILL is for a moment) is waited for: a restart right after a kill gets the
// directory. A live holder in another process is still refused at once.
TEST_F(Checkpoint, DirectoryLockWaitsForADyingHolder) {
  const std::string d = path("dying");
  auto state_of = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
  };
  for (const bool dying : {false, true}) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      io::DirectoryLock held(d);
      ASSERT_EQ(::write(ready[1], "x", 1), 1);
      if (!dying) {
        ::sleep(3);
        ::_exit(0);
      }
      // The main thread ends alone (the leader becomes a zombie); a second thread keeps the
      // process's files, the lock among them, for 1.5 s.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        ::_exit(0);
      }).detach();
      ::syscall(SYS_exit, 0);
    }
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    if (dying) {
      for (int i = 0; i < 200 && state_of(child) != 'Z'; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_EQ(state_of(child), 'Z') << "the holder did not become a zombie";
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (dying) {
      io::DirectoryLock mine(d);  // waits for the dying holder to let go
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GT(waited, 0.2) << "the lock was free at once: the holder never held it dying";
      EXPECT_LT(waited, 9.0);
    } else {
      try {
        io::DirectoryLock mine(d);
        ADD_FAILURE() << "a live holder's directory was granted";
      } catch (const IOError& e) {
        EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(child)), std::string::npos)
            << e.what();
      }
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0)
          << "a live holder was waited for";
      ::kill(child, SIGKILL);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
  }
}

// Train 3 steps, checkpoint, train 2 more; a fresh model/optimizer/scheduler restored from the
// checkpoint must reproduce the last 2 steps bit for bit (Adam moments, step counts, the
// scheduler's lr and the RNG stream all come back).
TEST_F(Checkpoint, ResumeReproducesTrainingExactly) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  auto make_model = [] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(4, 8));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(8, 2));
    return m;
  };
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 5; ++i) {
    batches.emplace_back(random_tensor({6, 4}, seed + 2 * i, -1, 1, DType::f32),
                         random_tensor({6, 2}, seed + 2 * i + 1, -1, 1, DType::f32));
  }
  auto train_step = [](nn::Module& m, optim::Optimizer& opt, optim::LRScheduler& sched,
                       const std::pair<Tensor, Tensor>& b) {
    opt.zero_grad();
    Tensor loss = mse_loss(m.forward(b.first), b.second);
    loss.backward();
    opt.step();
    sched.step();
  };

  manual_seed(seed);
  auto a = make_model();
  optim::Adam opt_a(a->parameters(), {.lr = 0.01});
  optim::StepLR sched_a(opt_a, 2, 0.5);
  for (int i = 0; i < 3; ++i) train_step(*a, opt_a, sched_a, batches[i]);
  io::TrainingState st = io::capture_training_state(*a, &opt_a, 3, &sched_a);
  st.epoch = 0;
  st.batch_index = 3;
  const std::string d = path("resume");
  io::save_checkpoint(d, 3, st, 2);
  const std::vector<double> noise_a = values_of(randn({5}));
  for (int i = 3; i < 5; ++i) train_step(*a, opt_a, sched_a, batches[i]);

  manual_seed(seed ^ 0x9999);  // different init and RNG position
  auto b = make_model();
  optim::Adam opt_b(b->parameters(), {.lr = 0.01});
  optim::StepLR sched_b(opt_b, 2, 0.5);
  io::TrainingState loaded = io::load_checkpoint(*io::latest_checkpoint(d));
  EXPECT_EQ(loaded.batch_index, 3);
  io::restore_training_state(loaded, *b, &opt_b, &sched_b);
  EXPECT_EQ(opt_b.lr(), opt_a.lr() * 2);  // StepLR halves it once between step 3 and 5
  EXPECT_EQ(values_of(randn({5})), noise_a);
  for (int i = static_cast<int>(loaded.batch_index); i < 5; ++i) {
    train_step(*b, opt_b, sched_b, batches[i]);
  }
  const nn::StateDict sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.keys(), sb.keys());
  for (const auto& [k, t] : sa) EXPECT_EQ(tensor_bytes(sb.at(k)), tensor_bytes(t)) << k;
  EXPECT_EQ(opt_b.lr(), opt_a.lr());

  // Mismatches are refused with typed errors.
  auto c = make_model();
  optim::SGD sgd(c->parameters(), {.lr = 0.1});
  EXPECT_THROW(io::restore_training_state(loaded, *c, &sgd), Error);
  auto small = std::make_shared<nn::Linear>(4, 2);
  EXPECT_THROW(io::restore_training_state(loaded, *small, nullptr), Error);
}

}  // namespace
}  // namespace gradus::testing
