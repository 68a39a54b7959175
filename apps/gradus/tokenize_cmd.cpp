// gradus tokenize: a text file -> a nanoGPT token file (.bin: raw little-endian uint16, or uint32
// for vocabularies past 65536 ids) with a byte-level BPE tokenizer (gradus/data/bpe_tokenizer.h).
// The input is memory-mapped and encoded in blocks on --threads threads; each block's ids are
// written as soon as it is done, into a temp file renamed over --output at the end
// (io::AtomicFile).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "gradus/core/error.h"
#include "gradus/data/bpe_tokenizer.h"
#include "gradus/io/atomic_file.h"
#include "progress.h"

namespace gradus::cli {

namespace {

// A read-only mapping of a whole file (an empty file maps to an empty view).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    GRADUS_CHECK(fd >= 0, IOError, "tokenize: cannot open ", path, ": ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      throw IOError("tokenize: cannot stat " + path + ": " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw IOError("tokenize: " + path + " is not a regular file" +
                    (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int e = errno;
      ::close(fd);
      GRADUS_CHECK(p != MAP_FAILED, IOError, "tokenize: cannot map ", path, ": ", std::strerror(e));
      data_ = p;
      ::madvise(data_, size_, MADV_SEQUENTIAL);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view view() const { return {static_cast<const char*>(data_), size_}; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Bytes encoded, MB/s and ETA on stderr: one redrawn line on a terminal, a line per tenth of the
// input otherwise (as the training progress bar, progress.h).
class ByteProgress {
 public:
  ByteProgress(size_t total, bool enabled)
      : total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}
  void update(size_t done) {
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const int tenth = total_ > 0 ? static_cast<int>(10 * done / total_) : 10;
    if (!tty_ && tenth <= last_tenth_) return;
    last_tenth_ = tenth;
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : -1.0;
    std::fprintf(stderr, "%stokenize [%s] %.1f/%.1f MB  %.1f MB/s  ETA %s%s", tty_ ? "\r" : "",
                 bar.c_str(), done / 1e6, total_ / 1e6, rate / 1e6, format_duration(eta).c_str(),
                 tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\n");
  }

 private:
  using Clock = std::chrono::steady_clock;
  size_t total_;
  bool enabled_, tty_;
  bool drawn_ = false;
  int last_tenth_ = 0;
  Clock::time_point start_ = Clock::now();
};

// nanoGPT's files are little-endian, and so are the ids in memory here.
static_assert(std::endian::native == std::endian::little, "token files are written as in memory");

template <typename T>
void write_ids(io::AtomicFile& out, std::span<const uint32_t> ids, std::vector<T>& buffer) {
  buffer.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    buffer[i] = static_cast<T>(ids[i]);
  }
  out.write(buffer.data(), buffer.size() * sizeof(T));
}

}  // namespace

void add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  CLI::App* c = app.add_subcommand(
      "tokenize",
      "Encode a text file with a byte-level BPE tokenizer (Hugging Face tokenizer.json or GPT-2's "
      "vocab.json + merges.txt) into a nanoGPT token file");
  c->add_option("--tokenizer", o.tokenizer,
                "Directory with tokenizer.json (else vocab.json + merges.txt), or a tokenizer.json")
      ->required();
  c->add_option("--input", o.input, "The text to encode (UTF-8; other bytes are kept too)")
      ->required();
  c->add_option("--output", o.output,
                "The token file: raw little-endian ids (nanoGPT's .bin with uint16)")
      ->required();
  c->add_option("--threads", o.threads, "Encoding threads (0: one per CPU)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_option("--dtype", o.dtype,
                "Token width: auto (uint16 when every id fits, else uint32), uint16 or uint32")
      ->check(CLI::IsMember({"auto", "uint16", "uint32"}))
      ->capture_default_str();
  c->add_flag("--no-progress", o.no_progress, "Do not draw the progress bar");
}

int run_tokenize(const TokenizeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const data::BpeTokenizer tok = data::BpeTokenizer::from_dir(o.tokenizer);
  const int64_t vocab = tok.vocab_size();
  const bool wide = o.dtype == "uint32" || (o.dtype == "auto" && vocab > 65536);
  GRADUS_CHECK(!(o.dtype == "uint16" && vocab > 65536), ValueError, "tokenize: --dtype uint16 ",
               "cannot hold the ids of ", tok.source(), " (a vocabulary of ", vocab,
               " ids, the largest ", vocab - 1, " > 65535): use --dtype uint32 or auto");
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const MappedFile input(o.input);
  const std::string_view text = input.view();
  io::AtomicFile out(o.output);
  // Progress on inputs of 32 MB and more; blocks of 8 MiB per thread (a bar step each).
  ByteProgress progress(text.size(), !o.no_progress && text.size() >= (size_t{32} << 20));
  std::vector<uint16_t> narrow_buffer;
  std::vector<uint32_t> wide_buffer;
  uint64_t tokens = 0;
  const auto t1 = std::chrono::steady_clock::now();
  tok.encode_blocks(
      text, threads,
      [&](std::span<const uint32_t> ids, size_t done) {
        if (wide) {
          write_ids(out, ids, wide_buffer);
        } else {
          write_ids(out, ids, narrow_buffer);
        }
        tokens += ids.size();
        progress.update(done);
      },
      (size_t{8} << 20) * static_cast<size_t>(threads));
  out.commit();
  progress.finish();
  const auto t2 = std::chrono::steady_clock::now();
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double encode_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "tokenize: %s: %zu bytes -> %llu tokens (%s, vocabulary %lld) in %.3f s: %.2f MB/s on %d "
      "thread%s (tokenizer loaded in %.3f s)\n",
      o.input.c_str(), text.size(), static_cast<unsigned long long>(tokens),
      wide ? "uint32" : "uint16", static_cast<long long>(vocab), encode_s,
      encode_s > 0 ? static_cast<double>(text.size()) / encode_s / 1e6 : 0.0, threads,
      threads == 1 ? "" : "s", load_s);
  std::printf("tokenize: wrote %s (%llu bytes%s)\n", o.output.c_str(),
              static_cast<unsigned long long>(tokens * (wide ? 4 : 2)),
              wide ? "; train and eval read it with --token-dtype uint32" : "");
  return 0;
}

}  // namespace gradus::cli
