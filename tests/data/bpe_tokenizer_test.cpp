// The byte-level BPE tokenizer against Hugging Face `tokenizers`: the ids tokenizers gave for texts
// with unicode, digits, whitespace runs and added tokens (tests/data/golden/bpe, written by
// tools/make_tokenizer_golden.py) from tokenizer.json (pairs and legacy string merges, with and
// without a prefix space) and from GPT-2's vocab.json + merges.txt; decode(encode(x)) == x on
// fresh random bytes and unicode; the parallel and block-wise encodings equal the serial one; and
// the errors name the file and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gradus/core/error.h"
#include "gradus/data/bpe_tokenizer.h"
#include "idx_files.h"

namespace gradus::data {
namespace {

const std::string kDir = std::string(GRADUS_TEST_DATA_DIR) + "/golden/bpe";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::json& expected() {
  static const nlohmann::json j = nlohmann::json::parse(read(kDir + "/expected.json"));
  return j;
}

const BpeTokenizer& from_json() {
  static const BpeTokenizer t = BpeTokenizer::from_tokenizer_json(kDir + "/tokenizer.json");
  return t;
}
const BpeTokenizer& from_files() {
  static const BpeTokenizer t =
      BpeTokenizer::from_vocab_merges(kDir + "/vocab.json", kDir + "/merges.txt");
  return t;
}
const BpeTokenizer& legacy() {
  static const BpeTokenizer t = BpeTokenizer::from_tokenizer_json(kDir + "/tokenizer_legacy.json");
  return t;
}
// Llama 3's layout: Sequence[Split(its regex), ByteLevel(use_regex false)], ignore_merges.
const BpeTokenizer& llama3() {
  static const BpeTokenizer t = BpeTokenizer::from_tokenizer_json(kDir + "/tokenizer_llama3.json");
  return t;
}

std::string shown(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0x20 && b < 0x7F) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      out += hex;
    }
  }
  return out;
}

void expect_golden(const BpeTokenizer& tok, const std::string& name) {
  const auto& texts = expected()["texts"];
  const auto& ids = expected()[name];
  ASSERT_EQ(texts.size(), ids.size());
  ASSERT_GT(texts.size(), 20u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const std::vector<uint32_t> want = ids[i].get<std::vector<uint32_t>>();
    EXPECT_EQ(tok.encode(text), want) << name << " text " << i << ": " << shown(text);
    EXPECT_EQ(tok.encode_parallel(text, 3), want) << name << " text " << i;
  }
}

TEST(BpeTokenizer, GivesTokenizersIdsFromTokenizerJson) {
  expect_golden(from_json(), "tokenizer.json");
  EXPECT_EQ(from_json().vocab_size(), expected()["vocab_size"].get<int64_t>());
  EXPECT_EQ(from_json().added_tokens(), 4u);
  EXPECT_EQ(from_json().token_to_id("<|endoftext|>"), 0u);
  EXPECT_EQ(from_json().encode("<|endoftext|>"), std::vector<uint32_t>{0});
  EXPECT_FALSE(from_json().token_to_id("no such token").has_value());
}

TEST(BpeTokenizer, GivesTokenizersIdsFromVocabAndMerges) {
  expect_golden(from_files(), "vocab_merges");
  EXPECT_EQ(from_files().added_tokens(), 0u);
  EXPECT_EQ(from_files().merges(), from_json().merges());
}

TEST(BpeTokenizer, GivesTokenizersIdsFromLegacyMergesWithPrefixSpace) {
  expect_golden(legacy(), "tokenizer_legacy.json");
}

TEST(BpeTokenizer, GivesTokenizersIdsFromALlama3StyleTokenizerJson) {
  expect_golden(llama3(), "tokenizer_llama3.json");
  EXPECT_EQ(llama3().token_to_id("<|begin_of_text|>"), 0u);
  // Its regex, not GPT-2's: digits in groups of at most three, a letter run takes one leading
  // punctuation character.
  EXPECT_NE(llama3().encode("1234567"), from_json().encode("1234567"));
  // A newline between printable characters still ends a piece of Llama 3's regex: the text may
  // be cut there for parallel encoding.
  EXPECT_EQ(llama3().next_cut("ab\ncd\n", 1), 3u);
}

TEST(BpeTokenizer, FromDirReadsTokenizerJsonElseVocabAndMerges) {
  EXPECT_EQ(BpeTokenizer::from_dir(kDir).source(), kDir + "/tokenizer.json");
  EXPECT_EQ(BpeTokenizer::from_dir(kDir + "/tokenizer_legacy.json").source(),
            kDir + "/tokenizer_legacy.json");
  const test::TempDir dir("gradus_bpe_dir_");
  std::filesystem::copy_file(kDir + "/vocab.json", dir / "vocab.json");
  std::filesystem::copy_file(kDir + "/merges.txt", dir / "merges.txt");
  const BpeTokenizer t = BpeTokenizer::from_dir(dir.path().string());
  EXPECT_NE(t.source().find("merges.txt"), std::string::npos);
  EXPECT_EQ(t.encode("Hello world"), from_files().encode("Hello world"));
}

TEST(BpeTokenizer, DecodesWhatTokenizersDecodes) {
  const auto& texts = expected()["texts"];
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const std::vector<uint32_t> ids = expected()["tokenizer.json"][i].get<std::vector<uint32_t>>();
    // (lstrip and rstrip tokens swallow the whitespace beside them.)
    if (text.find("[MASK]") != std::string::npos || text.find("<sep>") != std::string::npos) {
      continue;
    }
    EXPECT_EQ(from_json().decode(std::vector<int64_t>(ids.begin(), ids.end())), text) << i;
  }
  EXPECT_EQ(from_json().token_bytes(*from_json().token_to_id("\xc4\xa0the")), " the");
}

// Bytes drawn to hit the regex's cases: ASCII letters, digits, spaces, newlines, apostrophes,
// multi-byte UTF-8 (valid and cut short) and arbitrary bytes.
std::string random_bytes(std::mt19937_64& rng, size_t max_len) {
  static const std::vector<std::string> pieces = {
      " ",        "  ",           "\n",       "\n\n", "\t",       "'s",           "'ll",  "'",
      "é",        "日本",         "👋🏽", "\xc3", "\xe6\x97", "\xf0\x9f\x91", "\xff", "\x80",
      "\xc0\xaf", "\xed\xa0\x80", "1",        "42",   "\r\n",     "\xc2\xa0"};
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> kind(0, 3), byte(0, 255), letter('a', 'z');
  std::uniform_int_distribution<size_t> piece(0, pieces.size() - 1);
  const size_t n = len(rng);
  std::string s;
  while (s.size() < n) {
    switch (kind(rng)) {
      case 0:
        s += static_cast<char>(byte(rng));
        break;
      case 1:
        s += pieces[piece(rng)];
        break;
      default:
        s += static_cast<char>(letter(rng));
    }
  }
  return s;
}

TEST(BpeTokenizer, DecodeOfEncodeIsTheInputForRandomBytes) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int k = 0; k < 300; ++k) {
    const std::string s = random_bytes(rng, 120);
    for (const BpeTokenizer* t : {&from_json(), &from_files(), &legacy(), &llama3()}) {
      const std::vector<uint32_t> ids = t->encode(s);
      std::string back = t->decode(std::vector<int64_t>(ids.begin(), ids.end()));
      // add_prefix_space adds one space before the text.
      if (t == &legacy() && !s.empty() && s[0] != ' ' && !back.empty() && back[0] == ' ') {
        back.erase(0, 1);
      }
      ASSERT_EQ(back, s) << "seed " << seed << " text " << shown(s) << " from " << t->source();
    }
  }
}

TEST(BpeTokenizer, DecodeOfEncodeIsTheInputForRandomUnicode) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  // Code points from ASCII, Latin-1, combining marks, CJK, emoji, whitespace, private use, planes
  // beyond the BMP.
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x0, 0x7F},        {0x80, 0x2FF},      {0x300, 0x36F},   {0x2000, 0x206F},
      {0x3000, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3}, {0xE000, 0xF8FF},
      {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
  std::uniform_int_distribution<size_t> range(0, ranges.size() - 1), len(0, 40);
  for (int k = 0; k < 300; ++k) {
    std::string s;
    for (size_t i = len(rng); i > 0; --i) {
      const auto& [lo, hi] = ranges[range(rng)];
      uint32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    const std::vector<uint32_t> ids = from_json().encode(s);
    ASSERT_EQ(from_json().decode(std::vector<int64_t>(ids.begin(), ids.end())), s)
        << "seed " << seed << " text " << shown(s);
  }
}

// A long text: the corpus many times, with added tokens, random bytes and whitespace runs.
std::string long_text(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::string corpus = read(kDir + "/corpus.txt");
  std::string text;
  for (int k = 0; k < 24; ++k) {
    text += corpus;
    text += "<|endoftext|>" + random_bytes(rng, 300) + "\n[MASK]x\n  \n\nword\n";
  }
  return text;
}

TEST(BpeTokenizer, ParallelAndBlockwiseEncodingsEqualTheSerialOne) {
  const uint64_t seed = std::random_device{}();
  const std::string text = long_text(seed);
  ASSERT_GT(text.size(), 400000u);
  for (const BpeTokenizer* t : {&from_json(), &legacy(), &llama3()}) {
    const std::vector<uint32_t> serial = t->encode(text);
    EXPECT_EQ(t->encode_parallel(text, 4), serial) << "seed " << seed << " " << t->source();
    std::vector<uint32_t> blocks;
    size_t calls = 0, last = 0;
    t->encode_blocks(
        text, 2,
        [&](std::span<const uint32_t> ids, size_t done) {
          EXPECT_GT(done, last);
          last = done;
          ++calls;
          blocks.insert(blocks.end(), ids.begin(), ids.end());
        },
        50000);
    EXPECT_GT(calls, 5u);
    EXPECT_EQ(last, text.size());
    EXPECT_EQ(blocks, serial) << "seed " << seed << " " << t->source();
  }
}

TEST(BpeTokenizer, EveryCutOffsetKeepsTheIds) {
  // Blocks of one byte: the text is cut at every offset next_cut allows.
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int k = 0; k < 40; ++k) {
    std::string text;
    for (int line = 0; line < 30; ++line) text += random_bytes(rng, 12) + "\n";
    for (const BpeTokenizer* t : {&from_json(), &legacy(), &llama3()}) {
      std::vector<uint32_t> cut;
      t->encode_blocks(
          text, 1,
          [&](std::span<const uint32_t> ids, size_t) {
            cut.insert(cut.end(), ids.begin(), ids.end());
          },
          1);
      ASSERT_EQ(cut, t->encode(text)) << "seed " << seed << " text " << shown(text);
    }
  }
  const std::string text = "a\nb  \nc\n\nd\ne\n";
  EXPECT_EQ(from_json().next_cut(text, 0), 2u);   // "a\n|b"
  EXPECT_EQ(from_json().next_cut(text, 3), 11u);  // not after "  \n" nor "\n\n": "d\n|e"
  EXPECT_EQ(from_json().next_cut(text, 12), text.size());
}

TEST(BpeTokenizer, LongRunsOfOneCharacter) {
  const std::string spaces(200000, ' ');
  const std::string letters(50000, 'a');
  const std::string text = spaces + letters + "\n" + std::string(30000, '7');
  const std::vector<uint32_t> ids = from_json().encode(text);
  EXPECT_GT(ids.size(), 3u);
  EXPECT_EQ(from_json().decode(std::vector<int64_t>(ids.begin(), ids.end())), text);
}

TEST(BpeTokenizer, DecodeNamesAnIdOutOfRange) {
  const int64_t n = from_json().vocab_size();
  try {
    from_json().decode({72, n});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("token id " + std::to_string(n) + " at position 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(from_json().decode({-1}), ValueError);
}

// Writes tokenizer.json with `edit` applied and returns the error message of loading it.
template <typename Edit>
std::string load_error(const test::TempDir& dir, Edit edit) {
  nlohmann::json j = nlohmann::json::parse(read(kDir + "/tokenizer.json"));
  edit(j);
  const std::string path = (dir / "tokenizer.json").string();
  std::ofstream(path) << j.dump();
  try {
    BpeTokenizer::from_tokenizer_json(path);
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no ValueError";
  return "";
}

TEST(BpeTokenizer, ErrorsNameTheFileAndTheProblem) {
  const test::TempDir dir("gradus_bpe_errors_");
  using nlohmann::json;
  EXPECT_NE(load_error(dir, [](json& j) { j["model"]["type"] = "WordPiece"; })
                .find("model type 'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(load_error(dir,
                       [](json& j) {
                         j["pre_tokenizer"] = {{"type", "Metaspace"}};
                       })
                .find("pre_tokenizer 'Metaspace' is not supported"),
            std::string::npos);
  EXPECT_NE(load_error(dir,
                       [](json& j) {
                         j["pre_tokenizer"] = {
                             {"type", "Sequence"},
                             {"pretokenizers", {{{"type", "Split"}}, {{"type", "ByteLevel"}}}}};
                       })
                .find("'Sequence' (Split, ByteLevel) is not supported"),
            std::string::npos);
  EXPECT_NE(
      load_error(dir, [](json& j) { j["pre_tokenizer"] = nullptr; }).find("pre_tokenizer none"),
      std::string::npos);
  // Llama 3's Sequence, with what it does not support.
  const auto split_then_byte_level = [](json split, json byte_level) {
    return [=](json& j) {
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
    };
  };
  const json regex_split = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\S+"}}}, {"behavior", "Isolated"}};
  const json no_regex = {{"type", "ByteLevel"}, {"use_regex", false}};
  json removed = regex_split;
  removed["behavior"] = "Removed";
  EXPECT_NE(load_error(dir, split_then_byte_level(removed, no_regex))
                .find("Split pre-tokenizer with behavior 'Removed' is not supported"),
            std::string::npos);
  json literal = regex_split;
  literal["pattern"] = {{"String", " "}};
  EXPECT_NE(load_error(dir, split_then_byte_level(literal, no_regex))
                .find("needs a {\"Regex\": ...} pattern, got {\"String\":\" \"}"),
            std::string::npos);
  json prefixed = no_regex;
  prefixed["add_prefix_space"] = true;
  EXPECT_NE(load_error(dir, split_then_byte_level(regex_split, prefixed))
                .find("add_prefix_space after a Split is not supported"),
            std::string::npos);
  json bad_regex = regex_split;
  bad_regex["pattern"]["Regex"] = "(unclosed";
  EXPECT_NE(load_error(dir, split_then_byte_level(bad_regex, no_regex))
                .find("cannot compile the pre-tokenizer's regex"),
            std::string::npos);
  EXPECT_NE(load_error(dir,
                       [](json& j) {
                         j["normalizer"] = {{"type", "NFC"}};
                       })
                .find("normalizer 'NFC' is not supported"),
            std::string::npos);
  EXPECT_NE(load_error(dir, [](json& j) { j["model"].erase("merges"); }).find("no \"merges\""),
            std::string::npos);
  EXPECT_NE(load_error(dir,
                       [](json& j) {
                         j["model"]["merges"][3] = {"zz", "q"};
                       })
                .find("merge 4 ('zz' 'q'): 'zz' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(load_error(dir, [](json& j) { j["model"]["merges"][0] = "a b c"; })
                .find("merge 1 ('a b c') is not two tokens"),
            std::string::npos);
  EXPECT_NE(load_error(dir, [](json& j) { j["model"]["dropout"] = 0.1; }).find("dropout"),
            std::string::npos);
  {
    const std::string path = (dir / "broken.json").string();
    std::ofstream(path) << "{\"model\": ";
    try {
      BpeTokenizer::from_tokenizer_json(path);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": not valid JSON"), std::string::npos);
    }
  }
  {
    const std::string merges = (dir / "merges.txt").string();
    std::ofstream(merges) << "#version: 0.2\nh e\n\nt h\n";
    try {
      BpeTokenizer::from_vocab_merges(kDir + "/vocab.json", merges);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(merges + ":3: a merge is two tokens"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(BpeTokenizer::from_tokenizer_json((dir / "missing.json").string()), IOError);
  const test::TempDir empty("gradus_bpe_empty_");
  try {
    BpeTokenizer::from_dir(empty.path().string());
    ADD_FAILURE() << "no error";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("has neither tokenizer.json nor vocab.json + merges.txt"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace gradus::data
