// Bad input never aborts: each case below must throw the documented gradus error type with a
// message that names the op and what was wrong. The table in docs/reliability.md quotes these
// messages; GRADUS_PRINT_MESSAGES=1 prints them as Markdown rows to refresh it:
//   GRADUS_PRINT_MESSAGES=1 build/tests/test_reliability --gtest_filter='BadInput*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

namespace fs = std::filesystem;

// Runs fn, which must throw E (or a subclass) whose message contains every string in `needles`.
// Prints a Markdown row when GRADUS_PRINT_MESSAGES is set. (Substrings, not std::regex: GCC 12
// reports false -Wmaybe-uninitialized errors in <regex> under -fsanitize=address.)
template <typename E>
void expect_error(const std::string& what, const std::function<void()>& fn,
                  const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(msg.find(needle), std::string::npos)
          << what << ": the message\n  " << msg << "\ndoes not contain\n  " << needle;
    }
    if (std::getenv("GRADUS_PRINT_MESSAGES") != nullptr) {
      std::printf("| %s | `%s` |\n", what.c_str(), msg.c_str());
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw the wrong type (" << typeid(e).name() << "): " << e.what();
    return;
  }
  ADD_FAILURE() << what << ": did not throw";
}

template <typename E>
void expect_error(const std::string& what, const std::function<void()>& fn,
                  const std::string& needle) {
  expect_error<E>(what, fn, std::vector<std::string>{needle});
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("gradus_bad_input_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(testing::fresh_seed() % 1000000));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(BadInputFiles, CorruptTruncatedAndOversizedSafetensors) {
  TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  const std::string good = dir.file("good.safetensors");
  io::save_safetensors(good, {{"w", testing::random_tensor({4, 3}, seed, -1, 1, DType::f32)}});
  const std::string bytes = read_bytes(good);

  const std::string truncated = dir.file("truncated.safetensors");
  write_bytes(truncated, bytes.substr(0, bytes.size() - 5));
  expect_error<IOError>(
      "safetensors: file truncated by 5 bytes", [&] { io::read_safetensors(truncated); },
      "truncated.safetensors");

  std::string huge = bytes;
  const uint64_t too_large = 100'000'001;
  std::memcpy(huge.data(), &too_large, 8);
  const std::string oversized = dir.file("oversized.safetensors");
  write_bytes(oversized, huge);
  expect_error<IOError>(
      "safetensors: header length 100,000,001 (> 100 MB cap)",
      [&] { io::read_safetensors(oversized); }, "100000001");

  const std::string garbage = dir.file("garbage.safetensors");
  write_bytes(garbage, "this is not a safetensors file at all");
  expect_error<IOError>(
      "safetensors: a text file", [&] { io::read_safetensors(garbage); }, "garbage.safetensors");

  expect_error<IOError>(
      "safetensors: missing file", [&] { io::read_safetensors(dir.file("missing.safetensors")); },
      "missing.safetensors");
}

TEST(BadInputFiles, WrongModuleWeightsAndCheckpoints) {
  TempDir dir;
  manual_seed(testing::fresh_seed());
  nn::Linear small(4, 3), other(5, 3);
  const std::string path = dir.file("linear.safetensors");
  io::save_module(small, path);
  expect_error<ShapeError>("load_module: weights of another shape (strict)",
                           [&] { io::load_module(other, path); }, {"weight", "[3, 4]", "[3, 5]"});
  nn::Sequential seq;
  seq.push_back(std::make_shared<nn::Linear>(4, 3));
  expect_error<Error>(
      "load_module: different names (missing and unexpected keys)",
      [&] { io::load_module(seq, path); }, "0.weight");
  expect_error<IOError>(
      "load_checkpoint: plain weights file, not a checkpoint", [&] { io::load_checkpoint(path); },
      "not a gradus checkpoint");
}

TEST(BadInputFiles, CorruptIdx) {
  TempDir dir;
  const std::string path = dir.file("images-idx3-ubyte");
  write_bytes(path,
              std::string("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c", 16) +
                  std::string(100, 'x'));
  expect_error<IOError>(
      "IDX: 2x28x28 header, 100 data bytes", [&] { data::read_idx(path); },
      "truncated or its dims are wrong");
  write_bytes(path, std::string("\x00\x00\x08\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
                                "\xff\xff\xff\xff",
                                20));
  expect_error<IOError>(
      "IDX: dims whose product overflows", [&] { data::read_idx(path); },
      "more than the address space");
  write_bytes(path, "PK\x03\x04 a zip file");
  expect_error<IOError>(
      "IDX: wrong magic number", [&] { data::read_idx(path); }, "bad magic number");
  // Zero elements, but the other dims' strides overflow int64 (found by fuzz_idx).
  write_bytes(path, std::string("\x00\x00\x08\x04\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"
                                "\xff\xff\xff\xff",
                                20));
  expect_error<ShapeError>(
      "IDX: dims [0, 2^32-1, 2^32-1, 2^32-1] (empty, strides overflow)",
      [&] { data::read_idx(path); }, "is too large: its strides overflow");
  const std::string gz = dir.file("labels-idx1-ubyte.gz");
  write_bytes(gz, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8));
  expect_error<IOError>(
      "IDX: truncated .gz", [&] { data::read_idx(gz); }, "truncated");
}

TEST(BadInputOps, ShapesDTypesDevicesIndices) {
  const uint64_t seed = testing::fresh_seed();
  const Tensor a = testing::random_tensor({32, 784}, seed, -1, 1, DType::f32);
  const Tensor b = testing::random_tensor({128, 10}, seed + 1, -1, 1, DType::f32);
  expect_error<ShapeError>("matmul: inner dimensions differ", [&] { matmul(a, b); },
                           {"matmul", "784", "128"});
  expect_error<ShapeError>(
      "add: shapes that do not broadcast",
      [&] { add(a, testing::random_tensor({3}, seed, -1, 1, DType::f32)); },
      std::vector<std::string>{"[32, 784]", "[3]"});
  expect_error<Error>(
      "reshape: wrong element count",
      [&] {
        a.reshape({5, 5});
      },
      "reshape");
  const Tensor logits = testing::random_tensor({4, 10}, seed + 2, -1, 1, DType::f32);
  expect_error<IndexError>(
      "cross_entropy: class index 10 of 10",
      [&] {
        cross_entropy(logits, tensor({1, 2, 10, 3}, {}, {DType::i64}));
      },
      "10");
  expect_error<DTypeError>(
      "cross_entropy: float targets", [&] { cross_entropy(logits, logits); }, "cross_entropy");
  const Tensor table = testing::random_tensor({5, 3}, seed + 3, -1, 1, DType::f32);
  expect_error<IndexError>(
      "embedding: index 7 in a table of 5",
      [&] {
        embedding(table, tensor({0, 7}, {}, {DType::i64}));
      },
      "7");
  expect_error<IndexError>(
      "index_select: negative index",
      [&] { index_select(table, 0, tensor({-9}, {}, {DType::i64})); }, "-9");
  expect_error<Error>(
      "sum over dim 5 of a 2-D tensor", [&] { sum(a, {5}); }, "5");
  const int64_t big = int64_t{1} << 40;
  expect_error<ShapeError>(
      "empty([2^40, 2^40]): element count overflows",
      [&] {
        empty({big, big}, {DType::f32});
      },
      "element count overflows");
  if (cuda_device_count() == 0) {
    expect_error<DeviceError>(
        "to(cuda:0) without a GPU", [&] { a.to(Device::cuda(0)); }, "cuda");
  }
}

TEST(BadInputAnomaly, NaNNamesTheOp) {
  const uint64_t seed = testing::fresh_seed();
  DetectAnomalyGuard anomaly;
  Tensor x = testing::random_tensor({8}, seed, 0.5, 1.0, DType::f32);
  x.set_requires_grad();
  expect_error<AutogradError>(
      "anomaly mode: log of a negative number (forward)", [&] { (void)log(neg(x)); }, "log");
  Tensor y = testing::random_tensor({8}, seed + 1, 0.5, 1.0, DType::f32);
  y.set_requires_grad();
  expect_error<AutogradError>(
      "anomaly mode: sqrt(0) backward gives Inf", [&] { sqrt(y * 0.0).sum().backward(); }, "sqrt");
}

}  // namespace
}  // namespace gradus
