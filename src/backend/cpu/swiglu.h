// The SwiGLU's elementwise loops, silu(gate) * up and its backward, on float32: an AVX-512 copy
// (avx512_math.h) where the CPU has it, else the build's ISA. elementwise.cpp's BinaryOp::swiglu
// and swiglu.cpp's backward call them.
#pragma once

#include <cstdint>

namespace gradus::backend::cpu::swiglu {

// y[i] = gate[i] sigmoid(gate[i]) up[i].
void forward(const float* gate, const float* up, float* y, int64_t n);

// With s = sigmoid(gate): grad_up = g gate s, grad_gate = g up s (1 + gate (1 - s)).
void backward(const float* g, const float* gate, const float* up, float* grad_gate, float* grad_up,
              int64_t n);

}  // namespace gradus::backend::cpu::swiglu
