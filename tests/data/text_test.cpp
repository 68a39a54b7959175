// Text data: the character vocabulary, memory-mapped token files, the split and the seeded
// context sampler (windows in bounds, targets shifted by one, exact resume).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

std::string sample_text() {
  std::ifstream in(std::string(GRADUS_TEST_DATA_DIR) + "/text/shakespeare_sample.txt");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CharVocab, RoundTripsTheTextAndItsSavedForm) {
  const std::string text = sample_text();
  ASSERT_GT(text.size(), 10000u);
  const data::CharVocab v = data::CharVocab::from_text(text);
  EXPECT_GT(v.size(), 30);
  EXPECT_LT(v.size(), 70);
  const std::vector<uint16_t> ids = v.encode(text);
  const std::vector<int64_t> wide(ids.begin(), ids.end());
  EXPECT_EQ(v.decode(wide), text);
  const data::CharVocab back = data::CharVocab::from_string(v.to_string());
  EXPECT_EQ(back.encode(text), ids);
  EXPECT_THROW(v.encode("\x01"), ValueError);
  EXPECT_THROW(v.decode({v.size()}), ValueError);
  EXPECT_THROW(data::CharVocab::from_string("aa"), ValueError);
}

TEST(TokenArray, MapsANanoGptBinFileAndSplitsNinetyTen) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gradus_text_" + std::to_string(testing::fresh_seed()));
  std::filesystem::create_directories(dir);
  std::vector<uint16_t> tokens(1001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
  const std::string bin = (dir / "train.bin").string();
  {
    std::ofstream out(bin, std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()),
              static_cast<std::streamsize>(tokens.size() * 2));
  }
  const data::TokenArray mapped = data::TokenArray::map_file(bin);
  ASSERT_EQ(mapped.size(), 1001);
  for (int64_t i = 0; i < mapped.size(); ++i) ASSERT_EQ(mapped[i], tokens[static_cast<size_t>(i)]);
  EXPECT_EQ(mapped.max_token_plus_one(),
            int64_t{*std::max_element(tokens.begin(), tokens.end())} + 1);
  const auto [train, val] = data::split_train_val(mapped);
  EXPECT_EQ(train.size(), 900);
  EXPECT_EQ(val.size(), 101);
  EXPECT_EQ(val[0], tokens[900]);
  // An odd number of bytes is not a token file; a missing file names itself.
  {
    std::ofstream out((dir / "odd.bin").string(), std::ios::binary);
    out.write("abc", 3);
  }
  EXPECT_THROW(data::TokenArray::map_file((dir / "odd.bin").string()), IOError);
  EXPECT_THROW(data::TokenArray::map_file((dir / "missing.bin").string()), IOError);
  std::filesystem::remove_all(dir);
}

TEST(TokenArray, MapsUint32FilesWithIdsAboveSixtyFiveThousand) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gradus_text32_" + std::to_string(testing::fresh_seed()));
  std::filesystem::create_directories(dir);
  std::mt19937 rng(static_cast<uint32_t>(testing::fresh_seed()));
  std::vector<uint32_t> tokens(777);
  for (uint32_t& t : tokens) t = rng() % 151936;  // a Qwen-sized vocabulary
  tokens[100] = 151935;
  const std::string bin = (dir / "train32.bin").string();
  {
    std::ofstream out(bin, std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()),
              static_cast<std::streamsize>(tokens.size() * 4));
  }
  const data::TokenArray mapped = data::TokenArray::map_file(bin, data::TokenWidth::u32);
  ASSERT_EQ(mapped.size(), 777);
  EXPECT_EQ(mapped.width(), data::TokenWidth::u32);
  for (int64_t i = 0; i < mapped.size(); ++i) ASSERT_EQ(mapped[i], tokens[static_cast<size_t>(i)]);
  EXPECT_EQ(mapped.max_token_plus_one(), 151936);
  const data::TokenArray tail = mapped.slice(500, 777);
  EXPECT_EQ(tail[0], tokens[500]);
  EXPECT_EQ(tail.max_token_plus_one(),
            int64_t{*std::max_element(tokens.begin() + 500, tokens.end())} + 1);
  // The sampler's windows read the same ids as from an owned array.
  data::ContextSampler from_file(mapped, 16, 5, 7), from_memory(data::TokenArray(tokens), 16, 5, 7);
  const auto [x1, y1] = from_file.next();
  const auto [x2, y2] = from_memory.next();
  EXPECT_EQ(x1.to_vector<int64_t>(), x2.to_vector<int64_t>());
  EXPECT_EQ(y1.to_vector<int64_t>(), y2.to_vector<int64_t>());
  EXPECT_GT(*std::max_element(tokens.begin(), tokens.end()), 65535u);
  // A size that is not a whole number of uint32 ids names the width.
  {
    std::ofstream out((dir / "six.bin").string(), std::ios::binary);
    out.write("abcdef", 6);
  }
  try {
    data::TokenArray::map_file((dir / "six.bin").string(), data::TokenWidth::u32);
    ADD_FAILURE() << "a 6-byte uint32 file was mapped";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("uint32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(data::parse_token_width("uint32"), data::TokenWidth::u32);
  EXPECT_THROW(data::parse_token_width("int32"), ValueError);
  std::filesystem::remove_all(dir);
}

TEST(ContextSampler, WindowsStayInBoundsTargetsShiftAndResumeIsExact) {
  const std::string text = sample_text();
  const data::CharVocab v = data::CharVocab::from_text(text);
  const data::TokenArray all(v.encode(text));
  const auto [train, val] = data::split_train_val(all);
  const uint64_t seed = testing::fresh_seed();
  data::ContextSampler a(train, 64, 12, seed);
  std::vector<std::vector<int64_t>> xs;
  for (int s = 0; s < 20; ++s) {
    for (int64_t o : a.offsets()) {
      ASSERT_GE(o, 0);
      ASSERT_LE(o + 64 + 1, train.size());
    }
    const auto [x, y] = a.next();
    ASSERT_EQ(x.sizes(), (Shape{12, 64}));
    const std::vector<int64_t> xv = x.to_vector<int64_t>(), yv = y.to_vector<int64_t>();
    for (int64_t b = 0; b < 12; ++b) {
      for (int64_t t = 0; t + 1 < 64; ++t) ASSERT_EQ(yv[b * 64 + t], xv[b * 64 + t + 1]);
    }
    xs.push_back(xv);
  }
  EXPECT_EQ(a.position(), 20);
  // A new sampler set to position 7 continues exactly where the first one was at step 7.
  data::ContextSampler b(train, 64, 12, seed);
  b.set_position(7);
  for (int s = 7; s < 20; ++s)
    EXPECT_EQ(b.next().first.to_vector<int64_t>(), xs[static_cast<size_t>(s)]);
  // Another seed, other windows.
  data::ContextSampler c(train, 64, 12, seed + 1);
  EXPECT_NE(c.next().first.to_vector<int64_t>(), xs[0]);
  EXPECT_THROW(data::ContextSampler(train.slice(0, 64), 64, 1, 0), ValueError);
}

}  // namespace
}  // namespace gradus
