// IDX reader (MNIST format) with gzip support through zlib. Every check names the file, what is
// wrong and what was expected; sizes are validated before anything is allocated from them.
#include "gradus/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "gradus/core/error.h"

namespace gradus::data {

static_assert(std::endian::native == std::endian::little,
              "parse_idx converts big-endian file values for a little-endian host");

namespace {

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%0*X", digits, v);
  return buf;
}

std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GRADUS_CHECK(in.good(), IOError, "read_idx: cannot open '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  GRADUS_CHECK(!in.bad(), IOError, "read_idx: error while reading '", path, "'");
  return bytes;
}

// Inflates gzip data (one or more concatenated members, as gzip(1) allows).
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  z_stream zs{};
  GRADUS_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, IOError,
               "read_idx: cannot initialise zlib to read '", path, "'");
  std::vector<uint8_t> out;
  // The gzip trailer holds the uncompressed size mod 2^32: a good first guess for the buffer.
  // It is unchecked input, so it is capped by what deflate can produce from this many bytes
  // (at most 1032:1): a 40-byte file claiming 4 GB must not reserve gigabytes.
  if (in.size() >= 18) {
    uint32_t isize;
    std::memcpy(&isize, in.data() + in.size() - 4, 4);  // little-endian in the file
    out.reserve(std::min<size_t>({isize, in.size() * 1032, size_t{1} << 31}));
  }
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  GRADUS_CHECK(in.size() <= std::numeric_limits<uInt>::max(), IOError, "read_idx: '", path,
               "' is too large (", in.size(), " bytes of gzip data)");
  uint8_t chunk[1 << 16];
  int ret = Z_OK;
  for (;;) {
    zs.next_out = chunk;
    zs.avail_out = sizeof(chunk);
    ret = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another gzip member follows (or trailing garbage, which the next inflate rejects).
      inflateReset(&zs);
      continue;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw IOError(detail::str_cat("read_idx: '", path,
                                    "' is truncated: the gzip stream ends after ", in.size(),
                                    " compressed bytes before its end marker (expected a "
                                    "complete .gz file; re-download it)"));
    }
    const std::string msg = zs.msg ? zs.msg : "unknown error";
    inflateEnd(&zs);
    throw IOError(detail::str_cat("read_idx: '", path, "' is not valid gzip data: zlib says '", msg,
                                  "' (code ", ret, ")"));
  }
  inflateEnd(&zs);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxType {
  uint8_t code;
  DType dtype;
  const char* name;
};
constexpr IdxType kTypes[] = {{0x08, DType::u8, "uint8"},
                              {0x0C, DType::i32, "int32"},
                              {0x0D, DType::f32, "float32"},
                              {0x0E, DType::f64, "float64"}};
constexpr const char* kTypeList = "0x08 uint8, 0x0C int32, 0x0D float32 or 0x0E float64";

}  // namespace

std::vector<uint8_t> read_file_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> raw = read_raw(path);
  const bool is_gzip = raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b;
  if (is_gzip) return gunzip(raw, path);
  GRADUS_CHECK(!path.ends_with(".gz"), IOError, "read_idx: '", path,
               "' is not gzip data: a .gz file starts with the bytes 1f 8b, this one with ",
               raw.empty() ? std::string("nothing (it is empty)")
                           : hex(raw[0], 2) + (raw.size() > 1 ? " " + hex(raw[1], 2) : ""));
  return raw;
}

Tensor parse_idx(const std::vector<uint8_t>& bytes, const std::string& name) {
  GRADUS_CHECK(bytes.size() >= 4, IOError, "read_idx: '", name, "' is truncated: ", bytes.size(),
               " bytes, but an IDX file starts with a 4-byte magic number");
  const uint32_t magic = be32(bytes.data());
  const uint8_t type_code = bytes[2];
  const int ndim = bytes[3];
  const IdxType* type = nullptr;
  for (const IdxType& t : kTypes) {
    if (t.code == type_code) type = &t;
  }
  GRADUS_CHECK(bytes[0] == 0 && bytes[1] == 0 && type != nullptr && ndim >= 1, IOError,
               "read_idx: '", name, "' has a bad magic number ", hex(magic, 8),
               ": expected 00 00, a type byte (", kTypeList,
               ") and a dim count >= 1, e.g. 0x00000803 for uint8 images or 0x00000801 for "
               "uint8 labels");
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  GRADUS_CHECK(bytes.size() >= header, IOError, "read_idx: '", name,
               "' is truncated inside its header: ", ndim, " dims need ", header,
               " header bytes, the file has ", bytes.size());
  Shape shape;
  const size_t elem = dtype_size(type->dtype);
  // Dims are uint32 each; the product can overflow, so compare against what the file holds.
  const size_t available = bytes.size() - header;
  size_t count = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t dim = be32(bytes.data() + 4 + 4 * d);
    shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && count > std::numeric_limits<size_t>::max() / elem / dim) overflow = true;
    count *= dim;
  }
  GRADUS_CHECK(!overflow && count * elem <= available, IOError, "read_idx: '", name,
               "' is truncated or its dims are wrong: the header declares ", shape_str(shape), " ",
               type->name, " values (",
               overflow ? std::string("more than the address space")
                        : detail::str_cat(count * elem, " bytes"),
               ") but only ", available, " bytes of data follow the header");
  GRADUS_CHECK(count * elem == available, IOError, "read_idx: '", name,
               "' does not match its dims: the header declares ", shape_str(shape), " ", type->name,
               " values (", count * elem, " bytes) but ", available,
               " bytes of data follow the header (", available - count * elem, " extra)");

  Tensor out = empty(shape, {type->dtype, Device::cpu(), false});
  const uint8_t* src = bytes.data() + header;
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  if (elem == 1) {
    if (count > 0) std::memcpy(dst, src, count);  // an empty tensor has no buffer (dst null)
  } else {
    // Values are big-endian: reverse each element's bytes.
    for (size_t i = 0; i < count; ++i) {
      for (size_t k = 0; k < elem; ++k) dst[i * elem + k] = src[i * elem + (elem - 1 - k)];
    }
  }
  return out;
}

Tensor read_idx(const std::string& path) {
  return parse_idx(read_file_maybe_gzip(path), path);
}

Tensor read_idx_u8(const std::string& path, int ndim) {
  const std::vector<uint8_t> bytes = read_file_maybe_gzip(path);
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(ndim);
  const char* what = ndim == 3 ? " (uint8 images)" : ndim == 1 ? " (uint8 labels)" : " (uint8)";
  GRADUS_CHECK(bytes.size() >= 4, IOError, "read_idx: '", path, "' is truncated: ", bytes.size(),
               " bytes, but it should start with the magic number ", hex(expected, 8), what);
  const uint32_t magic = be32(bytes.data());
  GRADUS_CHECK(magic == expected, IOError, "read_idx: '", path, "' has the magic number ",
               hex(magic, 8), ", expected ", hex(expected, 8), what);
  return parse_idx(bytes, path);
}

}  // namespace gradus::data
