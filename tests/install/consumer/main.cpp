// Links against the installed package and checks a small computation end to end, on whatever
// device gradus finds (the CPU on a machine without a GPU or without the CUDA libraries).
#include <gradus/core/cpu_kernels.h>
#include <gradus/core/cuda.h>
#include <gradus/gradus.h>

#include <cmath>
#include <cstdio>

int main() {
  gradus::Tensor x = gradus::tensor({1.0, 2.0, 3.0}).set_requires_grad();
  gradus::Tensor y = gradus::sum(gradus::mul(x, x));
  y.backward();
  const auto g = x.grad().to_vector<double>();
  const bool ok = std::abs(y.item() - 14.0) < 1e-6 && g[0] == 2.0 && g[1] == 4.0 && g[2] == 6.0;
  std::printf("consumer: CUDA backend %s; %d CUDA device(s); default device %s\n",
              gradus::cuda::backend_status().c_str(), gradus::cuda::device_count(),
              gradus::Device::best().str().c_str());
  const gradus::CpuKernelsInfo kernels = gradus::cpu_kernels_info();
  std::printf("consumer: CPU kernels %s from %s\n", kernels.isa.c_str(), kernels.path.c_str());
  std::printf("consumer: y=%g grad=[%g, %g, %g] %s\n", y.item(), g[0], g[1], g[2],
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
