// safetensors reader and writer. The validation mirrors the reference Rust implementation
// (huggingface/safetensors, safetensors/src/tensor.rs) rule for rule, plus a few checks it leaves
// to serde or omits (duplicate keys, unknown fields, NUL bytes, BOOL byte values), so that a file
// gradus accepts is one the reference accepts, and every rejection says exactly what is wrong.
#include "gradus/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "gradus/autograd.h"
#include "gradus/io/atomic_file.h"

namespace gradus::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; gradus's reader copies bytes verbatim");

using json = nlohmann::json;

namespace {

// ------------------------------------------------------------------------------ dtype table
struct DTypeCode {
  const char* code;
  DType dtype;
};
constexpr DTypeCode kCodes[] = {
    {"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16}, {"BF16", DType::bf16},
    {"I32", DType::i32}, {"I64", DType::i64}, {"U8", DType::u8},   {"BOOL", DType::boolean},
};
// Codes the format defines but gradus has no dtype for: a distinct message from a typo.
constexpr const char* kUnsupportedCodes[] = {"I8",      "I16",     "U16",     "U32",
                                             "U64",     "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                             "F6_E2M3", "F6_E3M2", "F4",      "C64"};

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference's limit
constexpr int kMaxJsonDepth = 64;  // valid headers nest 3 deep; bounds work on hostile input

std::string squote(const std::string& s) {
  return "'" + s + "'";
}

// Shapes print as [5, 6]; dims come from the file as u64.
std::string dims_str(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

const char* json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
      return "a negative integer";
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a floating-point number";
    default:
      return "an unsupported value";
  }
}

// A short rendering of a JSON value for messages (never the whole of a huge value).
std::string json_excerpt(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

struct DepthExceeded {};

// Parses the header with nlohmann, additionally rejecting duplicate keys (nlohmann keeps the last
// silently, serde the reference rejects them) and absurd nesting. `top_keys` receives the
// top-level keys in header order (nlohmann's object sorts them).
json parse_json_strict(const char* begin, const char* end, const std::string& file,
                       std::vector<std::string>& top_keys) {
  std::vector<std::set<std::string>> keys;  // one key set per open object
  std::string duplicate;
  size_t duplicate_depth = 0;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        if (depth >= kMaxJsonDepth) throw DepthExceeded{};
        keys.emplace_back();
        break;
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw DepthExceeded{};
        break;
      case json::parse_event_t::key:
        if (keys.size() == 1) top_keys.push_back(parsed.get<std::string>());
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_depth = keys.size();
        }
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(begin, end, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const DepthExceeded&) {
    throw IOError(detail::str_cat(file, ": header JSON nests deeper than ", kMaxJsonDepth,
                                  " levels (a safetensors header nests 3)"));
  } catch (const json::exception& e) {
    throw IOError(detail::str_cat(file, ": header is not valid JSON: ", e.what()));
  }
  GRADUS_CHECK(duplicate.empty(), IOError, file, ": header has the key ", squote(duplicate),
               " twice", duplicate_depth == 1 ? "" : " (in a nested object)");
  return j;
}

// Reads a non-negative JSON integer as u64, or explains what it is instead.
bool as_u64(const json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<uint64_t>();
  return true;
}

SafetensorsEntry parse_entry(const std::string& file, const std::string& name, const json& v) {
  const std::string where = detail::str_cat(file, ": tensor ", squote(name), ": ");
  GRADUS_CHECK(v.is_object(), IOError, where, "entry must be a JSON object, got ", json_type(v));
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    GRADUS_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", IOError, where,
                 "unexpected field ", squote(k),
                 " (an entry has exactly dtype, shape, "
                 "data_offsets)");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    GRADUS_CHECK(v.contains(k), IOError, where, "missing field '", k, "'");
  }

  SafetensorsEntry e;
  e.name = name;
  const json& jd = v["dtype"];
  GRADUS_CHECK(jd.is_string(), IOError, where, "dtype must be a string, got ", json_type(jd));
  const std::string code = jd.get<std::string>();
  bool found = false;
  for (const DTypeCode& c : kCodes) {
    if (code == c.code) {
      e.dtype = c.dtype;
      found = true;
    }
  }
  if (!found) {
    for (const char* u : kUnsupportedCodes) {
      GRADUS_CHECK(code != u, IOError, where, "dtype ", code,
                   " is a safetensors dtype that gradus does not support (supported: F32, F64, "
                   "F16, BF16, I32, I64, U8, BOOL)");
    }
    throw IOError(detail::str_cat(where, "unknown dtype ", squote(code),
                                  " (safetensors dtypes: F32, F64, F16, BF16, I32, I64, U8, BOOL, "
                                  "I8, I16, U16, U32, U64, F8_E5M2, F8_E4M3)"));
  }

  const json& js = v["shape"];
  GRADUS_CHECK(js.is_array(), IOError, where, "shape must be an array, got ", json_type(js));
  std::vector<uint64_t> dims;
  dims.reserve(js.size());
  for (size_t i = 0; i < js.size(); ++i) {
    uint64_t d = 0;
    GRADUS_CHECK(as_u64(js[i], d), IOError, where, "shape element ", i, " is ", json_excerpt(js[i]),
                 "; dimensions must be non-negative integers");
    dims.push_back(d);
  }
  // numel and byte size with overflow checks (a hostile header can claim [2^40, 2^40]).
  uint64_t numel = 1;
  for (uint64_t d : dims) {
    GRADUS_CHECK(!__builtin_mul_overflow(numel, d, &numel), IOError, where, "shape ",
                 dims_str(dims), " has more elements than fit in 64 bits");
  }
  const uint64_t itemsize = dtype_size(e.dtype);
  uint64_t nbytes = 0;
  GRADUS_CHECK(!__builtin_mul_overflow(numel, itemsize, &nbytes), IOError, where, "shape ",
               dims_str(dims), " of ", code, " needs more bytes than fit in 64 bits");
  // gradus shapes are int64: a dim beyond that cannot be held even when another dim is 0.
  for (uint64_t d : dims) {
    GRADUS_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), IOError, where,
                 "dimension ", d, " in shape ", dims_str(dims), " exceeds 2^63 - 1");
  }
  GRADUS_CHECK(numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), IOError, where,
               "shape ", dims_str(dims), " has more than 2^63 - 1 elements");
  e.shape.assign(dims.begin(), dims.end());

  const json& jo = v["data_offsets"];
  GRADUS_CHECK(jo.is_array() && jo.size() == 2, IOError, where,
               "data_offsets must be an array [begin, end], got ", json_excerpt(jo));
  GRADUS_CHECK(as_u64(jo[0], e.begin) && as_u64(jo[1], e.end), IOError, where, "data_offsets ",
               json_excerpt(jo), " must be non-negative integers");
  GRADUS_CHECK(e.begin <= e.end, IOError, where, "data_offsets [", e.begin, ", ", e.end,
               "] end before they begin");
  GRADUS_CHECK(e.end - e.begin == nbytes, IOError, where, "data_offsets [", e.begin, ", ", e.end,
               "] hold ", e.end - e.begin, " bytes but shape ", dims_str(dims), " of ", code,
               " needs ", nbytes);
  return e;
}

// Checks a byte range is well-formed UTF-8 (no overlongs, surrogates or code points past
// U+10FFFF); returns the offset of the first bad byte or `n`.
size_t utf8_error_offset(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return n;
}

}  // namespace

const char* safetensors_dtype_code(DType dtype) {
  for (const DTypeCode& c : kCodes) {
    if (c.dtype == dtype) return c.code;
  }
  return "F32";
}

namespace detail_st {

uint64_t check_prefix(const uint8_t* first8, uint64_t file_size, const std::string& file) {
  GRADUS_CHECK(file_size >= 8, IOError, file, ": file has ", file_size,
               " bytes; a safetensors file starts with an 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, first8, 8);  // little-endian (static_assert above)
  GRADUS_CHECK(n <= kMaxHeaderSize, IOError, file, ": header length ", n, " exceeds the limit of ",
               kMaxHeaderSize, " bytes (not a safetensors file?)");
  GRADUS_CHECK(n <= file_size - 8, IOError, file, ": header length ", n,
               " runs past the end of "
               "the file (",
               file_size, " bytes; truncated file?)");
  return n;
}

SafetensorsHeader parse_header(const uint8_t* header, uint64_t n, uint64_t file_size,
                               const std::string& file) {
  GRADUS_CHECK(n > 0, IOError, file, ": header is empty (length 0)");
  const size_t bad = utf8_error_offset(header, n);
  GRADUS_CHECK(bad == n, IOError, file, ": header is not valid UTF-8 (bad byte 0x", std::hex,
               static_cast<int>(header[bad < n ? bad : 0]), std::dec, " at header offset ", bad,
               ")");
  GRADUS_CHECK(header[0] == '{', IOError, file,
               ": header must start with '{' (a JSON object), "
               "found byte 0x",
               std::hex, static_cast<int>(header[0]));
  // nlohmann treats a NUL as end of input and would ignore whatever follows it.
  const void* nul = std::memchr(header, 0, n);
  GRADUS_CHECK(nul == nullptr, IOError, file, ": header contains a NUL byte at offset ",
               static_cast<const uint8_t*>(nul) - header);
  const char* text = reinterpret_cast<const char*>(header);
  std::vector<std::string> order;
  json j = parse_json_strict(text, text + n, file, order);
  GRADUS_CHECK(j.is_object(), IOError, file, ": header must be a JSON object, got ", json_type(j));

  SafetensorsHeader h;
  h.data_start = 8 + n;
  h.entries.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      const json& m = it.value();
      if (m.is_null()) continue;  // the reference (serde Option) accepts null as "no metadata"
      GRADUS_CHECK(m.is_object(), IOError, file,
                   ": __metadata__ must be an object of strings, "
                   "got ",
                   json_type(m));
      for (auto mi = m.begin(); mi != m.end(); ++mi) {
        GRADUS_CHECK(mi.value().is_string(), IOError, file, ": __metadata__ value of ",
                     squote(mi.key()), " must be a string, got ", json_type(mi.value()), " ",
                     json_excerpt(mi.value()));
        h.metadata.emplace(mi.key(), mi.value().get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(file, it.key(), it.value()));
  }

  // Like the reference: sort by offsets, then the data must be covered exactly, from 0 to the end
  // of the file, with neither gaps nor overlaps. Empty tensors sharing an offset keep their header
  // order, so a file lists its tensors in the order they were written.
  std::unordered_map<std::string, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position.emplace(order[i], i);
  std::sort(h.entries.begin(), h.entries.end(),
            [&](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              if (a.end != b.end) return a.end < b.end;
              return position[a.name] < position[b.name];
            });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.entries) {
    GRADUS_CHECK(e.begin <= expected, IOError, file, ": tensor ", squote(e.name),
                 ": data_offsets [", e.begin, ", ", e.end, "] leave a gap: bytes [", expected, ", ",
                 e.begin, ") of the data belong to no tensor");
    GRADUS_CHECK(e.begin >= expected, IOError, file, ": tensor ", squote(e.name),
                 ": data_offsets [", e.begin, ", ", e.end, "] overlap tensor ",
                 squote(prev ? prev->name : std::string()), " which ends at ", expected);
    expected = e.end;
    prev = &e;
  }
  const uint64_t data_size = file_size - 8 - n;
  GRADUS_CHECK(expected <= data_size, IOError, file, ": tensor data needs ", expected,
               " bytes but the file holds only ", data_size, " after the header (truncated file?)");
  GRADUS_CHECK(expected == data_size, IOError, file, ": the file has ", data_size - expected,
               " trailing bytes after the last tensor (tensors cover ", expected, " of ", data_size,
               " data bytes)");
  return h;
}

void check_bool_bytes(const SafetensorsEntry& e, const Tensor& t, const std::string& file) {
  if (e.dtype != DType::boolean) return;
  const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    GRADUS_CHECK(p[i] <= 1, IOError, file, ": tensor ", squote(e.name), ": BOOL element ", i,
                 " has byte value ", static_cast<int>(p[i]), " (must be 0 or 1)");
  }
}

}  // namespace detail_st

// ---------------------------------------------------------------------------------- reading
const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string present;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) {
    present += (i ? ", " : "") + squote(tensors[i].first);
  }
  if (tensors.size() > 8) present += ", ...";
  throw IOError(detail::str_cat("safetensors: no tensor named ", squote(name), " (the file has ",
                                tensors.size(), " tensors", tensors.empty() ? "" : ": ", present,
                                ")"));
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size,
                                  const std::string& name_for_errors) {
  const std::string& file = name_for_errors;
  GRADUS_CHECK(data != nullptr || size == 0, IOError, file, ": null buffer");
  GRADUS_CHECK(size >= 8, IOError, file, ": file has ", size,
               " bytes; a safetensors file starts with an 8-byte header length");
  const uint64_t n = detail_st::check_prefix(data, size, file);
  SafetensorsHeader h = detail_st::parse_header(data + 8, n, size, file);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const SafetensorsEntry& e : h.entries) {
    Tensor t = empty(e.shape, {e.dtype, Device::cpu()});
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + h.data_start + e.begin, e.end - e.begin);
    detail_st::check_bool_bytes(e, t, file);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

namespace {

// An open file descriptor that closes itself.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& file) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IOError(detail::str_cat(file, ": read failed: ", std::strerror(errno)));
    }
    GRADUS_CHECK(r > 0, IOError, file, ": file ended early at byte ", offset,
                 " (was it truncated while being read?)");
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// Opens `path`, checks it is a regular file, returns its size. O_NONBLOCK: opening a FIFO for
// reading would otherwise wait for a writer forever, before the regular-file check could run (it
// changes nothing for regular files).
uint64_t open_file(const std::string& path, Fd& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  GRADUS_CHECK(f.fd >= 0, IOError, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  GRADUS_CHECK(::fstat(f.fd, &st) == 0, IOError, path, ": cannot stat: ", std::strerror(errno));
  GRADUS_CHECK(S_ISREG(st.st_mode), IOError, path, ": not a regular file (",
               S_ISDIR(st.st_mode)    ? "a directory"
               : S_ISFIFO(st.st_mode) ? "a FIFO"
               : S_ISCHR(st.st_mode)  ? "a character device"
                                      : "a special file",
               ")");
  return static_cast<uint64_t>(st.st_size);
}

SafetensorsHeader read_header_fd(int fd, uint64_t size, const std::string& path) {
  GRADUS_CHECK(size >= 8, IOError, path, ": file has ", size,
               " bytes; a safetensors file starts with an 8-byte header length");
  uint8_t first8[8];
  pread_all(fd, first8, 8, 0, path);
  const uint64_t n = detail_st::check_prefix(first8, size, path);
  // n <= 100 MB and <= the file size: safe to allocate.
  std::vector<uint8_t> header(static_cast<size_t>(n));
  pread_all(fd, header.data(), n, 8, path);
  return detail_st::parse_header(header.data(), n, size, path);
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd f;
  const uint64_t size = open_file(path, f);
  return read_header_fd(f.fd, size, path);
}

SafetensorsFile read_safetensors(const std::string& path) {
  Fd f;
  const uint64_t size = open_file(path, f);
  SafetensorsHeader h = read_header_fd(f.fd, size, path);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const SafetensorsEntry& e : h.entries) {
    // Sizes were checked against the file size, so this allocation is bounded by the file.
    Tensor t = empty(e.shape, {e.dtype, Device::cpu()});
    if (e.end > e.begin)
      pread_all(f.fd, t.raw_data(), e.end - e.begin, h.data_start + e.begin, path);
    detail_st::check_bool_bytes(e, t, path);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : f.tensors) out.emplace(name, std::move(t));
  return out;
}

// ---------------------------------------------------------------------------------- writing
struct SafetensorsWriter::State {
  std::string path;
  std::vector<Entry> entries;
  size_t next = 0;
  uint64_t expected_size = 0;
  std::unique_ptr<AtomicFile> file;
};

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries,
                                     const std::map<std::string, std::string>& metadata)
    : state_(std::make_unique<State>()) {
  state_->path = path;
  state_->entries = entries;
  auto check_utf8 = [&](const std::string& s, const char* what) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    GRADUS_CHECK(utf8_error_offset(p, s.size()) == s.size(), IOError, path, ": ", what, " ",
                 squote(s), " is not valid UTF-8");
  };
  // Header first (from shapes and dtypes only), so nothing is written for invalid input.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      check_utf8(k, "metadata key");
      check_utf8(v, "metadata value");
      m[k] = v;
    }
    header["__metadata__"] = std::move(m);
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const Entry& entry : entries) {
    const std::string& name = entry.name;
    GRADUS_CHECK(name != "__metadata__", IOError, path,
                 ": '__metadata__' is reserved and cannot name a tensor");
    GRADUS_CHECK(seen.insert(name).second, IOError, path, ": tensor name ", squote(name),
                 " appears twice");
    check_utf8(name, "tensor name");
    const uint64_t nbytes =
        static_cast<uint64_t>(shape_numel(entry.shape)) * dtype_size(entry.dtype);
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = safetensors_dtype_code(entry.dtype);
    e["shape"] = entry.shape;
    e["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(e);
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  const uint64_t n = text.size();
  state_->expected_size = 8 + n + offset;
  state_->file = std::make_unique<AtomicFile>(path);
  uint8_t prefix[8];
  std::memcpy(prefix, &n, 8);
  state_->file->write(prefix, 8);
  state_->file->write(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

const std::string& SafetensorsWriter::next_name() const {
  static const std::string none;
  return state_->next < state_->entries.size() ? state_->entries[state_->next].name : none;
}

void SafetensorsWriter::write(const Tensor& t) {
  State& s = *state_;
  GRADUS_CHECK(s.next < s.entries.size(), IOError, s.path, ": all ", s.entries.size(),
               " tensors are written already");
  const Entry& entry = s.entries[s.next];
  GRADUS_CHECK(t.defined(), IOError, s.path, ": tensor ", squote(entry.name), " is undefined");
  GRADUS_CHECK(t.dtype() == entry.dtype && t.sizes() == entry.shape, IOError, s.path, ": tensor ",
               squote(entry.name), " is ", dtype_name(t.dtype()), " ", shape_str(t.sizes()),
               ", its header entry ", dtype_name(entry.dtype), " ", shape_str(entry.shape));
  ++s.next;
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  // One tensor at a time on the host, so a model on the GPU never needs a second full copy.
  Tensor host = t.detach().to(Device::cpu()).contiguous();
  s.file->write(host.raw_data(), static_cast<size_t>(host.numel()) * host.element_size());
}

void SafetensorsWriter::commit() {
  State& s = *state_;
  GRADUS_CHECK(s.next == s.entries.size(), IOError, s.path, ": ", s.entries.size() - s.next, " of ",
               s.entries.size(), " tensors were not written (next: ", squote(next_name()), ")");
  GRADUS_CHECK(s.file->size() == s.expected_size, IOError, s.path, ": wrote ", s.file->size(),
               " bytes, expected ", s.expected_size);
  s.file->commit();
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : tensors) {
    GRADUS_CHECK(t.defined(), IOError, path, ": tensor ", squote(name), " is undefined");
    entries.push_back({name, t.dtype(), t.sizes()});
  }
  SafetensorsWriter writer(path, entries, metadata);
  for (const auto& [name, t] : tensors) writer.write(t);
  writer.commit();
}

}  // namespace gradus::io
