#include "gradus/io/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gradus/core/error.h"

namespace gradus::io {

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

void make_directories(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GRADUS_CHECK(!ec, IOError, what, ": cannot create the directory '", dir, "': ", ec.message());
}

}  // namespace

namespace {

// The pid in a lock file's text, or 0.
long holder_pid(const std::string& text) {
  char* end = nullptr;
  const long pid = std::strtol(text.c_str(), &end, 10);
  return pid > 0 && end != nullptr && *end == '\0' ? pid : 0;
}

// Whether the holder has ended but not yet let go: gone, or a zombie whose other threads are
// still exiting (a run killed with SIGKILL holds its files for a moment while its threads die).
bool holder_is_dying(long pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

// How long a dying holder is waited for before the directory is reported in use.
constexpr std::chrono::seconds kDyingHolderWait{10};

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir)
    : path_((std::filesystem::path(dir) / ".gradus.lock").string()) {
  make_directories(dir, "checkpoint directory");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  GRADUS_CHECK(fd_ >= 0, IOError, "cannot open the lock file '", path_, "': ", errno_text(errno));
  const auto give_up = std::chrono::steady_clock::now() + kDyingHolderWait;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {0};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("?");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err == EWOULDBLOCK && holder_is_dying(holder_pid(holder)) &&
        std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    ::close(fd_);
    fd_ = -1;
    GRADUS_CHECK(err != EWOULDBLOCK, IOError, "the checkpoint directory '", dir,
                 "' is in use by another run (pid ", holder, ", lock file ", path_,
                 "); two runs writing one directory would overwrite each other's checkpoints. "
                 "Wait for it to end or choose another --checkpoint-dir");
    throw IOError("cannot lock '" + path_ + "': " + errno_text(err));
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw IOError("cannot write the lock file '" + path_ + "': " + errno_text(err));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

void probe_writable_directory(const std::string& dir, const std::string& what, bool create) {
  const std::string shown = dir.empty() ? std::string(".") : dir;
  if (create) make_directories(shown, what);
  const std::string probe =
      (std::filesystem::path(shown) / (".gradus-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  GRADUS_CHECK(fd >= 0, IOError, what, ": cannot write in '", shown, "': ", errno_text(errno));
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  GRADUS_CHECK(wrote, IOError, what, ": cannot write in '", shown, "': ", errno_text(err));
}

}  // namespace gradus::io
