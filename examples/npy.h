// npy.h - the .npy header that the examples write: main's files and the server's
// application/x-npy answers, byte for byte the same for the same array.
//
// NumPy's format 1.0 (numpy.lib.format): the magic "\x93NUMPY", the version 1.0, the length
// of the header that follows (a little-endian uint16), then the header: a Python dict literal,
// padded with spaces and ended by '\n' so that the data starts aligned. Ours is always
// NPY_HEADER_BYTES in all, room for any shape the examples write, so that a writer can put
// the final row count in place at the end without moving the rows.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

static const size_t NPY_HEADER_BYTES = 128;

// The header of a C-order little-endian float32 (or with f16, float16) array of this shape:
// {'descr': '<f4', 'fortran_order': False, 'shape': (n, 1500, 512), }, as numpy writes the
// dict, one dimension written as Python's tuple (n,). NPY_HEADER_BYTES long.
static inline std::string npy_header(const std::vector<size_t> & shape, bool f16) {
    std::string dims;
    for (size_t d : shape) dims += (dims.empty() ? "" : " ") + std::to_string(d) + ",";
    if (shape.size() > 1) dims.pop_back();          // (n,) keeps its comma; (n, d) has none
    std::string dict = std::string("{'descr': '") + (f16 ? "<f2" : "<f4") + "', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
    const size_t prefix = 10;                       // magic (6), version (2), header length (2)
    dict.append(NPY_HEADER_BYTES - prefix - 1 - dict.size(), ' ');
    dict += '\n';
    std::string h("\x93NUMPY\x01\x00", 8);
    h += (char)(dict.size() & 0xff);
    h += (char)(dict.size() >> 8);
    return h + dict;
}
