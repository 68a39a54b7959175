// Text data (gradus/data/text.h).
#include "gradus/data/text.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gradus/core/error.h"
#include "gradus/core/random.h"
#include "gradus/ops.h"

namespace gradus::data {

CharVocab CharVocab::from_text(std::string_view text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  std::string symbols;
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) symbols.push_back(static_cast<char>(b));
  }
  return from_string(std::move(symbols));
}

CharVocab CharVocab::from_string(std::string symbols) {
  CharVocab v;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const auto b = static_cast<unsigned char>(symbols[i]);
    GRADUS_CHECK(v.index_[b] == 0, ValueError, "CharVocab: byte ", static_cast<int>(b),
                 " appears twice in the vocabulary");
    v.index_[b] = static_cast<int16_t>(i + 1);
  }
  v.symbols_ = std::move(symbols);
  return v;
}

std::vector<uint16_t> CharVocab::encode(std::string_view text) const {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t t = index_[static_cast<unsigned char>(text[i])];
    GRADUS_CHECK(t != 0, ValueError, "CharVocab::encode: byte ",
                 static_cast<int>(static_cast<unsigned char>(text[i])), " at offset ", i,
                 " is not in the vocabulary of ", size(), " symbols");
    out[i] = static_cast<uint16_t>(t - 1);
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    GRADUS_CHECK(t >= 0 && t < size(), ValueError, "CharVocab::decode: token ", t,
                 " is outside the vocabulary of ", size(), " symbols");
    out.push_back(symbols_[static_cast<size_t>(t)]);
  }
  return out;
}

TokenWidth parse_token_width(const std::string& name) {
  if (name == "uint16") return TokenWidth::u16;
  if (name == "uint32") return TokenWidth::u32;
  throw ValueError("token width must be uint16 or uint32, got '" + name + "'");
}

namespace {

template <class T>
std::shared_ptr<const void> own(std::vector<T> tokens, const void*& data, int64_t& size) {
  auto owned = std::make_shared<std::vector<T>>(std::move(tokens));
  data = owned->data();
  size = static_cast<int64_t>(owned->size());
  return owned;
}

}  // namespace

// (In the bodies: data_ and size_ are initialised after owner_, which would undo own's writes.)
TokenArray::TokenArray(std::vector<uint16_t> tokens) {
  owner_ = own(std::move(tokens), data_, size_);
}

TokenArray::TokenArray(std::vector<uint32_t> tokens) : width_(TokenWidth::u32) {
  owner_ = own(std::move(tokens), data_, size_);
}

TokenArray TokenArray::map_file(const std::string& path, TokenWidth width) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GRADUS_CHECK(fd >= 0, IOError, "TokenArray: cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw IOError("TokenArray: cannot stat " + path + ": " + std::strerror(e));
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  const auto id_bytes = static_cast<size_t>(width);
  if (bytes % id_bytes != 0) {
    ::close(fd);
    throw IOError("TokenArray: " + path + " has " + std::to_string(bytes) +
                  " bytes, not a whole number of " +
                  (width == TokenWidth::u16 ? "uint16" : "uint32") + " tokens");
  }
  TokenArray a;
  a.width_ = width;
  if (bytes == 0) {
    ::close(fd);
    return a;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping stays valid
  GRADUS_CHECK(p != MAP_FAILED, IOError, "TokenArray: cannot map ", path, ": ", std::strerror(e));
  a.owner_ = std::shared_ptr<const void>(
      p, [bytes](const void* q) { ::munmap(const_cast<void*>(q), bytes); });
  a.data_ = p;
  a.size_ = static_cast<int64_t>(bytes / id_bytes);
  return a;
}

TokenArray TokenArray::slice(int64_t begin, int64_t end) const {
  GRADUS_CHECK(0 <= begin && begin <= end && end <= size_, ValueError, "TokenArray::slice: [",
               begin, ", ", end, ") is outside [0, ", size_, ")");
  TokenArray a;
  a.owner_ = owner_;
  a.width_ = width_;
  a.data_ = static_cast<const char*>(data_) + begin * static_cast<int64_t>(width_);
  a.size_ = end - begin;
  return a;
}

int64_t TokenArray::max_token_plus_one() const {
  if (size_ == 0) return 0;
  if (width_ == TokenWidth::u16) {
    const auto* p = static_cast<const uint16_t*>(data_);
    return int64_t{*std::max_element(p, p + size_)} + 1;
  }
  const auto* p = static_cast<const uint32_t*>(data_);
  return int64_t{*std::max_element(p, p + size_)} + 1;
}

std::pair<TokenArray, TokenArray> split_train_val(const TokenArray& tokens, double val_fraction) {
  GRADUS_CHECK(val_fraction > 0 && val_fraction < 1, ValueError,
               "split_train_val: val_fraction must be in (0, 1), got ", val_fraction);
  const auto n_train =
      static_cast<int64_t>(static_cast<double>(tokens.size()) * (1 - val_fraction));
  return {tokens.slice(0, n_train), tokens.slice(n_train, tokens.size())};
}

ContextSampler::ContextSampler(TokenArray tokens, int64_t context, int64_t batch, uint64_t seed)
    : tokens_(std::move(tokens)), context_(context), batch_(batch), seed_(seed) {
  GRADUS_CHECK(context >= 1 && batch >= 1, ValueError,
               "ContextSampler: context and batch must be positive, got ", context, " and ", batch);
  GRADUS_CHECK(tokens_.size() > context, ValueError, "ContextSampler: ", tokens_.size(),
               " tokens hold no window of context ", context, " + 1 (the target) tokens");
}

std::vector<int64_t> ContextSampler::offsets() const {
  // One Philox block per window, counter = position * batch + i: two words give 64 bits, reduced
  // modulo the number of windows (bias below 2^-40 for any text that fits in memory).
  const auto windows = static_cast<uint64_t>(tokens_.size() - context_);
  std::vector<int64_t> out(static_cast<size_t>(batch_));
  for (int64_t i = 0; i < batch_; ++i) {
    const auto w = philox4x32(static_cast<uint64_t>(position_ * batch_ + i), seed_);
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    out[static_cast<size_t>(i)] = static_cast<int64_t>(r % windows);
  }
  return out;
}

std::pair<Tensor, Tensor> ContextSampler::next(Device device) {
  const std::vector<int64_t> offs = offsets();
  std::vector<int64_t> x(static_cast<size_t>(batch_ * context_)), y(x.size());
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t o = offs[static_cast<size_t>(b)];
    for (int64_t t = 0; t < context_; ++t) {
      x[static_cast<size_t>(b * context_ + t)] = tokens_[o + t];
      y[static_cast<size_t>(b * context_ + t)] = tokens_[o + t + 1];
    }
  }
  ++position_;
  const TensorOptions opts{.dtype = DType::i64};
  return {from_vector<int64_t>(x, {batch_, context_}, opts).to(device),
          from_vector<int64_t>(y, {batch_, context_}, opts).to(device)};
}

}  // namespace gradus::data
