// AtomicFile: temp file + fsync + rename + fsync(dir). See the header for the guarantee.
#include "gradus/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "gradus/core/error.h"

namespace gradus::io {
namespace {

constexpr size_t kBufferSize = size_t{4} << 20;  // batch small writes (headers, tiny tensors)

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string directory_of(const std::string& path) {
  std::filesystem::path p(path);
  std::string dir = p.parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

// write(2) until everything is out, retrying on EINTR and short writes.
void write_all(int fd, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IOError(detail::str_cat(what, ": write failed: ", errno_text(errno)));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string atomic_temp_path(const std::string& path) {
  return detail::str_cat(path, ".tmp.", static_cast<long long>(::getpid()));
}

bool is_atomic_temp_name(const std::string& filename) {
  const size_t pos = filename.rfind(".tmp.");
  if (pos == std::string::npos || pos + 5 >= filename.size()) return false;
  for (size_t i = pos + 5; i < filename.size(); ++i) {
    if (filename[i] < '0' || filename[i] > '9') return false;
  }
  return true;
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  GRADUS_CHECK(fd >= 0, IOError, dir, ": cannot open directory to sync it: ", errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems (e.g. certain network mounts) do not support fsync on directories; the
  // rename itself has still happened, so only real I/O errors are fatal.
  GRADUS_CHECK(rc == 0 || err == EINVAL || err == ENOTSUP, IOError, dir,
               ": fsync of the directory failed: ", errno_text(err));
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  GRADUS_CHECK(!path_.empty(), IOError, "atomic write: empty file path");
  temp_path_ = atomic_temp_path(path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GRADUS_CHECK(fd_ >= 0, IOError, path_, ": cannot create temporary file '", temp_path_,
               "': ", errno_text(errno));
  buffer_.reserve(kBufferSize);
}

AtomicFile::~AtomicFile() {
  if (!done_) abort();
}

void AtomicFile::flush_buffer() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), path_);
  buffer_.clear();
}

void AtomicFile::write(const void* data, size_t nbytes) {
  GRADUS_CHECK(!done_ && fd_ >= 0, IOError, path_, ": write after commit/abort");
  if (nbytes == 0) return;
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + nbytes <= kBufferSize) {
    buffer_.append(p, nbytes);
  } else {
    flush_buffer();
    if (nbytes < kBufferSize) {
      buffer_.append(p, nbytes);
    } else {
      write_all(fd_, p, nbytes, path_);  // large tensors go straight to the kernel
    }
  }
  written_ += nbytes;
}

void AtomicFile::commit() {
  GRADUS_CHECK(!done_ && fd_ >= 0, IOError, path_, ": commit after commit/abort");
  flush_buffer();
  // The data must be on disk before the rename makes it visible under the final name; otherwise
  // a crash could leave a complete-looking name with missing contents.
  GRADUS_CHECK(::fsync(fd_) == 0, IOError, path_, ": fsync of '", temp_path_,
               "' failed: ", errno_text(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  GRADUS_CHECK(rc == 0, IOError, path_, ": close of '", temp_path_,
               "' failed: ", errno_text(errno));
  GRADUS_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, IOError, path_,
               ": cannot rename '", temp_path_, "' over it: ", errno_text(errno));
  done_ = true;
  fsync_directory(directory_of(path_));  // make the rename itself durable
}

void AtomicFile::abort() noexcept {
  if (done_) return;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  ::unlink(temp_path_.c_str());
  done_ = true;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
}

}  // namespace gradus::io
