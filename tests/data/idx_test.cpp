// IDX reader: files written byte by byte here (raw and gzip), read back and compared; every kind
// of corruption must give an IOError that says what is wrong, never a crash.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "idx_files.h"
#include "support/test_util.h"

namespace gradus::data {
namespace {

namespace fs = std::filesystem;
using namespace test;  // NOLINT: the IDX writers

fs::path temp_path(const std::string& name) {
  static const TempDir dir("gradus_idx_test_");
  return dir / name;
}

// Runs fn, which must throw IOError whose message contains every one of `parts`.
template <typename Fn>
void expect_io_error(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an IOError";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    }
  }
}

TEST(Idx, RawAndGzipRoundTripU8Images) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const uint32_t n = 1 + rng() % 6, h = 1 + rng() % 30, w = 1 + rng() % 30;
  const Bytes payload = random_bytes(size_t{n} * h * w, seed + 1);
  const Bytes file = idx_u8({n, h, w}, payload);
  const fs::path raw = temp_path("images-idx3-ubyte"), gz = temp_path("images-idx3-ubyte.gz");
  write_file(raw, file);
  write_file(gz, gzip_bytes(file));
  for (const fs::path& p : {raw, gz}) {
    for (Tensor t : {read_idx(p.string()), read_idx_u8(p.string(), 3)}) {
      ASSERT_EQ(t.dtype(), DType::u8);
      ASSERT_EQ(t.sizes(), (Shape{n, h, w}));
      const uint8_t* v = t.data_ptr<uint8_t>();
      for (size_t i = 0; i < payload.size(); ++i) ASSERT_EQ(v[i], payload[i]) << p << " at " << i;
    }
  }
}

TEST(Idx, LabelsAndMultiMemberGzip) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Bytes payload = random_bytes(257, seed);
  const Bytes file = idx_u8({257}, payload);
  // gzip(1) allows concatenated members; split the file in two members.
  Bytes two = gzip_bytes(Bytes(file.begin(), file.begin() + 100));
  const Bytes second = gzip_bytes(Bytes(file.begin() + 100, file.end()));
  two.insert(two.end(), second.begin(), second.end());
  const fs::path gz = temp_path("labels-idx1-ubyte.gz");
  write_file(gz, two);
  Tensor t = read_idx_u8(gz.string(), 1);
  ASSERT_EQ(t.sizes(), (Shape{257}));
  const uint8_t* v = t.data_ptr<uint8_t>();
  for (size_t i = 0; i < payload.size(); ++i) ASSERT_EQ(v[i], payload[i]);
}

TEST(Idx, BigEndianWideTypes) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ints(6);
  for (auto& v : ints) v = static_cast<int32_t>(rng());
  Bytes b = {0, 0, 0x0C, 2};
  put_be32(b, 2);
  put_be32(b, 3);
  for (int32_t v : ints) put_be32(b, static_cast<uint32_t>(v));
  const fs::path p32 = temp_path("ints.idx");
  write_file(p32, b);
  Tensor t = read_idx(p32.string());
  ASSERT_EQ(t.dtype(), DType::i32);
  ASSERT_EQ(t.sizes(), (Shape{2, 3}));
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(t.data_ptr<int32_t>()[i], ints[i]);

  std::uniform_real_distribution<double> dist(-1e6, 1e6);
  std::vector<double> doubles(5);
  for (auto& v : doubles) v = dist(rng);
  Bytes d = {0, 0, 0x0E, 1};
  put_be32(d, 5);
  for (double v : doubles) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    for (int s = 56; s >= 0; s -= 8) d.push_back(static_cast<uint8_t>(u >> s));
  }
  const fs::path p64 = temp_path("doubles.idx");
  write_file(p64, d);
  Tensor td = read_idx(p64.string());
  ASSERT_EQ(td.dtype(), DType::f64);
  for (size_t i = 0; i < doubles.size(); ++i) EXPECT_EQ(td.data_ptr<double>()[i], doubles[i]);
}

TEST(Idx, CorruptFilesGiveIOError) {
  const Bytes payload = random_bytes(4 * 5 * 6, testing::fresh_seed());
  const Bytes good = idx_u8({4, 5, 6}, payload);
  auto check = [](const std::string& name, const Bytes& bytes,
                  std::initializer_list<std::string> parts) {
    SCOPED_TRACE(name);
    const fs::path p = temp_path(name);
    write_file(p, bytes);
    expect_io_error([&] { read_idx_u8(p.string(), 3); }, parts);
  };

  Bytes bad_magic = good;
  bad_magic[2] = 0x09;  // int8 type
  check("bad_magic", bad_magic, {"bad_magic", "magic number 0x00000903", "expected 0x00000803"});
  Bytes nonzero = good;
  nonzero[0] = 0x12;
  check("nonzero_magic", nonzero, {"magic number 0x12000803"});
  check("labels_as_images", idx_u8({120}, payload), {"0x00000801", "expected 0x00000803"});
  check("truncated", Bytes(good.begin(), good.end() - 1),
        {"truncated", "[4, 5, 6]", "120 bytes", "only 119 bytes"});
  check("truncated_header", Bytes(good.begin(), good.begin() + 9), {"truncated", "header"});
  check("tiny", Bytes{0, 0}, {"truncated", "2 bytes"});
  Bytes extra = good;
  extra.push_back(7);
  check("extra", extra, {"does not match its dims", "121 bytes", "1 extra"});
  check("empty.gz", Bytes{}, {"not gzip", "empty"});
  check("plain.gz", good, {"not gzip", "1f 8b", "0x00 0x00"});

  const Bytes gz = gzip_bytes(good);
  check("cut.gz", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)),
        {"cut.gz", "truncated"});
  Bytes flipped = gz;
  for (size_t i = 12; i < flipped.size() - 8; i += 3) flipped[i] ^= 0x5a;
  check("flipped.gz", flipped, {"flipped.gz", "gzip"});
  // Inflates fine but the content is not IDX.
  check("wrong_content.gz", gzip_bytes(random_bytes(50, 3) /* starts with nonzero bytes */),
        {"magic"});

  expect_io_error([] { read_idx("/nonexistent/dir/train-images-idx3-ubyte.gz"); },
                  {"cannot open", "/nonexistent/dir/train-images-idx3-ubyte.gz"});
}

TEST(Idx, HugeDimsDoNotAllocate) {
  // 0xFFFFFFFF^3 overflows any size_t; the reader must say so instead of allocating.
  const Bytes b = idx_u8({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, Bytes(10, 1));
  const fs::path p = temp_path("huge");
  write_file(p, b);
  expect_io_error([&] { read_idx(p.string()); }, {"truncated or its dims are wrong"});
}

TEST(Idx, RandomCorruptionNeverCrashes) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Bytes good = idx_u8({3, 7, 5}, random_bytes(105, seed));
  const Bytes gz = gzip_bytes(good);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Bytes b = trial % 2 ? gz : good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      if (rng() % 3 == 0 && !b.empty()) {
        b.resize(rng() % b.size());
      } else if (!b.empty()) {
        b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
    }
    const fs::path p = temp_path(trial % 2 ? "fuzz.gz" : "fuzz");
    write_file(p, b);
    try {
      Tensor t = read_idx(p.string());
      // A mutation that still parses must describe exactly the bytes in the file.
      if (trial % 2 == 0) {
        EXPECT_EQ(b.size(), static_cast<size_t>(4 + 4 * t.dim() + t.numel() * t.element_size()));
      }
    } catch (const IOError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace gradus::data
