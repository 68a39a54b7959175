// The guide's stand-in for text (examples/guide/tensor_parallel.cpp, pipeline.cpp): windows of
// `context` tokens of the sequence 0, 1, ..., vocab - 1, 0, 1, ... (the next token is always
// predictable), starting at every offset.
#pragma once

#include <gradus/gradus.h>

#include <vector>

class CountingWindows : public gradus::data::Dataset {
 public:
  CountingWindows(int64_t size, int64_t context, int64_t vocab)
      : size_(size), context_(context), vocab_(vocab) {}
  int64_t size() const override { return size_; }
  gradus::data::Example get(int64_t index) const override {
    std::vector<double> x, y;
    for (int64_t t = 0; t < context_; ++t) {
      x.push_back(static_cast<double>((index + t) % vocab_));
      y.push_back(static_cast<double>((index + t + 1) % vocab_));
    }
    return {gradus::tensor(x, {context_}, {.dtype = gradus::DType::i64}),
            gradus::tensor(y, {context_}, {.dtype = gradus::DType::i64})};
  }

 private:
  int64_t size_, context_, vocab_;
};
