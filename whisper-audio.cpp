// whisper-audio.cpp - the Whisper audio encoder: model file loading, audio decoding,
// log-mel, the encoder graph and the encode API. The tensor work is vt's (vt.h).
#define VT_BACKEND_IMPL
#include "whisper-audio.h"
#include "vt.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// =====================================================================================
// errors
// =====================================================================================

static thread_local char g_wa_error[512];

const char * whisper_audio_last_error(void) { return g_wa_error; }

static void wa_set_error(const char * fmt, ...) {
    char buf[sizeof(g_wa_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    memcpy(g_wa_error, buf, sizeof(buf));
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// =====================================================================================
// model file: GGUF v3 (ggml's docs/gguf.md), mapped read-only and validated
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
    const void * data = nullptr;
};

// A bounds-checked cursor over the mapped file: every read checks that it stays inside.
struct gguf_reader {
    const uint8_t * data;
    size_t size, pos = 0;
    bool ok = true;

    bool need(size_t n) {
        if (!ok || n > size - pos) { ok = false; return false; }
        return true;
    }
    template <typename T> T get() {
        T v{};
        if (need(sizeof(T))) { memcpy(&v, data + pos, sizeof(T)); pos += sizeof(T); }
        return v;
    }
    std::string get_string() {
        const uint64_t n = get<uint64_t>();
        if (n > (1u << 20) || !need(n)) { ok = false; return ""; }
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
                if (n > size || !need(n * sizes[et])) { ok = false; return; }
                pos += n * sizes[et];
                return;
            }
            for (uint64_t i = 0; i < n && ok; i++) skip(et, depth + 1);
            return;
        }
        if (need(sizes[type])) pos += sizes[type];
    }
};

struct whisper_audio_model {
    std::string path;
    void * map = nullptr;
    size_t map_size = 0;
    whisper_audio_hparams hparams{};
    std::vector<gguf_tensor_info> tensors;
    const float * mel_filters = nullptr;   // [n_mels, 201], inside the mapping

    const gguf_tensor_info * find(const std::string & name) const {
        for (const gguf_tensor_info & t : tensors) if (t.name == name) return &t;
        return nullptr;
    }
    ~whisper_audio_model() { if (map) munmap(map, map_size); }
};

// Checks one tensor against the shape the hyperparameters imply (PyTorch order given,
// compared innermost first) and the type rule: matrices F32/F16/BF16, the rest F32.
static bool check_tensor(const whisper_audio_model * m, const std::string & name,
                         std::vector<int64_t> torch_shape, bool matrix) {
    const gguf_tensor_info * t = m->find(name);
    if (!t) {
        wa_set_error("%s: tensor '%s' is missing from the model file", m->path.c_str(), name.c_str());
        return false;
    }
    std::reverse(torch_shape.begin(), torch_shape.end());
    bool same = t->n_dims == (int)torch_shape.size();
    for (int i = 0; same && i < t->n_dims; i++) same = t->ne[i] == torch_shape[i];
    if (!same) {
        std::string got, want;
        for (int i = 0; i < t->n_dims; i++) got += (i ? ", " : "") + std::to_string(t->ne[i]);
        for (size_t i = 0; i < torch_shape.size(); i++) want += (i ? ", " : "") + std::to_string(torch_shape[i]);
        wa_set_error("%s: tensor '%s' has dims [%s], the hyperparameters need [%s] (innermost first)",
                     m->path.c_str(), name.c_str(), got.c_str(), want.c_str());
        return false;
    }
    if (!matrix && t->type != VT_TYPE_F32) {
        wa_set_error("%s: tensor '%s' is %s, expected f32", m->path.c_str(), name.c_str(), vt_type_name((vt_type)t->type));
        return false;
    }
    return true;
}

// The tensors the encoder needs, by name, with their PyTorch shapes.
template <typename F> static bool for_each_expected_tensor(const whisper_audio_hparams & hp, F && f) {
    const int64_t d = hp.n_state, ff = hp.n_ff;
    bool ok = f("encoder.conv1.weight", std::vector<int64_t>{d, hp.n_mels, 3}, true) &&
              f("encoder.conv1.bias", std::vector<int64_t>{d}, false) &&
              f("encoder.conv2.weight", std::vector<int64_t>{d, d, 3}, true) &&
              f("encoder.conv2.bias", std::vector<int64_t>{d}, false) &&
              f("encoder.embed_positions.weight", std::vector<int64_t>{hp.n_ctx, d}, false) &&
              f("encoder.layer_norm.weight", std::vector<int64_t>{d}, false) &&
              f("encoder.layer_norm.bias", std::vector<int64_t>{d}, false) &&
              f("mel_filters", std::vector<int64_t>{hp.n_mels, WHISPER_AUDIO_N_BINS}, false);
    for (int il = 0; ok && il < hp.n_layer; il++) {
        const std::string p = "encoder.layers." + std::to_string(il) + ".";
        ok = f(p + "self_attn.q_proj.weight", std::vector<int64_t>{d, d}, true) &&
             f(p + "self_attn.q_proj.bias", std::vector<int64_t>{d}, false) &&
             f(p + "self_attn.k_proj.weight", std::vector<int64_t>{d, d}, true) &&
             f(p + "self_attn.v_proj.weight", std::vector<int64_t>{d, d}, true) &&
             f(p + "self_attn.v_proj.bias", std::vector<int64_t>{d}, false) &&
             f(p + "self_attn.out_proj.weight", std::vector<int64_t>{d, d}, true) &&
             f(p + "self_attn.out_proj.bias", std::vector<int64_t>{d}, false) &&
             f(p + "self_attn_layer_norm.weight", std::vector<int64_t>{d}, false) &&
             f(p + "self_attn_layer_norm.bias", std::vector<int64_t>{d}, false) &&
             f(p + "fc1.weight", std::vector<int64_t>{ff, d}, true) &&
             f(p + "fc1.bias", std::vector<int64_t>{ff}, false) &&
             f(p + "fc2.weight", std::vector<int64_t>{d, ff}, true) &&
             f(p + "fc2.bias", std::vector<int64_t>{d}, false) &&
             f(p + "final_layer_norm.weight", std::vector<int64_t>{d}, false) &&
             f(p + "final_layer_norm.bias", std::vector<int64_t>{d}, false);
    }
    return ok;
}

// Stages, as whisper.cpp's loader: map -> header -> key/values (hparams) -> tensor infos
// -> data offsets -> expected tensors and shapes. Any mismatch names what and where.
static bool model_parse(whisper_audio_model * m) {
    const char * path = m->path.c_str();
    gguf_reader r{(const uint8_t *)m->map, m->map_size};
    if (m->map_size < 24) { wa_set_error("%s: file too small to be a GGUF model (%zu bytes)", path, m->map_size); return false; }
    if (memcmp(m->map, "GGUF", 4) != 0) {
        wa_set_error("%s: not a GGUF model file (bad magic)\n---> HINT: convert a Hugging Face Whisper checkpoint with "
                     "convert/convert-hf-to-gguf.py", path);
        return false;
    }
    r.pos = 4;
    const uint32_t version = r.get<uint32_t>();
    if (version != 3) { wa_set_error("%s: GGUF version %u, this reader reads version 3", path, version); return false; }
    const uint64_t n_tensors = r.get<uint64_t>(), n_kv = r.get<uint64_t>();
    if (n_tensors > 100000 || n_kv > 100000) {
        wa_set_error("%s: implausible counts in GGUF header (%llu tensors, %llu keys)", path,
                     (unsigned long long)n_tensors, (unsigned long long)n_kv);
        return false;
    }

    // key/values: the ones we need, type-checked; the rest skipped
    std::string arch;
    uint32_t alignment = 32;
    std::map<std::string, uint32_t> u32;
    float eps = -1.0f;
    for (uint64_t i = 0; i < n_kv && r.ok; i++) {
        const std::string key = r.get_string();
        const uint32_t type = r.get<uint32_t>();
        if (!r.ok) break;
        if (key == "general.architecture" && type == GGUF_STRING) arch = r.get_string();
        else if (key == "general.alignment" && type == GGUF_UINT32) alignment = r.get<uint32_t>();
        else if (key == "whisper.encoder.attention.layer_norm_epsilon" && type == GGUF_FLOAT32) eps = r.get<float>();
        else if (key.rfind("whisper.encoder.", 0) == 0 && type == GGUF_UINT32) u32[key] = r.get<uint32_t>();
        else r.skip(type);
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt GGUF key/value section", path); return false; }
    if (arch != "whisper") {
        wa_set_error("%s: general.architecture is '%s', expected 'whisper'", path, arch.c_str());
        return false;
    }
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > 65536 || alignment % 4) {
        wa_set_error("%s: general.alignment %u is not a supported power of two", path, alignment);
        return false;
    }

    whisper_audio_hparams & hp = m->hparams;
    struct { const char * key; int * dst; int lo, hi; } keys[] = {
        {"whisper.encoder.mels_count", &hp.n_mels, 1, 512},
        {"whisper.encoder.context_length", &hp.n_ctx, 1500, 1500},
        {"whisper.encoder.embedding_length", &hp.n_state, 1, 16384},
        {"whisper.encoder.attention.head_count", &hp.n_head, 1, 256},
        {"whisper.encoder.block_count", &hp.n_layer, 1, 256},
        {"whisper.encoder.feed_forward_length", &hp.n_ff, 1, 65536},
    };
    for (auto & k : keys) {
        auto it = u32.find(k.key);
        if (it == u32.end()) { wa_set_error("%s: missing key %s (uint32)", path, k.key); return false; }
        if (it->second < (uint32_t)k.lo || it->second > (uint32_t)k.hi) {
            wa_set_error("%s: %s = %u is outside [%d, %d]", path, k.key, it->second, k.lo, k.hi);
            return false;
        }
        *k.dst = (int)it->second;
    }
    if (hp.n_state % hp.n_head != 0) {
        wa_set_error("%s: embedding_length %d is not a multiple of head_count %d", path, hp.n_state, hp.n_head);
        return false;
    }
    hp.eps = eps > 0.0f && std::isfinite(eps) ? eps : 1e-5f;

    // tensor infos
    for (uint64_t i = 0; i < n_tensors && r.ok; i++) {
        gguf_tensor_info t;
        t.name = r.get_string();
        t.n_dims = (int)r.get<uint32_t>();
        if (!r.ok || t.n_dims < 1 || t.n_dims > 4) {
            wa_set_error("%s: tensor %llu ('%s'): bad dimension count %d", path, (unsigned long long)i, t.name.c_str(), t.n_dims);
            return false;
        }
        for (int d = 0; d < t.n_dims; d++) {
            const uint64_t ne = r.get<uint64_t>();
            if (ne == 0 || ne > (1u << 24)) { wa_set_error("%s: tensor '%s': bad dimension %llu", path, t.name.c_str(), (unsigned long long)ne); return false; }
            t.ne[d] = (int64_t)ne;
        }
        t.type = (int)r.get<uint32_t>();
        t.offset = r.get<uint64_t>();
        if (!r.ok) break;
        if (!vt_type_valid(t.type)) {
            wa_set_error("%s: tensor '%s' has ggml type %d; supported: F32 (0), F16 (1), BF16 (30)", path, t.name.c_str(), t.type);
            return false;
        }
        if (m->find(t.name)) { wa_set_error("%s: duplicate tensor name '%s'", path, t.name.c_str()); return false; }
        m->tensors.push_back(t);
    }
    if (!r.ok) { wa_set_error("%s: truncated or corrupt GGUF tensor-info section", path); return false; }

    // data: each tensor must lie inside the file
    const size_t data_start = (r.pos + alignment - 1) / alignment * alignment;
    for (gguf_tensor_info & t : m->tensors) {
        const uint64_t bytes = (uint64_t)t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3] * vt_type_size((vt_type)t.type);
        if (t.offset % alignment != 0 || data_start > m->map_size || t.offset > m->map_size - data_start ||
            bytes > m->map_size - data_start - t.offset) {
            wa_set_error("%s: tensor '%s' (%llu bytes at offset %llu) lies outside the file (%zu bytes): truncated?",
                         path, t.name.c_str(), (unsigned long long)bytes, (unsigned long long)t.offset, m->map_size);
            return false;
        }
        t.data = (const uint8_t *)m->map + data_start + t.offset;
    }

    // the encoder's tensors, shapes checked against the hyperparameters
    if (!for_each_expected_tensor(hp, [&](const std::string & name, std::vector<int64_t> shape, bool matrix) {
            return check_tensor(m, name, shape, matrix);
        })) {
        return false;
    }
    hp.weight_type = m->find("encoder.layers.0.fc1.weight")->type;
    m->mel_filters = (const float *)m->find("mel_filters")->data;
    return true;
}

whisper_audio_model * whisper_audio_model_load(const char * path) {
    if (!path) { wa_set_error("no model path given"); return nullptr; }
    const int fd = open(path, O_RDONLY);
    if (fd < 0) { wa_set_error("%s: cannot open model file: %s", path, strerror(errno)); return nullptr; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        wa_set_error("%s: not a regular file", path);
        close(fd);
        return nullptr;
    }
    whisper_audio_model * m = new whisper_audio_model;
    m->path = path;
    m->map_size = (size_t)st.st_size;
    if (m->map_size == 0) {
        wa_set_error("%s: the model file is empty", path);
        close(fd);
        delete m;
        return nullptr;
    }
    m->map = mmap(nullptr, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = nullptr;
        wa_set_error("%s: mmap failed: %s", path, strerror(errno));
        delete m;
        return nullptr;
    }
    if (!model_parse(m)) {
        delete m;
        return nullptr;
    }
    return m;
}

void whisper_audio_model_free(whisper_audio_model * model) { delete model; }

const whisper_audio_hparams * whisper_audio_model_hparams(const whisper_audio_model * model) { return &model->hparams; }

const float * whisper_audio_model_mel_filters(const whisper_audio_model * model) { return model->mel_filters; }

// @@WAV@@

// @@MEL@@

bool whisper_audio_log_mel(const whisper_audio_model * model, const float * pcm, size_t n, float * out) {
    return whisper_audio_log_mel_filters(model->mel_filters, model->hparams.n_mels, pcm, n, out);
}

// =====================================================================================
// the encoder graph
// =====================================================================================

// encoder.layers.N.*: q, k and v are stored as one [3d, d] matrix so that one GEMM
// makes all three; k's bias slots are zero (Whisper's k_proj has no bias).
struct wa_layer {
    vt_tensor * attn_ln_w, * attn_ln_b;   // self_attn_layer_norm.{weight,bias}  [d]
    vt_tensor * qkv_w, * qkv_b;           // self_attn.{q,k,v}_proj              [3d, d], [3d]
    vt_tensor * out_w, * out_b;           // self_attn.out_proj                  [d, d], [d]
    vt_tensor * ffn_ln_w, * ffn_ln_b;     // final_layer_norm                    [d]
    vt_tensor * fc1_w, * fc1_b;           // fc1                                 [ff, d], [ff]
    vt_tensor * fc2_w, * fc2_b;           // fc2                                 [d, ff], [d]
};

struct wa_graph {                        // one batch shape, built once and replayed
    vt_context * ctx = nullptr;
    vt_graph * graph = nullptr;
    vt_tensor * mel = nullptr;           // [B, n_mels, 3000] f32 input
    vt_tensor * out = nullptr;           // [B, 1500, d]
};

struct whisper_audio_encoder {
    const whisper_audio_model * model;
    whisper_audio_encoder_params params;
    vt_backend * backend = nullptr;
    vt_context * wctx = nullptr;         // weights
    vt_tensor * conv1_w, * conv1_b;      // encoder.conv1   [d, n_mels, 3], [d]
    vt_tensor * conv2_w, * conv2_b;      // encoder.conv2   [d, d, 3], [d]
    vt_tensor * pos;                     // encoder.embed_positions.weight [1500, d]
    vt_tensor * ln_post_w, * ln_post_b;  // encoder.layer_norm [d]
    std::vector<wa_layer> layers;
    std::map<int, wa_graph> graphs;      // by batch size
    whisper_audio_timings timings{};
};

// Builds the forward for a batch of mel windows: mel [B, n_mels, 3000] -> [B, 1500, d].
static vt_tensor * whisper_audio_build_encoder(const whisper_audio_encoder * enc, vt_context * ctx, vt_tensor * mel) {
    const whisper_audio_hparams & hp = enc->model->hparams;
    const int n_state = hp.n_state, n_head = hp.n_head, n_ctx = hp.n_ctx;
    const int n_batch = (int)mel->ne[2];
    const float kq_scale = 1.0f / sqrtf((float)(n_state / n_head));
    const int out_layer = enc->params.output_layer;

    // conv stem: conv1 + GELU, conv2 (stride 2) + GELU + positional embedding
    vt_tensor * cur = vt_conv1d_k3(ctx, vt_transpose(ctx, mel), enc->conv1_w, enc->conv1_b, 1, VT_ACT_GELU, nullptr);
    cur = vt_conv1d_k3(ctx, cur, enc->conv2_w, enc->conv2_b, 2, VT_ACT_GELU, enc->pos);
    vt_set_name(cur, "post_conv");
    if (out_layer == WHISPER_AUDIO_POST_CONV) return cur;

    const size_t es = vt_type_size(cur->type);
    for (int il = 0; il < hp.n_layer; il++) {
        const wa_layer & layer = enc->layers[il];
        vt_tensor * inpL = cur;

        // norm
        cur = vt_layer_norm(ctx, inpL, layer.attn_ln_w, layer.attn_ln_b, hp.eps);

        // self-attention: one GEMM for q, k, v, then views of its [B, T, 3d] output
        {
            vt_tensor * qkv = vt_linear(ctx, cur, layer.qkv_w, layer.qkv_b, VT_ACT_NONE, nullptr);
            const size_t row = 3 * n_state * es, win = row * n_ctx;
            vt_tensor * q = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, 0);
            vt_tensor * k = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, n_state * es);
            vt_tensor * v = vt_view_3d(ctx, qkv, n_state, n_ctx, n_batch, row, win, 2 * n_state * es);
            cur = vt_attention(ctx, q, k, v, n_head, kq_scale);
        }

        // projection + residual
        vt_tensor * inpFF = vt_linear(ctx, cur, layer.out_w, layer.out_b, VT_ACT_NONE, inpL);

        // feed-forward network + residual
        cur = vt_layer_norm(ctx, inpFF, layer.ffn_ln_w, layer.ffn_ln_b, hp.eps);
        cur = vt_linear(ctx, cur, layer.fc1_w, layer.fc1_b, VT_ACT_GELU, nullptr);
        cur = vt_linear(ctx, cur, layer.fc2_w, layer.fc2_b, VT_ACT_NONE, inpFF);
        vt_set_name(cur, "layer%d", il);
        if (il == out_layer) return cur;
    }

    // final norm
    if (enc->params.final_ln) {
        cur = vt_layer_norm(ctx, cur, enc->ln_post_w, enc->ln_post_b, hp.eps);
        vt_set_name(cur, "output");
    }
    return cur;
}

// =====================================================================================
// encoder: weights upload, graphs per batch shape, encode
// =====================================================================================

whisper_audio_encoder_params whisper_audio_encoder_default_params(void) {
    whisper_audio_encoder_params p;
    p.device = WHISPER_AUDIO_DEVICE_AUTO;
    p.dtype = WHISPER_AUDIO_DTYPE_F16;
    p.n_threads = (int)std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
    p.gpu_device = 0;
    p.max_batch = 1;
    p.output_layer = -1;
    p.final_ln = true;
    return p;
}

// Copies one weight from the file to the backend, converting the type.
static bool upload(whisper_audio_encoder * enc, vt_tensor * t, const char * name) {
    const gguf_tensor_info * info = enc->model->find(name);
    if (!vt_backend_set_tensor(enc->backend, t, info->data, (vt_type)info->type)) {
        wa_set_error("uploading %s: %s", name, vt_last_error());
        return false;
    }
    return true;
}

static bool upload_weights(whisper_audio_encoder * enc) {
    const whisper_audio_hparams & hp = enc->model->hparams;
    const size_t d = hp.n_state;
    if (!upload(enc, enc->conv1_w, "encoder.conv1.weight") || !upload(enc, enc->conv1_b, "encoder.conv1.bias") ||
        !upload(enc, enc->conv2_w, "encoder.conv2.weight") || !upload(enc, enc->conv2_b, "encoder.conv2.bias") ||
        !upload(enc, enc->pos, "encoder.embed_positions.weight") ||
        !upload(enc, enc->ln_post_w, "encoder.layer_norm.weight") || !upload(enc, enc->ln_post_b, "encoder.layer_norm.bias")) {
        return false;
    }
    std::vector<float> qkv_w(3 * d * d), qkv_b(3 * d);
    for (int il = 0; il < hp.n_layer; il++) {
        const wa_layer & l = enc->layers[il];
        const std::string p = "encoder.layers." + std::to_string(il) + ".";
        const char * parts[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
        for (int i = 0; i < 3; i++) {
            const gguf_tensor_info * t = enc->model->find(p + parts[i]);
            vt_convert(qkv_w.data() + i * d * d, VT_TYPE_F32, t->data, (vt_type)t->type, d * d);
        }
        memcpy(qkv_b.data(), enc->model->find(p + "self_attn.q_proj.bias")->data, d * sizeof(float));
        std::fill(qkv_b.begin() + d, qkv_b.begin() + 2 * d, 0.0f);
        memcpy(qkv_b.data() + 2 * d, enc->model->find(p + "self_attn.v_proj.bias")->data, d * sizeof(float));
        if (!vt_backend_set_tensor(enc->backend, l.qkv_w, qkv_w.data(), VT_TYPE_F32) ||
            !vt_backend_set_tensor(enc->backend, l.qkv_b, qkv_b.data(), VT_TYPE_F32)) {
            wa_set_error("uploading %sself_attn: %s", p.c_str(), vt_last_error());
            return false;
        }
        if (!upload(enc, l.attn_ln_w, (p + "self_attn_layer_norm.weight").c_str()) ||
            !upload(enc, l.attn_ln_b, (p + "self_attn_layer_norm.bias").c_str()) ||
            !upload(enc, l.out_w, (p + "self_attn.out_proj.weight").c_str()) ||
            !upload(enc, l.out_b, (p + "self_attn.out_proj.bias").c_str()) ||
            !upload(enc, l.ffn_ln_w, (p + "final_layer_norm.weight").c_str()) ||
            !upload(enc, l.ffn_ln_b, (p + "final_layer_norm.bias").c_str()) ||
            !upload(enc, l.fc1_w, (p + "fc1.weight").c_str()) || !upload(enc, l.fc1_b, (p + "fc1.bias").c_str()) ||
            !upload(enc, l.fc2_w, (p + "fc2.weight").c_str()) || !upload(enc, l.fc2_b, (p + "fc2.bias").c_str())) {
            return false;
        }
    }
    return true;
}

whisper_audio_encoder * whisper_audio_encoder_init(const whisper_audio_model * model, whisper_audio_encoder_params params) {
    if (!model) { wa_set_error("no model"); return nullptr; }
    const whisper_audio_hparams & hp = model->hparams;
    if (params.max_batch < 1 || params.max_batch > 4096) { wa_set_error("batch size %d is outside [1, 4096]", params.max_batch); return nullptr; }
    if (params.output_layer < WHISPER_AUDIO_POST_CONV || params.output_layer >= hp.n_layer) {
        wa_set_error("output layer %d is outside [0, %d] (-1: the last layer)", params.output_layer, hp.n_layer - 1);
        return nullptr;
    }

    whisper_audio_encoder * enc = new whisper_audio_encoder;
    enc->model = model;
    enc->params = params;
    const vt_type cuda_type = params.dtype == WHISPER_AUDIO_DTYPE_BF16 ? VT_TYPE_BF16 : VT_TYPE_F16;
    if (params.device != WHISPER_AUDIO_DEVICE_CPU) {
        enc->backend = vt_backend_cuda_init(params.gpu_device, cuda_type);
        if (!enc->backend && params.device == WHISPER_AUDIO_DEVICE_CUDA) {
            wa_set_error("CUDA backend unavailable: %s", vt_last_error());
            delete enc;
            return nullptr;
        }
    }
    if (!enc->backend) enc->backend = vt_backend_cpu_init(params.n_threads);

    // weights: matrices in the compute type, vectors in f32
    const vt_type mt = vt_backend_compute_type(enc->backend);
    const int64_t d = hp.n_state, ff = hp.n_ff;
    vt_context * ctx = enc->wctx = vt_init(16 + 16 * hp.n_layer);
    auto weight = [&](vt_type type, int64_t ne0, int64_t ne1, int64_t ne2, const char * name) {
        vt_tensor * t = vt_new_tensor_3d(ctx, type, ne0, ne1, ne2);
        vt_set_weight(t);
        return vt_set_name(t, "%s", name);
    };
    enc->conv1_w = weight(mt, 3, hp.n_mels, d, "encoder.conv1.weight");
    enc->conv1_b = weight(VT_TYPE_F32, d, 1, 1, "encoder.conv1.bias");
    enc->conv2_w = weight(mt, 3, d, d, "encoder.conv2.weight");
    enc->conv2_b = weight(VT_TYPE_F32, d, 1, 1, "encoder.conv2.bias");
    enc->pos = weight(VT_TYPE_F32, d, hp.n_ctx, 1, "encoder.embed_positions.weight");
    enc->ln_post_w = weight(VT_TYPE_F32, d, 1, 1, "encoder.layer_norm.weight");
    enc->ln_post_b = weight(VT_TYPE_F32, d, 1, 1, "encoder.layer_norm.bias");
    enc->layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; il++) {
        wa_layer & l = enc->layers[il];
        l.attn_ln_w = weight(VT_TYPE_F32, d, 1, 1, "self_attn_layer_norm.weight");
        l.attn_ln_b = weight(VT_TYPE_F32, d, 1, 1, "self_attn_layer_norm.bias");
        l.qkv_w = weight(mt, d, 3 * d, 1, "self_attn.qkv.weight");
        l.qkv_b = weight(VT_TYPE_F32, 3 * d, 1, 1, "self_attn.qkv.bias");
        l.out_w = weight(mt, d, d, 1, "self_attn.out_proj.weight");
        l.out_b = weight(VT_TYPE_F32, d, 1, 1, "self_attn.out_proj.bias");
        l.ffn_ln_w = weight(VT_TYPE_F32, d, 1, 1, "final_layer_norm.weight");
        l.ffn_ln_b = weight(VT_TYPE_F32, d, 1, 1, "final_layer_norm.bias");
        l.fc1_w = weight(mt, d, ff, 1, "fc1.weight");
        l.fc1_b = weight(VT_TYPE_F32, ff, 1, 1, "fc1.bias");
        l.fc2_w = weight(mt, ff, d, 1, "fc2.weight");
        l.fc2_b = weight(VT_TYPE_F32, d, 1, 1, "fc2.bias");
    }
    if (!vt_backend_alloc_weights(enc->backend, ctx)) {
        wa_set_error("allocating weights on %s: %s", vt_backend_name(enc->backend), vt_last_error());
        whisper_audio_encoder_free(enc);
        return nullptr;
    }
    if (!upload_weights(enc)) {
        whisper_audio_encoder_free(enc);
        return nullptr;
    }
    return enc;
}

void whisper_audio_encoder_free(whisper_audio_encoder * enc) {
    if (!enc) return;
    for (auto & kv : enc->graphs) {
        vt_graph_free(kv.second.graph);
        vt_free(kv.second.ctx);
    }
    vt_backend_free(enc->backend);
    vt_free(enc->wctx);
    delete enc;
}

const char * whisper_audio_encoder_backend(const whisper_audio_encoder * enc) { return vt_backend_name(enc->backend); }

size_t whisper_audio_encoder_memory(const whisper_audio_encoder * enc) { return vt_backend_allocated_bytes(enc->backend); }

whisper_audio_timings whisper_audio_encoder_timings(const whisper_audio_encoder * enc) { return enc->timings; }

size_t whisper_audio_n_windows(size_t n_samples) {
    return std::max<size_t>(1, (n_samples + WHISPER_AUDIO_N_SAMPLES - 1) / WHISPER_AUDIO_N_SAMPLES);
}

// The graph for a batch of n windows, built and allocated on first use. Only the full
// batch and the last partial one are kept, so memory stays at two arenas at most.
static wa_graph * graph_for_batch(whisper_audio_encoder * enc, int n) {
    auto it = enc->graphs.find(n);
    if (it != enc->graphs.end()) return &it->second;
    for (auto i = enc->graphs.begin(); i != enc->graphs.end();) {
        if (i->first != enc->params.max_batch) {
            vt_graph_free(i->second.graph);
            vt_free(i->second.ctx);
            i = enc->graphs.erase(i);
        } else {
            ++i;
        }
    }
    const whisper_audio_hparams & hp = enc->model->hparams;
    wa_graph g;
    g.ctx = vt_init(32 + 16 * hp.n_layer);
    g.mel = vt_new_tensor_3d(g.ctx, VT_TYPE_F32, WHISPER_AUDIO_N_FRAMES, hp.n_mels, n);
    vt_set_name(g.mel, "mel");
    vt_set_input(g.mel);
    g.out = whisper_audio_build_encoder(enc, g.ctx, g.mel);
    g.graph = vt_graph_build(g.ctx, &g.out, 1);
    if (!vt_backend_alloc_graph(enc->backend, g.graph)) {
        wa_set_error("allocating the encoder graph (batch %d, %.1f MiB) on %s: %s", n,
                     vt_graph_arena_size(g.graph) / 1048576.0, vt_backend_name(enc->backend), vt_last_error());
        vt_graph_free(g.graph);
        vt_free(g.ctx);
        return nullptr;
    }
    return &(enc->graphs[n] = g);
}

bool whisper_audio_encode_mel(whisper_audio_encoder * enc, const float * mel, int n_windows, float * out) {
    const whisper_audio_hparams & hp = enc->model->hparams;
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES;
    const size_t out_win = (size_t)hp.n_ctx * hp.n_state;
    const auto t0 = std::chrono::steady_clock::now();
    for (int w0 = 0; w0 < n_windows; w0 += enc->params.max_batch) {
        const int n = std::min(enc->params.max_batch, n_windows - w0);
        wa_graph * g = graph_for_batch(enc, n);
        if (!g) return false;
        if (!vt_backend_set_tensor(enc->backend, g->mel, mel + w0 * mel_win, VT_TYPE_F32) ||
            !vt_backend_compute(enc->backend, g->graph) ||
            !vt_backend_get_tensor_f32(enc->backend, g->out, out + w0 * out_win)) {
            wa_set_error("encoding on %s: %s", vt_backend_name(enc->backend), vt_last_error());
            return false;
        }
    }
    enc->timings.encode_ms = ms_since(t0);
    return true;
}

bool whisper_audio_encode_pcm(whisper_audio_encoder * enc, const float * pcm, size_t n, float * out) {
    const whisper_audio_hparams & hp = enc->model->hparams;
    const size_t n_win = whisper_audio_n_windows(n);
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES;
    const size_t out_win = (size_t)hp.n_ctx * hp.n_state;
    const int batch = enc->params.max_batch;
    std::vector<float> mel((size_t)batch * mel_win);
    double mel_ms = 0.0, encode_ms = 0.0;
    for (size_t w0 = 0; w0 < n_win; w0 += batch) {
        const int nb = (int)std::min<size_t>(batch, n_win - w0);
        // log-mel of each window of this batch, in parallel
        const auto t0 = std::chrono::steady_clock::now();
        std::atomic<int> next{0}, failed{0};
        auto work = [&] {
            for (int i; (i = next.fetch_add(1)) < nb;) {
                const size_t start = (w0 + i) * WHISPER_AUDIO_N_SAMPLES;
                if (!whisper_audio_log_mel(enc->model, pcm + start, n - start, mel.data() + i * mel_win)) failed = 1;
            }
        };
        std::vector<std::thread> threads;
        for (int t = 1; t < std::min(nb, enc->params.n_threads); t++) threads.emplace_back(work);
        work();
        for (std::thread & t : threads) t.join();
        if (failed) return false;
        mel_ms += ms_since(t0);
        if (!whisper_audio_encode_mel(enc, mel.data(), nb, out + w0 * out_win)) return false;
        encode_ms += enc->timings.encode_ms;
    }
    enc->timings.mel_ms = mel_ms;
    enc->timings.encode_ms = encode_ms;
    return true;
}
