// Text for language models: a character vocabulary, token arrays held in memory or memory-mapped
// from nanoGPT's .bin files (uint16 tokens, or uint32 for vocabularies above 65536 ids), the
// train/validation split, and a seeded sampler of random context windows whose position is one
// integer (checkpointable, resumes exactly).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::data {

// Byte-level vocabulary of the distinct bytes of a text, in byte order (nanoGPT's
// shakespeare_char builds the same one from its characters when the text is ASCII).
class CharVocab {
 public:
  CharVocab() = default;
  static CharVocab from_text(std::string_view text);
  // The vocabulary saved by to_string(): its bytes, in token order.
  static CharVocab from_string(std::string symbols);
  int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
  // ValueError naming the first byte (and its offset) that is not in the vocabulary.
  std::vector<uint16_t> encode(std::string_view text) const;
  // ValueError for a token >= size().
  std::string decode(const std::vector<int64_t>& tokens) const;
  const std::string& to_string() const { return symbols_; }

 private:
  std::string symbols_;
  int16_t index_[256] = {};  // byte -> token + 1 (0: absent)
};

// The width of a token file's ids: nanoGPT's uint16, or uint32 for vocabularies above 65536 ids.
enum class TokenWidth { u16 = 2, u32 = 4 };
// "uint16" / "uint32" -> the width; ValueError naming `name` otherwise.
TokenWidth parse_token_width(const std::string& name);

// A read-only run of uint16 or uint32 tokens: owned, or a view into a memory-mapped file. Slices
// share the owner, so a split keeps the mapping alive.
class TokenArray {
 public:
  TokenArray() = default;
  explicit TokenArray(std::vector<uint16_t> tokens);
  explicit TokenArray(std::vector<uint32_t> tokens);
  // Maps a nanoGPT .bin file (raw little-endian ids of `width`). IOError naming the file when it
  // cannot be opened or mapped, or its size is not a whole number of ids.
  static TokenArray map_file(const std::string& path, TokenWidth width = TokenWidth::u16);
  int64_t size() const { return size_; }
  TokenWidth width() const { return width_; }
  uint32_t operator[](int64_t i) const {
    return width_ == TokenWidth::u16 ? static_cast<const uint16_t*>(data_)[i]
                                     : static_cast<const uint32_t*>(data_)[i];
  }
  TokenArray slice(int64_t begin, int64_t end) const;
  // The largest token + 1 (0 when empty); scans the whole array.
  int64_t max_token_plus_one() const;

 private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  int64_t size_ = 0;
  TokenWidth width_ = TokenWidth::u16;
};

// train = the first 90% of the tokens, val = the last 10% (nanoGPT's split).
std::pair<TokenArray, TokenArray> split_train_val(const TokenArray& tokens,
                                                  double val_fraction = 0.1);

// Batches of `batch` windows of `context` tokens at random offsets: x = tokens[o, o + context),
// y = tokens[o + 1, o + context + 1] (int64 [batch, context] on `device`). Offsets of batch s are
// a function of (seed, s) only, so set_position(s) resumes a run exactly.
class ContextSampler {
 public:
  // ValueError when the array has no window of context + 1 tokens or batch/context < 1.
  ContextSampler(TokenArray tokens, int64_t context, int64_t batch, uint64_t seed);
  std::pair<Tensor, Tensor> next(Device device = Device::cpu());
  // The offsets next() would use now (for tests).
  std::vector<int64_t> offsets() const;
  int64_t position() const { return position_; }
  void set_position(int64_t batches_drawn) { position_ = batches_drawn; }

 private:
  TokenArray tokens_;
  int64_t context_, batch_;
  uint64_t seed_;
  int64_t position_ = 0;
};

}  // namespace gradus::data
