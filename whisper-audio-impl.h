// whisper-audio-impl.h - what the library's own sources share, and nothing a caller sees:
// the error slot and the C API's exception boundary, the thread helpers, and the model file's
// in-memory form. whisper-audio.cpp (the model) defines what is declared here; the optional
// second set, whisper-audio-input.cpp (audio files) and whisper-audio-formats.cpp (foreign model
// files), uses it. Not installed, not part of the API.
#pragma once

#include "whisper-audio.h"
#include "whisper-audio-arch.h"
#include "vt.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cerrno>
#include <cmath>
#include <time.h>
#include <unistd.h>

// =====================================================================================
// errors and threads
// =====================================================================================

// The message whisper_audio_last_error returns, for this thread (printf's format).
void wa_set_error(const char * fmt, ...) __attribute__((format(printf, 1, 2)));

// The C API's boundary: what C++ throws inside (std::bad_alloc, std::system_error from a
// thread that cannot start) becomes an error value, as the header promises.
template <typename R, typename F> static inline R wa_catch(const char * func, R fail, F && f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        wa_set_error("%s: out of memory", func);
    } catch (const std::exception & e) {
        wa_set_error("%s: %s", func, e.what());
    }
    return fail;
}

// CPU threads: <= 0 means as many as the hardware runs (llama.cpp's -t convention), and
// more than that are capped to it, as vt's CPU backend does.
static inline int wa_n_threads(int n_threads) {
    const int hw = (int)std::max(1u, std::thread::hardware_concurrency());
    return n_threads <= 0 || n_threads > hw ? hw : n_threads;
}

// This thread's CPU time (what it computed, not the time it waited or was not scheduled).
static inline int64_t wa_thread_cpu_ns() {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// fn(i) for i in [0, n) on up to n_threads threads (this one among them); if the system
// refuses a thread, fewer do the work. What fn throws (out of memory) is thrown here, once
// every thread has stopped.
template <typename F> static inline void wa_parallel(int n, int n_threads, F && fn) {
    std::atomic<int> next{0};
    std::mutex mu;
    std::exception_ptr thrown;
    auto work = [&] {
        try {
            for (int i; (i = next.fetch_add(1)) < n;) fn(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!thrown) thrown = std::current_exception();
            next = n;                                   // the others stop too
        }
    };
    const int n_extra = std::min(n, wa_n_threads(n_threads)) - 1;
    std::vector<std::thread> threads;
    threads.reserve(std::max(0, n_extra));
    try {
        for (int t = 0; t < n_extra; t++) threads.emplace_back(work);
    } catch (const std::exception &) {}   // no more threads: this one and those started share the rest
    work();
    for (std::thread & t : threads) t.join();
    if (thrown) std::rethrow_exception(thrown);
}

// A float sample's largest magnitude that is still audio (+80 dBFS): whisper-audio-input.cpp's
// rules for float samples say why past it a file is refused; the log-mel refuses such PCM too.
static const double AUDIO_FLOAT_MAX = 1e4;

// The resampler's and the log-mel's loops again for AVX2 + FMA CPUs, picked at run time
// (GCC's target_clones): the build is for the baseline x86-64, where they ran 10-20% slower.
// Not under ThreadSanitizer: the clones' ifunc resolver is instrumented and runs before TSan starts.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define WA_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define WA_SIMD_CLONES
#endif

// A causal tower's input step by step (Voxtral Realtime; whisper-audio-towers.h): begin makes a new
// input's state on enc (its processor's zeros before the audio already in); feed takes the input's PCM as
// it comes (16 kHz mono, checked by the caller) and runs a step once min_step mel frames (rounded up to a
// whole token's 8) are complete, at most 3000 a step; end adds the processor's zeros after the audio and
// runs the rest. Each appends the rows its steps complete to rows (tokens with the encoder's projector,
// else the tower's positions), and they are the whole input's rows in one step, bit for bit on the CPU,
// whatever the pieces and steps. The encoder runs on the caller's thread; one input at a time on it.
// Inputs of at most 30 s can also run together: close adds the zeros after the audio and makes its last
// frames without running them, and returns their count where the input has had no step and they are one
// step's (3000 at most), else 0 (end runs them); run_batch runs n closed inputs of one such count as one
// batch (their rows into rows[i], the same as each alone).
struct wa_causal;
wa_causal * wa_causal_begin(whisper_audio_encoder * enc, int min_step);
bool        wa_causal_feed(wa_causal * s, const float * pcm, size_t n, std::vector<float> & rows);
bool        wa_causal_end(wa_causal * s, std::vector<float> & rows);
int         wa_causal_close(wa_causal * s);
bool        wa_causal_run_batch(wa_causal * const * s, int n, std::vector<float> * rows);
void        wa_causal_free(wa_causal * s);

// The optional second set's entry points (whisper-audio-formats.cpp), for model_load.
struct whisper_audio_model;
bool wa_formats_read_path(whisper_audio_model * m, const char * path, bool missing, bool is_dir, bool * taken);
bool wa_formats_read_file(whisper_audio_model * m, int fd, bool * taken);

// =====================================================================================
// the model file in memory: GGUF's types, the loaded model, the table walks
// =====================================================================================

enum gguf_value_type {
    GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32,
    GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_TYPE_COUNT,
};

struct gguf_tensor_info {
    std::string name;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};   // innermost first
    int type = 0;                   // vt_type
    uint64_t offset = 0;            // from the data section's start
    uint64_t bytes = 0;
    const void * data = nullptr;    // in the model's weights, for the tensors the encoder uses
    int block_type = -1;            // a block type's tensor, dequantised to F32 at load: its type in
    uint64_t block_bytes = 0;       // the file and its bytes there (whisper_audio_model_save_gguf keeps them)
};

// Limits beyond which a file is refused before anything is allocated for it: an encoder of
// 256 layers has 3848 tensors; gguf.md caps tensor names at 64 bytes and keys at 65535.
static const uint64_t GGUF_MAX_TENSORS = 16384;
static const uint64_t GGUF_MAX_KV      = 16384;
static const uint64_t GGUF_MAX_NAME    = 64;
static const uint64_t GGUF_MAX_KEY     = 65535;
static const uint64_t GGUF_MAX_STRING  = 1u << 20;

// A bounds-checked cursor over the file's first bytes: every read checks that it stays
// inside. past_end: a read ran past them (a longer prefix of the file may hold it).
struct gguf_reader {
    const uint8_t * data;
    size_t size, pos = 0;
    bool ok = true, past_end = false;

    bool need(size_t n) {
        if (ok && n > size - pos) past_end = true;
        if (!ok || n > size - pos) { ok = false; return false; }
        return true;
    }
    template <typename T> T get() {
        T v{};
        if (need(sizeof(T))) { memcpy(&v, data + pos, sizeof(T)); pos += sizeof(T); }
        return v;
    }
    std::string get_string(uint64_t max = GGUF_MAX_STRING) {
        const uint64_t n = get<uint64_t>();
        if (n > max || !need(n)) { ok = false; return ""; }
        std::string s((const char *)data + pos, n);
        pos += n;
        return s;
    }
    // skips a value of the given type (arrays of arrays included, to a bounded depth)
    void skip(uint32_t type, int depth = 0) {
        static const size_t sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type >= GGUF_TYPE_COUNT || depth > 2) { ok = false; return; }
        if (type == GGUF_STRING) { get_string(); return; }
        if (type == GGUF_ARRAY) {
            const uint32_t et = get<uint32_t>();
            const uint64_t n = get<uint64_t>();
            if (et >= GGUF_TYPE_COUNT) { ok = false; return; }
            if (et != GGUF_STRING && et != GGUF_ARRAY) {
                if (n > SIZE_MAX / 8 || !need(n * sizes[et])) { ok = false; return; }
                pos += n * sizes[et];
                return;
            }
            for (uint64_t i = 0; i < n && ok; i++) skip(et, depth + 1);
            return;
        }
        if (need(sizes[type])) pos += sizes[type];
    }
};

// The encoder's tensors are read into `weights` at load, not mapped: a mapping faults
// (SIGBUS) when the file is truncated under it, as `cp new.gguf model.gguf` does.
struct whisper_audio_model {
    std::string path;
    size_t file_size = 0;
    uint64_t data_start = 0;                             // the data section's offset in the file
    whisper_audio_hparams hparams{};
    std::vector<gguf_tensor_info> tensors;               // every tensor of the file
    std::unordered_map<std::string, size_t> index;       // name -> position in tensors
    std::unique_ptr<uint8_t[]> weights;                  // the encoder's tensors' bytes
    const float * mel_filters = nullptr;                 // [n_mels, 201], in weights (or mel_computed)
    bool mmproj = false;                                 // a llama.cpp mmproj file: its tensors renamed to ours
    std::vector<float> mel_computed;                     // the mel bank of a file without one (mmproj)
    enum { GGUF, GGML, CT2, HF } kind = GGUF;            // the file's format (GGUF: ours or an mmproj; HF: a directory)
    std::string name, description;                      // a GGUF's general.name and general.description
    std::vector<std::string> sources;                   // a Hugging Face directory's files read (path: the directory)

    const gguf_tensor_info * find(const std::string & name) const {
        auto it = index.find(name);
        return it == index.end() ? nullptr : &tensors[it->second];
    }
};

// A projector's GGUF name (WA_PROJECTORS), and the list of one column for messages.
static inline const char * wa_projector_gguf(whisper_audio_projector type) {
    for (const wa_projector_name & p : WA_PROJECTORS)
        if (p.type == type) return p.gguf;
    return "none";
}
static inline std::string wa_projector_list(const char * const wa_projector_name::* column) {
    std::string list;
    for (const wa_projector_name & p : WA_PROJECTORS)
        if (p.*column) list += (list.empty() ? "" : ", ") + std::string(p.*column);
    return list;
}

// Whether a model of these hyperparameters has the row (its family: Whisper's conv stem or the AuT's;
// Whisper's LayerNorms or Voxtral Realtime's RMSNorms and SwiGLU).
static inline bool wa_has_row(const whisper_audio_hparams & hp, const wa_tensor_desc & t) {
    switch (t.family) {
        case WA_EVERY:        return true;
        case WA_WHISPER_STEM: return hp.n_conv == 0;
        case WA_AUT:          return hp.n_conv > 0;
        case WA_LAYER_NORM:   return hp.n_window == 0;
        case WA_REALTIME:     return hp.n_window > 0;
    }
    return false;
}

// Calls f(row, il, name) for each tensor of the file that the encoder uses: the rows outside
// the layers (il -1), then layer by layer; name is the row's with the layer index put in.
template <typename F> static inline bool wa_for_each_tensor(const whisper_audio_hparams & hp, F && f) {
    for (const wa_tensor_desc & t : WA_TENSORS)
        if (!t.layer && wa_has_row(hp, t) && !f(t, -1, t.name)) return false;
    char name[GGUF_MAX_NAME + 1];
    for (int il = 0; il < hp.n_layer; il++) {
        for (const wa_tensor_desc & t : WA_TENSORS) {
            if (!t.layer || !wa_has_row(hp, t)) continue;
            snprintf(name, sizeof(name), t.name, il);
            if (!f(t, il, name)) return false;
        }
    }
    return true;
}

// The width of a head of q, k and v: Voxtral Realtime's own, else d_model / heads.
static inline int wa_head_dim(const whisper_audio_hparams & hp) { return hp.head_dim ? hp.head_dim : hp.n_state / hp.n_head; }

// The row's shape in vt's order (innermost first); returns the dimension count.
// The mel bins left after the AuT's three stride-2 Conv2d ((F - 1) / 2 + 1 each: 128 -> 16).
static inline int wa_conv_bins(int n_mels) { return (((n_mels + 1) / 2 + 1) / 2 + 1) / 2; }
static inline int wa_shape(const whisper_audio_hparams & hp, const wa_tensor_desc & t, int64_t ne[4]) {
    int n_dims = 0;
    for (; n_dims < 4 && t.shape[n_dims] != 0; n_dims++) {
        const int s = t.shape[n_dims];
        ne[n_dims] = s == WA_D ? hp.n_state : s == WA_FF ? hp.n_ff : s == WA_MELS ? hp.n_mels : s == WA_CTX ? hp.n_ctx
                   : s == WA_CONV ? hp.n_conv : s == WA_CONV_F ? (int64_t)hp.n_conv * wa_conv_bins(hp.n_mels)
                   : s == WA_ATTN ? (int64_t)hp.n_head * wa_head_dim(hp) : s;
    }
    std::reverse(ne, ne + n_dims);
    return n_dims;
}

// Where a row goes in w: nullptr for the host-only mel bank.
static inline vt_tensor ** wa_dst(wa_weights & w, const wa_tensor_desc & t, int il) {
    return t.layer ? &(w.layers[il].*t.layer) : t.top ? &(w.*t.top) : nullptr;
}

static inline whisper_audio_weight_type wa_weight_type(vt_type type) {
    switch (type) {
        case VT_TYPE_F32:  return WHISPER_AUDIO_WEIGHT_F32;
        case VT_TYPE_F16:  return WHISPER_AUDIO_WEIGHT_F16;
        case VT_TYPE_BF16: return WHISPER_AUDIO_WEIGHT_BF16;
    }
    VT_ASSERT(!"a type vt_type_valid accepts");
    return WHISPER_AUDIO_WEIGHT_F32;
}

// The projector's shape in vt's order (innermost first); returns the dimension count.
static inline int wa_proj_shape(const whisper_audio_hparams & hp, const wa_proj_desc & t, int64_t ne[3]) {
    int n_dims = 0;
    for (; n_dims < 3 && t.shape[n_dims] != 0; n_dims++) {
        const int s = t.shape[n_dims];
        ne[n_dims] = s == WA_D ? hp.n_state : s == WA_LLM ? hp.n_llm : s == WA_STACKED ? (int64_t)hp.stack_factor * hp.n_state
                   : s == WA_PFF ? hp.n_proj_ff : s == WA_PFF_HALF ? hp.n_proj_ff / 2 : s == WA_D5 ? 5 * (int64_t)hp.n_state : s;
    }
    std::reverse(ne, ne + n_dims);
    return n_dims;
}

// Is name of the pattern `from` ("%d" at most once)? Then out is `to` with the same layer.
static inline bool wa_rename(const char * from, const char * to, const std::string & name, std::string & out) {
    const char * d = strstr(from, "%d");
    if (!d) {
        if (name != from) return false;
        out = to;
        return true;
    }
    const size_t pre = (size_t)(d - from), post = strlen(d + 2);
    if (name.size() <= pre + post || name.compare(0, pre, from, pre) != 0 || name.compare(name.size() - post, post, d + 2) != 0)
        return false;
    const std::string digits = name.substr(pre, name.size() - pre - post);
    if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
    char buf[GGUF_MAX_NAME + 1];
    snprintf(buf, sizeof(buf), to, atoi(digits.c_str()));
    out = buf;
    return true;
}

// An mmproj file's name of a tensor to ours (to_ours) or back, by the model's projector's table
// first (MERaLiON-2's), then the common one; false for a name neither has.
static inline bool wa_mmproj_rename(const whisper_audio_model * m, bool to_ours, const std::string & name, std::string & out) {
    auto in = [&](const auto & table) {
        for (const wa_mmproj_name & n : table)
            if (to_ours ? wa_rename(n.mmproj, n.ours, name, out) : wa_rename(n.ours, n.mmproj, name, out)) return true;
        return false;
    };
    return (m->hparams.projector == WHISPER_AUDIO_PROJECTOR_MERALION && in(WA_MMPROJ_MERALION_NAMES)) || in(WA_MMPROJ_NAMES);
}

// The name a tensor of ours has in the model's file (for messages).
static inline std::string wa_file_name(const whisper_audio_model * m, const char * ours) {
    std::string out;
    if (m->mmproj && wa_mmproj_rename(m, false, ours, out)) return out;
    return ours;
}

// ---- ggml's block types: quantised matrices, dequantised to f32 at load ---------------------

// A quantised whisper.cpp model (and our GGUF conversion of one) stores its matrices in
// ggml's blocks of 32 weights: an f16 scale d (the _1 types add an f16 minimum m), then the
// quants (ggml-quants.c, dequantize_row_*). They become f32 at load, exactly (a quant times an
// f16 scale fits in f32's mantissa): the backends take f32 matrices as they take any other,
// and nothing computes in the block types.
static const int QK = 32;
struct wa_block_type {
    int type;                 // ggml's type number
    const char * name;
    size_t bytes;             // per block of QK weights
    uint32_t file_type;       // general.file_type of a file whose matrices have it (LLAMA_FTYPE_MOSTLY_*)
};
static const wa_block_type WA_BLOCK_TYPES[] = {
    {2, "q4_0", 18, 2}, {3, "q4_1", 20, 3}, {6, "q5_0", 22, 8}, {7, "q5_1", 24, 9}, {8, "q8_0", 34, 7},
};

static inline const wa_block_type * wa_block(int type) {
    for (const wa_block_type & b : WA_BLOCK_TYPES)
        if (b.type == type) return &b;
    return nullptr;
}

static inline const char * wa_type_name(int type) {
    const wa_block_type * b = wa_block(type);
    return b ? b->name : vt_type_valid(type) ? vt_type_name((vt_type)type) : "unknown";
}

// The bytes of a tensor of the given type (F32/F16/BF16 or a block type whose rows are whole
// blocks) and dims; false when they pass limit (step by step: the product can pass 2^64).
static inline bool wa_tensor_bytes(int type, const int64_t ne[4], uint64_t limit, uint64_t * bytes) {
    const wa_block_type * b = wa_block(type);
    uint64_t n = b ? b->bytes : vt_type_size((vt_type)type);
    for (int d = 0; d < 4; d++) {
        const uint64_t k = d == 0 && b ? (uint64_t)ne[0] / QK : (uint64_t)ne[d];
        if (k > limit / n) return false;
        n *= k;
    }
    *bytes = n;
    return true;
}

static inline float wa_f16(const uint8_t * p) {
    float v;
    vt_convert(&v, VT_TYPE_F32, p, VT_TYPE_F16, 1);
    return v;
}

// n_blocks blocks of type at x -> n_blocks * QK floats at y. Quants j and j + 16 of a block
// share byte j: the low nibble is j, the high one j + 16; q5's fifth bits are qh's bit j.
static inline void wa_dequantize(int type, const uint8_t * x, float * y, size_t n_blocks) {
    const size_t bytes = wa_block(type)->bytes;
    for (size_t i = 0; i < n_blocks; i++, x += bytes, y += QK) {
        const float d = wa_f16(x);
        const bool has_min = type == 3 || type == 7;
        const float m = has_min ? wa_f16(x + 2) : 0.0f;
        const uint8_t * q = x + (has_min ? 4 : 2);
        uint32_t qh = 0;
        if (type == 6 || type == 7) { memcpy(&qh, q, 4); q += 4; }
        for (int j = 0; j < QK / 2; j++) {
            int q0, q1;
            switch (type) {
                case 8:  q0 = (int8_t)q[j]; q1 = (int8_t)q[j + 16]; break;               // q8_0: q * d
                case 2:  q0 = (q[j] & 15) - 8; q1 = (q[j] >> 4) - 8; break;                // q4_0: (q - 8) * d
                case 3:  q0 = q[j] & 15; q1 = q[j] >> 4; break;                            // q4_1: q * d + m
                case 6:  q0 = ((q[j] & 15) | ((qh >> j) & 1) << 4) - 16;                   // q5_0: (q - 16) * d
                         q1 = ((q[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16; break;
                default: q0 = (q[j] & 15) | ((qh >> j) & 1) << 4;                          // q5_1: q * d + m
                         q1 = (q[j] >> 4) | ((qh >> (j + 16)) & 1) << 4; break;
            }
            y[j] = q0 * d + m;
            y[j + QK / 2] = q1 * d + m;
        }
    }
}

// ---- reading a model file ----------------------------------------------------------------

// pread of n bytes at offset of the file at path (size bytes when opened); false with the
// error set when the file fails or ends early.
static inline bool read_at(const std::string & path, uint64_t size, int fd, void * dst, size_t n, uint64_t offset) {
    for (size_t done = 0; done < n;) {
        const ssize_t k = pread(fd, (char *)dst + done, std::min<size_t>(n - done, 1u << 30), (off_t)(offset + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) wa_set_error("%s: the file ended at byte %llu, before its %llu bytes: it changed while loading",
                                     path.c_str(), (unsigned long long)(offset + done), (unsigned long long)size);
            else wa_set_error("%s: read failed at byte %llu: %s", path.c_str(), (unsigned long long)(offset + done), strerror(errno));
            return false;
        }
        done += (size_t)k;
    }
    return true;
}

static inline bool read_at(const whisper_audio_model * m, int fd, void * dst, size_t n, uint64_t offset) {
    return read_at(m->path, m->file_size, fd, dst, n, offset);
}

// The layer a tensor's name places it in (prefix "encoder.layers." and "encoder.layers.7.fc1.weight"
// -> 7), or -1 when the name is not of a layer. An index too large for a long reads as LONG_MAX.
static inline long wa_layer_of(const std::string & name, const char * prefix) {
    const size_t n = strlen(prefix);
    if (name.compare(0, n, prefix) != 0 || !isdigit((unsigned char)name[n])) return -1;
    char * end = nullptr;
    const long il = strtol(name.c_str() + n, &end, 10);
    return *end == '.' || *end == '/' ? il : -1;
}

// A tensor of a layer past the hyperparameters' count is an error: the file holds an encoder
// other than the one they describe, and running the layers they name would truncate it.
static inline bool wa_check_layers(const whisper_audio_model * m, const std::string & name, const char * prefix,
                            const char * file_name, const char * count_key) {
    const long il = wa_layer_of(name, prefix);
    if (il < m->hparams.n_layer) return true;
    wa_set_error("%s: tensor '%s' is of layer %ld, but %s says %d layer%s: a file whose layer count is wrong", m->path.c_str(),
                 file_name, il, count_key, m->hparams.n_layer, m->hparams.n_layer == 1 ? "" : "s");
    return false;
}

// The first of n elements whose exponent bits are all set (NaN or +-inf), or n. A block is
// scanned without branches, which vectorises; only a block that has one is searched.
template <typename T> static inline size_t first_nonfinite(const uint8_t * p, size_t n, T exp_mask) {
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        const size_t i1 = std::min(n, i0 + 4096);
        unsigned bad = 0;
        for (size_t i = i0; i < i1; i++) {
            T v;
            memcpy(&v, p + i * sizeof(T), sizeof(T));
            bad |= (v & exp_mask) == exp_mask;
        }
        for (size_t i = i0; bad && i < i1; i++) {
            T v;
            memcpy(&v, p + i * sizeof(T), sizeof(T));
            if ((v & exp_mask) == exp_mask) return i;
        }
    }
    return n;
}

// Why tensor t, held at d (its type and bytes as loaded), cannot be used: a value that is not
// finite (NaN would reach every output; inf the softmax); "" when every value is.
static inline std::string wa_nonfinite(const std::string & path, const std::string & name, const gguf_tensor_info & t, const uint8_t * d) {
    const size_t n = t.bytes / vt_type_size((vt_type)t.type);
    const size_t bad = t.type == VT_TYPE_F32 ? first_nonfinite<uint32_t>(d, n, 0x7f800000u)
                     : first_nonfinite<uint16_t>(d, n, t.type == VT_TYPE_F16 ? 0x7c00 : 0x7f80);
    if (bad == n) return "";
    float v;
    vt_convert(&v, VT_TYPE_F32, d + bad * vt_type_size((vt_type)t.type), (vt_type)t.type, 1);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: tensor '%s' holds %g at element %zu: a non-finite weight (a corrupt file, or a "
             "conversion that overflowed)", path.c_str(), name.c_str(), v, bad);
    return msg;
}

// The tensors `used` read into the model's own memory on every core (1.3 GB for large-v3),
// each in a slot of sizes[i] bytes: fill(i, slot) writes tensor i there as the model holds it
// (its type and bytes set) and returns why it cannot ("" when it can). The first failure in
// their order is the one reported.
template <typename F>
static inline bool wa_read_tensors(whisper_audio_model * m, const std::vector<gguf_tensor_info *> & used, const std::vector<uint64_t> & sizes,
                            F && fill) {
    const size_t ALIGN = 64;
    size_t total = 0;
    for (uint64_t s : sizes) total += (s + ALIGN - 1) / ALIGN * ALIGN;
    m->weights.reset(new (std::nothrow) uint8_t[total + ALIGN]);
    if (!m->weights) { wa_set_error("%s: out of memory for %zu bytes of weights", m->path.c_str(), total); return false; }
    uint8_t * dst = m->weights.get() + (ALIGN - (uintptr_t)m->weights.get() % ALIGN) % ALIGN;
    std::vector<uint8_t *> at(used.size());
    for (size_t i = 0; i < used.size(); i++) {
        at[i] = dst;
        dst += (sizes[i] + ALIGN - 1) / ALIGN * ALIGN;
    }
    std::vector<std::string> errors(used.size());
    wa_parallel((int)used.size(), 0, [&](int i) {
        errors[i] = fill((size_t)i, at[i]);
        if (errors[i].empty()) used[i]->data = at[i];
    });
    for (const std::string & e : errors) {
        if (!e.empty()) { wa_set_error("%s", e.c_str()); return false; }
    }
    return true;
}

// ---- GGUF's keys ---------------------------------------------------------------------------

// The two dialects of GGUF this reader takes: ours (whisper.*, the converter's) and llama.cpp's
// mmproj (general.architecture "clip", its audio tower under clip.audio.*). One row of keys each.
struct gguf_dialect {
    const char * n_mels, * n_ctx, * n_state, * n_head, * n_layer, * n_ff, * eps;
    const char * projector, * n_llm, * stack_factor;
};
static const gguf_dialect GGUF_OURS = {
    "whisper.encoder.mels_count", "whisper.encoder.context_length", "whisper.encoder.embedding_length",
    "whisper.encoder.attention.head_count", "whisper.encoder.block_count", "whisper.encoder.feed_forward_length",
    "whisper.encoder.attention.layer_norm_epsilon",
    "whisper.projector.type", "whisper.projector.embedding_length", "whisper.projector.stack_factor",
};
static const gguf_dialect GGUF_MMPROJ = {
    "clip.audio.num_mel_bins", "clip.audio.context_length", "clip.audio.embedding_length",
    "clip.audio.attention.head_count", "clip.audio.block_count", "clip.audio.feed_forward_length",
    "clip.audio.attention.layer_norm_epsilon",
    "clip.projector_type", "clip.audio.projection_dim", "clip.audio.projector.stack_factor",
};

// The header's key/values that this reader uses, type-checked; the rest are skipped.
struct gguf_kv {
    std::string arch, proj_type;
    bool has_arch = false, has_proj_type = false, audio_proj_type = false;
    uint32_t alignment = 32;
    std::map<std::string, uint32_t> u32;
    std::map<std::string, float> f32;
    std::map<std::string, uint32_t> wrong_type;       // keys we read, stored with another GGUF type

    // a key this reader needs that is absent, or there of another type (which says so)
    bool missing(const char * path, const char * key, const char * want) const {
        auto it = wrong_type.find(key);
        if (it != wrong_type.end()) wa_set_error("%s: key %s has GGUF type %u, not %s", path, key, it->second, want);
        else wa_set_error("%s: missing key %s (%s)", path, key, want);
        return false;
    }
};

// The rest of the model file's reading, defined in whisper-audio.cpp.
void wa_mel_filters_slaney(int n_mels, float * out);                 // [n_mels, 201], the feature extractor's bank
bool check_tensor(const whisper_audio_model * m, const char * name, int n_dims, const int64_t * ne, bool matrix);
bool model_read_weights(whisper_audio_model * m, int fd);
bool wa_read_prefix(whisper_audio_model * m, int fd, bool (*parse)(whisper_audio_model *, gguf_reader &, int));
