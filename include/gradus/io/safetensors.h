// safetensors (https://github.com/huggingface/safetensors): the file format of Hugging Face and
// PyTorch weights. Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, then the raw little-endian, row-major tensor bytes.
//
// Reading validates as strictly as the reference implementation (and a little more): every
// violation throws gradus::IOError naming the file and the exact problem, and no byte outside
// the buffer is ever read, nor is memory allocated from a size that was not checked against the
// file size first. Writing is atomic (see atomic_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::io {

// What a safetensors file holds. Tensors are on the CPU, contiguous, in file (offset) order.
struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  // Throws IOError naming the key (and listing a few present ones) if absent.
  const Tensor& at(const std::string& name) const;
  // nullptr when absent.
  const Tensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
};

// One tensor's entry in the header (what a reader learns without touching the data).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// The validated header of a file: entries sorted by offset, the metadata, and where data starts.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Parses and validates a whole file held in memory (the fuzzer's entry point).
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size,
                                  const std::string& name_for_errors);
// Reads and validates a file; tensor bytes are read straight into the tensors' storage.
SafetensorsFile read_safetensors(const std::string& path);
// read_safetensors(path).tensors as a map.
std::map<std::string, Tensor> load_safetensors(const std::string& path);
// Reads only the header and checks it against the file size (cheap: no tensor data is read).
// Throws IOError exactly where read_safetensors would for a malformed header or a truncated file.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Writes `tensors` (any device, any layout, any gradus dtype; copied to the host one by one and
// made contiguous) in the given order, and `metadata`, atomically. The header is padded with
// spaces to a multiple of 8 bytes, like the reference writer, so every tensor's data is aligned.
// Names must be unique, valid UTF-8 and not "__metadata__"; nothing is written if any is not.
// From a std::map: save_safetensors(path, {map.begin(), map.end()}).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes a safetensors file a tensor at a time: the header (every name, dtype and shape) first,
// then each tensor's data in the header's order, so the tensors need not all exist at once (a
// sharded model's whole weights, gathered a part at a time). commit() makes the file appear
// atomically; without it (an exception on the way) nothing is written. save_safetensors is this
// over tensors that all exist.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
  };
  // Validates the names (unique, UTF-8, not "__metadata__") and writes the header.
  SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // The next entry's data (any device and layout; IOError if its dtype or shape is not the
  // entry's, or every entry is written already).
  void write(const Tensor& t);
  // The name of the entry write() expects next ("" when all are written).
  const std::string& next_name() const;
  // IOError unless every entry was written.
  void commit();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The safetensors dtype code ("F32", "BF16", "BOOL", ...) of a gradus dtype.
const char* safetensors_dtype_code(DType dtype);

}  // namespace gradus::io
