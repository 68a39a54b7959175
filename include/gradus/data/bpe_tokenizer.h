// Byte-level BPE tokenizer (GPT-2's), reading Hugging Face `tokenizers` files and giving the ids
// `tokenizers` gives (Tokenizer.encode(text, add_special_tokens=False).ids):
//   1. added tokens ("added_tokens" of tokenizer.json, e.g. "<|endoftext|>") are split out first,
//      as whole strings, leftmost-longest, in tokenizers' two passes (normalized: false, then
//      normalized: true) and with its single_word, lstrip and rstrip rules;
//   2. the rest is pre-tokenized with GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (PCRE2, JIT-compiled, UTF and Unicode properties; \s is Unicode White_Space, as in
//      tokenizers' Oniguruma), with add_prefix_space when the file asks for it;
//   3. each piece is mapped byte -> symbol (GPT-2's bytes_to_unicode) and merged by rank exactly
//      as tokenizers' BPE does (lowest rank first, leftmost first among equals), with a cache of
//      the pieces already seen.
// Any bytes, not only UTF-8: tokenizers takes Unicode strings only; here each maximal run of bytes
// that is not valid UTF-8 (PCRE2_MATCH_INVALID_UTF: no regex match includes them) is a piece of its
// own, so decode(encode(x)) == x for every byte string x when the vocabulary has all 256 byte
// symbols (any tokenizer trained with ByteLevel.alphabet(), GPT-2's included). On valid UTF-8 the
// ids are tokenizers', for characters that both Unicode tables know: \p{L} and \p{N} come from
// the PCRE2 library installed (10.42 in Debian 12: Unicode 14), tokenizers' Oniguruma may be newer,
// so a character assigned since (e.g. U+1C89, Unicode 16) can be split differently.
// Not supported (ValueError naming the file): other models (WordPiece, Unigram), other
// pre-tokenizers (Metaspace, Sequence, ...), normalizers, BPE dropout, continuing_subword_prefix,
// end_of_word_suffix. A post-processor is ignored: no template tokens (BOS/EOS) are added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradus::data {

class BpeTokenizer {
 public:
  // DIR/tokenizer.json when it exists, else DIR/vocab.json + DIR/merges.txt. IOError naming the
  // directory when it has neither.
  static BpeTokenizer from_dir(const std::string& dir);
  // A tokenizers tokenizer.json (merges as "a b" strings or [a, b] pairs). IOError when the file
  // cannot be read; ValueError naming the file and what is wrong with it.
  static BpeTokenizer from_tokenizer_json(const std::string& path);
  // GPT-2's files: vocab.json ({"token": id}) and merges.txt (a "#version" line, then one merge
  // "a b" per line, by rank). No added tokens, no prefix space.
  static BpeTokenizer from_vocab_merges(const std::string& vocab_json,
                                        const std::string& merges_txt);

  // The ids of `text` (any bytes; see above). Thread-safe: concurrent calls share nothing mutable.
  std::vector<uint32_t> encode(std::string_view text) const;
  // The same ids, computed on `threads` threads (0: the hardware's) for large texts: the text is
  // cut at offsets where cutting cannot change the result (next_cut) and the chunks are encoded
  // concurrently. Small texts, or texts with no such offset, are encoded on one thread.
  std::vector<uint32_t> encode_parallel(std::string_view text, int threads = 0) const;
  // encode_parallel in blocks of about `block_bytes` (cut as encode_parallel cuts): calls
  // sink(ids of the block, bytes of `text` encoded so far) after each block, in order, so a large
  // file is written as it is encoded, with bounded memory. The concatenated ids are encode(text)'s.
  using BlockSink = std::function<void(std::span<const uint32_t> ids, size_t bytes_done)>;
  void encode_blocks(std::string_view text, int threads, const BlockSink& sink,
                     size_t block_bytes = size_t{32} << 20) const;
  // The first offset b >= from (b > 0) at which encode(text[0, b)) followed by the encoding of
  // text[b, end) as the continuation of a piece equals encode(text); text.size() when there is
  // none. Such offsets follow a newline that is preceded and followed by a printable ASCII
  // character
  // ("word\nWord"): the regex always ends a piece there, and no added token can reach across (none
  // of them may contain a newline, none with lstrip may start there and none may end just before).
  size_t next_cut(std::string_view text, size_t from) const;

  // The bytes of the tokens: model tokens through GPT-2's unicode -> byte map (as the ByteLevel
  // decoder), added tokens as their text. Unlike tokenizers' decode, special tokens are kept and
  // bytes that are not valid UTF-8 are returned as they are (no U+FFFD). ValueError naming the
  // position for an id that is negative, >= vocab_size() or names no token.
  std::string decode(const std::vector<int64_t>& ids) const;
  // The largest id + 1, over the model's vocabulary and the added tokens.
  int64_t vocab_size() const;
  // The id of a token as the file spells it (model tokens in GPT-2's byte symbols, e.g. "Ġthe";
  // added tokens as their text), or nullopt.
  std::optional<uint32_t> token_to_id(std::string_view token) const;
  // The bytes id stands for (decode of that one id). ValueError as decode.
  std::string token_bytes(uint32_t id) const;
  // Number of merges (their ranks are 0 .. merges() - 1) and of added tokens.
  size_t merges() const;
  size_t added_tokens() const;
  // The file(s) this was read from.
  const std::string& source() const;

  struct Impl;

 private:
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable: copies share it
};

}  // namespace gradus::data
