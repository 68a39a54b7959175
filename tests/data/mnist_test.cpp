// MNIST-format loading: synthetic directories written here (values checked against a float64
// reference), every failure mode, and the real Fashion-MNIST files when they are installed.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "idx_files.h"
#include "support/test_util.h"

namespace gradus::data {
namespace {

namespace fs = std::filesystem;
using namespace test;  // NOLINT: the IDX writers

void write_gz(const fs::path& path, const Bytes& bytes) {
  write_file(path, gzip_bytes(bytes));
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
  const TempDir dir("gradus_mnist_test_");
  const uint32_t n = 9;
  const Split s = random_split(n, seed);
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_u8({n, 28, 28}, s.pixels));
  // Uncompressed files are found too.
  write_file(dir / "t10k-labels-idx1-ubyte", idx_u8({n}, s.labels));

  for (int64_t limit : {int64_t{-1}, int64_t{4}}) {
    auto ds = load_fashion_mnist(dir.path().string(), /*train=*/false, limit);
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
  auto mnist = load_mnist(dir.path().string(), false);
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
  const TempDir dir("gradus_mnist_test_");
  const Split s = random_split(3, testing::fresh_seed());
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_u8({3, 28, 28}, s.pixels));
  const std::string msg = io_error_message([&] { load_fashion_mnist(dir.path().string(), true); });
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(Mnist, CountMismatchAndBadLabels) {
  const TempDir dir("gradus_mnist_test_");
  const Split s = random_split(5, testing::fresh_seed());
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_u8({5, 28, 28}, s.pixels));
  write_gz(dir / "train-labels-idx1-ubyte.gz",
           idx_u8({4}, Bytes(s.labels.begin(), s.labels.end() - 1)));
  std::string msg = io_error_message([&] { load_fashion_mnist(dir.path().string(), true); });
  EXPECT_NE(msg.find("5 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 labels"), std::string::npos) << msg;

  Bytes bad = s.labels;
  bad[2] = 10;
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_u8({5}, bad));
  msg = io_error_message([&] { load_fashion_mnist(dir.path().string(), true); });
  EXPECT_NE(msg.find("label 10 at index 2"), std::string::npos) << msg;

  // Images and labels swapped: the magic numbers say which is which.
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_u8({5, 28, 28}, s.pixels));
  msg = io_error_message([&] { load_fashion_mnist(dir.path().string(), true); });
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
