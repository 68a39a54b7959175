// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), gzip-compressed
// or plain. Layout: two zero bytes, a type byte, the number of dims, then each dim as a big-endian
// uint32, then the values (big-endian). Every malformed file gives an IOError that names the file,
// what is wrong and what was expected; nothing crashes on corrupt input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::data {

// Reads the whole file, inflating it when it starts with the gzip magic bytes (1f 8b). A file
// whose name ends in ".gz" but is not gzip data is an IOError.
std::vector<uint8_t> read_file_maybe_gzip(const std::string& path);

// Reads an IDX file of any supported element type: 0x08 uint8 -> u8, 0x0C int32 -> i32,
// 0x0D float32 -> f32, 0x0E float64 -> f64. The tensor has the file's dims.
Tensor read_idx(const std::string& path);

// Reads a uint8 IDX file that must have `ndim` dims: 3 for images (magic 0x00000803),
// 1 for labels (magic 0x00000801).
Tensor read_idx_u8(const std::string& path, int ndim);

// Parses IDX bytes already in memory; `name` is used in error messages.
Tensor parse_idx(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace gradus::data
