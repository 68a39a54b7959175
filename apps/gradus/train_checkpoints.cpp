#include "train_checkpoints.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "gradus/dist/dist.h"

namespace gradus::cli {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

// Temp files "<ckpt>.tmp.<pid>" left by a writer that was killed mid-write (AtomicFile never
// renamed them). Only files of processes that no longer exist are removed.
int remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!io::is_atomic_temp_name(name)) continue;
    const long pid = std::strtol(name.substr(name.rfind('.') + 1).c_str(), nullptr, 10);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code ec2;
    if (fs::remove(e.path(), ec2)) ++removed;
  }
  return removed;
}

// Whether `path` is a complete gradus checkpoint (its header validates against the file size).
bool is_complete_checkpoint(const std::string& path) {
  try {
    const io::SafetensorsHeader h = io::read_safetensors_header(path);
    auto it = h.metadata.find("format");
    return it != h.metadata.end() && it->second == "gradus.checkpoint";
  } catch (const Error&) {
    return false;
  }
}

// Applies --keep-checkpoints on resume: a process killed between writing a checkpoint and
// deleting the oldest one leaves one extra; without this, repeated kills would accumulate them.
// Like save_checkpoint, files that fail validation are left alone for inspection.
void prune_checkpoints(const std::string& dir, int keep) {
  if (keep <= 0) return;
  const auto all = io::list_checkpoints(dir);
  int kept = 0;
  bool removed = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!is_complete_checkpoint(it->second)) continue;
    if (++kept <= keep) continue;
    if (::unlink(it->second.c_str()) == 0) removed = true;
  }
  if (removed) io::fsync_directory(dir);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the process at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // the terminal closed: same as SIGTERM
}

double agree_on_step(dist::ProcessGroup& group, const Tensor& loss) {
  Tensor shared =
      tensor({loss.item(), static_cast<double>(g_stop_signal)}, {2}, {.dtype = DType::f64});
  group.all_reduce(shared, dist::ReduceOp::sum, "loss")->wait();
  const std::vector<double> v = shared.to_vector<double>();
  if (v[1] != 0 && g_stop_signal == 0) g_stop_signal = SIGTERM;
  return v[0] / group.size();
}

StartPoint find_start(const TrainOptions& o, const std::string& config, nn::Module& model,
                      amp::GradScaler& scaler, optim::Optimizer& optimizer,
                      optim::LRScheduler* scheduler) {
  StartPoint start;
  if (o.checkpoint_dir.empty()) return start;
  const auto all = io::list_checkpoints(o.checkpoint_dir);
  if (!o.resume) {
    GRADUS_CHECK(all.empty(), ValueError, "train: the checkpoint directory '", o.checkpoint_dir,
                 "' already holds ", all.size(),
                 " checkpoint(s) of a run (newest: ", all.empty() ? "" : all.back().second,
                 "); pass --resume to continue that run, or choose an empty --checkpoint-dir");
    return start;
  }
  const int stale = dist::rank() == 0 ? remove_stale_temp_files(o.checkpoint_dir) : 0;
  if (stale > 0) {
    std::fprintf(stderr, "gradus train: removed %d temp file(s) of interrupted checkpoint writes\n",
                 stale);
  }
  // The newest checkpoint that loads and verifies (checksums, metadata, finite values); newer
  // ones that do not are named and skipped.
  std::optional<io::GoodCheckpoint> good;
  try {
    good = io::latest_good_checkpoint(o.checkpoint_dir);
  } catch (const io::UnusableCheckpointsError& e) {
    if (!o.resume_or_start) {
      throw IOError(std::string("train: --resume: ") + e.what() +
                    "\nInspect them with `gradus inspect FILE`; pass --resume-or-start to start "
                    "from step 0 anyway (the damaged files are kept)");
    }
    std::fprintf(stderr, "gradus train: --resume-or-start: %s\ngradus train: starting at step 0\n",
                 e.what());
    return start;
  }
  if (!good) {
    std::fprintf(stderr, "gradus train: --resume: no checkpoint in '%s' yet; starting at step 0\n",
                 o.checkpoint_dir.c_str());
    return start;
  }
  for (const auto& [path, why] : good->skipped) {
    std::fprintf(stderr, "gradus train: --resume: skipping %s: %s\n", path.c_str(), why.c_str());
  }
  if (!good->skipped.empty()) {
    std::fprintf(stderr, "gradus train: --resume: falling back to %s, the newest good checkpoint\n",
                 good->path.c_str());
  }
  const std::optional<std::string> latest = good->path;
  const io::TrainingState& state = good->state;
  for (const std::string& note : check_resume_config(state.config, config, *latest)) {
    std::fprintf(stderr, "gradus train: warning: %s\n", note.c_str());
  }
  // (A sharded optimizer takes this rank's shard of the whole state.)
  io::restore_training_state(state, model, &optimizer, scheduler, /*restore_rng=*/true);
  if (scaler.is_enabled() && !state.scaler.empty()) scaler.load_state_dict(state.scaler);
  if (dist::rank() == 0) prune_checkpoints(o.checkpoint_dir, o.keep_checkpoints);
  start.step = state.step;
  start.position = {state.epoch, state.batch_index};
  start.progress = load_epoch_progress(state);
  start.path = *latest;
  std::fprintf(stderr, "gradus train: resuming from %s (step %lld, epoch %lld, batch %lld)\n",
               latest->c_str(), static_cast<long long>(start.step),
               static_cast<long long>(start.position.epoch + 1),
               static_cast<long long>(start.position.batch));
  return start;
}

}  // namespace gradus::cli
