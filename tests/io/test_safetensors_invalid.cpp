// Every way a safetensors file can be malformed: each must throw IOError naming the file and the
// exact problem, through both read_safetensors (file) and parse_safetensors (memory), and
// read_safetensors_header must agree.
#include "gradus/io/io.h"
#include "io/io_test_util.h"

namespace gradus::testing {
namespace {

class SafetensorsInvalid : public IoTest {
 protected:
  // Expects every reader to reject `bytes` with a message containing the file name and `needle`.
  // header_detects = false for problems in the tensor data, which read_safetensors_header (by
  // design) does not read.
  void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& needle,
                       bool header_detects = true) {
    SCOPED_TRACE(needle);
    const std::string p = path("model.safetensors");
    write_bytes(p, bytes);
    auto check = [&](auto&& fn, const std::string& name) {
      try {
        fn();
        ADD_FAILURE() << "accepted; expected IOError containing: " << needle;
      } catch (const IOError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(name + ": "), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
      }
    };
    check([&] { io::read_safetensors(p); }, p);
    if (header_detects) {
      check([&] { io::read_safetensors_header(p); }, p);
    } else {
      EXPECT_NO_THROW(io::read_safetensors_header(p));
    }
    check([&] { io::parse_safetensors(bytes.data(), bytes.size(), "model.safetensors"); },
          "model.safetensors");
  }
  static std::vector<uint8_t> zeros(size_t n) { return std::vector<uint8_t>(n, 0); }
};

TEST_F(SafetensorsInvalid, TooSmall) {
  expect_rejected({}, "file has 0 bytes");
  expect_rejected({1, 0, 0}, "file has 3 bytes");
}

TEST_F(SafetensorsInvalid, HeaderLength) {
  expect_rejected(make_file("{}", {}, 100'000'001), "exceeds the limit of 100000000 bytes");
  expect_rejected(make_file("{}", {}, UINT64_MAX), "exceeds the limit");
  expect_rejected(make_file("{}", {}, 3), "runs past the end of the file");
  expect_rejected(make_file("", {}, 0), "header is empty");
}

TEST_F(SafetensorsInvalid, HeaderEncoding) {
  expect_rejected(make_file("{\"a\xFF\":1}"), "not valid UTF-8");
  expect_rejected(make_file("{\"\xC0\x80\":1}"), "not valid UTF-8");      // overlong
  expect_rejected(make_file("{\"\xED\xA0\x80\":1}"), "not valid UTF-8");  // surrogate
  expect_rejected(make_file("{\"\xE2\x82\":1}"), "not valid UTF-8");      // cut short
  expect_rejected(make_file(" {}"), "must start with '{'");
  expect_rejected(make_file("[]"), "must start with '{'");
  expect_rejected(make_file(std::string("{}\0\0", 4)), "NUL byte at offset 2");
  expect_rejected(make_file(std::string("{}\0garbage", 10)), "NUL byte");
  expect_rejected(make_file("{"), "not valid JSON");
  expect_rejected(make_file("{}x"), "not valid JSON");
  expect_rejected(make_file("{} {}"), "not valid JSON");
  expect_rejected(make_file("{\"a\":1,}"), "not valid JSON");
  expect_rejected(make_file("{/*c*/}"), "not valid JSON");
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  expect_rejected(make_file(deep), "nests deeper than");
}

TEST_F(SafetensorsInvalid, DuplicateKeys) {
  const std::string e = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  expect_rejected(make_file("{\"w\":" + e + ",\"w\":" + e + "}", {1}), "the key 'w' twice");
  expect_rejected(
      make_file(R"({"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {1}),
      "the key 'dtype' twice (in a nested object)");
  expect_rejected(make_file(R"({"__metadata__":{"a":"1","a":"2"}})"), "the key 'a' twice");
}

TEST_F(SafetensorsInvalid, EntryFields) {
  expect_rejected(make_file(R"({"w":[1]})"),
                  "tensor 'w': entry must be a JSON object, got an array");
  expect_rejected(make_file(R"({"w":{"shape":[0],"data_offsets":[0,0]}})"),
                  "tensor 'w': missing field 'dtype'");
  expect_rejected(make_file(R"({"w":{"dtype":"F32","data_offsets":[0,0]}})"),
                  "missing field 'shape'");
  expect_rejected(make_file(R"({"w":{"dtype":"F32","shape":[0]}})"),
                  "missing field 'data_offsets'");
  expect_rejected(make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":1}})"),
                  "unexpected field 'x'");
}

TEST_F(SafetensorsInvalid, DType) {
  expect_rejected(make_file(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", zeros(4)),
                  "tensor 'w': unknown dtype 'F7'");
  expect_rejected(make_file(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", zeros(4)),
                  "unknown dtype 'f32'");
  expect_rejected(make_file(R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", zeros(1)),
                  "dtype I8 is a safetensors dtype that gradus does not support");
  expect_rejected(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", zeros(4)),
                  "dtype must be a string, got an integer");
}

TEST_F(SafetensorsInvalid, Shape) {
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})"),
                  "shape element 0 is -1; dimensions must be non-negative integers");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[1,2.5],"data_offsets":[0,0]}})"),
                  "shape element 1 is 2.5");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})", zeros(2)),
                  "shape element 0 is \"2\"");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":3,"data_offsets":[0,3]}})", zeros(3)),
                  "shape must be an array, got an integer");
  // Overflow of the element count and of the byte count, and dims gradus cannot index.
  expect_rejected(
      make_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      "has more elements than fit in 64 bits");
  expect_rejected(
      make_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
      "needs more bytes than fit in 64 bits");
  expect_rejected(
      make_file(R"({"w":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}})"),
      "dimension 18446744073709551615 in shape [0, 18446744073709551615] exceeds 2^63 - 1");
  expect_rejected(
      make_file(R"({"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})"),
      "shape element 0 is");  // > u64: parsed as a float
}

TEST_F(SafetensorsInvalid, DataOffsets) {
  expect_rejected(make_file(R"({"fc.weight":{"dtype":"F32","shape":[5,6],"data_offsets":[0,100]}})",
                            zeros(100)),
                  "tensor 'fc.weight': data_offsets [0, 100] hold 100 bytes but shape [5, 6] of "
                  "F32 needs 120");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[3,1]}})", zeros(3)),
                  "data_offsets [3, 1] end before they begin");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", zeros(2)),
                  "data_offsets must be an array [begin, end], got [0]");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}})", zeros(2)),
                  "data_offsets must be an array [begin, end]");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", zeros(2)),
                  "data_offsets [-1,1] must be non-negative integers");
  expect_rejected(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":"0,2"}})", zeros(2)),
                  "data_offsets must be an array");
}

TEST_F(SafetensorsInvalid, CoverageOfTheDataSection) {
  // Gap at the start, gap in the middle, overlap, data missing (truncated) and trailing bytes.
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", zeros(3)),
                  "tensor 'a': data_offsets [1, 3] leave a gap: bytes [0, 1) of the data belong "
                  "to no tensor");
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                            zeros(6)),
                  "tensor 'b': data_offsets [4, 6] leave a gap: bytes [2, 4)");
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                            zeros(4)),
                  "tensor 'b': data_offsets [2, 4] overlap tensor 'a' which ends at 4");
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", zeros(3)),
                  "tensor data needs 4 bytes but the file holds only 3 after the header "
                  "(truncated file?)");
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", zeros(5)),
                  "the file has 1 trailing bytes after the last tensor");
  expect_rejected(make_file("{}", zeros(1)), "1 trailing bytes");
  // A file truncated mid-way (the classic interrupted copy).
  std::vector<uint8_t> good =
      make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", zeros(16));
  // (erase, not resize(size() - 7): the latter trips GCC 12's -Warray-bounds under ASan)
  good.erase(good.end() - 7, good.end());
  expect_rejected(good, "truncated file?");
}

TEST_F(SafetensorsInvalid, Metadata) {
  expect_rejected(make_file(R"({"__metadata__":{"a":1}})"),
                  "__metadata__ value of 'a' must be a string, got an integer 1");
  expect_rejected(make_file(R"({"__metadata__":{"a":{"b":"c"}}})"), "got an object");
  expect_rejected(make_file(R"({"__metadata__":["a"]})"),
                  "__metadata__ must be an object of strings, got an array");
  expect_rejected(make_file(R"({"__metadata__":"x"})"), "got a string");
}

TEST_F(SafetensorsInvalid, BoolBytesMustBeZeroOrOne) {
  expect_rejected(
      make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", {1, 0, 7}),
      "tensor 'm': BOOL element 2 has byte value 7 (must be 0 or 1)",
      /*header_detects=*/false);
}

// The boundary cases the reference accepts must load too.
TEST_F(SafetensorsInvalid, AcceptedEdgeCases) {
  // Offsets listed out of order in the header, several empty tensors sharing an offset, null
  // metadata, whitespace after the object, and a header that is not 8-aligned.
  const std::string h =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"__metadata__":null,)"
      R"("e2":{"dtype":"F32","shape":[0,5],"data_offsets":[2,2]},)"
      R"("a":{"dtype":"U8","shape":[1,2],"data_offsets":[0,2]},)"
      R"("e1":{"dtype":"I64","shape":[3,0],"data_offsets":[2,2]}} )"
      "\n\t";
  std::vector<uint8_t> bytes = make_file(h, {1, 2, 3, 4});
  io::SafetensorsFile f = io::parse_safetensors(bytes.data(), bytes.size(), "edge");
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].first, "a");
  EXPECT_EQ(f.tensors[3].first, "b");
  EXPECT_EQ(tensor_bytes(f.at("a")), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(tensor_bytes(f.at("b")), (std::vector<uint8_t>{3, 4}));
  EXPECT_EQ(f.at("e1").sizes(), (Shape{3, 0}));
  EXPECT_EQ(f.at("e2").dtype(), DType::f32);
  EXPECT_TRUE(f.metadata.empty());
  // An empty file body: {} padded, no tensors.
  bytes = make_file("{}      ");
  EXPECT_TRUE(io::parse_safetensors(bytes.data(), bytes.size(), "x").tensors.empty());
}

TEST_F(SafetensorsInvalid, MissingFileAndDirectoryAreIOErrors) {
  try {
    io::read_safetensors(path("nope.safetensors"));
    ADD_FAILURE();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors: cannot open"), std::string::npos);
  }
  EXPECT_THROW(io::read_safetensors(dir_.string()), IOError);
}

// Every prefix of a valid file and every single-byte corruption of its header is rejected or
// parsed without crashing (run under ASan/UBSan in the sanitizer build).
TEST_F(SafetensorsInvalid, TruncationsAndByteFlipsNeverCrash) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const std::string p = path("ok.safetensors");
  io::save_safetensors(p,
                       {{"a", random_raw_tensor({3, 2}, DType::f32, seed)},
                        {"m", random_raw_tensor({5}, DType::boolean, seed + 1)},
                        {"s", random_raw_tensor({}, DType::i64, seed + 2)}},
                       {{"k", "v"}});
  const std::vector<uint8_t> good = read_bytes(p);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(io::parse_safetensors(good.data(), n, "prefix"), IOError) << n;
  }
  uint64_t hlen = 0;
  std::memcpy(&hlen, good.data(), 8);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < 8 + hlen; ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      io::parse_safetensors(bad.data(), bad.size(), "flip");
    } catch (const IOError&) {
    }
  }
}

}  // namespace
}  // namespace gradus::testing
