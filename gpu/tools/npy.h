// A minimal, strict reader and writer of NumPy .npy files holding little-endian float32 ('<f4')
// C-order arrays: the interchange format of the replay tool, so trajectories dumped from PyTorch
// or JAX (np.save(path, x.astype('<f4'))) can be run through the reference formats without a
// Python dependency here.
//
// Strict because a silently misread trajectory gives plausible but wrong accuracy numbers: every
// other dtype, byte order, Fortran order and any mismatch between the header's shape and the
// file's size is an error naming the file and the offending field, never a conversion.
// Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/format/status.h"

namespace leapcache::tools {

struct NpyArray {
  std::vector<int64_t> shape;  // () for a 0-d array, which holds one element
  std::vector<float> data;     // C order, product(shape) elements
};

// What the header dict of a .npy file says, before any check of its values.
struct NpyHeader {
  std::string descr;  // e.g. "<f4"
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the header dict, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }":
// keys in any order, either quote style, any spacing, optional trailing commas, shapes (), (n,),
// (n, m, ...) (a Python 2 'L' suffix is accepted). Exactly the three keys must be present. It does
// not check the dtype or order; ReadNpy does. Errors say what was expected and where.
StatusOr<NpyHeader> ParseNpyHeader(std::string_view text);

// Reads a .npy file of version 1.0, 2.0 or 3.0 holding a '<f4' C-order array. Errors
// (NOT_FOUND for a missing file, INVALID_ARGUMENT or DATA_LOSS otherwise) start with the path.
StatusOr<NpyArray> ReadNpy(const std::string& path);

// Writes a version 1.0 file (2.0 if the header would not fit, which no real shape needs), the
// header padded with spaces so the data starts at a multiple of 64 bytes, as numpy does. The file
// is written under a temporary name in the same folder and renamed into place, so `path` is never
// left half-written. REQUIRES nothing: a data size that does not match the shape is an error.
Status WriteNpy(const std::string& path, std::span<const int64_t> shape,
                std::span<const float> data);

// Number of elements of `shape` (1 for ()), or an error on a negative dimension or int64 overflow.
StatusOr<int64_t> NumElements(std::span<const int64_t> shape);

// "(3, 4)", "(3,)", "()": numpy's spelling, for messages.
std::string ShapeToString(std::span<const int64_t> shape);

// INVALID_ARGUMENT "<name>: non-finite value nan at flat index 7 (index [1, 3])" for the first
// NaN or infinity of the array, else OK. The tools reject such inputs up front rather than let
// them surface as an unlocated error deep inside a replay.
Status CheckFinite(const std::string& name, const NpyArray& array);

}  // namespace leapcache::tools
