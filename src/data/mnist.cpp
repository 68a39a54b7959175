// MNIST / Fashion-MNIST loading: two IDX files per split, validated against each other, turned
// into normalised float32 images [N, 1, H, W] and int64 labels [N].
#include "gradus/data/mnist.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gradus/core/error.h"
#include "gradus/data/idx.h"

namespace gradus::data {

namespace {

namespace fs = std::filesystem;

// dir/stem.gz, or dir/stem when only the uncompressed file exists.
std::string find_file(const MnistOptions& o, const std::string& stem) {
  const fs::path gz = fs::path(o.dir) / (stem + ".gz");
  const fs::path plain = fs::path(o.dir) / stem;
  std::error_code ec;
  if (fs::exists(gz, ec)) return gz.string();
  if (fs::exists(plain, ec)) return plain.string();
  GRADUS_CHECK(!ec || ec == std::errc::no_such_file_or_directory, IOError,
               "load dataset: cannot look for '", gz.string(), "': ", ec.message());
  throw IOError(detail::str_cat("load dataset: cannot find '", gz.string(), "' (nor '",
                                plain.string(), "')", o.missing_hint));
}

}  // namespace

std::shared_ptr<TensorDataset> load_mnist_format(const MnistOptions& o) {
  // The real cause: missing (with the install hint), not a directory, or not readable.
  std::error_code ec;
  const fs::file_status st = fs::status(o.dir, ec);
  GRADUS_CHECK(fs::exists(st), IOError, "load dataset: the directory '", o.dir, "' does not exist",
               o.missing_hint);
  GRADUS_CHECK(fs::is_directory(st), IOError, "load dataset: '", o.dir,
               "' is not a directory; --data-dir takes the directory that holds the dataset files");
  GRADUS_CHECK(::access(o.dir.c_str(), R_OK | X_OK) == 0, IOError,
               "load dataset: cannot read the "
               "directory '",
               o.dir, "': ", std::strerror(errno));
  GRADUS_CHECK(o.std > 0, ValueError, "load dataset: std must be > 0, got ", o.std);
  const std::string split = o.train ? "train" : "t10k";
  const std::string images_path = find_file(o, split + "-images-idx3-ubyte");
  const std::string labels_path = find_file(o, split + "-labels-idx1-ubyte");
  Tensor images = read_idx_u8(images_path, 3);
  Tensor labels = read_idx_u8(labels_path, 1);
  const int64_t n_images = images.size(0), n_labels = labels.size(0);
  GRADUS_CHECK(n_images == n_labels, IOError, "load dataset: '", images_path, "' holds ", n_images,
               " images but '", labels_path, "' holds ", n_labels,
               " labels (expected the same count; the two files belong to different sets or "
               "one is damaged)");
  const int64_t n = o.limit >= 0 ? std::min(o.limit, n_images) : n_images;
  const int64_t h = images.size(1), w = images.size(2);
  const int64_t pixels = h * w;

  // (x / 255 - mean) / std, as one multiply-add per pixel.
  const float scale = static_cast<float>(1.0 / (255.0 * o.std));
  const float shift = static_cast<float>(-o.mean / o.std);
  Tensor x = empty({n, 1, h, w}, {DType::f32, Device::cpu(), false});
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* dst = x.data_ptr<float>();
  for (int64_t i = 0; i < n * pixels; ++i) dst[i] = static_cast<float>(src[i]) * scale + shift;

  Tensor y = empty({n}, {DType::i64, Device::cpu(), false});
  const uint8_t* lsrc = labels.data_ptr<uint8_t>();
  int64_t* ldst = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    GRADUS_CHECK(lsrc[i] < 10, IOError, "load dataset: '", labels_path, "' has label ",
                 int(lsrc[i]), " at index ", i, ", expected a class in [0, 10)");
    ldst[i] = lsrc[i];
  }
  return std::make_shared<TensorDataset>(x, y);
}

std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, bool train, int64_t limit,
                                                  bool normalise) {
  MnistOptions o;
  o.dir = dir;
  o.train = train;
  o.limit = limit;
  o.mean = normalise ? kFashionMnistMean : 0.0;
  o.std = normalise ? kFashionMnistStd : 1.0;
  o.missing_hint =
      ". Install Debian's dataset-fashion-mnist (sudo apt-get install dataset-fashion-mnist), "
      "which puts the files in /usr/share/datasets/fashion-mnist, or pass --data-dir DIR "
      "containing train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
      "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz";
  return load_mnist_format(o);
}

std::shared_ptr<TensorDataset> load_mnist(const std::string& dir, bool train, int64_t limit,
                                          bool normalise) {
  MnistOptions o;
  o.dir = dir;
  o.train = train;
  o.limit = limit;
  o.mean = normalise ? kMnistMean : 0.0;
  o.std = normalise ? kMnistStd : 1.0;
  o.missing_hint =
      ". Download MNIST's four files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
      "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) into that directory";
  return load_mnist_format(o);
}

}  // namespace gradus::data
