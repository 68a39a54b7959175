// OpenBLAS kernel selection. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise recent
// Intel cores (e.g. Sapphire Rapids, family 6 model 207) and falls back to its generic SSE3
// "Prescott" kernels: SGEMM runs ~3x slower than it should. OpenBLAS reads OPENBLAS_CORETYPE
// only while the library loads, before main(); but its dynamic initialiser is exported and
// re-runs when its kernel table pointer is cleared. So when the automatic choice is a generic
// fallback and the CPU has AVX-512 or AVX2, gradus selects the matching kernel table before the
// first BLAS call. A user's own OPENBLAS_CORETYPE always wins.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/blas_address_space.h"
#include "backend/cpu/cpu_backend.h"

extern "C" {
// From OpenBLAS's dynamic.c (exported by DYNAMIC_ARCH builds).
extern void* gotoblas;
void gotoblas_dynamic_init(void);
// From OpenBLAS's memory.c: a work buffer from its table, mapped on first use and kept.
void* blas_memory_alloc(int procpos);
void blas_memory_free(void* buffer);
char* openblas_get_corename(void);
}

namespace gradus::backend::cpu {
namespace {

bool is_generic_core(const std::string& name) {
  for (const char* generic : {"Prescott", "Core2", "Penryn", "Nehalem", "Unknown"}) {
    if (name == generic) return true;
  }
  return false;
}

const char* preferred_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  return nullptr;
}

}  // namespace

void configure_blas() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user decided
  const std::string current = openblas_get_corename();
  const char* wanted = preferred_core();
  if (wanted == nullptr || !is_generic_core(current)) return;
  setenv("OPENBLAS_CORETYPE", wanted, /*overwrite=*/0);
  gotoblas = nullptr;  // makes the initialiser choose again, now honouring the variable
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");  // child processes make their own choice
}

namespace {
std::mutex reserve_mutex;
int reserved_callers = 0;
}  // namespace

void reserve_blas_buffers(int callers) {
  if (address_space_limit() == 0) return;
  std::lock_guard<std::mutex> lock(reserve_mutex);
  if (callers <= reserved_callers) return;
  // Held all at once, so that each is a buffer of its own; freed, they stay mapped in the table.
  std::vector<void*> buffers;
  for (int i = 0; i < callers; ++i) buffers.push_back(blas_memory_alloc(0));
  for (void* buffer : buffers) blas_memory_free(buffer);
  reserved_callers = callers;
}

int reserved_blas_buffers() {
  std::lock_guard<std::mutex> lock(reserve_mutex);
  return reserved_callers;
}

std::string blas_core_name() {
  return openblas_get_corename();
}

}  // namespace gradus::backend::cpu
