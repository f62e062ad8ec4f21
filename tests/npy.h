// npy.h - read a float32 .npy file (numpy's format, versions 1-3), for the tests.
//
//   std::vector<int64_t> shape;
//   std::vector<float> x = npy_load_f32("tests/data/features/speech_16k.mel80.npy", &shape);
//   // x.size() == 80 * 3000, shape == {80, 3000}
//
// Only C-order '<f4' (or '>f4', swapped) arrays. On any problem it prints the reason to
// stderr and returns an empty vector with an empty shape.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

static inline std::vector<float> npy_load_f32(const char * path, std::vector<int64_t> * shape) {
    std::vector<float> data;
    std::vector<int64_t> dims;
    if (shape) shape->clear();

    FILE * f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "npy_load_f32: cannot open %s\n", path);
        return data;
    }
    auto fail = [&](const char * why) {
        fprintf(stderr, "npy_load_f32: %s: %s\n", path, why);
        fclose(f);
        return std::vector<float>();
    };

    // magic "\x93NUMPY", major, minor, header length (u16 in v1, u32 in v2/v3, little-endian)
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) return fail("not a .npy file");
    uint32_t hlen = pre[8] | (pre[9] << 8);
    if (pre[6] >= 2) {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) return fail("truncated header");
        hlen |= ((uint32_t) more[0] << 16) | ((uint32_t) more[1] << 24);
    }
    if (hlen > (1u << 20)) return fail("header too long");
    std::string h(hlen, '\0');
    if (fread(&h[0], 1, hlen, f) != hlen) return fail("truncated header");

    // the header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (80, 3000), }
    bool swap = false;
    if (h.find("'descr': '<f4'") != std::string::npos) {
        swap = false;
    } else if (h.find("'descr': '>f4'") != std::string::npos) {
        swap = true;
    } else {
        return fail("not float32 (descr must be '<f4')");
    }
    if (h.find("'fortran_order': False") == std::string::npos) return fail("Fortran order is not supported");
    size_t p = h.find("'shape':");
    if (p == std::string::npos) return fail("no shape");
    p = h.find('(', p);
    const size_t e = p == std::string::npos ? p : h.find(')', p);
    if (e == std::string::npos) return fail("bad shape");
    int64_t count = 1;
    for (size_t i = p + 1; i < e;) {
        while (i < e && (h[i] == ' ' || h[i] == ',')) i++;
        if (i >= e) break;
        if (h[i] < '0' || h[i] > '9') return fail("bad shape");
        int64_t v = 0;
        while (i < e && h[i] >= '0' && h[i] <= '9') {
            v = v * 10 + (h[i] - '0');
            if (v > ((int64_t) 1 << 40)) return fail("bad shape");
            i++;
        }
        dims.push_back(v);
        count *= v;
        if (count > ((int64_t) 1 << 36)) return fail("array too large");
    }

    data.resize((size_t) count);
    if (count > 0 && fread(data.data(), sizeof(float), (size_t) count, f) != (size_t) count) return fail("truncated data");
    fclose(f);

    const uint16_t one = 1;
    const bool host_le = *(const unsigned char *) &one == 1;
    if (swap == host_le) {
        for (float & x : data) {
            unsigned char * b = (unsigned char *) &x;
            std::swap(b[0], b[3]);
            std::swap(b[1], b[2]);
        }
    }
    if (shape) *shape = dims;
    return data;
}
