// Guards for output directories.
//
// DirectoryLock: one writer per checkpoint directory. It takes an exclusive flock() on
// DIR/.gradus.lock for as long as the object lives; the kernel releases it when the process ends,
// however it ends, so a crashed run never leaves a stale lock. A second run on the same directory
// is refused with the holder's pid (written into the lock file).
//
// probe_writable_directory: creates and removes a file in a directory, so a run fails before it
// trains, with the path and the system's reason, instead of after the work is done.
#pragma once

#include <string>

namespace gradus::io {

class DirectoryLock {
 public:
  // Creates dir if needed. Throws IOError when it cannot, or when another process holds the lock
  // (naming its pid).
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Creates dir if `create` (with parents), then creates, writes and removes a probe file in it.
// Throws IOError "<what>: cannot write in '<dir>': <strerror>" on any failure.
void probe_writable_directory(const std::string& dir, const std::string& what, bool create);

}  // namespace gradus::io
