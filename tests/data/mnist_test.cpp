// MNIST-format loading: synthetic directories written here (values checked against a float64
// reference), every failure mode, and the real Fashion-MNIST files when they are installed.
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/test_util.h"

namespace gradus::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

fs::path fresh_dir() {
  fs::path dir =
      fs::temp_directory_path() / ("gradus_mnist_test_" + std::to_string(testing::fresh_seed()));
  fs::create_directories(dir);
  return dir;
}

Bytes idx_u8(const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void write_gz(const fs::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_raw(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

struct Split {
  Bytes pixels;
  Bytes labels;
};

Split random_split(uint32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Split s;
  s.pixels.resize(size_t{n} * 28 * 28);
  for (auto& p : s.pixels) p = static_cast<uint8_t>(rng());
  s.labels.resize(n);
  for (auto& l : s.labels) l = static_cast<uint8_t>(rng() % 10);
  return s;
}

template <typename Fn>
std::string io_error_message(Fn fn) {
  try {
    fn();
  } catch (const IOError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an IOError";
  return "";
}

TEST(Mnist, LoadsAndNormalisesSyntheticFiles) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const fs::path dir = fresh_dir();
  const uint32_t n = 9;
  const Split s = random_split(n, seed);
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_u8({n, 28, 28}, s.pixels));
  // Uncompressed files are found too.
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_u8({n}, s.labels));

  for (int64_t limit : {int64_t{-1}, int64_t{4}}) {
    auto ds = load_fashion_mnist(dir.string(), /*train=*/false, limit);
    const int64_t expect_n = limit < 0 ? n : limit;
    ASSERT_EQ(ds->size(), expect_n);
    ASSERT_EQ(ds->inputs().sizes(), (Shape{expect_n, 1, 28, 28}));
    ASSERT_EQ(ds->inputs().dtype(), DType::f32);
    ASSERT_EQ(ds->targets().sizes(), (Shape{expect_n}));
    ASSERT_EQ(ds->targets().dtype(), DType::i64);
    const float* x = ds->inputs().data_ptr<float>();
    for (int64_t i = 0; i < expect_n * 784; ++i) {
      const double ref = (s.pixels[static_cast<size_t>(i)] / 255.0 - 0.2860) / 0.3530;
      ASSERT_NEAR(x[i], ref, 1e-5) << "pixel " << i;
    }
    for (int64_t i = 0; i < expect_n; ++i) {
      EXPECT_EQ(ds->targets().data_ptr<int64_t>()[i], s.labels[static_cast<size_t>(i)]);
    }
  }
  // MNIST uses its own statistics.
  auto mnist = load_mnist(dir.string(), false);
  EXPECT_NEAR(mnist->inputs().data_ptr<float>()[5], (s.pixels[5] / 255.0 - 0.1307) / 0.3081, 1e-5);
}

TEST(Mnist, MissingDirectoryNamesTheFix) {
  const std::string msg =
      io_error_message([] { load_fashion_mnist("/nonexistent/fashion", true); });
  EXPECT_NE(msg.find("/nonexistent/fashion"), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data-dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
}

TEST(Mnist, MissingFileIsNamed) {
  const fs::path dir = fresh_dir();
  const Split s = random_split(3, testing::fresh_seed());
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_u8({3, 28, 28}, s.pixels));
  const std::string msg = io_error_message([&] { load_fashion_mnist(dir.string(), true); });
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(Mnist, CountMismatchAndBadLabels) {
  const fs::path dir = fresh_dir();
  const Split s = random_split(5, testing::fresh_seed());
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_u8({5, 28, 28}, s.pixels));
  write_gz(dir / "train-labels-idx1-ubyte.gz",
           idx_u8({4}, Bytes(s.labels.begin(), s.labels.end() - 1)));
  std::string msg = io_error_message([&] { load_fashion_mnist(dir.string(), true); });
  EXPECT_NE(msg.find("5 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 labels"), std::string::npos) << msg;

  Bytes bad = s.labels;
  bad[2] = 10;
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_u8({5}, bad));
  msg = io_error_message([&] { load_fashion_mnist(dir.string(), true); });
  EXPECT_NE(msg.find("label 10 at index 2"), std::string::npos) << msg;

  // Images and labels swapped: the magic numbers say which is which.
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_u8({5, 28, 28}, s.pixels));
  msg = io_error_message([&] { load_fashion_mnist(dir.string(), true); });
  EXPECT_NE(msg.find("expected 0x00000801"), std::string::npos) << msg;
}

TEST(Mnist, RealFashionMnistWhenInstalled) {
  if (!fs::is_directory(kDefaultFashionMnistDir)) {
    GTEST_SKIP() << kDefaultFashionMnistDir
                 << " is absent (install Debian's dataset-fashion-mnist to run this test)";
  }
  auto test = load_fashion_mnist(kDefaultFashionMnistDir, false);
  ASSERT_EQ(test->size(), 10000);
  // The test set holds exactly 1000 images of each class.
  std::vector<int> counts(10, 0);
  const int64_t* y = test->targets().data_ptr<int64_t>();
  for (int64_t i = 0; i < 10000; ++i) ++counts[static_cast<size_t>(y[i])];
  for (int c : counts) EXPECT_EQ(c, 1000);

  // With the documented statistics the training pixels have mean ~0 and std ~1.
  auto train = load_fashion_mnist(kDefaultFashionMnistDir, true);
  ASSERT_EQ(train->size(), 60000);
  const float* x = train->inputs().data_ptr<float>();
  double sum = 0, sq = 0;
  const int64_t n = train->inputs().numel();
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += double{x[i]} * x[i];
  }
  const double mean = sum / static_cast<double>(n);
  EXPECT_NEAR(mean, 0.0, 2e-3);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(n) - mean * mean), 1.0, 2e-3);
}

}  // namespace
}  // namespace gradus::data
