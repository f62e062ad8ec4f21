// whisper-audio-formats.cpp - model files in other formats, each read into the same model as
// our GGUF: whisper.cpp's legacy ggml-*.bin, CTranslate2 / faster-whisper's model.bin, Hugging
// Face directories (config.json + safetensors, and the Hugging Face cache's snapshots), and our
// GGUF written out of any of them (whisper_audio_model_save_gguf). Part of the library's optional
// second set: compiled in with -DWHISPER_AUDIO_FORMATS on every file of the library, it answers
// whisper-audio.cpp's model_load through wa_formats_read_path and wa_formats_read_file.
#ifndef WHISPER_AUDIO_FORMATS
#error "whisper-audio-formats.cpp: compile every file of the library with -DWHISPER_AUDIO_FORMATS, so that whisper-audio.cpp reads through it"
#endif
#include "whisper-audio-impl.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- CTranslate2 / faster-whisper models: model.bin, read through the same table ----------
// CTranslate2's models.cc, binary version 6: uint32 version, string spec name, uint32 spec
// revision, uint32 n_vars; per variable: string name, uint8 rank, uint32 dims[rank] (outermost
// first), uint8 dtype, uint32 n_bytes, data; then uint32 n_aliases of (string alias, string
// target). A string is a uint16 length (its trailing NUL included) and the bytes. int8 weights
// keep a float scale per row in "<name>_scale", int16 ones a scalar one: w = q / scale.

enum ct2_dtype { CT2_F32, CT2_I8, CT2_I16, CT2_I32, CT2_F16, CT2_BF16, CT2_DTYPE_COUNT };
static const int      CT2_DTYPE_SIZE[CT2_DTYPE_COUNT] = {4, 1, 2, 4, 2, 2};
static const char *   CT2_DTYPE_NAME[CT2_DTYPE_COUNT] = {"float32", "int8", "int16", "int32", "float16", "bfloat16"};
static const uint32_t CT2_VERSION  = 6;
static const int      CT2_MAX_RANK = 4;
static const char     CT2_MAGIC[]  = "\x06\0\0\0\x0c\0WhisperSpec";   // version, spec name's length, spec name + NUL
// as GGUF's tensor count is (large-v3's model.bin: about 1,300 variables)
static const uint32_t CT2_MAX_VARS = 65536, CT2_MAX_ALIASES = 65536;

struct ct2_var {
    int rank = 0, dtype = 0;
    uint32_t dims[CT2_MAX_RANK] = {};
    uint64_t offset = 0, bytes = 0;     // the data's place in the file
    bool alias = false;                 // another name for a variable stored before it
};

// A bounds-checked cursor over the file through pread: model.bin interleaves the variables'
// headers with their data, and only the encoder's data is read.
struct ct2_reader {
    const whisper_audio_model * m;
    int fd;
    uint64_t pos = 0;
    bool ok = true;

    bool get(void * dst, uint64_t n) {
        if (ok && n > m->file_size - pos) ok = false;
        if (ok && !read_at(m, fd, dst, n, pos)) ok = false;
        if (ok) pos += n;
        return ok;
    }
    template <typename T> T get() { T v{}; get(&v, sizeof(T)); return v; }
    std::string get_string() {
        const uint16_t n = get<uint16_t>();
        if (n == 0) return "";                  // no NUL even: the caller says what it wanted
        std::string s(n, '\0');
        if (!get(&s[0], n) || s.back() != '\0') { ok = false; return ""; }
        s.pop_back();
        return s;
    }
};

using ct2_vars = std::unordered_map<std::string, ct2_var>;

static const ct2_var * ct2_find(const ct2_vars & vars, const std::string & name) {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
}

// The variables of model.bin, aliases resolved, each inside the file and of the size its dims say.
static bool ct2_parse(whisper_audio_model * m, int fd, ct2_vars & vars) {
    const char * path = m->path.c_str();
    ct2_reader r{m, fd};
    const uint32_t version = r.get<uint32_t>();
    if (r.ok && version != CT2_VERSION) {
        wa_set_error("%s: CTranslate2 binary version %u; this reader reads version %u", path, version, CT2_VERSION);
        return false;
    }
    r.pos = sizeof(CT2_MAGIC);                              // the spec name: checked by the caller
    r.get<uint32_t>();                                      // spec revision
    const uint32_t n_vars = r.get<uint32_t>();
    if (r.ok && n_vars > CT2_MAX_VARS) {
        wa_set_error("%s: %u variables (at most %u)", path, n_vars, CT2_MAX_VARS);
        return false;
    }
    for (uint32_t i = 0; i < n_vars && r.ok; i++) {         // each variable takes bytes: the file bounds the loop
        const std::string name = r.get_string();
        if (r.ok && name.empty()) {
            wa_set_error("%s: variable %u of %u (at byte %llu) has an empty name: n_vars too large, or a corrupt file", path,
                         i, n_vars, (unsigned long long)r.pos);
            return false;
        }
        ct2_var v;
        v.rank = r.get<uint8_t>();
        if (!r.ok) break;
        if (v.rank > CT2_MAX_RANK) {
            wa_set_error("%s: variable '%s' has rank %d (at most %d)", path, name.c_str(), v.rank, CT2_MAX_RANK);
            return false;
        }
        for (int d = 0; d < v.rank; d++) v.dims[d] = r.get<uint32_t>();
        v.dtype = r.get<uint8_t>();
        v.bytes = r.get<uint32_t>();
        if (!r.ok) break;
        if (v.dtype >= CT2_DTYPE_COUNT) {
            wa_set_error("%s: variable '%s' has dtype %d; known: 0-5 (float32, int8, int16, int32, float16, bfloat16)",
                         path, name.c_str(), v.dtype);
            return false;
        }
        uint64_t want = CT2_DTYPE_SIZE[v.dtype];           // capped at 2^32 before each step: no wrap
        for (int d = 0; d < v.rank; d++) want = std::min<uint64_t>(want, 1ull << 32) * v.dims[d];
        if (want != v.bytes) {
            wa_set_error("%s: variable '%s': %llu bytes, its dims and dtype (%s) need %llu", path, name.c_str(),
                         (unsigned long long)v.bytes, CT2_DTYPE_NAME[v.dtype], (unsigned long long)want);
            return false;
        }
        if (v.bytes > m->file_size - r.pos) {
            wa_set_error("%s: variable '%s' (%llu bytes at byte %llu) lies outside the file (%zu bytes): truncated?", path,
                         name.c_str(), (unsigned long long)v.bytes, (unsigned long long)r.pos, m->file_size);
            return false;
        }
        v.offset = r.pos;
        r.pos += v.bytes;
        if (!vars.emplace(name, v).second) { wa_set_error("%s: duplicate variable '%s'", path, name.c_str()); return false; }
    }
    const uint32_t n_aliases = r.get<uint32_t>();
    if (r.ok && n_aliases > CT2_MAX_ALIASES) {
        wa_set_error("%s: %u aliases (at most %u)", path, n_aliases, CT2_MAX_ALIASES);
        return false;
    }
    for (uint32_t i = 0; i < n_aliases && r.ok; i++) {
        const std::string alias = r.get_string(), target = r.get_string();
        if (!r.ok) break;
        if (alias.empty()) { wa_set_error("%s: alias %u of %u has an empty name: a corrupt file", path, i, n_aliases); return false; }
        const ct2_var * v = ct2_find(vars, target);
        if (!v) { wa_set_error("%s: alias '%s' names '%s', which is not a variable", path, alias.c_str(), target.c_str()); return false; }
        ct2_var copy = *v;
        copy.alias = true;
        if (!vars.emplace(alias, copy).second) { wa_set_error("%s: duplicate variable '%s'", path, alias.c_str()); return false; }
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt CTranslate2 model (at byte %llu)", path, (unsigned long long)r.pos); return false; }
    return true;
}

// The hyperparameters from the variables' shapes: conv1 [d, n_mels, 3], layer_0's fc1 [ff, d],
// the layers present, the scalar encoder/num_heads.
static bool ct2_hparams(whisper_audio_model * m, int fd, const ct2_vars & vars) {
    const char * path = m->path.c_str();
    const ct2_var * conv1 = ct2_find(vars, "encoder/conv1/weight"), * fc1 = ct2_find(vars, "encoder/layer_0/ffn/linear_0/weight");
    const ct2_var * heads = ct2_find(vars, "encoder/num_heads");
    if (!conv1 || conv1->rank != 3 || !fc1 || fc1->rank != 2 || !heads || heads->rank != 0 ||
        (heads->dtype != CT2_I8 && heads->dtype != CT2_I16 && heads->dtype != CT2_I32)) {
        wa_set_error("%s: not a Whisper encoder: it needs encoder/conv1/weight [d, n_mels, 3], "
                     "encoder/layer_0/ffn/linear_0/weight [ff, d] and the integer scalar encoder/num_heads", path);
        return false;
    }
    uint8_t b[4] = {};
    if (!read_at(m, fd, b, heads->bytes, heads->offset)) return false;
    const int64_t n_head = heads->dtype == CT2_I8 ? (int8_t)b[0] : heads->dtype == CT2_I16 ? (int16_t)(b[0] | b[1] << 8)
                         : (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    int64_t n_layer = 0;
    for (char name[64]; n_layer <= 256; n_layer++) {
        snprintf(name, sizeof(name), "encoder/layer_%d/ffn/linear_0/weight", (int)n_layer);
        if (!ct2_find(vars, name)) break;
    }
    whisper_audio_hparams & hp = m->hparams;
    hp.n_layer = (int)std::min<int64_t>(n_layer, 256);
    for (const auto & kv : vars) {                          // a layer after a gap: not one of the encoder's
        const long il = wa_layer_of(kv.first, "encoder/layer_");
        if (n_layer <= 256 && il >= n_layer) {
            wa_set_error("%s: variable '%s' is of layer %ld, but the layers present end at encoder/layer_%d: a layer is "
                         "missing", path, kv.first.c_str(), il, (int)n_layer - 1);
            return false;
        }
    }
    struct { const char * what; int64_t v; int * dst; int lo, hi; } keys[] = {
        {"n_mels (encoder/conv1/weight's dims[1])", conv1->dims[1], &hp.n_mels, 1, 512},
        {"d_model (encoder/conv1/weight's dims[0])", conv1->dims[0], &hp.n_state, 1, 16384},
        {"encoder/num_heads", n_head, &hp.n_head, 1, 256},
        {"the layer count (encoder/layer_N)", n_layer, &hp.n_layer, 1, 256},
        {"the FFN width (encoder/layer_0/ffn/linear_0/weight's dims[0])", fc1->dims[0], &hp.n_ff, 1, 65536},
    };
    for (auto & k : keys) {
        if (k.v < k.lo || k.v > k.hi) { wa_set_error("%s: %s = %lld is outside [%d, %d]", path, k.what, (long long)k.v, k.lo, k.hi); return false; }
        *k.dst = (int)k.v;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: d_model %d is not a multiple of encoder/num_heads %d", path, hp.n_state, hp.n_head);
        return false;
    }
    hp.n_ctx = 1500;
    hp.eps = 1e-5f;                                         // CTranslate2's LayerNorm, as Whisper's
    return true;
}

// A variable's data as float32 (n values from element `first`), through a scratch buffer.
static bool ct2_read_f32(whisper_audio_model * m, int fd, const ct2_var & v, uint64_t first, size_t n, float * out,
                         std::vector<uint8_t> & tmp) {
    static const vt_type types[CT2_DTYPE_COUNT] = {VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16};
    VT_ASSERT(v.dtype == CT2_F32 || v.dtype == CT2_F16 || v.dtype == CT2_BF16);
    const size_t es = CT2_DTYPE_SIZE[v.dtype];
    tmp.resize(n * es);
    if (!read_at(m, fd, tmp.data(), n * es, v.offset + first * es)) return false;
    vt_convert(out, VT_TYPE_F32, tmp.data(), types[v.dtype], n);
    return true;
}

// One encoder tensor as it is made from a CTranslate2 variable (or part of a fused one).
struct ct2_use {
    const ct2_var * v = nullptr, * scale = nullptr;       // none: the computed mel bank
    gguf_tensor_info t;
    uint64_t first = 0;                                     // the part's first element in v
};
// fused variable -> (n_parts, a bit for each part that a row takes)
typedef std::map<std::string, std::pair<int, unsigned>> ct2_fused;
static const size_t CT2_ALIGN = 64;

// The row t of layer il (name: ours) from its variable: dims, dtype and scale checked, its
// type and first element worked out; false with the error set.
static bool ct2_plan_use(const whisper_audio_model * m, const ct2_vars & vars, const wa_tensor_desc & t, int il,
                         const char * name, ct2_use & u, ct2_fused & fused) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    u.t.name = name;
    u.t.n_dims = wa_shape(hp, t, u.t.ne);
    u.t.type = VT_TYPE_F32;
    const char * ct2 = WA_CT2_NAMES[&t - WA_TENSORS].ct2;
    char vname[128];
    if (ct2) {
        snprintf(vname, sizeof(vname), ct2, il);
        u.v = ct2_find(vars, vname);
        if (!u.v) { wa_set_error("%s: variable '%s' (%s) is missing", path, vname, name); return false; }
        // dims outermost first; a fused variable holds n_parts parts on its first
        bool same = u.v->rank == u.t.n_dims;
        for (int i = 0; same && i < u.t.n_dims; i++) same = u.v->dims[i] == u.t.ne[u.t.n_dims - 1 - i] * (i == 0 ? t.n_parts : 1);
        if (!same) {
            std::string got, want;
            for (int i = 0; i < u.v->rank; i++) got += (i ? ", " : "") + std::to_string(u.v->dims[i]);
            for (int i = 0; i < u.t.n_dims; i++) want += (i ? ", " : "") + std::to_string(u.t.ne[u.t.n_dims - 1 - i] * (i == 0 ? t.n_parts : 1));
            wa_set_error("%s: variable '%s' has dims [%s], the encoder needs [%s]", path, vname, got.c_str(), want.c_str());
            return false;
        }
        const int dt = u.v->dtype;
        if (dt != CT2_F32 && dt != CT2_F16 && dt != CT2_BF16 && !(t.matrix && (dt == CT2_I8 || dt == CT2_I16))) {
            wa_set_error("%s: variable '%s' is %s; expected float32, float16, bfloat16%s", path, vname,
                         CT2_DTYPE_NAME[dt], t.matrix ? ", int8 or int16" : "");
            return false;
        }
        if (dt == CT2_I8 || dt == CT2_I16) {                // int8: a scale per row; int16: one scale
            const std::string sname = std::string(vname) + "_scale";
            u.scale = ct2_find(vars, sname);
            if (!u.scale || u.scale->rank != (dt == CT2_I8) || (dt == CT2_I8 && u.scale->dims[0] != u.v->dims[0]) ||
                (u.scale->dtype != CT2_F32 && u.scale->dtype != CT2_F16 && u.scale->dtype != CT2_BF16)) {
                wa_set_error("%s: %s variable '%s' needs '%s', a float %s", path, CT2_DTYPE_NAME[dt], vname, sname.c_str(),
                             dt == CT2_I8 ? "per row (rank 1)" : "scalar");
                return false;
            }
        }
        if (t.matrix && dt == CT2_F16) u.t.type = VT_TYPE_F16;
        if (t.matrix && dt == CT2_BF16) u.t.type = VT_TYPE_BF16;
        u.first = (uint64_t)t.part * (u.v->dims[0] / t.n_parts) * (u.v->bytes / CT2_DTYPE_SIZE[dt] / u.v->dims[0]);
        if (t.n_parts > 1) {
            auto & f = fused[vname];
            f.first = t.n_parts;
            f.second |= 1u << t.part;
        }
    }
    u.t.bytes = vt_type_size((vt_type)u.t.type);
    for (int i = 0; i < u.t.n_dims; i++) u.t.bytes *= u.t.ne[i];
    return true;
}

// Aliases may name one variable for many: the encoder's variables must be backed by the data the
// file stores (256 layers aliased to one took 6.4 GB from a 7.5 MB file).
static bool ct2_check_aliases(const whisper_audio_model * m, const ct2_vars & vars, const std::vector<ct2_use> & uses) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    std::set<const ct2_var *> distinct;
    uint64_t used_bytes = 0, stored = 0;
    for (const ct2_use & u : uses)
        for (const ct2_var * v : {u.v, u.scale})
            if (v && distinct.insert(v).second) used_bytes += v->bytes;
    for (const auto & kv : vars) stored += kv.second.alias ? 0 : kv.second.bytes;
    if (used_bytes > stored) {
        wa_set_error("%s: the encoder's %d layers take %llu bytes, more than the %llu bytes of data the file stores: "
                     "aliases stand in for layers the file does not hold", path, hp.n_layer, (unsigned long long)used_bytes,
                     (unsigned long long)stored);
        return false;
    }
    return true;
}

// The parts of a fused variable that no row takes (k's bias) must be zero: they are dropped.
static bool ct2_check_dropped_parts(whisper_audio_model * m, int fd, const ct2_vars & vars, const ct2_fused & fused) {
    const char * path = m->path.c_str();
    std::vector<uint8_t> tmp;
    std::vector<float> vals;
    for (const auto & kv : fused) {
        const ct2_var & v = *ct2_find(vars, kv.first);
        const size_t n = v.bytes / CT2_DTYPE_SIZE[v.dtype] / kv.second.first;
        for (int p = 0; p < kv.second.first; p++) {
            if (kv.second.second >> p & 1) continue;
            vals.resize(n);
            if (!ct2_read_f32(m, fd, v, p * n, n, vals.data(), tmp)) return false;
            for (size_t i = 0; i < n; i++) {
                if (vals[i] != 0.0f) {
                    wa_set_error("%s: variable '%s': part %d of %d holds %g, but Whisper has no such weight (k_proj has no bias)",
                                 path, kv.first.c_str(), p, kv.second.first, vals[i]);
                    return false;
                }
            }
        }
    }
    return true;
}

// Reads u's values into dst (its type's bytes): dequantised, converted or kept; false with the
// error set, a non-finite value among them too.
static bool ct2_read_use(whisper_audio_model * m, int fd, const ct2_use & u, uint8_t * dst, std::vector<uint8_t> & tmp,
                         std::vector<float> & vals) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    const size_t n = u.t.bytes / vt_type_size((vt_type)u.t.type);
    float * f32 = (float *)dst;
    if (!u.v) {
        wa_mel_filters_slaney(hp.n_mels, f32);
    } else if (u.scale) {                                   // w = q / scale, int8's scale per row
        const bool i8 = u.v->dtype == CT2_I8;
        const size_t cols = i8 ? u.v->bytes / u.v->dims[0] : n, row0 = u.first / cols, rows = n / cols;
        tmp.resize(n * (i8 ? 1 : 2));
        vals.resize(rows);
        if (!read_at(m, fd, tmp.data(), tmp.size(), u.v->offset + u.first * (i8 ? 1 : 2))) return false;
        std::vector<uint8_t> stmp;
        if (!ct2_read_f32(m, fd, *u.scale, i8 ? row0 : 0, rows, vals.data(), stmp)) return false;
        for (size_t i = 0; i < n; i++)
            f32[i] = (float)(i8 ? (int8_t)tmp[i] : (int16_t)(tmp[2 * i] | tmp[2 * i + 1] << 8)) / vals[i / cols];
    } else if (u.t.type == VT_TYPE_F32) {
        if (!ct2_read_f32(m, fd, *u.v, u.first, n, f32, tmp)) return false;
    } else {                                                // float16 or bfloat16 kept
        if (!read_at(m, fd, dst, u.t.bytes, u.v->offset + u.first * 2)) return false;
    }
    const size_t bad = u.t.type == VT_TYPE_F32 ? first_nonfinite<uint32_t>(dst, n, 0x7f800000u)
                     : first_nonfinite<uint16_t>(dst, n, u.t.type == VT_TYPE_F16 ? 0x7c00 : 0x7f80);
    if (bad < n) {
        wa_set_error("%s: tensor '%s' has a non-finite value at element %zu (a corrupt file, or a zero int8 scale)",
                     path, u.t.name.c_str(), bad);
        return false;
    }
    return true;
}

// The encoder's tensors, row by row of WA_TENSORS, made from their CTranslate2 variables into
// the model's memory under our names, as model_read_weights leaves a GGUF file's: float16 and
// bfloat16 matrices kept, int8 ones dequantised to float32, the rest float32.
static bool ct2_read_weights(whisper_audio_model * m, int fd, const ct2_vars & vars) {
    std::vector<ct2_use> uses;
    ct2_fused fused;
    size_t total = 0;
    const bool found = wa_for_each_tensor(m->hparams, [&](const wa_tensor_desc & t, int il, const char * name) {
        ct2_use u;
        if (!ct2_plan_use(m, vars, t, il, name, u, fused)) return false;
        total += (u.t.bytes + CT2_ALIGN - 1) / CT2_ALIGN * CT2_ALIGN;
        uses.push_back(u);
        return true;
    });
    if (!found || !ct2_check_aliases(m, vars, uses) || !ct2_check_dropped_parts(m, fd, vars, fused)) return false;

    m->weights.reset(new (std::nothrow) uint8_t[total + CT2_ALIGN]);
    if (!m->weights) { wa_set_error("%s: out of memory for %zu bytes of weights", m->path.c_str(), total); return false; }
    uint8_t * dst = m->weights.get() + (CT2_ALIGN - (uintptr_t)m->weights.get() % CT2_ALIGN) % CT2_ALIGN;
    std::vector<uint8_t> tmp;
    std::vector<float> vals;
    for (ct2_use & u : uses) {
        if (!ct2_read_use(m, fd, u, dst, tmp, vals)) return false;
        u.t.data = dst;
        m->index.emplace(u.t.name, m->tensors.size());
        m->tensors.push_back(u.t);
        dst += (u.t.bytes + CT2_ALIGN - 1) / CT2_ALIGN * CT2_ALIGN;
    }
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc2.weight")->type);
    m->mel_filters = (const float *)m->find("mel_filters")->data;
    return true;
}

static bool ct2_model_read(whisper_audio_model * m, int fd) {
    ct2_vars vars;
    m->kind = whisper_audio_model::CT2;
    return ct2_parse(m, fd, vars) && ct2_hparams(m, fd, vars) && ct2_read_weights(m, fd, vars);
}

// ---- whisper.cpp's legacy ggml-*.bin, read through the same table ------------------------
// What whisper.cpp's models/convert-pt-to-ggml.py and convert-h5-to-ggml.py write (and its
// quantize rewrites): uint32 magic 0x67676d6c; 11 int32 hparams (n_vocab, n_audio_ctx,
// n_audio_state, n_audio_head, n_audio_layer, 4 of the decoder, n_mels, ftype); the mel bank
// (int32 n_mel, n_fft, f32 [n_mel][n_fft]); the vocabulary (int32 count, then int32 length +
// bytes each); then tensors up to the end of the file: int32 n_dims, name length, ggml type,
// dims (innermost first), name, data, unaligned. The scripts store the conv biases as [d, 1].
// The encoder's feed-forward width is not stored: fc1's shape says it.

static const uint32_t GGML_FILE_MAGIC = 0x67676d6c;   // "lmgg" on disk

// Header, hyperparameters, mel bank and vocabulary from r (the file's first bytes; past_end
// when they go beyond), then the tensor headers, walked with pread to the end of the file.
// The encoder tensors that the table names are recorded under our names, offsets from the
// file's start; the rest (the decoder's) are only stepped over.
// The header's hyperparameters (after the magic), each within the loader's bounds.
static bool ggml_parse_hparams(whisper_audio_model * m, gguf_reader & r) {
    const char * path = m->path.c_str();
    r.pos = 4;
    int32_t h[11];
    for (int32_t & v : h) v = r.get<int32_t>();
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml header", path); return false; }
    whisper_audio_hparams & hp = m->hparams;
    struct { const char * name; int32_t v; int * dst; int lo, hi; } keys[] = {
        {"n_audio_ctx", h[1], &hp.n_ctx, 1500, 1500},
        {"n_audio_state", h[2], &hp.n_state, 1, 16384},
        {"n_audio_head", h[3], &hp.n_head, 1, 256},
        {"n_audio_layer", h[4], &hp.n_layer, 1, 256},
        {"n_mels", h[9], &hp.n_mels, 1, 512},
    };
    for (auto & k : keys) {
        if (k.v < k.lo || k.v > k.hi) {
            wa_set_error("%s: whisper.cpp ggml hparam %s = %d is outside [%d, %d]", path, k.name, k.v, k.lo, k.hi);
            return false;
        }
        *k.dst = k.v;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: n_audio_state %d is not a multiple of n_audio_head %d", path, hp.n_state, hp.n_head);
        return false;
    }
    hp.eps = 1e-5f;                                            // Whisper's; the file has none

    return true;
}

// The mel bank, recorded as the tensor mel_filters [n_mels, 201], and the vocabulary, stepped over.
static bool ggml_parse_mel_vocab(whisper_audio_model * m, gguf_reader & r, gguf_tensor_info & mel) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    const int32_t n_mel = r.get<int32_t>(), n_fft = r.get<int32_t>();
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml mel filters", path); return false; }
    if (n_mel != hp.n_mels || n_fft != WHISPER_AUDIO_N_BINS) {
        wa_set_error("%s: the mel filters are [%d, %d], n_mels needs [%d, %d]", path, n_mel, n_fft, hp.n_mels, WHISPER_AUDIO_N_BINS);
        return false;
    }
    mel.name = "mel_filters";
    mel.n_dims = 2;
    mel.ne[0] = n_fft;
    mel.ne[1] = n_mel;
    mel.offset = r.pos;
    mel.bytes = (uint64_t)n_mel * n_fft * sizeof(float);
    if (!r.need(mel.bytes)) { wa_set_error("%s: truncated whisper.cpp ggml mel filters", path); return false; }
    r.pos += mel.bytes;

    // the vocabulary, stepped over
    const int32_t n_vocab = r.get<int32_t>();
    if (r.ok && (n_vocab < 0 || n_vocab > (1 << 20))) { wa_set_error("%s: implausible vocabulary size %d", path, n_vocab); return false; }
    for (int32_t i = 0; i < n_vocab && r.ok; i++) {
        const uint32_t len = r.get<uint32_t>();
        if (r.ok && len > GGUF_MAX_STRING) { wa_set_error("%s: vocabulary entry %d is %u bytes long", path, i, len); return false; }
        if (r.need(len)) r.pos += len;
    }
    if (!r.ok) { wa_set_error("%s: truncated whisper.cpp ggml vocabulary", path); return false; }
    return true;
}

// Tensor i's header at byte pos: its name, ggml type and dims into t, checked, and its data's
// offset (pos + the header's length, returned in head).
static bool ggml_read_tensor_header(whisper_audio_model * m, int fd, uint64_t i, uint64_t pos, gguf_tensor_info & t,
                                    uint64_t & head) {
    const char * path = m->path.c_str();
    int32_t th[3 + 4];                                   // n_dims, name length, type, dims
    char name[GGUF_MAX_NAME];
    if (m->file_size - pos < 12) { wa_set_error("%s: truncated tensor header at byte %llu", path, (unsigned long long)pos); return false; }
    if (!read_at(m, fd, th, 12, pos)) return false;
    const int n_dims = th[0], name_len = th[1], type = th[2];
    if (n_dims < 1 || n_dims > 4 || name_len < 1 || name_len > (int)GGUF_MAX_NAME) {
        wa_set_error("%s: tensor %llu at byte %llu: bad header (%d dims, name of %d bytes)", path, (unsigned long long)i,
                     (unsigned long long)pos, n_dims, name_len);
        return false;
    }
    head = 12 + 4 * n_dims + name_len;
    if (m->file_size - pos < head) { wa_set_error("%s: truncated tensor header at byte %llu", path, (unsigned long long)pos); return false; }
    if (!read_at(m, fd, th + 3, 4 * n_dims, pos + 12) || !read_at(m, fd, name, name_len, pos + 12 + 4 * n_dims)) return false;
    t.name.assign(name, name_len);
    if (!vt_type_valid(type) && !wa_block(type)) {
        wa_set_error("%s: tensor '%s' has ggml type %d; supported: F32 (0), F16 (1), BF16 (30), Q4_0 (2), Q4_1 (3), "
                     "Q5_0 (6), Q5_1 (7), Q8_0 (8)", path, t.name.c_str(), type);
        return false;
    }
    t.type = type;
    t.n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) {
        if (th[3 + d] < 1 || th[3 + d] > (1 << 24)) { wa_set_error("%s: tensor '%s': bad dimension %d", path, t.name.c_str(), th[3 + d]); return false; }
        t.ne[d] = th[3 + d];
    }
    if (wa_block(type) && t.ne[0] % QK != 0) {
        wa_set_error("%s: tensor '%s' is %s with rows of %lld: not whole blocks of %d", path, t.name.c_str(),
                     wa_type_name(type), (long long)t.ne[0], QK);
        return false;
    }
    if (!wa_tensor_bytes(type, t.ne, m->file_size - pos - head, &t.bytes)) {
        wa_set_error("%s: tensor '%s' (%s, [%lld, %lld, %lld, %lld]) runs past the end of the file: truncated?", path,
                     t.name.c_str(), wa_type_name(type), (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)t.ne[3]);
        return false;
    }
    return true;
}

static bool ggml_parse(whisper_audio_model * m, gguf_reader & r, int fd) {
    const char * path = m->path.c_str();
    m->kind = whisper_audio_model::GGML;
    gguf_tensor_info mel;
    if (!ggml_parse_hparams(m, r) || !ggml_parse_mel_vocab(m, r, mel)) return false;
    const whisper_audio_hparams & hp = m->hparams;

    // the tensors: ours by their whisper.cpp names (the mel bank is already ours)
    std::unordered_map<std::string, std::pair<std::string, int>> ours;   // -> our name, dimension count
    wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        const char * ggml = WA_GGML_NAMES[&t - WA_TENSORS].ggml;
        char buf[GGUF_MAX_NAME + 1];
        int64_t ne[4];
        if (ggml) snprintf(buf, sizeof(buf), ggml, il);
        if (ggml) ours[buf] = {name, wa_shape(hp, t, ne)};
        return true;
    });
    m->index.emplace(mel.name, 0);
    m->tensors.push_back(mel);
    uint64_t pos = r.pos;
    for (uint64_t i = 0; pos < m->file_size; i++) {
        if (i == GGUF_MAX_TENSORS) { wa_set_error("%s: more than %llu tensors", path, (unsigned long long)GGUF_MAX_TENSORS); return false; }
        gguf_tensor_info t;
        uint64_t head = 0;
        if (!ggml_read_tensor_header(m, fd, i, pos, t, head)) return false;
        t.offset = pos + head;
        pos = t.offset + t.bytes;
        auto it = ours.find(t.name);
        if (it == ours.end() && !wa_check_layers(m, t.name, "encoder.blocks.", t.name.c_str(), "n_audio_layer")) return false;
        if (it == ours.end()) continue;
        t.name = it->second.first;
        for (int d = 0; d < t.n_dims && t.n_dims > it->second.second;)   // dims of 1 beyond ours: [d, 1] is [d]
            if (t.ne[d] == 1) { std::copy(t.ne + d + 1, t.ne + 4, t.ne + d); t.ne[3] = 1; t.n_dims--; } else d++;
        if (!m->index.emplace(t.name, m->tensors.size()).second) {
            wa_set_error("%s: duplicate tensor '%s'", path, it->first.c_str());
            return false;
        }
        m->tensors.push_back(t);
    }
    // the feed-forward width from fc1 [n_ff, d]; without it the table's check says what is missing
    const gguf_tensor_info * fc1 = m->find("encoder.layers.0.fc1.weight");
    m->hparams.n_ff = fc1 && fc1->n_dims == 2 ? (int)fc1->ne[1] : 4 * hp.n_state;
    if (hp.n_ff > 65536) { wa_set_error("%s: fc1 is %d wide, more than 65536", path, hp.n_ff); return false; }
    return true;
}

// ---- JSON (RFC 8259): config.json, the shard index, safetensors headers --------------------
// The library's one JSON reader: a tree of values, as strict as the RFC (UTF-8 checked, no
// text after the value) and stricter than Python's json (a key twice in an object, which
// Python silently resolves to the last, is refused), nested at most WA_JSON_DEPTH deep. A
// number keeps its text, so that a 64-bit offset reads back exactly.

static const int WA_JSON_DEPTH = 64;

struct wa_json {
    enum kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT } type = NUL;
    bool b = false;
    std::string str;                                        // STRING: its text (UTF-8); NUMBER: the literal
    std::vector<wa_json> items;                             // ARRAY
    std::vector<std::pair<std::string, wa_json>> fields;    // OBJECT, in the text's order

    const wa_json * get(const char * key) const {
        for (const auto & f : fields) if (f.first == key) return &f.second;
        return nullptr;
    }
    // a non-negative integer literal (no sign, fraction or exponent) that fits in 64 bits
    bool u64(uint64_t * v) const {
        if (type != NUMBER || str.empty()) return false;
        uint64_t x = 0;
        for (const char c : str) {
            if (c < '0' || c > '9' || x > (UINT64_MAX - (uint64_t)(c - '0')) / 10) return false;
            x = x * 10 + (uint64_t)(c - '0');
        }
        *v = x;
        return true;
    }
    // the value as a message shows it: a number, true/false/null or a short string as written
    std::string shown() const {
        switch (type) {
            case NUL:    return "null";
            case BOOL:   return b ? "true" : "false";
            case NUMBER: return str;
            case STRING: {   // escaped as JSON writes it (a NUL as \u0000), so that the message shows what is there
                if (str.size() > 48) return "a string of " + std::to_string(str.size()) + " bytes";
                std::string o = "\"";
                for (const char c : str) {
                    if (c == '"' || c == '\\') { o += '\\'; o += c; }
                    else if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", (unsigned char)c); o += b; }
                    else o += c;
                }
                return o + "\"";
            }
            case ARRAY:  return "an array";
            case OBJECT: return "an object";
        }
        return "";
    }
};

// Recursive descent over [s, end): value -> object | array | string | number | literal. Each
// function starts at its first character and leaves s just past its last.
struct wa_json_parser {
    const char * begin, * s, * end;
    std::string error;                                      // what is wrong and at which byte

    bool fail(const std::string & what) {
        if (error.empty()) error = (s >= end ? "unexpected end (" + what + ")" : what) + " at byte " + std::to_string(s - begin);
        return false;
    }
    void ws() { while (s < end && strchr(" \t\n\r", *s) && *s) s++; }
    bool at(char c) { ws(); return s < end && *s == c; }   // the next character after white space is c
    bool eat(char c) { return at(c) && ++s; }
    bool is_digit() const { return s < end && *s >= '0' && *s <= '9'; }

    bool object(wa_json & v, int depth) {
        v.type = wa_json::OBJECT;
        s++;
        if (eat('}')) return true;
        do {
            if (!at('"')) return fail("expected a key");
            std::string key;
            if (!string(key)) return false;
            if (!eat(':')) return fail("expected ':' after a key");
            v.fields.emplace_back(std::move(key), wa_json());
            if (!value(v.fields.back().second, depth + 1)) return false;
        } while (eat(','));
        if (!eat('}')) return fail("expected ',' or '}'");
        std::vector<const std::string *> keys;              // each key once
        for (const auto & f : v.fields) keys.push_back(&f.first);
        std::sort(keys.begin(), keys.end(), [](const std::string * a, const std::string * b) { return *a < *b; });
        for (size_t i = 1; i < keys.size(); i++)
            if (*keys[i] == *keys[i - 1]) { s--; return fail("the key \"" + keys[i]->substr(0, 64) + "\" twice in one object"); }
        return true;
    }
    bool array(wa_json & v, int depth) {
        v.type = wa_json::ARRAY;
        s++;
        if (eat(']')) return true;
        do {
            v.items.emplace_back();
            if (!value(v.items.back(), depth + 1)) return false;
        } while (eat(','));
        return eat(']') || fail("expected ',' or ']'");
    }
    // four hex digits of a \u escape
    bool hex4(uint32_t & cp) {
        cp = 0;
        for (int k = 0; k < 4; k++, s++) {
            if (s >= end || !isxdigit((unsigned char)*s)) return false;
            cp = cp * 16 + (uint32_t)(isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10));
        }
        return true;
    }
    // a code point of a \u escape (a surrogate pair as one), appended as UTF-8
    bool escape_u(std::string & o) {
        uint32_t cp, lo;
        if (!hex4(cp)) return fail("a bad \\u escape");
        if (cp >= 0xdc00 && cp <= 0xdfff) return fail("a lone surrogate");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (end - s < 2 || s[0] != '\\' || s[1] != 'u') return fail("a lone surrogate");
            s += 2;
            if (!hex4(lo) || lo < 0xdc00 || lo > 0xdfff) return fail("a lone surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const uint8_t lead[5] = {0, 0x00, 0xc0, 0xe0, 0xf0};
        for (int k = 0; k < n; k++) {                       // byte k: the lead's bits, then 6 bits each
            const int shift = 6 * (n - 1 - k);
            o += (char)(k == 0 ? lead[n] | (cp >> shift) : 0x80 | ((cp >> shift) & 0x3f));
        }
        return true;
    }
    // a UTF-8 character of 2 to 4 bytes, checked: its shortest form, no surrogate, at most U+10FFFF
    bool utf8(std::string & o) {
        const unsigned char c = (unsigned char)*s;
        const int n = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc0 && c < 0xe0 ? 2 : 0;
        if (n == 0 || end - s < n) return fail("invalid UTF-8");
        uint32_t cp = c & (0xff >> (n + 1));
        for (int k = 1; k < n; k++) {
            const unsigned char cc = (unsigned char)s[k];
            if ((cc & 0xc0) != 0x80) return fail("invalid UTF-8");
            cp = cp << 6 | (cc & 0x3f);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return fail("invalid UTF-8");
        o.append(s, (size_t)n);
        s += n;
        return true;
    }
    bool string(std::string & o) {
        static const char ESC[] = "\"\\/bfnrt", CHR[] = "\"\\/\b\f\n\r\t";   // \x -> the character
        for (s++; s < end && *s != '"';) {
            const unsigned char c = (unsigned char)*s;
            if (c < 0x20) return fail("a control character in a string");
            if (c >= 0x80) {
                if (!utf8(o)) return false;
            } else if (c != '\\') {
                o += *s++;
            } else if (++s < end && *s == 'u') {
                s++;
                if (!escape_u(o)) return false;
            } else if (const char * e = s < end && *s ? strchr(ESC, *s) : nullptr) {
                o += CHR[e - ESC];
                s++;
            } else {
                return fail("a bad escape");
            }
        }
        return eat('"') || fail("an unterminated string");
    }
    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as its text
    bool number(wa_json & v) {
        const char * start = s;
        s += *s == '-';
        if (!is_digit()) return fail("unexpected character");
        if (*s++ != '0') while (is_digit()) s++;
        for (const char * part : {".", "eE"}) {
            if (s >= end || !strchr(part, *s) || !*s) continue;
            s++;
            if (*part == 'e' && s < end && (*s == '+' || *s == '-')) s++;
            if (!is_digit()) return fail("a bad number");
            while (is_digit()) s++;
        }
        v.type = wa_json::NUMBER;
        v.str.assign(start, s);
        return true;
    }
    bool literal(const char * word, wa_json & v, wa_json::kind type, bool b) {
        const size_t n = strlen(word);
        if ((size_t)(end - s) < n || strncmp(s, word, n) != 0) return fail("unexpected character");
        s += n;
        v.type = type;
        v.b = b;
        return true;
    }
    bool value(wa_json & v, int depth) {
        if (depth > WA_JSON_DEPTH) return fail("nesting deeper than " + std::to_string(WA_JSON_DEPTH));
        ws();
        if (s >= end) return fail("no value");
        switch (*s) {
            case '{': return object(v, depth);
            case '[': return array(v, depth);
            case '"': v.type = wa_json::STRING; return string(v.str);
            case 't': return literal("true", v, wa_json::BOOL, true);
            case 'f': return literal("false", v, wa_json::BOOL, false);
            case 'n': return literal("null", v, wa_json::NUL, false);
            default:  return number(v);
        }
    }
};

// text as one JSON value; false with error ("expected ':' at byte 17") when it is not one.
static bool wa_json_parse(const char * text, size_t n, wa_json & out, std::string & error) {
    wa_json_parser p{text, text, text + n, {}};
    bool ok = p.value(out, 0);
    if (ok) {
        p.ws();
        ok = p.s == p.end || p.fail("text after the value");
    }
    error = p.error;
    return ok;
}

// ---- Hugging Face directories: config.json + safetensors, read through the same table -------
// What save_pretrained writes (convert/convert-hf-to-gguf.py reads the same): config.json, and
// model.safetensors or shards that model.safetensors.index.json names ({"weight_map": {tensor:
// shard file}}). The encoder's tensors keep their stored type where the model file would hold
// it (matrices F32, F16 or BF16; F64 ones as F32); the rest become F32, the mel bank is
// computed: the weights the converter's GGUF of the directory holds, with --outtype the stored
// type, bit for bit. A safetensors file (huggingface/safetensors): uint64 LE header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} with an optional
// "__metadata__" of strings, then the data, which the tensors tile exactly: in offset order
// each begins where the one before ended and the last ends with the file (the checks of the
// safetensors library's own reader).

// safetensors' dtypes and their widths in bits (F4 and F6 pack their elements)
static const struct { const char * name; int bits; } WA_ST_DTYPES[] = {
    {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
    {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},
    {"U32", 32}, {"F32", 32}, {"F64", 64}, {"I64", 64}, {"U64", 64}, {"C64", 64},
};
static const uint64_t WA_ST_MAX_HEADER = 100u << 20;     // the safetensors library's bound on N
static const uint64_t WA_HF_MAX_JSON   = 100u << 20;     // config.json, the shard index

struct wa_st_tensor {
    std::string dtype;
    std::vector<uint64_t> shape;                          // PyTorch's, outermost first
    uint64_t begin = 0, end = 0;                          // in the data section
};

struct wa_st_file {
    std::string path;
    int fd = -1;
    uint64_t size = 0, data_start = 0;
    std::unordered_map<std::string, wa_st_tensor> tensors;
    ~wa_st_file() { if (fd >= 0) close(fd); }
};

// Opens path for reading, a regular file (a FIFO would block, a directory is not one), within
// root when root is set (a model from the Hugging Face cache: its files, symlinks into blobs/,
// must stay inside its folder there). size: the file's. -1 with the error set.
static int wa_hf_open(const std::string & path, const std::string & root, uint64_t * size) {
    std::string real = path;
    if (!root.empty()) {
        if (char * r = realpath(path.c_str(), nullptr)) {
            real = r;
            free(r);
            if (real.compare(0, root.size() + 1, root + "/") != 0) {
                wa_set_error("%s: a symlink to %s, which leaves the model's folder in the Hugging Face cache (%s): refused",
                             path.c_str(), real.c_str(), root.c_str());
                return -1;
            }
        }
    }
    const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) { wa_set_error("%s: cannot open: %s", path.c_str(), strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        wa_set_error("%s: not a regular file", path.c_str());
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (uint64_t)st.st_size;
    return fd;
}

// A JSON file of the directory (config.json, the index), parsed.
static bool wa_hf_json(const std::string & path, const std::string & root, wa_json & out) {
    uint64_t size = 0;
    const int fd = wa_hf_open(path, root, &size);
    if (fd < 0) return false;
    std::string text;
    bool ok = size <= WA_HF_MAX_JSON;
    if (!ok) wa_set_error("%s: %llu bytes: more than the %llu of a JSON file this reader takes", path.c_str(),
                          (unsigned long long)size, (unsigned long long)WA_HF_MAX_JSON);
    if (ok) {
        text.resize(size);
        ok = read_at(path, size, fd, &text[0], size, 0);
    }
    close(fd);
    std::string error;
    if (ok && !wa_json_parse(text.data(), text.size(), out, error)) {
        wa_set_error("%s: not valid JSON: %s", path.c_str(), error.c_str());
        return false;
    }
    return ok;
}

// shape's elements of dtype in bytes, false when they pass limit or are not whole bytes
static bool wa_st_bytes(const std::vector<uint64_t> & shape, int bits, uint64_t limit, uint64_t * bytes) {
    uint64_t n = 1;
    for (const uint64_t d : shape) {
        if (d == 0) { *bytes = 0; return true; }
        if (n > limit * 8 / d) return false;
        n *= d;
    }
    if (n > limit * 8 / (uint64_t)bits || n * (uint64_t)bits % 8 != 0) return false;
    *bytes = n * (uint64_t)bits / 8;
    return true;
}

// One tensor's entry of a safetensors header: its dtype, shape and data_offsets, each checked
// against the others and the data_size bytes of data.
static bool wa_st_entry(const char * p, const std::string & name, const wa_json & e, uint64_t data_size, wa_st_tensor & st) {
    const char * t = name.c_str();
    if (e.type != wa_json::OBJECT) { wa_set_error("%s: tensor '%s': its entry is %s, not an object", p, t, e.shown().c_str()); return false; }
    int bits = 0;
    bool has_offsets = false, has_shape = false;
    for (const auto & fld : e.fields) {
        const wa_json & v = fld.second;
        if (fld.first == "dtype" && v.type == wa_json::STRING) {
            for (const auto & d : WA_ST_DTYPES) if (v.str == d.name) bits = d.bits;
            if (!bits) { wa_set_error("%s: tensor '%s': dtype %s is not one of safetensors'", p, t, v.shown().c_str()); return false; }
            st.dtype = v.str;
        } else if (fld.first == "shape" && v.type == wa_json::ARRAY) {
            for (const wa_json & d : v.items) {
                uint64_t x;
                if (!d.u64(&x)) { wa_set_error("%s: tensor '%s': shape holds %s, not a size", p, t, d.shown().c_str()); return false; }
                st.shape.push_back(x);
            }
            has_shape = true;
        } else if (fld.first == "data_offsets" && v.type == wa_json::ARRAY && v.items.size() == 2 && v.items[0].u64(&st.begin) &&
                   v.items[1].u64(&st.end)) {
            has_offsets = true;
        } else {
            const bool known = fld.first == "dtype" || fld.first == "shape" || fld.first == "data_offsets";
            wa_set_error("%s: tensor '%s': %s%s%s", p, t, known ? fld.first.c_str() : "an unknown field \"",
                         known ? " is not what safetensors stores there" : fld.first.substr(0, 64).c_str(),
                         known ? "" : "\" (its entry holds dtype, shape and data_offsets)");
            return false;
        }
    }
    if (!bits || !has_shape || !has_offsets) {
        wa_set_error("%s: tensor '%s': no %s", p, t, !bits ? "dtype" : !has_shape ? "shape" : "data_offsets");
        return false;
    }
    if (st.begin > st.end || st.end > data_size) {
        wa_set_error("%s: tensor '%s': data_offsets [%llu, %llu] %s the %llu bytes of data: truncated?", p, t,
                     (unsigned long long)st.begin, (unsigned long long)st.end, st.begin > st.end ? "run backwards in" : "lie outside",
                     (unsigned long long)data_size);
        return false;
    }
    uint64_t bytes = 0;
    if (!wa_st_bytes(st.shape, bits, data_size, &bytes) || bytes != st.end - st.begin) {
        std::string shape;
        for (const uint64_t d : st.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        wa_set_error("%s: tensor '%s': shape [%s] of %s does not fill its data_offsets [%llu, %llu] (%llu bytes)", p, t,
                     shape.c_str(), st.dtype.c_str(), (unsigned long long)st.begin, (unsigned long long)st.end,
                     (unsigned long long)(st.end - st.begin));
        return false;
    }
    return true;
}

// The tensors' data must tile the data section: no overlap, no byte that belongs to no tensor
// (the converter and the loader refuse the same files).
static bool wa_st_check_tiling(const wa_st_file & f, const char * p, uint64_t data_size) {
    std::vector<std::pair<const std::string *, const wa_st_tensor *>> order;
    for (const auto & kv : f.tensors) order.push_back({&kv.first, &kv.second});
    std::sort(order.begin(), order.end(), [](const auto & a, const auto & b) {
        return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
    });
    uint64_t pos = 0;
    for (size_t i = 0; i < order.size(); i++) {
        const wa_st_tensor & t = *order[i].second;
        if (t.begin < pos) {
            wa_set_error("%s: tensors '%s' and '%s' overlap (data bytes [%llu, %llu) and [%llu, %llu))", p, order[i - 1].first->c_str(),
                         order[i].first->c_str(), (unsigned long long)order[i - 1].second->begin, (unsigned long long)pos,
                         (unsigned long long)t.begin, (unsigned long long)t.end);
            return false;
        }
        if (t.begin > pos) {
            wa_set_error("%s: data bytes [%llu, %llu) before tensor '%s' belong to no tensor", p, (unsigned long long)pos,
                         (unsigned long long)t.begin, order[i].first->c_str());
            return false;
        }
        pos = t.end;
    }
    if (pos != data_size) {
        wa_set_error("%s: %llu bytes after the last tensor's data belong to no tensor", p, (unsigned long long)(data_size - pos));
        return false;
    }
    return true;
}

// The header of a safetensors file, every entry checked, and its data's tiling.
static bool wa_st_open(wa_st_file & f, const std::string & path, const std::string & root) {
    f.path = path;
    const char * p = path.c_str();
    if ((f.fd = wa_hf_open(path, root, &f.size)) < 0) return false;
    uint8_t len[8];
    if (f.size < 8) { wa_set_error("%s: %llu bytes: too short for a safetensors file", p, (unsigned long long)f.size); return false; }
    if (!read_at(path, f.size, f.fd, len, 8, 0)) return false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
    if (n > f.size - 8 || n > WA_ST_MAX_HEADER) {
        wa_set_error("%s: a safetensors header of %llu bytes, in a file of %llu (at most %llu): not a safetensors file, or truncated",
                     p, (unsigned long long)n, (unsigned long long)f.size, (unsigned long long)WA_ST_MAX_HEADER);
        return false;
    }
    std::string text(n, '\0');
    if (!read_at(path, f.size, f.fd, &text[0], n, 8)) return false;
    wa_json h;
    std::string error;
    if (!wa_json_parse(text.data(), text.size(), h, error)) { wa_set_error("%s: bad safetensors header: %s", p, error.c_str()); return false; }
    if (h.type != wa_json::OBJECT) { wa_set_error("%s: the safetensors header is %s, not an object", p, h.shown().c_str()); return false; }
    f.data_start = 8 + n;
    const uint64_t data_size = f.size - f.data_start;
    for (const auto & kv : h.fields) {
        if (kv.first == "__metadata__") {
            bool strings = kv.second.type == wa_json::OBJECT;
            for (const auto & m : kv.second.fields) strings = strings && m.second.type == wa_json::STRING;
            if (!strings) { wa_set_error("%s: __metadata__ is not an object of strings", p); return false; }
            continue;
        }
        wa_st_tensor st;
        if (!wa_st_entry(p, kv.first, kv.second, data_size, st)) return false;
        f.tensors.emplace(kv.first, std::move(st));
    }
    return wa_st_check_tiling(f, p, data_size);
}

// A checkpoint's tensors: model.safetensors, else the shards model.safetensors.index.json names.
struct wa_hf_checkpoint {
    std::string dir, index;                                 // index: the shard index's path, if there is one
    std::vector<std::unique_ptr<wa_st_file>> files;
    std::unordered_map<std::string, std::pair<const wa_st_file *, const wa_st_tensor *>> where;

    const wa_st_tensor * find(const std::string & name, const wa_st_file ** file = nullptr) const {
        auto it = where.find(name);
        if (it == where.end()) return nullptr;
        if (file) *file = it->second.first;
        return it->second.second;
    }
};

static bool wa_hf_exists(const std::string & path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

static bool wa_hf_checkpoint_open(wa_hf_checkpoint & c, const std::string & dir, const std::string & root) {
    c.dir = dir;
    const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
    if (wa_hf_exists(single)) {
        c.files.emplace_back(new wa_st_file);
        if (!wa_st_open(*c.files.back(), single, root)) return false;
        for (const auto & kv : c.files.back()->tensors) c.where[kv.first] = {c.files.back().get(), &kv.second};
        return true;
    }
    if (!wa_hf_exists(index)) {
        bool pickles = false;                               // what save_pretrained wrote before safetensors
        if (DIR * d = opendir(dir.c_str())) {
            while (const dirent * e = readdir(d)) {
                const std::string fn = e->d_name;
                for (const char * ext : {".bin", ".pt", ".pth", ".ckpt"})
                    pickles = pickles || (fn.size() > strlen(ext) && fn.compare(fn.size() - strlen(ext), std::string::npos, ext) == 0);
            }
            closedir(d);
        }
        if (pickles) wa_set_error("%s: no model.safetensors (PyTorch pickles are not read: save it again with "
                                  "save_pretrained(..., safe_serialization=True))", dir.c_str());
        else wa_set_error("%s: no model.safetensors or model.safetensors.index.json", dir.c_str());
        return false;
    }
    wa_json idx;
    c.index = index;
    if (!wa_hf_json(index, root, idx)) return false;
    const wa_json * map = idx.type == wa_json::OBJECT ? idx.get("weight_map") : nullptr;
    if (!map || map->type != wa_json::OBJECT) {
        wa_set_error("%s: no \"weight_map\" object of tensor name -> shard file", index.c_str());
        return false;
    }
    std::map<std::string, wa_st_file *> shards;
    for (const auto & kv : map->fields) {
        const wa_json & fn = kv.second;
        if (fn.type != wa_json::STRING || fn.str.empty() || fn.str == "." || fn.str == ".." ||
            fn.str.find_first_of(std::string("/\0", 2)) != std::string::npos) {
            wa_set_error("%s: weight_map gives tensor '%s' the shard %s: not a file name in the directory", index.c_str(),
                         kv.first.c_str(), fn.shown().c_str());
            return false;
        }
        auto it = shards.find(fn.str);
        if (it == shards.end()) {
            c.files.emplace_back(new wa_st_file);
            const std::string shard = dir + "/" + fn.str;
            if (!wa_hf_exists(shard)) {
                wa_set_error("%s: shard %s, which the index names, is missing", dir.c_str(), fn.str.c_str());
                return false;
            }
            if (!wa_st_open(*c.files.back(), shard, root)) return false;
            it = shards.emplace(fn.str, c.files.back().get()).first;
        }
        auto t = it->second->tensors.find(kv.first);
        if (t == it->second->tensors.end()) {
            wa_set_error("%s: tensor '%s' is not in shard %s, as the index says", dir.c_str(), kv.first.c_str(), fn.str.c_str());
            return false;
        }
        c.where[kv.first] = {it->second, &t->second};
    }
    for (const auto & s : shards)                           // and each shard holds what the index says it does
        for (const auto & kv : s.second->tensors) {
            auto w = c.where.find(kv.first);
            if (w == c.where.end() || w->second.first != s.second) {
                wa_set_error("%s: shard %s holds tensor '%s', which the index %s", dir.c_str(), s.first.c_str(), kv.first.c_str(),
                             w == c.where.end() ? "does not name" : "puts in another shard");
                return false;
            }
        }
    return true;
}

// What config.json says beyond the hyperparameters.
struct wa_hf_options {
    const wa_hf_tower * tower = nullptr;   // model_type's row of WA_HF_TOWERS
    std::string encoder_dir;            // the encoder's own checkpoint (Kimi-Audio's whisper-large-v3/); "": the directory's
    std::string encoder_config;         // the file that holds the encoder's config
    bool ln_mid = false;                // Ultravox's projector_ln_mid (v0.5+): ln_mid.weight, else ln_post.weight
    std::string audio_model_id;         // Ultravox: the model its audio tower comes from ("": none named)
};

// The value at a dotted path of objects ("a.b.c"; "": j itself), or null when a step is missing.
static const wa_json * wa_json_at(const wa_json & j, const std::string & path) {
    const wa_json * v = &j;
    for (size_t s = 0; v && !path.empty();) {
        const size_t e = path.find('.', s);
        v = v->type == wa_json::OBJECT ? v->get(path.substr(s, e - s).c_str()) : nullptr;
        if (e == std::string::npos) break;
        s = e + 1;
    }
    return v;
}

// config.json's values, each checked as the converter's read_config checks it; every failure
// names the file and the key.
struct wa_hf_cfg {
    const char * path;                  // the directory
    std::string file;                   // the JSON file read, below it

    // an integer in [1, hi]: a JSON number without fraction or exponent, as Python's int
    bool get(const wa_json & in, const std::string & where, const char * key, int hi, int * dst) const {
        const wa_json * v = wa_json_at(in, key);
        uint64_t x = 0;
        if (!v || !v->u64(&x) || x < 1 || x > (uint64_t)hi) {
            wa_set_error("%s: %s: %s%s is %s, expected an integer in [1, %d]", path, file.c_str(), where.c_str(), key,
                         v ? v->shown().c_str() : "absent", hi);
            return false;
        }
        *dst = (int)x;
        return true;
    }
    // a number (a default where absent)
    bool number(const wa_json & in, const std::string & where, const char * key, double dflt, double * dst) const {
        const wa_json * v = wa_json_at(in, key);
        if (v && v->type != wa_json::NUMBER) {
            wa_set_error("%s: %s: %s%s is %s, not a number", path, file.c_str(), where.c_str(), key, v->shown().c_str());
            return false;
        }
        *dst = v ? strtod(v->str.c_str(), nullptr) : dflt;
        return true;
    }
    // a setting that whisper-audio runs one way (WA_HF_SETTINGS' `runs`): when present, it holds that
    bool runs(const wa_json & in, const std::string & where, const char * key, const char * want) const {
        const wa_json * v = wa_json_at(in, key);
        if (!v) return true;
        const bool flag = !strcmp(want, "true") || !strcmp(want, "false") || !strcmp(want, "null");
        const bool num = !flag && (isdigit((unsigned char)want[0]) || want[0] == '-');
        const bool same = flag ? (!strcmp(want, "null") ? v->type == wa_json::NUL : v->type == wa_json::BOOL && v->b == !strcmp(want, "true"))
                        : num  ? v->type == wa_json::NUMBER && strtod(v->str.c_str(), nullptr) == strtod(want, nullptr)
                               : v->type == wa_json::STRING && v->str == want;
        if (same) return true;
        wa_set_error("%s: %s: %s%s is %s; whisper-audio runs %s%s%s", path, file.c_str(), where.c_str(), key, v->shown().c_str(),
                     flag || num ? "" : "\"", want, flag || num ? "" : "\"");
        return false;
    }
};

// config.json's model_type's row of WA_HF_TOWERS (its projector in hp.projector; NONE for Whisper
// itself), or an error naming the types it takes.
static const wa_hf_tower * wa_hf_model_type(const char * path, const wa_json & top, whisper_audio_hparams & hp) {
    const wa_json * mt = top.type == wa_json::OBJECT ? top.get("model_type") : nullptr;
    std::string types;
    for (const wa_hf_tower & t : WA_HF_TOWERS) {
        if (mt && mt->type == wa_json::STRING && mt->str == t.model_type) {
            hp.projector = WHISPER_AUDIO_PROJECTOR_NONE;
            for (const wa_projector_name & p : WA_PROJECTORS)
                if (!strcmp(p.gguf, t.projector)) hp.projector = p.type;
            return &t;
        }
        if (*t.projector) types += (types.empty() ? "" : ", ") + std::string(t.model_type);
    }
    wa_set_error("%s: config.json: model_type is %s, not \"whisper\" or an audio LLM's (%s)", path,
                 top.type != wa_json::OBJECT ? "absent (not an object)" : mt ? mt->shown().c_str() : "absent", types.c_str());
    return nullptr;
}

// The object that holds the encoder's config (WA_HF_TOWERS' encoder): a path in config.json, or a
// config.json of its own beside its checkpoint (read into own). where: its path for messages.
static const wa_json * wa_hf_encoder_config(const char * dir, const std::string & root, const wa_json & top, const wa_hf_tower & t,
                                            wa_json & own, wa_hf_cfg & r, std::string & where, wa_hf_options & opt) {
    const std::string enc = t.encoder;
    const size_t slash = enc.rfind('/');
    if (slash != std::string::npos) {
        const std::string file = std::string(dir) + "/" + enc;
        if (!wa_hf_exists(file)) {
            wa_set_error("%s: %s: no %s (its Whisper encoder's directory)", dir, t.model_type, enc.c_str());
            return nullptr;
        }
        if (!wa_hf_json(file, root, own)) return nullptr;
        r.file = enc;
        opt.encoder_dir = std::string(dir) + "/" + enc.substr(0, slash);
        opt.encoder_config = file;
        if (own.type != wa_json::OBJECT) { wa_set_error("%s: %s is %s, not an object", dir, enc.c_str(), own.shown().c_str()); return nullptr; }
        return &own;
    }
    where = enc.empty() ? "" : enc + ".";
    const wa_json * cfg = &top;
    for (size_t s = 0; !enc.empty();) {                     // each step, so that the message names the missing one
        const size_t e = enc.find('.', s);
        const std::string step = enc.substr(s, e - s);
        const wa_json * next = cfg->get(step.c_str());
        if (!next || next->type != wa_json::OBJECT) {
            wa_set_error("%s: config.json: %s without %s %s", dir, t.model_type, strchr("aeiou", step[0]) ? "an" : "a", step.c_str());
            return nullptr;
        }
        cfg = next;
        if (e == std::string::npos) break;
        s = e + 1;
    }
    return cfg;
}

// GLM-ASR's GlmAsrEncoder: fc1 4 d wide (get_audio_features stacks 4 frames into intermediate_size),
// as many key/value heads as query heads, RoPE on partial_rotary_factor of each head.
static bool wa_hf_config_glmasr(const wa_hf_cfg & r, const wa_json & cfg, const std::string & ac, whisper_audio_hparams & hp) {
    if (hp.n_ff != 4 * hp.n_state) {
        wa_set_error("%s: config.json: %sintermediate_size %d is not 4 x hidden_size %d (get_audio_features stacks 4 frames "
                     "into intermediate_size)", r.path, ac.c_str(), hp.n_ff, hp.n_state);
        return false;
    }
    hp.stack_factor = 4;
    hp.n_proj_ff = 2 * hp.n_llm;
    const wa_json * kv = cfg.get("num_key_value_heads");
    uint64_t n_kv = 0;
    if (kv && kv->type != wa_json::NUL && !(kv->u64(&n_kv) && n_kv == (uint64_t)hp.n_head)) {
        // grouped-query attention: the library's attention kernels take one key/value head per query head
        wa_set_error("%s: config.json: %snum_key_value_heads is %s; whisper-audio runs one per attention head (%d)", r.path,
                     ac.c_str(), kv->shown().c_str(), hp.n_head);
        return false;
    }
    const wa_json * hd = cfg.get("head_dim");            // GlmAsrAttention's getattr(config, "head_dim", d / heads)
    uint64_t hd_value = 0;
    if (hd && !(hd->u64(&hd_value) && hd_value == (uint64_t)(hp.n_state / hp.n_head))) {
        wa_set_error("%s: config.json: %shead_dim is %s; whisper-audio runs hidden_size / num_attention_heads (%d)", r.path,
                     ac.c_str(), hd->shown().c_str(), hp.n_state / hp.n_head);
        return false;
    }
    const wa_json * rp = cfg.get("rope_parameters");
    const wa_json none;
    if (rp && rp->type != wa_json::OBJECT && rp->type != wa_json::NUL) {
        wa_set_error("%s: config.json: %srope_parameters is %s, not an object", r.path, ac.c_str(), rp->shown().c_str());
        return false;
    }
    const wa_json & rope = rp && rp->type == wa_json::OBJECT ? *rp : none;
    double factor = 1.0, theta = 10000.0;
    const std::string rw = ac + "rope_parameters.";
    if (!r.number(rope, rw, "partial_rotary_factor", 1.0, &factor) || !r.number(rope, rw, "rope_theta", 10000.0, &theta)) return false;
    const int head_dim = hp.n_state / hp.n_head;
    const double rot = head_dim * factor;
    hp.n_rot = rot > 0 && rot < 1e9 ? (int)rot : 0;         // Python's int(): toward zero
    hp.rope_theta = (float)theta;
    if (hp.n_rot < 2 || hp.n_rot % 2 || hp.n_rot > head_dim || !(theta > 0) || !std::isfinite(hp.rope_theta)) {
        wa_set_error("%s: config.json: %srope_parameters give %d rotary dims of %d, theta %g", r.path, ac.c_str(), hp.n_rot,
                     head_dim, theta);
        return false;
    }
    return true;
}

// MiniCPM-o's get_audio_embedding: blocks of chunk_num_frame = int(audio_chunk_length * 50) positions.
static bool wa_hf_config_minicpmo(const wa_hf_cfg & r, const wa_json & top, whisper_audio_hparams & hp) {
    double chunk = 1.0;
    if (!r.number(top, "", "audio_chunk_length", 1.0, &chunk)) return false;
    // chunk_length <= 0: one block of the whole window
    const double blocks = chunk > 0 ? std::trunc(chunk * 50) : hp.n_ctx;
    if (!(blocks >= 1 && blocks <= hp.n_ctx)) {
        const wa_json * ch = top.get("audio_chunk_length");
        wa_set_error("%s: config.json: audio_chunk_length %s gives blocks of %g positions; [1, %d] expected", r.path,
                     ch ? ch->shown().c_str() : "1.0", blocks, hp.n_ctx);
        return false;
    }
    hp.n_causal = (int)blocks;
    return true;
}

// Kimi-Audio: tokenize_waveform's 4 positions stacked into kimia_adaptor_input_dim; its encoder
// is Whisper-large-v3's (128 mel bins); the VQ adaptor's LayerNorm takes rms_norm_eps.
static bool wa_hf_config_kimiaudio(const wa_hf_cfg & r, const wa_json & top, whisper_audio_hparams & hp) {
    const wa_json * ad = top.get("kimia_adaptor_input_dim");
    uint64_t dim = 0;
    if (!(ad && ad->u64(&dim) && dim == 4 * (uint64_t)hp.n_state) || hp.n_mels != 128) {
        wa_set_error("%s: config.json: kimia_adaptor_input_dim %s, %s's num_mel_bins %d; whisper-audio runs 4 x d_model %d, "
                     "128 (its encoder's fixed mel count)", r.path, ad ? ad->shown().c_str() : "absent", r.file.c_str(), hp.n_mels, hp.n_state);
        return false;
    }
    hp.stack_factor = 4;
    double eps = 1e-6;
    if (!r.number(top, "", "rms_norm_eps", 1e-6, &eps)) return false;
    if (!(eps > 0 && eps < 1)) {
        wa_set_error("%s: config.json: rms_norm_eps is %s, not a number in (0, 1)", r.path, top.get("rms_norm_eps")->shown().c_str());
        return false;
    }
    hp.proj_eps = (float)eps;
    return true;
}

// Music Flamingo's rotary time embedding (MusicFlamingoConfig, MusicFlamingoRotaryEmbedding), as the
// converter reads it: rope_parameters' rope_theta (1200) and partial_rotary_factor (0.2) of head_dim (the
// audio d_model), rope_type "default"; audio_frame_step (0.01 s a mel frame; a row is 4 of them).
static bool wa_hf_config_musicflamingo(const wa_hf_cfg & r, const wa_json & top, whisper_audio_hparams & hp) {
    const wa_json * rp = top.get("rope_parameters");
    if (rp && rp->type != wa_json::OBJECT && rp->type != wa_json::NUL) {
        wa_set_error("%s: config.json: rope_parameters is %s, not an object", r.path, rp->shown().c_str());
        return false;
    }
    const bool has_rp = rp && rp->type == wa_json::OBJECT;
    // a number where present (else its default), as Python reads it
    bool ok = true;
    auto number = [&](const wa_json * in, const char * key, double dflt) {
        const wa_json * v = in ? in->get(key) : nullptr;
        if (!v || v->type == wa_json::NUL) return dflt;
        if (v->type != wa_json::NUMBER) ok = false;
        return v->type == wa_json::NUMBER ? strtod(v->str.c_str(), nullptr) : 0.0;
    };
    const double theta = number(has_rp ? rp : nullptr, "rope_theta", 1200.0), factor = number(has_rp ? rp : nullptr, "partial_rotary_factor", 0.2);
    const double step = number(&top, "audio_frame_step", 0.01), head = number(&top, "head_dim", 0.0);
    const double head_dim = head != 0.0 ? head : hp.n_state;
    const double rot = std::trunc(head_dim * factor);
    if (!ok || head_dim != hp.n_state || !(rot >= 2 && rot * 2 <= hp.n_state) || std::fmod(rot, 2.0) != 0.0 ||
        !(theta >= hp.n_ctx / 2 && theta <= 1e9) || !(step > 0 && step <= 0.25)) {
        wa_set_error("%s: config.json: rope_parameters %s, head_dim %s, audio_frame_step %s; whisper-audio runs rope_type "
                     "\"default\", head_dim the audio d_model %d, an even rotary width of at most d_model / 2, rope_theta from %d, "
                     "a frame step in (0, 0.25] s", r.path, rp ? rp->shown().c_str() : "absent",
                     top.get("head_dim") ? top.get("head_dim")->shown().c_str() : "absent",
                     top.get("audio_frame_step") ? top.get("audio_frame_step")->shown().c_str() : "absent", hp.n_state, hp.n_ctx / 2);
        return false;
    }
    hp.n_time_rot = (int)rot;
    hp.time_rope_theta = (float)theta;
    hp.time_rope_step = (float)(4.0 * step);
    return true;
}

// Ultravox's projector: stacking, SwiGLU's width, the optional mid LayerNorm; the model its audio tower comes from.
static bool wa_hf_config_ultravox(const wa_hf_cfg & r, const wa_json & top, whisper_audio_hparams & hp, wa_hf_options & opt) {
    if (!r.get(top, "", "stack_factor", 64, &hp.stack_factor) || !r.get(top, "", "hidden_size", 65536, &hp.n_proj_ff)) return false;
    if (hp.n_proj_ff % 2 != 0) {
        wa_set_error("%s: config.json: hidden_size %d is odd; Ultravox's SwiGLU halves it", r.path, hp.n_proj_ff);
        return false;
    }
    const wa_json * ln_mid = top.get("projector_ln_mid");
    if (ln_mid && ln_mid->type != wa_json::BOOL && ln_mid->type != wa_json::NUL) {
        wa_set_error("%s: config.json: projector_ln_mid is %s, not true or false", r.path, ln_mid->shown().c_str());
        return false;
    }
    opt.ln_mid = ln_mid && ln_mid->b;
    const wa_json * id = top.get("audio_model_id");
    if (id && id->type == wa_json::STRING) opt.audio_model_id = id->str;
    return true;
}

// Voxtral Realtime's processor's padding from tekken.json (its mistral_common tokenizer) beside config.json,
// as the converter's realtime_tekken reads it: audio.streaming_n_left_pad_tokens, and the tokens of
// audio.transcription_delay_ms (AudioConfig.get_num_delay_tokens: its samples as mel frames, 8 a token);
// left and delay stay as given where it says none.
static bool wa_hf_tekken(const char * dir, const std::string & root, int * left, int * delay) {
    const std::string path = std::string(dir) + "/tekken.json";
    if (!wa_hf_exists(path)) return true;
    wa_json t;
    if (!wa_hf_json(path, root, t)) return false;
    const wa_json * audio = t.type == wa_json::OBJECT ? t.get("audio") : nullptr;
    if (!audio) return true;
    if (audio->type != wa_json::OBJECT) {
        wa_set_error("%s: tekken.json: audio is %s, not an object", dir, audio->shown().c_str());
        return false;
    }
    for (auto k : {std::make_pair("sampling_rate", 16000.0), std::make_pair("frame_rate", 12.5)}) {
        const wa_json * v = audio->get(k.first);
        if (v && !(v->type == wa_json::NUMBER && strtod(v->str.c_str(), nullptr) == k.second)) {
            wa_set_error("%s: tekken.json: audio.%s is %s; whisper-audio runs %g (1280 samples a token)", dir, k.first,
                         v->shown().c_str(), k.second);
            return false;
        }
    }
    const wa_json * n = audio->get("streaming_n_left_pad_tokens");
    uint64_t nl = 0;
    if (n && !(n->u64(&nl) && nl >= 1 && nl <= 1000)) {
        wa_set_error("%s: tekken.json: audio.streaming_n_left_pad_tokens is %s, expected an integer in [1, 1000]", dir,
                     n->shown().c_str());
        return false;
    }
    if (n) *left = (int)nl;
    const wa_json * ms = audio->get("transcription_delay_ms");
    if (ms) {
        const double v = ms->type == wa_json::NUMBER ? strtod(ms->str.c_str(), nullptr) : 0.0;
        if (ms->type != wa_json::NUMBER || !(v > 0 && v <= 60000)) {
            wa_set_error("%s: tekken.json: audio.transcription_delay_ms is %s, expected a number in (0, 60000]", dir,
                         ms->shown().c_str());
            return false;
        }
        const int64_t samples = (int64_t)(v / 1000.0 * WHISPER_AUDIO_SAMPLE_RATE);
        const int64_t frames = samples % WHISPER_AUDIO_HOP ? (int64_t)std::ceil((double)samples / WHISPER_AUDIO_HOP - 1)
                                                           : samples / WHISPER_AUDIO_HOP;
        *delay = (int)((frames + 7) / 8);
    }
    return true;
}

// Voxtral Realtime's VoxtralRealtimeEncoder: as many key/value heads as query heads, each head_dim wide, RoPE
// over whole heads, RMSNorms of rms_norm_eps, attention over the last sliding_window positions, 4 positions
// a token; its processor's zeros: streaming_n_left_pad_tokens before the audio (the released model's 32), the
// delay's tokens (default_num_delay_tokens, 6) + 1 + 10 after it, or what tekken.json says.
static bool wa_hf_config_realtime(const wa_hf_cfg & r, const wa_json & cfg, const std::string & ac, const wa_hf_cfg & top_r,
                                  const wa_json & top, const std::string & root, whisper_audio_hparams & hp) {
    if (!r.get(cfg, ac, "head_dim", 256, &hp.head_dim) || !r.get(cfg, ac, "sliding_window", 65536, &hp.n_window)) return false;
    const wa_json * kv = cfg.get("num_key_value_heads");
    uint64_t n_kv = 0;
    if (kv && kv->type != wa_json::NUL && !(kv->u64(&n_kv) && n_kv == (uint64_t)hp.n_head)) {
        wa_set_error("%s: config.json: %snum_key_value_heads is %s; whisper-audio runs one per attention head (%d)", r.path,
                     ac.c_str(), kv->shown().c_str(), hp.n_head);
        return false;
    }
    if (hp.head_dim % 2 != 0) {
        wa_set_error("%s: config.json: %shead_dim %d is odd; RoPE turns pairs", r.path, ac.c_str(), hp.head_dim);
        return false;
    }
    const wa_json * rp = cfg.get("rope_parameters");
    if (rp && rp->type != wa_json::OBJECT && rp->type != wa_json::NUL) {
        wa_set_error("%s: config.json: %srope_parameters is %s, not an object", r.path, ac.c_str(), rp->shown().c_str());
        return false;
    }
    const wa_json none;
    double theta = 10000.0, eps = 1e-5;
    if (!r.number(rp && rp->type == wa_json::OBJECT ? *rp : none, ac + "rope_parameters.", "rope_theta", 10000.0, &theta) ||
        !r.number(cfg, ac, "rms_norm_eps", 1e-5, &eps))
        return false;
    if (!(theta > 0 && std::isfinite((float)theta)) || !(eps > 0 && eps < 1)) {
        const wa_json * e = cfg.get("rms_norm_eps");
        wa_set_error("%s: config.json: %srope_theta %g, rms_norm_eps %s: a positive theta and an eps in (0, 1) expected", r.path,
                     ac.c_str(), theta, e ? e->shown().c_str() : "1e-05");
        return false;
    }
    hp.n_rot = hp.head_dim;
    hp.rope_theta = (float)theta;
    hp.eps = (float)eps;
    hp.stack_factor = 4;
    int delay = 6, left = 32;
    if (top.get("default_num_delay_tokens") && !top_r.get(top, "", "default_num_delay_tokens", 1000, &delay)) return false;
    if (!wa_hf_tekken(r.path, root, &left, &delay)) return false;
    hp.pad_left = left;
    hp.pad_right = delay + 1 + 10;
    return true;
}

// The hyperparameters from config.json, the projector's included, as the converter's read_config
// takes them (and within the GGUF loader's bounds): the encoder's by WA_HF_TOWERS' keys, the
// settings of WA_HF_SETTINGS, then what a tower reads its own way.
static bool wa_hf_config(whisper_audio_model * m, const std::string & root, const wa_json & top, wa_hf_options & opt) {
    const char * path = m->path.c_str();
    whisper_audio_hparams & hp = m->hparams;
    const wa_hf_tower * t = wa_hf_model_type(path, top, hp);
    if (!t) return false;
    opt.tower = t;
    opt.encoder_config = m->path + "/config.json";
    wa_hf_cfg r{path, "config.json"}, top_r{path, "config.json"};
    wa_json own;
    std::string ac;                                         // the encoder config's path, for messages
    const wa_json * cfg = wa_hf_encoder_config(path, root, top, *t, own, r, ac, opt);
    if (!cfg) return false;
    if (!r.get(*cfg, ac, t->d_model, 16384, &hp.n_state) || !r.get(*cfg, ac, t->layers, 256, &hp.n_layer) ||
        !r.get(*cfg, ac, t->heads, 256, &hp.n_head) || !r.get(*cfg, ac, t->mels, 512, &hp.n_mels))
        return false;
    if (*t->ffn) { if (!r.get(*cfg, ac, t->ffn, 65536, &hp.n_ff)) return false; }
    else hp.n_ff = 4 * hp.n_state;                          // OpenAI Whisper's MLP
    hp.n_ctx = 1500;
    hp.eps = 1e-5f;                                         // Whisper's LayerNorm; the converter writes it
    hp.stack_factor = 1;
    if (*t->projector) {
        if (!top_r.get(top, "", t->llm, 65536, &hp.n_llm)) return false;
        hp.proj_eps = 1e-6f;                                // Ultravox's RMSNorm default; the converter writes it
    }
    const wa_json * n_pos = *t->positions ? cfg->get(t->positions) : nullptr;
    uint64_t pos = 0;
    if (n_pos && !(n_pos->u64(&pos) && pos == (uint64_t)hp.n_ctx)) {
        wa_set_error("%s: %s: %s%s is %s; whisper-audio needs %d (30 s windows)", path, r.file.c_str(), ac.c_str(), t->positions,
                     n_pos->shown().c_str(), hp.n_ctx);
        return false;
    }
    if (*t->activation && !r.runs(*cfg, ac, t->activation, "gelu")) return false;
    for (const wa_hf_setting & s : WA_HF_SETTINGS) {
        const bool enc = !strcmp(s.in, "encoder");
        if (!strcmp(s.model_type, t->model_type) && !(enc ? r : top_r).runs(enc ? *cfg : top, enc ? ac : "", s.key, s.runs)) return false;
    }
    bool ok = true;
    switch (hp.projector) {
        case WHISPER_AUDIO_PROJECTOR_VOXTRAL: {     // get_audio_features: reshape(-1, intermediate_size)
            const int stack = hp.n_ff / hp.n_state;
            if (hp.n_ff % hp.n_state != 0 || hp.n_ctx % stack != 0 || stack > 64) {
                wa_set_error("%s: config.json: %sintermediate_size %d is not the d_model %d times a divisor of %d (at most 64)",
                             path, ac.c_str(), hp.n_ff, hp.n_state, hp.n_ctx);
                return false;
            }
            hp.stack_factor = stack;
            break;
        }
        case WHISPER_AUDIO_PROJECTOR_MERALION: {    // speech_audio_adapter: reshape(B, T // f, C * f); ln_speech's nn.LayerNorm eps
            uint64_t f = 15;
            const wa_json * sf = top.get("speech_mlp_scale_factor");
            if (sf && !(sf->u64(&f) && f >= 1 && f <= 64 && hp.n_ctx % f == 0)) {
                wa_set_error("%s: config.json: speech_mlp_scale_factor is %s, not a divisor of %d in [1, 64]", path,
                             sf->shown().c_str(), hp.n_ctx);
                return false;
            }
            hp.stack_factor = (int)f;
            hp.proj_eps = 1e-5f;
            break;
        }
        case WHISPER_AUDIO_PROJECTOR_QWEN25O: {     // attention and the conv stem keep to chunks of n_window * 2 frames
            int n_window = 0;
            if (!r.get(*cfg, ac, "n_window", 1 << 20, &n_window)) return false;
            hp.n_chunk = 2 * n_window;
            if (2 * hp.n_ctx % hp.n_chunk != 0) {
                wa_set_error("%s: config.json: %sn_window %d: chunks of %d frames do not divide a window's %d", path, ac.c_str(),
                             n_window, hp.n_chunk, 2 * hp.n_ctx);
                return false;
            }
            break;
        }
        case WHISPER_AUDIO_PROJECTOR_QWEN3A:        // the AuT (Qwen3-ASR's too): chunks of n_window * 2 frames, attention
        case WHISPER_AUDIO_PROJECTOR_QWEN3ASR: {    // windows of n_window_infer
            int n_window = 0;
            if (!r.get(*cfg, ac, "n_window", 1 << 20, &n_window) || !r.get(*cfg, ac, "n_window_infer", 1 << 20, &hp.n_attn_window) ||
                !r.get(*cfg, ac, "downsample_hidden_size", 1 << 20, &hp.n_conv))
                return false;
            hp.n_chunk = 2 * n_window;
            if (hp.n_attn_window % hp.n_chunk != 0 || hp.n_attn_window > 2 * hp.n_ctx) {
                wa_set_error("%s: config.json: %sn_window_infer %d is not a multiple of 2 x n_window %d of at most %d frames", path,
                             ac.c_str(), hp.n_attn_window, hp.n_chunk, 2 * hp.n_ctx);
                return false;
            }
            break;
        }
        case WHISPER_AUDIO_PROJECTOR_GLMASR:     ok = wa_hf_config_glmasr(r, *cfg, ac, hp); break;
        case WHISPER_AUDIO_PROJECTOR_MINICPMO:   ok = wa_hf_config_minicpmo(top_r, top, hp); break;
        case WHISPER_AUDIO_PROJECTOR_KIMIAUDIO:  ok = wa_hf_config_kimiaudio(r, top, hp); break;
        case WHISPER_AUDIO_PROJECTOR_ULTRAVOX:   ok = wa_hf_config_ultravox(top_r, top, hp, opt); break;
        case WHISPER_AUDIO_PROJECTOR_VOXTRAL_REALTIME: ok = wa_hf_config_realtime(r, *cfg, ac, top_r, top, root, hp); break;
        case WHISPER_AUDIO_PROJECTOR_MUSICFLAMINGO:   // Music Flamingo: its rotary time embedding (Audio Flamingo 3: none)
            ok = strcmp(t->model_type, "musicflamingo") || wa_hf_config_musicflamingo(top_r, top, hp);
            break;
        default: break;
    }
    if (!ok) return false;
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: %s: %s%s %d is not a multiple of the %d attention heads", path, r.file.c_str(), ac.c_str(), t->d_model,
                     hp.n_state, hp.n_head);
        return false;
    }
    if (!strcmp(t->embed_positions, "sinusoids") && (hp.n_state % 2 != 0 || hp.n_state < 4)) {   // sin | cos over (d/2 - 1) steps
        wa_set_error("%s: %s: %s%s %d: the sinusoidal positions its model computes need an even width of at least 4", path,
                     r.file.c_str(), ac.c_str(), t->d_model, hp.n_state);
        return false;
    }
    return true;
}

// ---- the Hugging Face cache: a repo id ("openai/whisper-base") as huggingface_hub stores it --
// In $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME (~/.cache)/huggingface/hub
// (huggingface_hub's constants): models--<namespace>--<name>/refs/main holds the commit whose
// snapshots/<commit>/ has the files, each a symlink into the folder's blobs/ (or the file
// itself where symlinks could not be made). Read as it is: the library never reaches the network.

// namespace/name of letters, digits, '-', '_', '.', each part neither starting nor ending with
// '-' or '.', without "--" or "..", at most 96 characters (huggingface_hub's validate_repo_id)
static bool wa_is_repo_id(const std::string & s) {
    const size_t slash = s.find('/');
    if (slash == std::string::npos || s.size() > 96 || s.find('/', slash + 1) != std::string::npos) return false;
    for (const std::string & part : {s.substr(0, slash), s.substr(slash + 1)}) {
        if (part.empty() || part.find("--") != std::string::npos || part.find("..") != std::string::npos) return false;
        for (const char c : part) if (!isalnum((unsigned char)c) && c != '-' && c != '_' && c != '.') return false;
        if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
    }
    return true;
}

static std::string wa_hf_cache_dir() {
    auto env = [](const char * k) { const char * v = getenv(k); return std::string(v ? v : ""); };
    auto user = [&](std::string p) {                        // os.path.expanduser's ~/
        if ((p == "~" || p.compare(0, 2, "~/") == 0) && !env("HOME").empty()) p = env("HOME") + p.substr(1);
        return p;
    };
    if (!env("HF_HUB_CACHE").empty()) return user(env("HF_HUB_CACHE"));
    if (!env("HF_HOME").empty()) return user(env("HF_HOME")) + "/hub";
    return (env("XDG_CACHE_HOME").empty() ? user("~/.cache") : env("XDG_CACHE_HOME")) + "/huggingface/hub";
}

// The snapshot of repo id `id` that refs/main names (dir), and the repo's folder in the cache,
// its real path (root: every file read must lie inside it). false with the error set, which
// says how to download it.
static bool wa_hf_cached(const std::string & id, std::string & dir, std::string & root) {
    const size_t slash = id.find('/');
    const std::string repo = wa_hf_cache_dir() + "/models--" + id.substr(0, slash) + "--" + id.substr(slash + 1);
    const char * i = id.c_str();
    struct stat st;
    if (stat(repo.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        wa_set_error("%s: neither a local path nor a model in the Hugging Face cache (no %s): `hf download %s` fetches it "
                     "(whisper-audio itself never reaches the network)", i, repo.c_str(), i);
        return false;
    }
    const std::string ref_path = repo + "/refs/main";
    char buf[129] = {};
    const int fd = open(ref_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    const bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const ssize_t n = regular ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (fd >= 0) close(fd);
    if (fd < 0 && errno == ENOENT) {
        wa_set_error("%s: the Hugging Face cache's %s has no refs/main (downloaded at another revision?): `hf download %s` "
                     "fetches the main one", i, repo.c_str(), i);
        return false;
    }
    if (fd < 0 || !regular) {   // there, but a FIFO, a folder or unreadable: say so rather than "missing"
        const int e = errno;
        wa_set_error("%s: %s is %s, not a file holding a commit hash: `hf download %s` writes it again", i, ref_path.c_str(),
                     fd < 0 ? strerror(e) : S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : "not a regular file", i);
        return false;
    }
    std::string sha(buf, n > 0 ? (size_t)n : 0);
    while (!sha.empty() && isspace((unsigned char)sha.back())) sha.pop_back();
    if ((sha.size() != 40 && sha.size() != 64) || sha.find_first_not_of("0123456789abcdef") != std::string::npos) {
        wa_set_error("%s: %s holds %zd bytes that are not a commit hash", i, ref_path.c_str(), n);
        return false;
    }
    dir = repo + "/snapshots/" + sha;
    char * r = realpath(repo.c_str(), nullptr);
    char * s = realpath(dir.c_str(), nullptr);
    root = r ? r : "";
    const std::string snap = s ? s : "";
    free(r);
    free(s);
    if (snap.empty() || root.empty() || stat(snap.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        wa_set_error("%s: refs/main names commit %s, whose snapshot %s is missing: `hf download %s` fetches it again", i,
                     sha.c_str(), dir.c_str(), i);
        return false;
    }
    if (snap.compare(0, root.size() + 1, root + "/") != 0) {
        wa_set_error("%s: the snapshot %s is a symlink to %s, which leaves the model's folder in the Hugging Face cache: refused",
                     i, dir.c_str(), snap.c_str());
        return false;
    }
    return true;
}

// ---- a Hugging Face directory, read ------------------------------------------------------------

// A directory's name as the converter names a model of it (os.path.basename of its absolute path).
static std::string wa_dir_name(std::string dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const size_t s = dir.rfind('/');
    std::string base = s == std::string::npos ? dir : dir.substr(s + 1);
    if (base == "." || base == ".." || base.empty()) {
        if (char * real = realpath(dir.empty() ? "/" : dir.c_str(), nullptr)) {
            const std::string r = real;
            free(real);
            base = r == "/" ? "" : r.substr(r.rfind('/') + 1);
        }
    }
    return base;
}

// The checkpoint's tensor `hf` as our tensor `ours` (shape ne, innermost first): its dtype one
// the model can hold, its shape the hyperparameters'. A matrix keeps F32, F16 or BF16 (F64
// becomes F32); the rest become F32. A tensor the checkpoint does not hold (computed: the
// positional embedding of some towers) has its values instead of a file.
struct wa_hf_source { const wa_st_file * file; const wa_st_tensor * t; std::string name; std::vector<float> values; };

static bool wa_hf_record(whisper_audio_model * m, const std::string & dir, const char * ours, int n_dims, const int64_t * ne,
                         int type, std::vector<wa_hf_source> & sources, wa_hf_source && src) {
    gguf_tensor_info g;
    g.name = ours;
    g.n_dims = n_dims;
    std::copy(ne, ne + n_dims, g.ne);
    g.type = type;
    g.bytes = vt_type_size((vt_type)g.type);
    for (int i = 0; i < n_dims; i++) g.bytes *= (uint64_t)ne[i];
    if (!m->index.emplace(ours, m->tensors.size()).second) { wa_set_error("%s: tensor '%s' twice", dir.c_str(), ours); return false; }
    m->tensors.push_back(g);
    sources.push_back(std::move(src));
    return true;
}

static bool wa_hf_take(whisper_audio_model * m, const wa_hf_checkpoint & c, const std::string & hf, const char * ours, int n_dims,
                       const int64_t * ne, bool matrix, const char * what, std::vector<wa_hf_source> & sources) {
    const wa_st_file * f = nullptr;
    const wa_st_tensor * t = c.find(hf, &f);
    if (!t) { wa_set_error("%s: the checkpoint has no %s tensor '%s'", c.dir.c_str(), what, hf.c_str()); return false; }
    const std::string & dt = t->dtype;
    if (dt != "F32" && dt != "F16" && dt != "BF16" && dt != "F64") {
        wa_set_error("%s: tensor '%s' is %s (F32, F16, BF16 or F64 expected)", f->path.c_str(), hf.c_str(), dt.c_str());
        return false;
    }
    bool same = (int)t->shape.size() == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == (uint64_t)ne[n_dims - 1 - i];
    if (!same) {
        std::string got, want;
        for (const uint64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
        for (int i = n_dims - 1; i >= 0; i--) want += (want.empty() ? "" : ", ") + std::to_string(ne[i]);
        wa_set_error("%s: tensor '%s' has shape [%s], config.json implies [%s]", f->path.c_str(), hf.c_str(), got.c_str(), want.c_str());
        return false;
    }
    const int type = !matrix || dt == "F32" || dt == "F64" ? VT_TYPE_F32 : dt == "F16" ? VT_TYPE_F16 : VT_TYPE_BF16;
    return wa_hf_record(m, c.dir, ours, n_dims, ne, type, sources, {f, t, hf, {}});
}

// Qwen2.5-Omni's and Qwen3-Omni's SinusoidsPositionEmbedding [length, channels] as transformers
// computes it in float32: inv = exp(f32(-ln(10000) / (channels/2 - 1)) * i), t * inv rounded to
// float32, then sin | cos; each float32 step done in double and rounded, as the converter does.
static std::vector<float> wa_sinusoids_f32(int length, int channels) {
    auto f32 = [](double x) { return (double)(float)x; };
    const int half = channels / 2;
    const double inc = f32(-std::log(10000.0) / (half - 1));
    std::vector<double> inv(half);
    for (int i = 0; i < half; i++) inv[i] = f32(std::exp(f32(inc * i)));
    std::vector<float> out((size_t)length * channels);
    for (int t = 0; t < length; t++)
        for (int i = 0; i < half; i++) {
            const double x = f32(t * inv[i]);
            out[(size_t)t * channels + i] = (float)std::sin(x);
            out[(size_t)t * channels + half + i] = (float)std::cos(x);
        }
    return out;
}

// The checkpoint's name of our encoder tensor below the encoder's prefix: WA_HF_RENAMES' first row
// of the projector whose `ours` (%d: the layer's digits) begins the name, else the name itself.
static std::string wa_hf_theirs(const char * projector, const std::string & ours) {
    for (const wa_hf_rename & r : WA_HF_RENAMES) {
        if (strcmp(r.projector, projector) != 0) continue;
        const std::string pat = r.ours, theirs = r.hf;
        const size_t d = pat.find("%d");
        if (d == std::string::npos) {
            if (ours.compare(0, pat.size(), pat) == 0) return theirs + ours.substr(pat.size());
            continue;
        }
        if (ours.compare(0, d, pat, 0, d) != 0) continue;
        size_t e = d;
        while (e < ours.size() && isdigit((unsigned char)ours[e])) e++;
        const std::string tail = pat.substr(d + 2);
        if (e == d || ours.compare(e, tail.size(), tail) != 0) continue;
        const size_t td = theirs.find("%d");
        return theirs.substr(0, td) + ours.substr(d, e - d) + theirs.substr(td + 2) + ours.substr(e + tail.size());
    }
    return ours;
}

// float64 to float32, rounded to nearest even; beyond the range (by more than half an ulp) an
// infinity, which the finite check then refuses
static float wa_f64_to_f32(double v) {
    if (std::fabs(v) >= 0x1.ffffffp127 && std::isfinite(v)) return v < 0 ? -INFINITY : INFINITY;
    return (float)v;
}

// The first of WA_HF_PREFIXES under which c holds an encoder (Whisper's conv1, the AuT's conv2d1 or
// Voxtral Realtime's embedder.conv1); top_only: those of a model saved alone (no projector beside it).
static const wa_hf_prefix * hf_prefix(const wa_hf_checkpoint & c, bool top_only) {
    for (const wa_hf_prefix & p : WA_HF_PREFIXES)
        for (const char * stem : {"conv1.weight", "conv2d1.weight", "embedder.conv1.weight"})
            if ((!top_only || !*p.projector) && c.find(std::string(p.encoder) + stem)) return &p;
    return nullptr;
}

// Where the encoder's tensors are: under the first prefix whose stem is there (pre), in ck, in the
// encoder's own checkpoint that config.json names (Kimi-Audio's whisper-large-v3/) or, for a
// published Ultravox checkpoint that holds its projector alone, in the checkpoint of the model its
// config names (opened into tower_ck); enc is the one that holds them. A projector beside an
// encoder of its own sits at ck's top or under model.: where its first tensor is.
static bool hf_find_encoder(whisper_audio_model * m, const wa_hf_checkpoint & ck, wa_hf_checkpoint & tower_ck,
                            const std::string & root, const wa_hf_options & opt, const wa_hf_prefix *& pre,
                            const wa_hf_checkpoint *& enc, std::string & proj_prefix) {
    const char * path = m->path.c_str();
    const whisper_audio_hparams & hp = m->hparams;
    enc = &ck;
    if (!opt.encoder_dir.empty()) {
        if (!wa_hf_checkpoint_open(tower_ck, opt.encoder_dir, root)) return false;
        enc = &tower_ck;
        pre = hf_prefix(tower_ck, true);
    } else {
        pre = hf_prefix(ck, false);
    }
    if (!pre && hp.projector == WHISPER_AUDIO_PROJECTOR_ULTRAVOX && !opt.audio_model_id.empty()) {
        const std::string & id = opt.audio_model_id;
        std::string tdir = id, troot;
        struct stat st;
        const bool local = stat(id.c_str(), &st) == 0;
        if (!local && !(wa_is_repo_id(id) && wa_hf_cached(id, tdir, troot))) {
            const std::string why = wa_is_repo_id(id) ? whisper_audio_last_error() : id + ": neither a directory nor a repo id";
            wa_set_error("%s: an Ultravox checkpoint of its projector alone; its audio tower is the encoder of %s (config.json's "
                         "audio_model_id): %s", path, id.c_str(), why.c_str());
            return false;
        }
        if (!wa_hf_checkpoint_open(tower_ck, tdir, troot)) return false;
        pre = hf_prefix(tower_ck, true);
        if (!pre) { wa_set_error("%s (audio_model_id of %s): no Whisper encoder tensors", tdir.c_str(), path); return false; }
        enc = &tower_ck;
    }
    if (!pre) {
        std::string names;
        for (const wa_hf_prefix & p : WA_HF_PREFIXES) names += (names.empty() ? "" : ", ") + std::string(p.encoder) + "conv1.weight";
        wa_set_error("%s: no encoder tensors: none of %s (nor conv2d1.weight under those prefixes) is in the checkpoint",
                     enc->dir.c_str(), names.c_str());
        return false;
    }
    proj_prefix = pre->projector;
    if (enc != &ck) {
        proj_prefix = "";
        for (const wa_proj_desc & t : WA_PROJ_TENSORS)
            if (t.type == hp.projector) {
                if (ck.find(std::string("model.") + t.name)) proj_prefix = "model.";
                break;
            }
    }
    return true;
}

// The checkpoint's tensors that config.json does not account for (a layer beyond its count), under
// the encoder's and the projector's prefixes: the checkpoint holds another model than the one it
// describes. True with the error set when there are some.
static bool hf_untaken(const wa_hf_checkpoint & c, const std::vector<std::string> & prefixes, const char * what,
                       const std::set<std::string> & taken) {
    std::vector<std::string> extra;
    for (const auto & kv : c.where)
        for (const std::string & p : prefixes)
            if (kv.first.compare(0, p.size(), p) == 0 && !taken.count(kv.first)) { extra.push_back(kv.first); break; }
    if (extra.empty()) return false;
    std::sort(extra.begin(), extra.end());
    wa_set_error("%s: %zu %s tensor%s that config.json does not describe, e.g. %s", c.dir.c_str(), extra.size(),
                 what, extra.size() == 1 ? "" : "s", extra[0].c_str());
    return true;
}

// The tensors of sources into the model's memory, read on every core: a tensor stored as held goes
// straight to its place, the rest through a buffer, widened (F16, BF16: exact) or rounded (F64).
static bool hf_read_sources(whisper_audio_model * m, const std::vector<wa_hf_source> & sources) {
    std::vector<gguf_tensor_info *> used;
    std::vector<uint64_t> sizes;
    for (gguf_tensor_info & t : m->tensors) { used.push_back(&t); sizes.push_back(t.bytes); }
    const bool read = wa_read_tensors(m, used, sizes, [&](size_t i, uint8_t * d) {
        const wa_hf_source & s = sources[i];
        const gguf_tensor_info & t = *used[i];
        if (!s.t) {                                         // computed, F32
            memcpy(d, s.values.data(), t.bytes);
            return std::string();
        }
        const uint64_t stored = s.t->end - s.t->begin, at = s.file->data_start + s.t->begin;
        const std::string & dt = s.t->dtype;
        const vt_type from = dt == "F16" ? VT_TYPE_F16 : dt == "BF16" ? VT_TYPE_BF16 : VT_TYPE_F32;
        if (dt != "F64" && from == (vt_type)t.type) {
            if (!read_at(s.file->path, s.file->size, s.file->fd, d, stored, at)) return std::string(whisper_audio_last_error());
        } else {
            std::vector<uint8_t> tmp(stored);
            if (!read_at(s.file->path, s.file->size, s.file->fd, tmp.data(), stored, at)) return std::string(whisper_audio_last_error());
            const size_t n = t.bytes / sizeof(float);
            if (dt == "F64") {
                for (size_t k = 0; k < n; k++) {
                    double v;
                    memcpy(&v, tmp.data() + 8 * k, 8);
                    const float f = wa_f64_to_f32(v);
                    memcpy(d + 4 * k, &f, 4);
                }
            } else {
                vt_convert(d, VT_TYPE_F32, tmp.data(), from, n);
            }
        }
        return wa_nonfinite(s.file->path, s.name, t, d);
    });
    return read;
}

// A Hugging Face directory: dir; root: its folder in the Hugging Face cache ("": a local one).
static bool hf_model_read(whisper_audio_model * m, std::string dir, const std::string & root) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    m->kind = whisper_audio_model::HF;
    m->path = dir;
    const char * path = dir.c_str();
    const std::string cfg_path = dir + "/config.json";
    if (!wa_hf_exists(cfg_path)) { wa_set_error("%s: no config.json: not a Hugging Face checkpoint directory", path); return false; }
    wa_json cfg;
    wa_hf_options opt;
    if (!wa_hf_json(cfg_path, root, cfg) || !wa_hf_config(m, root, cfg, opt)) return false;
    whisper_audio_hparams & hp = m->hparams;
    const wa_hf_tower & tower = *opt.tower;
    wa_hf_checkpoint ck, tower_ck;
    if (!wa_hf_checkpoint_open(ck, dir, root)) return false;
    m->sources.push_back(cfg_path);
    if (opt.encoder_config != cfg_path) m->sources.push_back(opt.encoder_config);

    const wa_hf_prefix * pre = nullptr;
    const wa_hf_checkpoint * enc = nullptr;
    std::string proj_prefix;
    if (!hf_find_encoder(m, ck, tower_ck, root, opt, pre, enc, proj_prefix)) return false;
    for (const wa_hf_checkpoint * c : {&ck, &tower_ck}) {
        if (!c->index.empty()) m->sources.push_back(c->index);
        for (const auto & f : c->files) m->sources.push_back(f->path);
    }
    if (hp.projector == WHISPER_AUDIO_PROJECTOR_STEPAUDIO2) {   // its Adaptor's width is not in its config: linear1's rows
        const std::string l1 = proj_prefix + "adapter.linear1.weight";
        const wa_st_tensor * t = ck.find(l1);
        if (!t || t->shape.size() != 2 || t->shape[0] < 1 || t->shape[0] > 65536) {
            wa_set_error("%s: the checkpoint has no projector tensor '%s' of [1, 65536] rows", path, l1.c_str());
            return false;
        }
        hp.n_proj_ff = (int)t->shape[0];
    }

    // the encoder's tensors and the projector's, each found (or computed), checked and recorded under our name
    std::vector<wa_hf_source> sources;
    std::set<std::string> taken;
    if (*tower.unused) taken.insert(pre->encoder + std::string(tower.unused));
    const bool found = wa_for_each_tensor(hp, [&](const wa_tensor_desc & t, int il, const char * name) {
        const char * hf = WA_HF_NAMES[&t - WA_TENSORS].hf;
        if (!hf) return true;                               // the mel bank: computed below
        int64_t ne[4];
        const int n_dims = wa_shape(hp, t, ne);
        if (t.top == &wa_weights::pos && strcmp(tower.embed_positions, "stored") != 0) {
            // not in the checkpoint: the sinusoids its model computes, or zeros where RoPE turns q and k instead
            std::vector<float> v = !strcmp(tower.embed_positions, "sinusoids") ? wa_sinusoids_f32(hp.n_ctx, hp.n_state)
                                                                                : std::vector<float>((size_t)hp.n_ctx * hp.n_state);
            return wa_hf_record(m, dir, name, n_dims, ne, VT_TYPE_F32, sources, {nullptr, nullptr, name, std::move(v)});
        }
        char buf[GGUF_MAX_NAME + 1];
        snprintf(buf, sizeof(buf), hf, il);
        const std::string theirs = pre->encoder + wa_hf_theirs(tower.projector, buf);
        taken.insert(theirs);
        return wa_hf_take(m, *enc, theirs, name, n_dims, ne, t.matrix, "encoder", sources);
    });
    if (!found) return false;
    std::vector<std::string> proj_prefixes;                 // the first part of each projector tensor's name
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) {
        if (t.type != hp.projector) continue;
        const std::string head = proj_prefix + std::string(t.name, strchr(t.name, '.') + 1);
        if (std::find(proj_prefixes.begin(), proj_prefixes.end(), head) == proj_prefixes.end()) proj_prefixes.push_back(head);
        if (t.either && (t.name == std::string("multi_modal_projector.ln_mid.weight")) != opt.ln_mid) continue;
        int64_t ne[3];
        const int n_dims = wa_proj_shape(hp, t, ne);
        taken.insert(proj_prefix + t.name);
        if (!wa_hf_take(m, ck, proj_prefix + t.name, t.name, n_dims, ne, t.matrix, "projector", sources)) return false;
    }
    const std::vector<std::string> enc_prefixes = *pre->encoder ? std::vector<std::string>{pre->encoder}
                                                : std::vector<std::string>{"conv", "layers.", "layer_norm.", "embed_positions."};
    if (hf_untaken(*enc, enc_prefixes, "encoder", taken)) return false;
    if (hf_untaken(ck, proj_prefixes, "projector", taken)) return false;
    if (enc != &ck && hf_untaken(ck, {"audio_tower.", "model.audio_tower."}, "audio-tower", taken)) return false;   // not the tower alone: LoRA, a part
    if (!hf_read_sources(m, sources)) return false;
    m->hparams.weight_type = wa_weight_type((vt_type)m->find("encoder.layers.0.fc2.weight")->type);
    m->mel_computed.resize((size_t)hp.n_mels * WHISPER_AUDIO_N_BINS);   // as the feature extractor computes it
    wa_mel_filters_slaney(hp.n_mels, m->mel_computed.data());
    m->mel_filters = m->mel_computed.data();
    if (m->name.empty()) m->name = wa_dir_name(dir);
    return true;
}

// CTranslate2's config.json beside model.bin (its converter writes one; a model.bin alone loads
// too): valid JSON, an object, and the encoder's LayerNorm epsilon where it says one (the
// other keys, alignment heads and token ids, are the decoder's).
static bool ct2_read_config(whisper_audio_model * m) {
    const size_t slash = m->path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : m->path.substr(0, slash);
    const std::string path = dir + "/config.json";
    if (!wa_hf_exists(path)) return true;
    wa_json cfg;
    if (!wa_hf_json(path, "", cfg)) return false;   // (no root: a cache's symlinks into blobs/ are fine here)
    if (cfg.type != wa_json::OBJECT) {
        wa_set_error("%s: CTranslate2's config.json is %s, not an object", path.c_str(), cfg.shown().c_str());
        return false;
    }
    const wa_json * eps = cfg.get("layer_norm_epsilon");
    if (eps && eps->type != wa_json::NUL) {
        char * end = nullptr;
        const double v = eps->type == wa_json::NUMBER ? strtod(eps->str.c_str(), &end) : 0.0;
        if (eps->type != wa_json::NUMBER || *end || !(v > 0.0 && v < 1.0)) {
            wa_set_error("%s: layer_norm_epsilon is %s, expected a number in (0, 1)", path.c_str(), eps->shown().c_str());
            return false;
        }
        m->hparams.eps = (float)v;
    }
    return true;
}

// A directory holds a Hugging Face checkpoint when its config.json has a model_type (CTranslate2's
// has none), or, without a model.bin, when it has a config.json or safetensors at all.
static bool wa_is_hf_dir(const std::string & dir) {
    wa_json cfg;
    if (wa_hf_exists(dir + "/config.json") && wa_hf_json(dir + "/config.json", "", cfg) && cfg.type == wa_json::OBJECT &&
        cfg.get("model_type"))
        return true;
    if (wa_hf_exists(dir + "/model.bin")) return false;
    for (const char * f : {"/config.json", "/model.safetensors", "/model.safetensors.index.json"})
        if (wa_hf_exists(dir + f)) return true;
    return false;
}

// =====================================================================================
// the format table's entry points, called by whisper-audio.cpp's model_load
// =====================================================================================

// A path that is no file: a Hugging Face repo id that is not a local path, nor inside a local
// directory (build/x.gguf is a file missing from build/), read from the Hugging Face cache; or a
// Hugging Face directory. *taken false: the path is the GGUF reader's (a CTranslate2 directory's
// model.bin is read as a file).
bool wa_formats_read_path(whisper_audio_model * m, const char * path, bool missing, bool is_dir, bool * taken) {
    *taken = true;
    if (missing && wa_is_repo_id(path) && !wa_hf_exists(std::string(path, strchr(path, '/')))) {
        std::string snapshot, root;
        if (!wa_hf_cached(path, snapshot, root)) return false;
        m->name = strchr(path, '/') + 1;                    // as the converter names a download of it
        return hf_model_read(m, snapshot, root);
    }
    if (is_dir && wa_is_hf_dir(path)) return hf_model_read(m, path, "");
    *taken = false;
    return false;
}

// ---- the format table -----------------------------------------------------------------------
// The model files this set reads, each recognised by its content. sniff says 1 (the file is of
// the format), 0 (it is not: the next row looks) or -1 (it is, and cannot be read: the error is
// set); a row without read only refuses. The rows are tried in order; a file none takes goes to
// the GGUF reader (ours, an mmproj, or a file it refuses with GGUF's own message).

// CTranslate2's model.bin of a Whisper model, any binary version.
static int ct2_sniff(whisper_audio_model * m, int fd) {
    char magic[sizeof(CT2_MAGIC)];
    return m->file_size >= sizeof(magic) && read_at(m, fd, magic, sizeof(magic), 0) &&
           memcmp(magic + 4, CT2_MAGIC + 4, sizeof(magic) - 4) == 0;
}
static bool ct2_read(whisper_audio_model * m, int fd) { return ct2_model_read(m, fd) && ct2_read_config(m); }

// A safetensors file (a header length that fits, then a JSON object): the Hugging Face directory
// that holds it is read.
static int st_sniff(whisper_audio_model * m, int fd) {
    uint8_t st[9];
    if (m->file_size < 10 || !read_at(m, fd, st, 9, 0) || st[8] != '{') return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | st[i];
    return n <= m->file_size - 8;
}
static bool st_read(whisper_audio_model * m, int) {
    const size_t slash = m->path.rfind('/');
    return hf_model_read(m, slash == std::string::npos ? "." : slash == 0 ? "/" : m->path.substr(0, slash), "");
}

// Another CTranslate2 spec (a translation model), or a model.bin too short for its header: said
// as such, not as a bad GGUF.
static int ct2_other_sniff(whisper_audio_model * m, int fd) {
    uint8_t h[6 + 64] = {};
    const size_t have = std::min(m->file_size, sizeof(h));
    if (!read_at(m, fd, h, have, 0)) return -1;
    const size_t base = m->path.rfind('/') == std::string::npos ? 0 : m->path.rfind('/') + 1;
    const bool named_ct2 = m->path.compare(base, std::string::npos, "model.bin") == 0;
    const uint32_t version = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    const size_t len = have >= 6 ? (size_t)(h[4] | h[5] << 8) : 0;
    if (version >= 1 && version < 100 && len >= 6 && 6 + len <= have && h[6 + len - 1] == 0) {
        const std::string spec((const char *)h + 6, len - 1);
        bool word = spec.size() > 4 && spec.compare(spec.size() - 4, 4, "Spec") == 0;
        for (char c : spec) word = word && (isalnum((unsigned char)c) || c == '_');
        if (word) {
            wa_set_error("%s: a CTranslate2 model of spec %s (binary version %u), not a Whisper one (WhisperSpec)",
                         m->path.c_str(), spec.c_str(), version);
            return -1;
        }
    }
    if (named_ct2 && m->file_size < sizeof(CT2_MAGIC)) {
        wa_set_error("%s: %zu bytes: too short for a CTranslate2 model.bin (its header alone is %zu bytes)", m->path.c_str(),
                     m->file_size, sizeof(CT2_MAGIC));
        return -1;
    }
    return 0;
}

// whisper.cpp's legacy ggml-*.bin, by its magic.
static int ggml_sniff(whisper_audio_model * m, int fd) {
    uint32_t magic = 0;
    if (m->file_size >= 4 && !read_at(m, fd, &magic, 4, 0)) return -1;
    return magic == GGML_FILE_MAGIC;
}
static bool ggml_read(whisper_audio_model * m, int fd) { return wa_read_prefix(m, fd, ggml_parse); }

struct wa_file_format {
    const char * name;
    int (*sniff)(whisper_audio_model * m, int fd);
    bool (*read)(whisper_audio_model * m, int fd);    // nullptr: a row that only refuses
};
static const wa_file_format WA_FILE_FORMATS[] = {
    {"CTranslate2 model.bin",      ct2_sniff,       ct2_read},
    {"safetensors",                st_sniff,        st_read},
    {"CTranslate2, not Whisper",   ct2_other_sniff, nullptr},
    {"whisper.cpp ggml",           ggml_sniff,      ggml_read},
};

// An open model file, by the table's rows; *taken false for the GGUF reader.
bool wa_formats_read_file(whisper_audio_model * m, int fd, bool * taken) {
    *taken = true;
    for (const wa_file_format & f : WA_FILE_FORMATS) {
        const int is = f.sniff(m, fd);
        if (is < 0) return false;
        if (is > 0 && f.read) return f.read(m, fd);
    }
    *taken = false;
    return false;
}

// ---- a GGUF of any loaded model: the file convert-hf-to-gguf.py writes -----------------------
// Our GGUF (DESIGN.md's contract) of whatever was loaded: its keys in the converter's order,
// the encoder's tensors in the converter's (WA_TENSORS' order column), the projector's, then
// the mel bank, under our names, each aligned to 32 bytes. The types are those the loader
// holds (f16 and bf16 matrices kept, CTranslate2's int8/int16 as the f32 it dequantised),
// except that a block type's matrices are written as their blocks: read again from the file
// and checked against the f32 held. So the file loads back to the same weights, bit for bit.

static const uint32_t WA_GGUF_ALIGNMENT = 32;   // the converter's general.alignment

// The header as it is built: GGUF's little-endian integers, length-prefixed strings.
struct gguf_writer {
    std::string b;
    void u32(uint32_t v) { b.append((const char *)&v, 4); }
    void u64(uint64_t v) { b.append((const char *)&v, 8); }
    void str(const std::string & s) { u64(s.size()); b += s; }
    void kv_str(const char * key, const std::string & v) { str(key); u32(GGUF_STRING); str(v); }
    void kv_u32(const char * key, uint32_t v) { str(key); u32(GGUF_UINT32); u32(v); }
    void kv_f32(const char * key, float v) { str(key); u32(GGUF_FLOAT32); b.append((const char *)&v, 4); }
};

// What the converter names a model of this file: a GGUF's own general.name; a ggml file's
// name without its extension; a CTranslate2 model's directory's name.
static std::string wa_model_name(const whisper_audio_model * m) {
    if (!m->name.empty()) return m->name;
    const size_t slash = m->path.rfind('/');
    std::string base = slash == std::string::npos ? m->path : m->path.substr(slash + 1);
    if (m->kind == whisper_audio_model::CT2)            // DIR/model.bin: DIR's last component
        return wa_dir_name(slash == std::string::npos ? "." : m->path.substr(0, slash));
    const size_t dot = base.rfind('.');                 // os.path.splitext: not a leading dot
    if (dot != std::string::npos && dot > base.find_first_not_of('.')) base.resize(dot);
    return base;
}

// The new file's mode, 0666 less the umask, as open() would make it (read without changing it).
static mode_t wa_new_file_mode() {
    mode_t mask = 022;
    if (FILE * f = fopen("/proc/self/status", "r")) {
        char line[256];
        unsigned v;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Umask: %o", &v) == 1) { mask = (mode_t)v; break; }
        fclose(f);
    }
    return 0666 & ~mask;
}

static bool wa_write_all(int fd, const void * p, size_t n) {
    for (size_t done = 0; done < n;) {
        const ssize_t k = write(fd, (const char *)p + done, std::min<size_t>(n - done, 1u << 30));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}

// A tensor of the GGUF written: its name, where its data is (block types: read again from the
// model's file), its type, bytes and offset in the data section.
struct gguf_out_tensor { std::string name; const gguf_tensor_info * t; int type; uint64_t bytes, offset; };
static uint64_t gguf_pad(uint64_t n) { return (n + WA_GGUF_ALIGNMENT - 1) / WA_GGUF_ALIGNMENT * WA_GGUF_ALIGNMENT; }

// The model's tensors in the converter's order (WA_TENSORS' order column, the projector's, the
// mel bank last: mel, the file's or the one computed at load).
static std::vector<gguf_out_tensor> gguf_out_tensors(const whisper_audio_model * m, gguf_tensor_info & mel) {
    const whisper_audio_hparams & hp = m->hparams;
    std::vector<gguf_out_tensor> out;
    auto add = [&](const std::string & name) {
        const gguf_tensor_info * t = m->find(name);
        VT_ASSERT(t && t->data);                           // model_read_weights read each of them
        out.push_back({name, t, t->block_type >= 0 ? t->block_type : t->type, t->block_type >= 0 ? t->block_bytes : t->bytes, 0});
    };
    std::vector<const wa_tensor_desc *> rows;
    for (const wa_tensor_desc & t : WA_TENSORS) if ((t.top || t.layer) && wa_has_row(hp, t)) rows.push_back(&t);
    std::stable_sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->order < b->order; });
    char name[GGUF_MAX_NAME + 1];
    for (const wa_tensor_desc * t : rows) if (!t->layer && t->order < WA_AFTER_LAYERS) add(t->name);
    for (int il = 0; il < hp.n_layer; il++)
        for (const wa_tensor_desc * t : rows) if (t->layer) { snprintf(name, sizeof(name), t->name, il); add(name); }
    for (const wa_tensor_desc * t : rows) if (!t->layer && t->order >= WA_AFTER_LAYERS) add(t->name);
    for (const wa_proj_desc & t : WA_PROJ_TENSORS) if (t.type == hp.projector && m->find(t.name)) add(t.name);
    mel.n_dims = 2;
    mel.ne[0] = WHISPER_AUDIO_N_BINS;
    mel.ne[1] = hp.n_mels;
    mel.data = m->mel_filters;
    mel.bytes = (uint64_t)hp.n_mels * WHISPER_AUDIO_N_BINS * sizeof(float);
    out.push_back({"mel_filters", &mel, VT_TYPE_F32, mel.bytes, 0});
    return out;
}

// The header: the converter's keys, then the tensor infos (each tensor's offset set), padded.
static std::string gguf_header(const whisper_audio_model * m, std::vector<gguf_out_tensor> & out) {
    const whisper_audio_hparams & hp = m->hparams;
    // general.file_type: the matrices' type, as encoder.layers.0.fc2.weight has it in the file
    const gguf_tensor_info * fc2 = m->find("encoder.layers.0.fc2.weight");
    const wa_block_type * blk = wa_block(fc2->block_type);
    const uint32_t file_type = blk ? blk->file_type : fc2->type == VT_TYPE_F16 ? 1 : fc2->type == VT_TYPE_BF16 ? 32 : 0;

    gguf_writer w;
    w.b = "GGUF";
    w.u32(3);
    w.u64(out.size());
    const size_t n_kv_at = w.b.size();
    w.u64(0);                                            // the key count, once known
    uint64_t n_kv = 0;
    w.kv_str("general.architecture", "whisper"), n_kv++;
    w.kv_str("general.name", wa_model_name(m)), n_kv++;
    w.kv_u32("general.file_type", file_type), n_kv++;
    w.kv_u32("general.alignment", WA_GGUF_ALIGNMENT), n_kv++;
    if (!m->description.empty()) w.kv_str("general.description", m->description), n_kv++;
    if (hp.projector != WHISPER_AUDIO_PROJECTOR_NONE) {
        w.kv_str("whisper.projector.type", whisper_audio_projector_name(hp.projector)), n_kv++;
        w.kv_u32("whisper.projector.embedding_length", (uint32_t)hp.n_llm), n_kv++;
        w.kv_u32("whisper.projector.stack_factor", (uint32_t)hp.stack_factor), n_kv++;
        w.kv_f32("whisper.projector.layer_norm_epsilon", hp.proj_eps), n_kv++;
    }
    if (hp.n_window) {                                   // Voxtral Realtime's processor's zeros around the audio
        w.kv_u32("whisper.projector.pad_left_tokens", (uint32_t)hp.pad_left), n_kv++;
        w.kv_u32("whisper.projector.pad_right_tokens", (uint32_t)hp.pad_right), n_kv++;
    }
    if (hp.n_time_rot) {                                 // Music Flamingo's rotary time embedding
        w.kv_u32("whisper.projector.time_rope.dimension_count", (uint32_t)hp.n_time_rot), n_kv++;
        w.kv_f32("whisper.projector.time_rope.freq_base", hp.time_rope_theta), n_kv++;
        w.kv_f32("whisper.projector.time_rope.step", hp.time_rope_step), n_kv++;
    }
    if (hp.n_rot) {
        w.kv_u32("whisper.encoder.rope.dimension_count", (uint32_t)hp.n_rot), n_kv++;
        w.kv_f32("whisper.encoder.rope.freq_base", hp.rope_theta), n_kv++;
    }
    if (hp.n_chunk) w.kv_u32("whisper.encoder.chunk_length", (uint32_t)hp.n_chunk), n_kv++;
    if (hp.n_causal) w.kv_u32("whisper.encoder.attention.causal_chunk", (uint32_t)hp.n_causal), n_kv++;
    if (hp.n_conv) w.kv_u32("whisper.encoder.conv2d.channels", (uint32_t)hp.n_conv), n_kv++;
    if (hp.n_attn_window) w.kv_u32("whisper.encoder.attention.window_length", (uint32_t)hp.n_attn_window), n_kv++;
    if (hp.n_window) {                                   // Voxtral Realtime's attention
        w.kv_u32("whisper.encoder.attention.key_length", (uint32_t)hp.head_dim), n_kv++;
        w.kv_u32("whisper.encoder.attention.sliding_window", (uint32_t)hp.n_window), n_kv++;
    }
    w.kv_u32("whisper.encoder.context_length", (uint32_t)hp.n_ctx), n_kv++;
    w.kv_u32("whisper.encoder.embedding_length", (uint32_t)hp.n_state), n_kv++;
    w.kv_u32("whisper.encoder.block_count", (uint32_t)hp.n_layer), n_kv++;
    w.kv_u32("whisper.encoder.mels_count", (uint32_t)hp.n_mels), n_kv++;
    w.kv_u32("whisper.encoder.attention.head_count", (uint32_t)hp.n_head), n_kv++;
    w.kv_u32("whisper.encoder.feed_forward_length", (uint32_t)hp.n_ff), n_kv++;
    w.kv_f32("whisper.encoder.attention.layer_norm_epsilon", hp.eps), n_kv++;
    memcpy(&w.b[n_kv_at], &n_kv, 8);
    uint64_t offset = 0;
    for (gguf_out_tensor & o : out) {
        w.str(o.name);
        w.u32((uint32_t)o.t->n_dims);
        for (int d = 0; d < o.t->n_dims; d++) w.u64((uint64_t)o.t->ne[d]);
        w.u32((uint32_t)o.type);
        w.u64(offset);
        o.offset = offset;
        offset += gguf_pad(o.bytes);
    }
    w.b.resize(gguf_pad(w.b.size()), '\0');
    return w.b;
}

// Where the output goes: a symlink followed; a FIFO or a device written straight through
// (*through); a regular file (or a new one) made as a temporary beside it and renamed over it
// when complete (*st its mode when it exists); never the model's own file.
static bool gguf_save_target(const whisper_audio_model * m, const char * path, std::string & target, struct stat & st,
                             bool & exists, bool & through) {
    target = path;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char * real = realpath(path, nullptr);
        if (!real && !(stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
            wa_set_error("%s: a symlink that does not lead to a file", path);
            return false;
        }
        if (real) { target = real; free(real); }
    }
    exists = stat(target.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) { wa_set_error("%s: is a directory", path); return false; }
    struct stat in;
    for (const std::string & own : m->sources.empty() ? std::vector<std::string>{m->path} : m->sources) {
        if (exists && stat(own.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
            wa_set_error("%s: the output is the model's own file %s; nothing was written", path, own.c_str());
            return false;
        }
    }
    through = exists && !S_ISREG(st.st_mode);
    return true;
}

static bool model_save_gguf(const whisper_audio_model * m, const char * path) {
    if (!m) { wa_set_error("whisper_audio_model_save_gguf: no model"); return false; }
    if (!path || !*path) { wa_set_error("whisper_audio_model_save_gguf: no output path"); return false; }
    gguf_tensor_info mel;
    std::vector<gguf_out_tensor> out = gguf_out_tensors(m, mel);
    const std::string header = gguf_header(m, out);
    std::string target;
    struct stat st;
    bool exists = false, through = false;
    if (!gguf_save_target(m, path, target, st, exists, through)) return false;

    // a block type's data, from the model's file: it must hold the weights loaded
    int src = -1;
    for (const gguf_out_tensor & o : out)
        if (o.t->block_type >= 0 && src < 0 && (src = open(m->path.c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
            wa_set_error("%s: cannot open it again for its %s blocks: %s", m->path.c_str(), wa_type_name(o.type), strerror(errno));
            return false;
        }
    std::string tmp;                                    // ours until renamed: removed on any failure
    int fd = -1;
    struct cleanup {
        std::string & tmp;
        int & fd, & src;
        ~cleanup() {
            if (fd >= 0) close(fd);
            if (src >= 0) close(src);
            if (!tmp.empty()) unlink(tmp.c_str());
        }
    } guard{tmp, fd, src};
    if (through) {
        fd = open(target.c_str(), O_WRONLY | O_CLOEXEC);
    } else {
        tmp = target + ".XXXXXX";
        fd = mkstemp(&tmp[0]);
        if (fd >= 0 && fchmod(fd, exists ? (st.st_mode & 07777) : wa_new_file_mode()) != 0) { close(fd); unlink(tmp.c_str()); fd = -1; }
        if (fd < 0) tmp.clear();
    }
    if (fd < 0) {
        wa_set_error("%s: cannot write %s: %s", path, through ? "it" : "a temporary file beside it", strerror(errno));
        return false;
    }
    bool ok = wa_write_all(fd, header.data(), header.size());
    std::string err = ok ? "" : std::string("write failed: ") + strerror(errno);
    std::vector<uint8_t> blocks;
    std::vector<float> check;
    static const char zeros[WA_GGUF_ALIGNMENT] = {};
    for (size_t i = 0; ok && i < out.size(); i++) {
        const gguf_out_tensor & o = out[i];
        const void * data = o.t->data;
        if (o.t->block_type >= 0) {
            blocks.resize(o.bytes);
            check.resize(o.t->bytes / sizeof(float));
            if (!read_at(m, src, blocks.data(), o.bytes, m->data_start + o.t->offset)) { ok = false; err = whisper_audio_last_error(); break; }
            wa_dequantize(o.type, blocks.data(), check.data(), o.bytes / wa_block(o.type)->bytes);
            if (memcmp(check.data(), o.t->data, o.t->bytes) != 0) {
                ok = false;
                err = m->path + ": tensor '" + o.name + "' is not the one loaded: the file changed since; load it again";
                break;
            }
            data = blocks.data();
        }
        ok = wa_write_all(fd, data, o.bytes) && wa_write_all(fd, zeros, gguf_pad(o.bytes) - o.bytes);
        if (!ok) err = std::string("write failed: ") + strerror(errno);
    }
    const int closing = fd;
    fd = -1;
    if (close(closing) != 0 && ok) { ok = false; err = std::string("write failed: ") + strerror(errno); }
    if (ok && !tmp.empty()) {
        if (rename(tmp.c_str(), target.c_str()) == 0) tmp.clear();
        else { ok = false; err = std::string("rename failed: ") + strerror(errno); }
    }
    if (!ok) {
        if (err.compare(0, m->path.size(), m->path) == 0) wa_set_error("%s", err.c_str());
        else wa_set_error("%s: %s", path, err.c_str());
        return false;
    }
    return true;
}

bool whisper_audio_model_save_gguf(const whisper_audio_model * model, const char * path) {
    return wa_catch(__func__, false, [&] { return model_save_gguf(model, path); });
}

