// Byte-level BPE as Hugging Face `tokenizers` runs it (gradus/data/bpe_tokenizer.h). The steps
// follow tokenizers' sources: AddedVocabulary::find_matches / extract_and_normalize (added
// tokens), pre_tokenizers::byte_level (GPT-2's regex and byte map) and models::bpe (Word::
// merge_all: a min-heap of (rank, position), stale entries skipped by their merged id).
#include "gradus/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "gradus/core/error.h"

namespace gradus::data {

namespace {

using nlohmann::json;

// ---- GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the others
// (controls, space, 0x7F-0xA0, 0xAD) for U+0100 + n in byte order.
struct ByteMap {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // every code point used is < 0x144
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.cp_to_byte.fill(-1);
    auto direct = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    };
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      m.byte_to_cp[b] = direct(b) ? static_cast<uint32_t>(b) : 256 + n++;
      m.cp_to_byte[m.byte_to_cp[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The length of the valid UTF-8 character at s[i] (and its code point), or 0 when the bytes there
// are not one (overlong forms, surrogates and code points past U+10FFFF are not).
size_t utf8_char(std::string_view s, size_t i, uint32_t* cp) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = at(i);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((at(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (at(i + k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

// The valid UTF-8 character that ends at s[end) (its start), or nullopt.
std::optional<std::pair<size_t, uint32_t>> utf8_char_before(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 4 && len <= end; ++len) {
    uint32_t cp;
    if (utf8_char(s, end - len, &cp) == len) return std::make_pair(end - len, cp);
  }
  return std::nullopt;
}

// Unicode's White_Space (Rust's char::is_whitespace and regex \s, Oniguruma's \s).
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}
// The same set as a PCRE2 class body (PCRE2's own \s under UCP also has U+180E).
constexpr const char* kWhiteSpaceClass =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string gpt2_pattern() {
  const std::string ws = kWhiteSpaceClass;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws + "\\p{L}\\p{N}]+|[" + ws +
         "]+(?![^" + ws + "])|[" + ws + "]+";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h | 1;  // 0 marks an empty cache slot
}

// (left id, right id) -> (rank, merged id): open addressing, a quarter full at most.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    uint32_t id = 0;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 4 * n) cap *= 2;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // Overwrites: the last of duplicate merges wins, as in tokenizers' hash map.
  void put(uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
    const uint64_t key = (uint64_t{a} << 32) | b;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == key) {
        if (slots_[i].key == kEmpty) ++size_;
        slots_[i] = Entry{key, rank, id};
        return;
      }
    }
  }
  const Entry* find(uint32_t a, uint32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = (uint64_t{a} << 32) | b;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Pieces already merged -> their ids (per thread). Stops growing at kMaxEntries, like tokenizers'
// bounded cache; pieces of kMaxWordBytes or more are not kept.
class WordCache {
 public:
  static constexpr size_t kMaxEntries = size_t{1} << 20;
  static constexpr size_t kMaxWordBytes = 256;

  const uint32_t* find(std::string_view w, uint64_t h, size_t* n) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == w.size() &&
          std::memcmp(keys_.data() + s.key_off, w.data(), w.size()) == 0) {
        *n = s.ids_len;
        return ids_.data() + s.ids_off;
      }
    }
  }
  void insert(std::string_view w, uint64_t h, const uint32_t* ids, size_t n) {
    if (count_ >= kMaxEntries) return;
    if (2 * (count_ + 1) > slots_.size()) grow();
    size_t i = h & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(w.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(w);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 4096 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  std::string keys_;
  std::vector<uint32_t> ids_;
};

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// The added tokens of one pass, by first byte, longest first (leftmost-longest matching).
struct AddedSet {
  std::array<std::vector<const AddedToken*>, 256> by_first;
  std::array<bool, 256> first{};
  int only_first = -1;  // the one first byte of all the tokens, if they share one
  bool empty = true;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GRADUS_CHECK(in, IOError, "BpeTokenizer: cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  GRADUS_CHECK(!in.bad(), IOError, "BpeTokenizer: cannot read ", path);
  return os.str();
}

json parse_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ValueError(path + ": not valid JSON: " + e.what());
  }
}

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

struct Options {
  bool add_prefix_space = false;
  bool use_regex = true;
  // The pre-tokenizer's regex in PCRE2's syntax: GPT-2's when empty, else a Split's (Llama 3).
  std::string pattern;
  // Whether a newline between two printable ASCII characters always ends a piece of `pattern`
  // (next_cut may cut the text there): true for GPT-2's and the Llama 3 / Qwen 2 patterns.
  bool newline_ends_piece = true;
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::optional<std::string> unk_token;
};

}  // namespace

struct BpeTokenizer::Impl {
  std::string source;
  Options options;
  // By id: the bytes a token stands for, and whether the id names a token.
  std::vector<std::string> bytes;
  std::vector<uint8_t> present;
  std::unordered_map<std::string, uint32_t> model_vocab;  // as spelled in the file
  std::unordered_map<std::string, uint32_t> names;        // model vocab, then added tokens
  std::array<int64_t, 256> byte_id{};                     // -1: the byte's symbol is not a token
  std::array<std::vector<uint32_t>, 256> fallback_ids;    // byte_fallback's "<0xAB>" tokens
  int64_t unk_id = -1;                                    // -2: unk_token not in the vocabulary
  std::unordered_map<std::string, uint32_t> whole_words;  // ignore_merges: bytes -> id
  MergeTable merges;
  size_t merge_count = 0;
  std::vector<AddedToken> added;
  AddedSet raw_set, normalized_set;  // tokenizers' two passes: normalized false, then true
  pcre2_code* re = nullptr;
  bool jit = false;
  pcre2_code* word_re = nullptr;  // Rust's \w, for single_word tokens
  bool cuts = false;
  std::array<bool, 256> added_last{};    // last byte of some added token
  std::array<bool, 256> lstrip_first{};  // first byte of some lstrip token

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    pcre2_code_free(re);
    pcre2_code_free(word_re);
  }
};

namespace {

using Impl = BpeTokenizer::Impl;

pcre2_code* compile(const std::string& pattern, uint32_t extra, const std::string& source) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | extra, &err,
                                   &offset, nullptr);
  GRADUS_CHECK(code != nullptr, ValueError, source, ": cannot compile the pre-tokenizer's regex (",
               pcre2_message(err), " at offset ", offset, ")");
  return code;
}

// Everything a thread needs to encode: PCRE2's match data and JIT stack, the word cache and the
// merge scratch. Not shared between threads.
class Encoder {
 public:
  explicit Encoder(const Impl& t) : t_(t) {
    match_ = pcre2_match_data_create_from_pattern(t.re, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    stack_ = pcre2_jit_stack_create(32 << 10, 16 << 20, nullptr);
    if (match_ == nullptr || context_ == nullptr || stack_ == nullptr) {
      release();
      throw std::bad_alloc();
    }
    pcre2_jit_stack_assign(context_, nullptr, stack_);
  }
  ~Encoder() { release(); }
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Appends the ids of `text`; continuation: the text starts inside a piece of a larger text cut
  // at next_cut (so no prefix space is added before it).
  void encode(std::string_view text, bool continuation, std::vector<uint32_t>& out) {
    if (text.empty()) return;
    if (t_.raw_set.empty && t_.normalized_set.empty) {
      encode_segment(text, !continuation, out);
      return;
    }
    pieces_.clear();
    split_added(text, 0, t_.raw_set, pieces_);
    for (const Piece& p : pieces_) {
      if (p.id >= 0) {
        out.push_back(static_cast<uint32_t>(p.id));
        continue;
      }
      second_.clear();
      split_added(text.substr(p.begin, p.end - p.begin), p.begin, t_.normalized_set, second_);
      for (const Piece& q : second_) {
        if (q.id >= 0) {
          out.push_back(static_cast<uint32_t>(q.id));
        } else if (q.end > q.begin) {
          encode_segment(text.substr(q.begin, q.end - q.begin), !(continuation && q.begin == 0),
                         out);
        }
      }
    }
  }

 private:
  struct Piece {
    size_t begin, end;
    int64_t id;  // < 0: text
  };
  struct Symbol {
    uint32_t c;
    int32_t prev, next;
    uint32_t len;
  };
  struct Merge {
    uint32_t rank, pos, id;
  };

  void release() {
    if (match_ != nullptr) pcre2_match_data_free(match_);
    if (context_ != nullptr) pcre2_match_context_free(context_);
    if (stack_ != nullptr) pcre2_jit_stack_free(stack_);
    match_ = nullptr, context_ = nullptr, stack_ = nullptr;
  }

  bool is_word_char(std::string_view s, size_t begin, size_t len) {
    if (t_.word_re == nullptr) return false;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(t_.word_re, nullptr);
    const int rc = pcre2_match(t_.word_re, reinterpret_cast<PCRE2_SPTR>(s.data() + begin), len, 0,
                               0, md, nullptr);
    pcre2_match_data_free(md);
    return rc > 0;
  }
  bool ends_with_word(std::string_view s, size_t end) {
    const auto c = utf8_char_before(s, end);
    return c && is_word_char(s, c->first, end - c->first);
  }
  bool starts_with_word(std::string_view s, size_t begin) {
    uint32_t cp;
    const size_t len = utf8_char(s, begin, &cp);
    return len > 0 && is_word_char(s, begin, len);
  }

  // tokenizers' AddedVocabulary::find_matches on s (at offset base of the text): the matches of the
  // set's tokens, leftmost-longest and not overlapping, each with its single_word, lstrip and
  // rstrip rules, and the text between them.
  void split_added(std::string_view s, size_t base, const AddedSet& set, std::vector<Piece>& out) {
    const size_t n = s.size();
    if (set.empty) {
      out.push_back(Piece{base, base + n, -1});
      return;
    }
    size_t start_offset = 0;
    size_t search = 0;
    while (search < n) {
      // The leftmost position where a token starts, and the longest token there.
      const AddedToken* tok = nullptr;
      size_t at = search;
      for (; at < n && tok == nullptr; ++at) {
        if (set.only_first >= 0) {  // one first byte (e.g. '<'): memchr to it
          const void* p = std::memchr(s.data() + at, set.only_first, n - at);
          if (p == nullptr) break;
          at = static_cast<size_t>(static_cast<const char*>(p) - s.data());
        }
        const auto b = static_cast<uint8_t>(s[at]);
        if (!set.first[b]) continue;
        for (const AddedToken* cand : set.by_first[b]) {
          if (s.compare(at, cand->content.size(), cand->content) == 0) {
            tok = cand;
            break;
          }
        }
        if (tok != nullptr) break;
      }
      if (tok == nullptr) break;
      size_t start = at, stop = at + tok->content.size();
      search = stop;
      if (tok->single_word) {
        const bool start_space = start == 0 || !ends_with_word(s, start);
        const bool stop_space = stop == n || !starts_with_word(s, stop);
        if (!start_space || !stop_space) continue;
      }
      if (tok->lstrip) {
        size_t left = start;
        while (left > 0) {
          const auto c = utf8_char_before(s, left);
          if (!c || !is_white_space(c->second)) break;
          left = c->first;
        }
        start = std::max(left, start_offset);
      }
      if (tok->rstrip) {
        uint32_t cp;
        size_t len;
        while (stop < n && (len = utf8_char(s, stop, &cp)) > 0 && is_white_space(cp)) stop += len;
      }
      if (start_offset < start) out.push_back(Piece{base + start_offset, base + start, -1});
      out.push_back(Piece{base + start, base + stop, static_cast<int64_t>(tok->id)});
      start_offset = stop;
    }
    if (start_offset != n) out.push_back(Piece{base + start_offset, base + n, -1});
  }

  // One piece of text between added tokens: the prefix space, the regex, BPE on each match.
  void encode_segment(std::string_view s, bool segment_start, std::vector<uint32_t>& out) {
    if (t_.options.add_prefix_space && segment_start && s.front() != ' ') {
      prefixed_.assign(1, ' ');
      prefixed_.append(s);
      s = prefixed_;
    }
    if (!t_.options.use_regex) {
      encode_word(s, out);
      return;
    }
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    const size_t n = s.size();
    size_t pos = 0;
    while (pos < n) {
      const int rc = t_.jit ? pcre2_jit_match(t_.re, subject, n, pos, 0, match_, context_)
                            : pcre2_match(t_.re, subject, n, pos, 0, match_, context_);
      if (rc == PCRE2_ERROR_NOMATCH) {
        encode_word(s.substr(pos), out);  // bytes that are not UTF-8
        return;
      }
      GRADUS_CHECK(rc > 0, ValueError, "BpeTokenizer (", t_.source,
                   "): the pre-tokenizer's regex failed at byte ", pos, " of a piece of ", n,
                   " bytes: ", pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
      const size_t begin = ov[0], end = std::max<size_t>(ov[1], ov[0] + 1);
      if (begin > pos) encode_word(s.substr(pos, begin - pos), out);  // not UTF-8
      encode_word(s.substr(begin, end - begin), out);
      pos = end;
    }
  }

  void encode_word(std::string_view w, std::vector<uint32_t>& out) {
    if (w.size() == 1) {
      const int64_t id = t_.byte_id[static_cast<uint8_t>(w[0])];
      if (id >= 0) {
        out.push_back(static_cast<uint32_t>(id));
        return;
      }
    }
    if (t_.options.ignore_merges) {
      const auto it = t_.whole_words.find(std::string(w));
      if (it != t_.whole_words.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = w.size() < WordCache::kMaxWordBytes;
    uint64_t h = 0;
    if (cacheable) {
      h = hash_bytes(w.data(), w.size());
      size_t n = 0;
      if (const uint32_t* ids = cache_.find(w, h, &n)) {
        out.insert(out.end(), ids, ids + n);
        return;
      }
    }
    const size_t first = out.size();
    merge_word(w, out);
    if (cacheable) cache_.insert(w, h, out.data() + first, out.size() - first);
  }

  void add_symbol(uint32_t c, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols_.size());
    if (n > 0) symbols_.back().next = n;
    symbols_.push_back(Symbol{c, n - 1, -1, len});
  }

  // tokenizers' BPE::merge_word + Word::merge_all (without dropout).
  void merge_word(std::string_view w, std::vector<uint32_t>& out) {
    symbols_.clear();
    int64_t unk = -1;  // pending unknown symbol's id
    uint32_t unk_len = 0;
    for (const char ch : w) {
      const auto b = static_cast<uint8_t>(ch);
      if (t_.byte_id[b] >= 0) {
        if (unk >= 0) add_symbol(static_cast<uint32_t>(unk), unk_len), unk = -1;
        add_symbol(static_cast<uint32_t>(t_.byte_id[b]), 1);
        continue;
      }
      if (t_.options.byte_fallback && !t_.fallback_ids[b].empty()) {
        for (const uint32_t id : t_.fallback_ids[b]) add_symbol(id, 1);
        continue;
      }
      if (t_.options.unk_token) {
        GRADUS_CHECK(t_.unk_id >= 0, ValueError, "BpeTokenizer (", t_.source, "): unk_token '",
                     *t_.options.unk_token, "' is not in the vocabulary");
        if (unk >= 0 && t_.options.fuse_unk) {
          unk_len += 1;
        } else {
          if (unk >= 0) add_symbol(static_cast<uint32_t>(unk), unk_len);
          unk = t_.unk_id, unk_len = 1;
        }
      }
      // (No unk_token: the byte is dropped, as tokenizers does.)
    }
    if (unk >= 0) add_symbol(static_cast<uint32_t>(unk), unk_len);

    const auto later = [](const Merge& a, const Merge& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    heap_.clear();
    for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
      if (const auto* m = t_.merges.find(symbols_[i].c, symbols_[i + 1].c)) {
        heap_.push_back(Merge{m->rank, static_cast<uint32_t>(i), m->id});
      }
    }
    std::make_heap(heap_.begin(), heap_.end(), later);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const Merge top = heap_.back();
      heap_.pop_back();
      Symbol& cur = symbols_[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const Symbol right = symbols_[static_cast<size_t>(cur.next)];
      const auto* now = t_.merges.find(cur.c, right.c);
      if (now == nullptr || now->id != top.id) continue;  // a stale entry
      symbols_[static_cast<size_t>(cur.next)].len = 0;
      cur.c = top.id;
      cur.len += right.len;
      cur.next = right.next;
      if (right.next >= 0)
        symbols_[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
      const Symbol current = cur;
      if (current.prev >= 0) {
        if (const auto* m =
                t_.merges.find(symbols_[static_cast<size_t>(current.prev)].c, current.c)) {
          heap_.push_back(Merge{m->rank, static_cast<uint32_t>(current.prev), m->id});
          std::push_heap(heap_.begin(), heap_.end(), later);
        }
      }
      if (current.next >= 0) {
        if (const auto* m =
                t_.merges.find(current.c, symbols_[static_cast<size_t>(current.next)].c)) {
          heap_.push_back(Merge{m->rank, top.pos, m->id});
          std::push_heap(heap_.begin(), heap_.end(), later);
        }
      }
    }
    for (const Symbol& s : symbols_) {
      if (s.len != 0) out.push_back(s.c);
    }
  }

  const Impl& t_;
  pcre2_match_data* match_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
  WordCache cache_;
  std::vector<Symbol> symbols_;
  std::vector<Merge> heap_;
  std::vector<Piece> pieces_, second_;
  std::string prefixed_;
};

// The bytes a model token stands for: its symbols through GPT-2's map, or (a token with other
// characters, as the ByteLevel decoder falls back to) its own UTF-8.
std::optional<std::string> symbols_to_bytes(const std::string& token) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    uint32_t cp;
    const size_t len = utf8_char(token, i, &cp);
    if (len == 0 || cp >= map.cp_to_byte.size() || map.cp_to_byte[cp] < 0) return std::nullopt;
    out += static_cast<char>(map.cp_to_byte[cp]);
    i += len;
  }
  return out;
}

std::shared_ptr<const Impl> build(std::string source, const Options& options,
                                  std::vector<std::pair<std::string, uint32_t>> vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  std::vector<AddedToken> added) {
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.source = std::move(source);
  t.options = options;
  GRADUS_CHECK(!vocab.empty(), ValueError, t.source, ": the vocabulary is empty");
  uint64_t max_id = 0;
  for (const auto& [token, id] : vocab) max_id = std::max<uint64_t>(max_id, id);
  for (const AddedToken& a : added) max_id = std::max<uint64_t>(max_id, a.id);
  const uint64_t entries = vocab.size() + added.size();
  GRADUS_CHECK(max_id < 4 * entries + (1 << 20), ValueError, t.source, ": token id ", max_id,
               " is far beyond the ", entries, " tokens of the vocabulary (ids must be dense)");
  t.bytes.resize(max_id + 1);
  t.present.assign(max_id + 1, 0);
  t.model_vocab.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    std::optional<std::string> b = symbols_to_bytes(token);
    if (b && options.ignore_merges) t.whole_words.emplace(*b, id);
    t.bytes[id] = b ? std::move(*b) : token;
    t.present[id] = 1;
    t.model_vocab[token] = id;
  }
  t.names = t.model_vocab;

  const ByteMap& map = byte_map();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, map.byte_to_cp[b]);
    const auto it = t.model_vocab.find(symbol);
    t.byte_id[b] = it == t.model_vocab.end() ? -1 : static_cast<int64_t>(it->second);
    if (options.byte_fallback) {
      std::vector<uint32_t> ids;
      for (const char c : symbol) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>",
                      static_cast<unsigned>(static_cast<uint8_t>(c)));
        const auto f = t.model_vocab.find(name);
        if (f == t.model_vocab.end()) break;
        ids.push_back(f->second);
      }
      if (ids.size() == symbol.size()) t.fallback_ids[b] = std::move(ids);
    }
  }
  if (options.unk_token) {
    const auto it = t.model_vocab.find(*options.unk_token);
    t.unk_id = it == t.model_vocab.end() ? -2 : static_cast<int64_t>(it->second);
  }

  t.merges.reserve(merges.size());
  t.merge_count = merges.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto lookup = [&](const std::string& token) {
      const auto it = t.model_vocab.find(token);
      GRADUS_CHECK(it != t.model_vocab.end(), ValueError, t.source, ": merge ", rank + 1, " ('", a,
                   "' '", b, "'): '", token, "' is not in the vocabulary");
      return it->second;
    };
    const uint32_t a_id = lookup(a), b_id = lookup(b), merged = lookup(a + b);
    t.merges.put(a_id, b_id, static_cast<uint32_t>(rank), merged);
  }

  t.added = std::move(added);
  bool newline_in_added = false;
  bool single_word = false;
  for (const AddedToken& a : t.added) {
    t.bytes[a.id] = a.content;
    t.present[a.id] = 1;
    t.names[a.content] = a.id;
    newline_in_added |= a.content.find('\n') != std::string::npos;
    single_word |= a.single_word;
    t.added_last[static_cast<uint8_t>(a.content.back())] = true;
    if (a.lstrip) t.lstrip_first[static_cast<uint8_t>(a.content.front())] = true;
  }
  for (const AddedToken& a : t.added) {
    AddedSet& set = a.normalized ? t.normalized_set : t.raw_set;
    const auto b = static_cast<uint8_t>(a.content.front());
    set.by_first[b].push_back(&a);
    set.first[b] = true;
    set.empty = false;
  }
  for (AddedSet* set : {&t.raw_set, &t.normalized_set}) {
    if (std::count(set->first.begin(), set->first.end(), true) == 1) {
      set->only_first = static_cast<int>(std::find(set->first.begin(), set->first.end(), true) -
                                         set->first.begin());
    }
    for (auto& bucket : set->by_first) {
      std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken* x, const AddedToken* y) {
        return x->content.size() > y->content.size();
      });
    }
  }

  t.re = compile(options.pattern.empty() ? gpt2_pattern() : options.pattern, 0, t.source);
  t.jit = pcre2_jit_compile(t.re, PCRE2_JIT_COMPLETE) == 0;
  // Rust's regex \w (tokenizers' single_word test): Alphabetic, marks, decimal digits, connector
  // punctuation and the joiners. (PCRE2's \w is letters, numbers and '_'.)
  if (single_word) {
    t.word_re = compile("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", PCRE2_ANCHORED,
                        t.source);
  }
  t.cuts = options.use_regex && options.newline_ends_piece && !newline_in_added;
  return impl;
}

const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string type_of(const json& object) {
  const json* type = member(object, "type");
  return type != nullptr && type->is_string() ? type->get<std::string>() : std::string("?");
}

template <typename T>
T get_or(const json& object, const char* key, T fallback, const std::string& path,
         const char* where) {
  const json* v = member(object, key);
  if (v == nullptr || v->is_null()) return fallback;
  try {
    return v->get<T>();
  } catch (const json::exception&) {
    throw ValueError(path + ": " + where + "." + key + " has the wrong type: " + v->dump());
  }
}

// Llama 3's and Qwen 2's Split patterns (Oniguruma syntax, as tokenizer.json holds them).
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The Split of a pre_tokenizer that is Sequence[Split, ByteLevel(use_regex false)]; nullptr for
// any other pre_tokenizer.
const json* split_then_byte_level(const json* pre) {
  if (pre == nullptr || type_of(*pre) != "Sequence") return nullptr;
  const json* list = member(*pre, "pretokenizers");
  if (list == nullptr || !list->is_array() || list->size() != 2) return nullptr;
  const json &split = (*list)[0], &byte_level = (*list)[1];
  const json* use_regex = member(byte_level, "use_regex");
  if (type_of(split) != "Split" || type_of(byte_level) != "ByteLevel" || use_regex == nullptr ||
      !use_regex->is_boolean() || use_regex->get<bool>()) {
    return nullptr;
  }
  return &split;
}

// A Split's regex as tokenizer.json holds it (Oniguruma's syntax). ValueError naming what is not
// supported (a literal pattern, other behaviours, inversion).
std::string split_regex(const json& split, const std::string& path) {
  const std::string behavior = get_or<std::string>(split, "behavior", "", path, "Split");
  const bool invert = get_or<bool>(split, "invert", false, path, "Split");
  GRADUS_CHECK(behavior == "Isolated" && !invert, ValueError, path,
               ": a Split pre-tokenizer with behavior '", behavior, "'", invert ? " inverted" : "",
               " is not supported (Isolated, not inverted, as Llama 3's)");
  const json* pattern = member(split, "pattern");
  const json* regex = pattern != nullptr ? member(*pattern, "Regex") : nullptr;
  GRADUS_CHECK(regex != nullptr && regex->is_string(), ValueError, path,
               ": a Split pre-tokenizer needs a {\"Regex\": ...} pattern, got ",
               pattern != nullptr ? pattern->dump() : std::string("none"));
  return regex->get<std::string>();
}

// An Oniguruma regex as PCRE2 compiles it the way tokenizers matches it: \s and \S as
// Unicode's White_Space (PCRE2's \s under UCP also has U+180E).
std::string onig_to_pcre2(const std::string& in, const std::string& path) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\\' && i + 1 < in.size()) {
      const char e = in[++i];
      if (e == 's' || e == 'S') {
        GRADUS_CHECK(e == 's' || !in_class, ValueError, path,
                     ": \\S inside a character class of the Split regex is not supported");
        if (!in_class) out.append(e == 's' ? "[" : "[^");
        out.append(kWhiteSpaceClass);
        if (!in_class) out.push_back(']');
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < in.size() && in[i + 1] == '^') out += in[++i];
      if (i + 1 < in.size() && in[i + 1] == ']') out += in[++i];  // a literal ] first
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
  const json j = parse_json(path);
  GRADUS_CHECK(j.is_object(), ValueError, path, ": not a tokenizer.json (not a JSON object)");
  const json* model = member(j, "model");
  GRADUS_CHECK(model != nullptr && model->is_object(), ValueError, path,
               ": not a tokenizer.json (no \"model\" object)");
  if (member(*model, "type") != nullptr) {
    const std::string type = type_of(*model);
    GRADUS_CHECK(type == "BPE", ValueError, path, ": model type '", type,
                 "' is not supported: BpeTokenizer reads byte-level BPE tokenizers (\"type\": "
                 "\"BPE\", as GPT-2's)");
  }
  if (const json* norm = member(j, "normalizer"); norm != nullptr && !norm->is_null()) {
    throw ValueError(path + ": normalizer '" + type_of(*norm) +
                     "' is not supported: a GPT-2 style byte-level BPE has none (null)");
  }
  const json* pre = member(j, "pre_tokenizer");
  Options o;
  // Llama 3's (and Qwen 2's) layout: Sequence[Split(regex, Isolated), ByteLevel(use_regex
  // false)] is the ByteLevel pre-tokenizer with the Split's regex in place of GPT-2's.
  if (const json* split = split_then_byte_level(pre)) {
    const std::string regex = split_regex(*split, path);
    o.pattern = onig_to_pcre2(regex, path);
    o.newline_ends_piece = regex == kLlama3Pattern || regex == kQwen2Pattern;
    pre = &(*pre)["pretokenizers"][1];
    GRADUS_CHECK(!get_or<bool>(*pre, "add_prefix_space", false, path, "pre_tokenizer"), ValueError,
                 path,
                 ": a ByteLevel pre-tokenizer with add_prefix_space after a Split is not "
                 "supported (it prefixes every piece)");
  }
  if (pre == nullptr || pre->is_null() || type_of(*pre) != "ByteLevel") {
    std::string what = "none";
    if (pre != nullptr && !pre->is_null())
      what.assign(1, '\'').append(type_of(*pre)).append(1, '\'');
    if (pre != nullptr && type_of(*pre) == "Sequence") {
      what += " (";
      for (const json& p : pre->value("pretokenizers", json::array())) {
        what += (what.back() == '(' ? "" : ", ") + type_of(p);
      }
      what += ")";
    }
    throw ValueError(path + ": pre_tokenizer " + what +
                     " is not supported: a byte-level BPE needs the ByteLevel pre-tokenizer "
                     "(GPT-2's regex and byte map), or a Sequence of a Split (a regex, Isolated) "
                     "and a ByteLevel without its regex (Llama 3's)");
  }
  o.add_prefix_space = get_or<bool>(*pre, "add_prefix_space", true, path, "pre_tokenizer");
  o.use_regex = get_or<bool>(*pre, "use_regex", true, path, "pre_tokenizer") || !o.pattern.empty();
  const double dropout = get_or<double>(*model, "dropout", 0.0, path, "model");
  GRADUS_CHECK(dropout == 0.0, ValueError, path, ": BPE dropout (", dropout,
               ") is not supported: it makes encoding random");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string v = get_or<std::string>(*model, key, "", path, "model");
    GRADUS_CHECK(v.empty(), ValueError, path, ": model.", key, " ('", v,
                 "') is not supported by a byte-level BPE");
  }
  o.ignore_merges = get_or<bool>(*model, "ignore_merges", false, path, "model");
  o.byte_fallback = get_or<bool>(*model, "byte_fallback", false, path, "model");
  o.fuse_unk = get_or<bool>(*model, "fuse_unk", false, path, "model");
  if (const json* unk = member(*model, "unk_token"); unk != nullptr && unk->is_string()) {
    o.unk_token = unk->get<std::string>();
  }

  const json* vocab = member(*model, "vocab");
  GRADUS_CHECK(vocab != nullptr && vocab->is_object(), ValueError, path,
               ": the model has no \"vocab\" object");
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    GRADUS_CHECK(id.is_number_unsigned(), ValueError, path, ": vocab entry '", token, "' has id ",
                 id.dump(), " (not an unsigned integer)");
    entries.emplace_back(token, id.get<uint32_t>());
  }
  const json* merges = member(*model, "merges");
  GRADUS_CHECK(merges != nullptr && merges->is_array(), ValueError, path,
               ": the model has no \"merges\" array (a BPE model needs its merges)");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    if (m.is_string()) {  // "a b": tokenizers before 0.20
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      GRADUS_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   ValueError, path, ": merge ", i + 1, " ('", s,
                   "') is not two tokens separated by one space");
      pairs.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pairs.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw ValueError(path + ": merge " + std::to_string(i + 1) + " (" + m.dump() +
                       ") is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  std::vector<AddedToken> added;
  if (const json* list = member(j, "added_tokens"); list != nullptr && list->is_array()) {
    for (const json& a : *list) {
      const json* content = member(a, "content");
      const json* id = member(a, "id");
      GRADUS_CHECK(
          content != nullptr && content->is_string() && id != nullptr && id->is_number_unsigned(),
          ValueError, path, ": added token ", a.dump(),
          " needs a string \"content\" and an unsigned \"id\"");
      AddedToken t;
      t.content = content->get<std::string>();
      if (t.content.empty()) continue;  // tokenizers ignores empty added tokens
      t.id = id->get<uint32_t>();
      t.single_word = get_or<bool>(a, "single_word", false, path, "added_tokens[]");
      t.lstrip = get_or<bool>(a, "lstrip", false, path, "added_tokens[]");
      t.rstrip = get_or<bool>(a, "rstrip", false, path, "added_tokens[]");
      t.normalized = get_or<bool>(a, "normalized", false, path, "added_tokens[]");
      added.push_back(std::move(t));
    }
  }
  return BpeTokenizer(build(path, o, std::move(entries), pairs, std::move(added)));
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json,
                                             const std::string& merges_txt) {
  const json vocab = parse_json(vocab_json);
  GRADUS_CHECK(vocab.is_object(), ValueError, vocab_json,
               ": not a vocabulary (a JSON object of token -> id)");
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    GRADUS_CHECK(id.is_number_unsigned(), ValueError, vocab_json, ": entry '", token, "' has id ",
                 id.dump(), " (not an unsigned integer)");
    entries.emplace_back(token, id.get<uint32_t>());
  }
  const std::string text = read_file(merges_txt);
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    GRADUS_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                 ValueError, merges_txt, ":", line_no,
                 ": a merge is two tokens separated by one "
                 "space, got '",
                 line, "'");
    pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  GRADUS_CHECK(!pairs.empty(), ValueError, merges_txt, ": no merges");
  return BpeTokenizer(
      build(vocab_json + " + " + merges_txt, Options{}, std::move(entries), pairs, {}));
}

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  if (is_file(dir)) return from_tokenizer_json(dir);
  struct stat st;
  GRADUS_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), IOError,
               "BpeTokenizer: no tokenizer directory or tokenizer.json at ", dir);
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  if (is_file(base + "tokenizer.json")) return from_tokenizer_json(base + "tokenizer.json");
  if (is_file(base + "vocab.json") && is_file(base + "merges.txt")) {
    return from_vocab_merges(base + "vocab.json", base + "merges.txt");
  }
  throw IOError("BpeTokenizer: " + dir +
                " has neither tokenizer.json nor vocab.json + merges.txt (GPT-2's files)");
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 16);
  Encoder(*impl_).encode(text, false, out);
  return out;
}

size_t BpeTokenizer::next_cut(std::string_view text, size_t from) const {
  const Impl& t = *impl_;
  const size_t n = text.size();
  if (!t.cuts || from >= n) return n;
  const auto graph = [](char c) { return c > ' ' && c < 0x7F; };
  size_t i = std::max<size_t>(from, 2) - 1;  // a newline at i gives the offset i + 1 >= from
  while (i + 1 < n) {
    const void* p = std::memchr(text.data() + i, '\n', n - 1 - i);
    if (p == nullptr) return n;
    i = static_cast<size_t>(static_cast<const char*>(p) - text.data());
    const char before = text[i - 1], after = text[i + 1];
    if (graph(before) && graph(after) && !t.added_last[static_cast<uint8_t>(before)] &&
        !t.lstrip_first[static_cast<uint8_t>(after)]) {
      return i + 1;
    }
    ++i;
  }
  return n;
}

namespace {

// Encodes text[begin, end) on up to `threads` threads (encoders[k] is thread k's), cut at
// next_cut into chunks of about a quarter of a thread's share (at least 64 KiB).
void encode_range(const BpeTokenizer& tok, const Impl& impl, std::string_view text, size_t begin,
                  size_t end, int threads, std::vector<std::unique_ptr<Encoder>>& encoders,
                  std::vector<uint32_t>& out) {
  out.clear();
  const size_t len = end - begin;
  const size_t target = std::max<size_t>(len / (static_cast<size_t>(threads) * 4), 64 << 10);
  std::vector<size_t> bounds{begin};
  if (threads > 1 && len >= 2 * target) {
    while (bounds.back() < end) {
      const size_t from = bounds.back() + target;
      bounds.push_back(from >= end ? end : std::min(tok.next_cut(text, from), end));
    }
  } else {
    bounds.push_back(end);
  }
  const size_t chunks = bounds.size() - 1;
  if (!encoders[0]) encoders[0] = std::make_unique<Encoder>(impl);
  if (chunks == 1) {
    out.reserve(len / 3 + 16);
    encoders[0]->encode(text.substr(begin, len), begin != 0, out);
    return;
  }
  std::vector<std::vector<uint32_t>> parts(chunks);
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto work = [&](size_t worker) {
    try {
      if (!encoders[worker]) encoders[worker] = std::make_unique<Encoder>(impl);
      for (size_t i; (i = next.fetch_add(1)) < chunks;) {
        parts[i].reserve((bounds[i + 1] - bounds[i]) / 3 + 16);
        encoders[worker]->encode(text.substr(bounds[i], bounds[i + 1] - bounds[i]), bounds[i] != 0,
                                 parts[i]);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(chunks);
    }
  };
  const size_t workers = std::min<size_t>(static_cast<size_t>(threads), chunks);
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  out.reserve(total);
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::vector<uint32_t> BpeTokenizer::encode_parallel(std::string_view text, int threads) const {
  threads = resolve_threads(threads);
  std::vector<std::unique_ptr<Encoder>> encoders(static_cast<size_t>(threads));
  std::vector<uint32_t> out;
  encode_range(*this, *impl_, text, 0, text.size(), threads, encoders, out);
  return out;
}

void BpeTokenizer::encode_blocks(std::string_view text, int threads, const BlockSink& sink,
                                 size_t block_bytes) const {
  threads = resolve_threads(threads);
  block_bytes = std::max<size_t>(block_bytes, 1);
  std::vector<std::unique_ptr<Encoder>> encoders(static_cast<size_t>(threads));
  std::vector<uint32_t> ids;
  const size_t n = text.size();
  if (n == 0) {
    sink(std::span<const uint32_t>(), 0);
    return;
  }
  for (size_t pos = 0; pos < n;) {
    // (The last block may be up to 1.5 blocks long rather than leave a small one.)
    const size_t end =
        n - pos > block_bytes + block_bytes / 2 ? next_cut(text, pos + block_bytes) : n;
    encode_range(*this, *impl_, text, pos, end, threads, encoders, ids);
    sink(std::span<const uint32_t>(ids.data(), ids.size()), end);
    pos = end;
  }
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  const Impl& t = *impl_;
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t id = ids[k];
    GRADUS_CHECK(id >= 0 && id < static_cast<int64_t>(t.bytes.size()) && t.present[id], ValueError,
                 "BpeTokenizer::decode: token id ", id, " at position ", k,
                 id >= 0 && id < static_cast<int64_t>(t.bytes.size()) ? " names no token"
                                                                      : " is out of range",
                 " (the vocabulary of ", t.source, " has ids 0..", t.bytes.size() - 1, ")");
    out += t.bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string BpeTokenizer::token_bytes(uint32_t id) const {
  return decode({static_cast<int64_t>(id)});
}

int64_t BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->bytes.size());
}

std::optional<uint32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->names.find(std::string(token));
  if (it == impl_->names.end()) return std::nullopt;
  return it->second;
}

size_t BpeTokenizer::merges() const {
  return impl_->merge_count;
}
size_t BpeTokenizer::added_tokens() const {
  return impl_->added.size();
}
const std::string& BpeTokenizer::source() const {
  return impl_->source;
}

}  // namespace gradus::data
