// Crash-safe file replacement. The content goes to `<path>.tmp.<pid>` in the same directory, is
// fsync'ed, renamed over `path` and the directory is fsync'ed. A reader (or a process restarted
// after a SIGKILL or power loss at any moment) therefore sees either the previous complete file or
// the new complete file, never a mixture; an interrupted write leaves only a temp file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gradus::io {

class AtomicFile {
 public:
  // Creates (truncating) the temp file next to `path`. Throws IOError naming the path.
  explicit AtomicFile(std::string path);
  // Without commit() the temp file is closed and removed: `path` is left untouched.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes (buffered). Throws IOError (e.g. disk full) naming the path.
  void write(const void* data, size_t nbytes);
  // Bytes written so far.
  uint64_t size() const { return written_; }
  // Flushes, fsyncs, renames the temp file over `path` and fsyncs the directory.
  void commit();
  // Drops the temp file (also what the destructor does without commit()).
  void abort() noexcept;

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush_buffer();
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::string buffer_;
  bool done_ = false;
};

// The temp name used for `path` by this process: "<path>.tmp.<pid>".
std::string atomic_temp_path(const std::string& path);
// Whether `filename` (no directory) looks like a temp file of AtomicFile ("*.tmp.<digits>").
bool is_atomic_temp_name(const std::string& filename);
// Writes `contents` to `path` atomically (see AtomicFile).
void write_file_atomic(const std::string& path, const std::string& contents);
// fsyncs a directory so that a rename/unlink inside it is durable. Throws IOError.
void fsync_directory(const std::string& dir);

}  // namespace gradus::io
