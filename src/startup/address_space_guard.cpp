// Runs before any shared library's initialiser (an executable's .preinit_array), so that a process
// under an address-space limit never hangs in OpenBLAS's start-up (src/backend/cpu/
// blas_address_space.h says why it would). When the limit leaves room for fewer BLAS threads than
// the process would start, it starts again with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to the
// number that fits; when it leaves room for none, it ends at once with a message naming the limit.
//
// Linked into executables only (the ELF format allows .preinit_array nowhere else): gradus::gradus
// adds it to every executable that links it, the CLI and the tests included. libc calls only:
// nothing else is initialised yet.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

// (Relative: the same path in the source tree and where it is installed, share/gradus/.)
#include "../backend/cpu/blas_address_space.h"

namespace {

using namespace gradus::backend::cpu;

// A variable's value from the environment the process was started with (getenv cannot be used
// yet: libc sets up its view of the environment after this guard runs).
const char* start_env(char** envp, const char* name) {
  const std::size_t length = std::strlen(name);
  for (char** entry = envp; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=')
      return *entry + length + 1;
  }
  return nullptr;
}

int positive_from_env(char** envp, const char* name) {
  const char* value = start_env(envp, name);
  if (value == nullptr) return 0;
  const long n = std::strtol(value, nullptr, 10);  // OMP_NUM_THREADS may be a list: its first entry
  return n > 0 && n < 4096 ? static_cast<int>(n) : 0;
}

// The threads OpenBLAS would start: its own variables first, then OpenMP's, then the usable CPUs.
int blas_threads_wanted(char** envp) {
  static const char* const names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                      "OMP_NUM_THREADS"};
  for (const char* name : names) {
    if (const int n = positive_from_env(envp, name); n > 0) return n;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0)
    return CPU_COUNT(&cpus);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

// Bytes mapped now (/proc/self/statm's first field, in pages); 0 when it cannot be read.
std::size_t mapped_bytes() {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[64] = {};
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return 0;
  return static_cast<std::size_t>(std::strtoull(text, nullptr, 10)) *
         static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

void fit_blas_threads_to_address_space(int /*argc*/, char** argv, char** envp) {
  const std::size_t limit = address_space_limit();
  if (limit == 0) return;
  const int wanted = blas_threads_wanted(envp);
  const int fit = blas_threads_that_fit(wanted);
  if (fit == wanted) return;
  char message[512];
  if (fit == 0) {
    const int n = std::snprintf(
        message, sizeof(message),
        "gradus: error: out of memory at start-up: the address-space limit (ulimit -v, RLIMIT_AS) "
        "of %zu MiB leaves too little room for the BLAS library, which maps twice %zu MiB per "
        "thread, beyond the %zu MiB mapped already: raise the limit to "
        "at least %zu MiB\n",
        limit / kMiB, kBlasBufferBytes / kMiB, mapped_bytes() / kMiB,
        (mapped_bytes() + blas_address_space_bytes(1)) / kMiB + 1);
    if (n > 0) (void)!write(STDERR_FILENO, message, static_cast<std::size_t>(n));
    _exit(1);
  }
  // The variables must be in the process's environment when libgomp and OpenBLAS read it, but
  // libc's own initialiser, which runs after this one, restores the environment the process started
  // with: the process starts again with them (then they ask for what fits, so it does not loop).
  static char omp_threads[32];
  static char blas_threads[40];
  std::snprintf(omp_threads, sizeof(omp_threads), "OMP_NUM_THREADS=%d", fit);
  std::snprintf(blas_threads, sizeof(blas_threads), "OPENBLAS_NUM_THREADS=%d", fit);
  static char* env[1024];
  std::size_t n = 0;
  for (char** entry = envp; *entry != nullptr; ++entry) {
    if (n + 3 > sizeof(env) / sizeof(env[0])) return;  // (an environment too large to copy here)
    if (std::strncmp(*entry, "OMP_NUM_THREADS=", 16) != 0 &&
        std::strncmp(*entry, "OPENBLAS_NUM_THREADS=", 21) != 0) {
      env[n++] = *entry;
    }
  }
  env[n++] = omp_threads;
  env[n++] = blas_threads;
  env[n] = nullptr;
  execve("/proc/self/exe", argv, env);
  // Cannot start again (no /proc): go on; OpenBLAS may then wait for memory that never comes.
}

}  // namespace

// The dynamic loader calls this before libgomp's and OpenBLAS's initialisers read the variables.
__attribute__((used, section(".preinit_array"))) static void (*const gradus_address_space_guard)(
    int, char**, char**) = &fit_blas_threads_to_address_space;
