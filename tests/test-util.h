// test-util.h - helpers that every test file shares: data paths, whole-file bytes, the
// relative L2 error, WAV files built in memory, decoding a file, and .npy loading.
//
//   std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
//   CHECK(rel_l2(got, ref) < 1e-5);
//   write_bytes(test_tmp("x.wav"), wav_file(1, 1, 16000, 16, wav_s16({ 0, 16384 })));
//
// The tests run from the repository root (the Makefile's test-run and CMake's ctest both
// start them there), so data paths are plain relative paths.
#pragma once

#include <doctest/doctest.h>

#include "vt.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

// ---- files -------------------------------------------------------------------------

// vt's backends as the tests start them, by name (vt_backend_init): the CPU on n_threads
// (<= 0: all), and a CUDA device in a compute type (fp8: bf16 with the FP8 GEMMs).
static inline vt_backend * test_cpu_backend(int n_threads, vt_type compute_type = VT_TYPE_F32) {
    const vt_backend_params p = {compute_type, n_threads, false};
    return vt_backend_init("cpu", 0, &p);
}
static inline vt_backend * test_cuda_backend(vt_type type, int device = 0, bool fp8 = false) {
    const vt_backend_params p = {type, 0, fp8};
    return vt_backend_init("cuda", device, &p);
}

// The path of a file under tests/data, e.g. test_data("audio/speech_16k.wav").
static inline std::string test_data(const std::string & path) {
    return "tests/data/" + path;
}

// The path of a model file that `make` writes from the micro checkpoints before the tests run
// (tests/data/make-model-files.py: whisper.cpp's ggml files and CTranslate2 directories, byte for
// byte as those tools wrote them), e.g. test_model_file("ggml/micro-80-f16.bin").
static inline std::string test_model_file(const std::string & path) {
    return "build/" + path;
}
#define TEST_MODEL_FILE_HINT " (`make build/model-files.stamp` writes it: tests/data/make-model-files.py)"

// A per-process scratch path: $TMPDIR (or /tmp)/whisper-audio-test-<pid>-<name>.
static inline std::string test_tmp(const std::string & name) {
    const char * tmp = getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/whisper-audio-test-" + std::to_string(getpid()) + "-" + name;
}

// The whole file as bytes; empty when it cannot be opened.
static inline std::vector<uint8_t> read_bytes(const std::string & path) {
    std::vector<uint8_t> b;
    if (FILE * f = fopen(path.c_str(), "rb")) {
        uint8_t buf[65536];
        size_t k;
        while ((k = fread(buf, 1, sizeof(buf), f)) > 0) b.insert(b.end(), buf, buf + k);
        fclose(f);
    }
    return b;
}

// Writes bytes as the whole file; REQUIREs that it opened and took every byte.
static inline void write_bytes(const std::string & path, const std::vector<uint8_t> & b) {
    FILE * f = fopen(path.c_str(), "wb");
    bool ok = f != nullptr;
    if (f) {
        ok = (b.empty() || fwrite(b.data(), 1, b.size(), f) == b.size()) && ok;
        ok = fclose(f) == 0 && ok;
    }
    REQUIRE_MESSAGE(ok, "cannot write " << path);
}

// ---- numerics ----------------------------------------------------------------------

// Relative L2 error ||got - ref|| / ||ref|| over n elements, accumulated in double; ref is
// float, or double for a float64 reference. An empty or all-zero ref gives NaN or inf,
// which fails any `err < tol` check.
template <typename R>
static inline double rel_l2(const float * got, const R * ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double) got[i] - ref[i];
        num += d * d;
        den += (double) ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

// Vectors: over the shorter one's length (a decoder's output against a reference of
// another length compares the common prefix).
template <typename R>
static inline double rel_l2(const std::vector<float> & got, const std::vector<R> & ref) {
    return rel_l2(got.data(), ref.data(), std::min(got.size(), ref.size()));
}

// ---- WAV files in memory -----------------------------------------------------------

// Builds RIFF/WAV bytes little-endian field by field: w.id("RIFF").u32(36).id("WAVE")...
struct wav_bytes {
    std::vector<uint8_t> b;

    wav_bytes & u8(uint32_t v)  { b.push_back((uint8_t) v); return *this; }
    wav_bytes & u16(uint32_t v) { return u8(v).u8(v >> 8); }
    wav_bytes & u24(uint32_t v) { return u16(v).u8(v >> 16); }
    wav_bytes & u32(uint32_t v) { return u16(v).u16(v >> 16); }
    wav_bytes & id(const char * s) { for (int i = 0; i < 4; i++) b.push_back((uint8_t) s[i]); return *this; }
    wav_bytes & raw(const std::vector<uint8_t> & v) { b.insert(b.end(), v.begin(), v.end()); return *this; }
    wav_bytes & f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u32(u); }
    wav_bytes & f64(double d) { uint64_t u; memcpy(&u, &d, 8); return u32((uint32_t) u).u32((uint32_t) (u >> 32)); }

    // a chunk: id, size field (the body's size unless given), body, pad byte when odd
    wav_bytes & chunk(const char * ck, const std::vector<uint8_t> & body, int64_t size_field = -1, bool pad = true) {
        id(ck).u32(size_field < 0 ? (uint32_t) body.size() : (uint32_t) size_field).raw(body);
        if (pad && (body.size() & 1)) u8(0);
        return *this;
    }
};

// "RIFF" <size> "WAVE" + chunks; riff_size -1: the right size (chunks + 4)
static inline std::vector<uint8_t> wav_riff(const std::vector<uint8_t> & chunks, int64_t riff_size = -1) {
    wav_bytes w;
    w.id("RIFF").u32(riff_size < 0 ? (uint32_t) (chunks.size() + 4) : (uint32_t) riff_size).id("WAVE").raw(chunks);
    return w.b;
}

// A 16-byte fmt chunk body; block_align -1: channels * bytes per sample. The byte rate is
// rate * block_align.
static inline std::vector<uint8_t> wav_fmt(uint32_t tag, uint32_t channels, uint32_t rate, uint32_t bits,
                                           int64_t block_align = -1) {
    const uint32_t ba = block_align < 0 ? channels * ((bits + 7) / 8) : (uint32_t) block_align;
    wav_bytes w;
    w.u16(tag).u16(channels).u32(rate).u32(rate * ba).u16(ba).u16(bits);
    return w.b;
}

// 16-bit little-endian samples
static inline std::vector<uint8_t> wav_s16(const std::vector<int> & v) {
    wav_bytes w;
    for (int x : v) w.u16((uint32_t) x);
    return w.b;
}

// A whole WAV file: a fmt chunk (wav_fmt) then a data chunk holding data, whose size field
// says data_size (-1: data's size). The data chunk ends the file: no pad byte after odd data.
static inline std::vector<uint8_t> wav_file(uint32_t tag, uint32_t channels, uint32_t rate, uint32_t bits,
                                            const std::vector<uint8_t> & data, int64_t block_align = -1,
                                            int64_t data_size = -1) {
    wav_bytes c;
    c.chunk("fmt ", wav_fmt(tag, channels, rate, bits, block_align)).chunk("data", data, data_size, false);
    return wav_riff(c.b);
}

// ---- decoding ----------------------------------------------------------------------

// A decoded file: 16 kHz mono samples and the file's info, or the error.
struct decoded_audio {
    std::vector<float> pcm;
    whisper_audio_info info = {};
    bool ok = false;
    std::string error;
};

// What whisper_audio_decode_file or _decode_memory gave (ok, pcm, n), as a decoded_audio.
static inline decoded_audio decoded_result(bool ok, float * pcm, size_t n, const whisper_audio_info & info) {
    decoded_audio a;
    a.ok = ok;
    a.info = info;
    if (ok) {
        a.pcm.assign(pcm, pcm + n);
        whisper_audio_pcm_free(pcm);
    } else {
        a.error = whisper_audio_last_error();
    }
    return a;
}

// whisper_audio_decode_file into a vector ("-": standard input).
static inline decoded_audio decode_file(const std::string & path) {
    float * pcm = nullptr;
    size_t n = 0;
    whisper_audio_info info{};
    const bool ok = whisper_audio_decode_file(path.c_str(), &pcm, &n, &info);
    return decoded_result(ok, pcm, n, info);
}

// whisper_audio_decode_memory into a vector.
static inline decoded_audio decode_memory(const std::vector<uint8_t> & b) {
    float * pcm = nullptr;
    size_t n = 0;
    whisper_audio_info info{};
    const bool ok = whisper_audio_decode_memory(b.data(), b.size(), &pcm, &n, &info);
    return decoded_result(ok, pcm, n, info);
}

// ---- .npy --------------------------------------------------------------------------

// Reads a float32 .npy file (numpy's format, versions 1-3):
//
//   std::vector<int64_t> shape;
//   std::vector<float> x = npy_load_f32(test_data("features/speech_16k.mel80.npy"), &shape);
//   // x.size() == 80 * 3000, shape == {80, 3000}
//
// Only C-order '<f4' (or '>f4', swapped) arrays. On any problem it prints the reason to
// stderr and returns an empty vector with an empty shape.
static inline std::vector<float> npy_load_f32(const std::string & path, std::vector<int64_t> * shape) {
    std::vector<float> data;
    std::vector<int64_t> dims;
    if (shape) shape->clear();

    FILE * f = fopen(path.c_str(), "rb");
    if (!f) {
        fprintf(stderr, "npy_load_f32: cannot open %s\n", path.c_str());
        return data;
    }
    auto fail = [&](const char * why) {
        fprintf(stderr, "npy_load_f32: %s: %s\n", path.c_str(), why);
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

// ---- encoding ------------------------------------------------------------------------

// One log-mel window [n_mels, 3000] through a CPU encoder (2 threads): [1500, n_state].
static inline std::vector<float> encode_cpu(const whisper_audio_model * model, const std::vector<float> & mel) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = 2;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
    std::vector<float> out((size_t)hp->n_ctx * hp->n_state, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()), whisper_audio_last_error());
    whisper_audio_encoder_free(enc);
    return out;
}

// ---- GGUF ----------------------------------------------------------------------------

// Where the data of tensor `name` starts in a GGUF v3 file's bytes (for tests that plant
// values in a model); 0 when the file does not parse or has no such tensor.
static inline size_t gguf_tensor_data_at(const std::vector<uint8_t> & file, const std::string & name) {
    size_t pos = 0;
    bool ok = true;
    auto get = [&](size_t n) -> uint64_t {                 // a little-endian integer of n bytes
        uint64_t v = 0;
        if (!ok || n > file.size() - pos) { ok = false; return 0; }
        for (size_t i = 0; i < n; i++) v |= (uint64_t)file[pos + i] << (8 * i);
        pos += n;
        return v;
    };
    auto skip_string = [&]() { const uint64_t n = get(8); if (n > file.size() - pos) ok = false; else pos += n; };
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (file.size() < 24 || memcmp(file.data(), "GGUF", 4) != 0) return 0;
    pos = 8;
    const uint64_t n_tensors = get(8), n_kv = get(8);
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv && ok; i++) {
        const uint64_t klen = get(8);
        const bool is_alignment = ok && klen == 17 && klen <= file.size() - pos &&
                                  memcmp(&file[pos], "general.alignment", 17) == 0;
        pos += ok ? klen : 0;
        const uint64_t type = get(4);
        if (type == 8) skip_string();
        else if (type == 9) {                                  // arrays of scalars or strings
            const uint64_t et = get(4), n = get(8);
            for (uint64_t k = 0; k < n && ok; k++) { if (et == 8) skip_string(); else if (et < 13) get(sizes[et]); else ok = false; }
        } else if (type < 13) {
            const uint64_t v = get(sizes[type]);
            if (is_alignment) alignment = v;
        } else ok = false;
    }
    uint64_t found = UINT64_MAX;
    for (uint64_t i = 0; i < n_tensors && ok; i++) {
        const uint64_t nlen = get(8);
        const bool match = ok && nlen == name.size() && nlen <= file.size() - pos && memcmp(&file[pos], name.data(), nlen) == 0;
        pos += ok ? nlen : 0;
        const uint64_t n_dims = get(4);
        for (uint64_t d = 0; d < n_dims && ok; d++) get(8);
        get(4);
        const uint64_t offset = get(8);
        if (match) found = offset;
    }
    if (!ok || found == UINT64_MAX || alignment == 0) return 0;
    return (pos + alignment - 1) / alignment * alignment + found;
}

// ---- the log-mel op (vt_log_mel) ------------------------------------------------------

// Whisper's sizes, as whisper-audio.cpp passes them, and the row a window's frames read: its
// 480000 samples with n_fft / 2 more on each side.
static const vt_mel_shape TEST_MEL_SHAPE = {WHISPER_AUDIO_N_FFT, WHISPER_AUDIO_HOP, WHISPER_AUDIO_N_FRAMES};
static const int TEST_MEL_CONTEXT = WHISPER_AUDIO_N_FFT / 2;
static const int TEST_MEL_ROW = WHISPER_AUDIO_N_SAMPLES + 2 * TEST_MEL_CONTEXT;

// The row of a 30 s window that is a signal of its own (whisper_audio_log_mel's): pcm's first
// n samples zero-padded to 480000, mirrored at both ends without repeating the edge sample.
static inline std::vector<float> test_mel_row(const float * pcm, size_t n) {
    const int N = WHISPER_AUDIO_N_SAMPLES;
    std::vector<float> row(TEST_MEL_ROW);
    for (int i = 0; i < TEST_MEL_ROW; i++) {
        int j = i - TEST_MEL_CONTEXT;
        if (j < 0) j = -j;
        if (j >= N) j = 2 * (N - 1) - j;
        row[i] = (size_t)j < n ? pcm[j] : 0.0f;
    }
    return row;
}

// Runs vt_log_mel (or vt_log_mel_max) on a backend: rows [B, row_len], filters [n_mels,
// n_fft / 2 + 1], params [B, 2] or empty. out: [B, n_mels, n_frames] (max_only: [B]).
static inline bool test_run_log_mel(vt_backend * be, const std::vector<float> & rows, int B, const float * filters,
                                    int n_mels, const std::vector<float> & params, const vt_mel_shape & shape,
                                    bool max_only, std::vector<float> & out) {
    const int64_t row_len = (int64_t)(rows.size() / B);
    vt_context * wctx = vt_init(1), * ctx = vt_init(4);
    vt_tensor * f = vt_new_tensor_2d(wctx, VT_TYPE_F32, shape.n_fft / 2 + 1, n_mels);
    vt_set_weight(f);
    vt_tensor * pcm = vt_new_tensor_2d(ctx, VT_TYPE_F32, row_len, B);
    vt_set_input(pcm);
    vt_tensor * prm = nullptr;
    if (!params.empty()) {
        prm = vt_new_tensor_2d(ctx, VT_TYPE_F32, 2, B);
        vt_set_input(prm);
    }
    vt_tensor * y = max_only ? vt_log_mel_max(ctx, pcm, f, prm, &shape) : vt_log_mel(ctx, pcm, f, prm, &shape);
    vt_graph * g = vt_graph_build(ctx, &y, 1);
    out.assign((size_t)vt_nelements(y), NAN);
    const bool ok = vt_backend_alloc_weights(be, wctx) && vt_backend_set_tensor(be, f, filters, VT_TYPE_F32) &&
                    vt_backend_alloc_graph(be, g) && vt_backend_set_tensor(be, pcm, rows.data(), VT_TYPE_F32) &&
                    (!prm || vt_backend_set_tensor(be, prm, params.data(), VT_TYPE_F32)) &&
                    vt_backend_compute(be, g) && vt_backend_get_tensor_f32(be, y, out.data());
    vt_graph_free(g);
    vt_free(ctx);
    vt_free(wctx);
    return ok;
}

// ---- GPU tests ---------------------------------------------------------------------

// GPU tests are declared TEST_CASE("..." * doctest::skip(no_gpu())): doctest reports them
// "skipped" where no CUDA device can be used (no GPU, or a build without CUDA), and the test
// binary's main then says why in one line (tests/test-main.cpp).
// WA_REQUIRE_GPU=1 (tests/gpu/run-tests.sh sets it) runs them regardless, so that a GPU
// machine whose device is missing fails instead of passing unnoticed.
// no_gpu_reason(): why no CUDA device can be used (the backend's message), "" when one can.
static inline const std::string & no_gpu_reason() {
    static const std::string reason = [] {
        const char * require = getenv("WA_REQUIRE_GPU");
        if (require && strcmp(require, "1") == 0) return std::string();
        vt_backend * be = test_cuda_backend(VT_TYPE_F16);
        if (!be) {
            const char * why = vt_last_error();
            return std::string(why && *why ? why : "the CUDA backend did not start");
        }
        vt_backend_free(be);
        return std::string();
    }();
    return reason;
}
static inline bool no_gpu() { return !no_gpu_reason().empty(); }
