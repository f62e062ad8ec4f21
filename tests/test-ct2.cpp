// CTranslate2 / faster-whisper model directories: the ones CTranslate2's own converter made
// (build/ct2, byte for byte those files, written again by tests/data/make-model-files.py; their
// references in tests/data/ct2, tests/data/make-ct2-references.py) against transformers in float64
// on their own weights, the mel bank computed in C++, and hostile model.bin files.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace {

// ---- a tiny WhisperSpec model.bin (d 2, 1 mel, 1 layer, 1 head, ffn 2) ------------------------

enum { F32 = 0, I8 = 1, I16 = 2, I32 = 3, F16 = 4 };

struct ct2_var {
    std::string name;
    std::vector<uint32_t> dims;
    int dtype;
    std::vector<uint8_t> data;
};

void put(std::vector<uint8_t> & b, uint64_t v, int n) { for (int i = 0; i < n; i++) b.push_back((uint8_t)(v >> 8 * i)); }
void put_str(std::vector<uint8_t> & b, const std::string & s) {
    put(b, s.size() + 1, 2);
    b.insert(b.end(), s.begin(), s.end());
    b.push_back(0);
}

ct2_var f32_var(const std::string & name, std::vector<uint32_t> dims, float base) {
    ct2_var v{name, dims, F32, {}};
    size_t n = 1;
    for (uint32_t d : dims) n *= d;
    for (size_t i = 0; i < n; i++) {
        const float x = (float)(base + 0.01 * (i % 13));   // in double: the same bytes whether or not the compiler fuses a multiply-add
        uint32_t u;
        memcpy(&u, &x, 4);
        put(v.data, u, 4);
    }
    return v;
}

// The variables of a tiny model that loads: float32, or int8 matrices with per-row scales.
std::vector<ct2_var> tiny_vars(bool int8) {
    std::vector<ct2_var> v;
    auto matrix = [&](const std::string & name, std::vector<uint32_t> dims) {
        if (!int8) { v.push_back(f32_var(name, dims, -0.05f)); return; }
        ct2_var q{name, dims, I8, {}};
        size_t n = 1;
        for (uint32_t d : dims) n *= d;
        for (size_t i = 0; i < n; i++) q.data.push_back((uint8_t)(int8_t)((int)(i % 11) - 5));
        v.push_back(q);
        v.push_back(f32_var(name + "_scale", {dims[0]}, 100.0f));
    };
    matrix("encoder/conv1/weight", {2, 1, 3});
    v.push_back(f32_var("encoder/conv1/bias", {2}, 0.1f));
    matrix("encoder/conv2/weight", {2, 2, 3});
    v.push_back(f32_var("encoder/conv2/bias", {2}, 0.1f));
    v.push_back(f32_var("encoder/position_encodings/encodings", {1500, 2}, 0.0f));
    v.push_back(f32_var("encoder/layer_norm/gamma", {2}, 1.0f));
    v.push_back(f32_var("encoder/layer_norm/beta", {2}, 0.0f));
    v.push_back(ct2_var{"encoder/num_heads", {}, I16, {1, 0}});
    const std::string l = "encoder/layer_0/";
    v.push_back(f32_var(l + "self_attention/layer_norm/gamma", {2}, 1.0f));
    v.push_back(f32_var(l + "self_attention/layer_norm/beta", {2}, 0.0f));
    matrix(l + "self_attention/linear_0/weight", {6, 2});
    ct2_var qkv_b = f32_var(l + "self_attention/linear_0/bias", {6}, 0.2f);
    std::fill(qkv_b.data.begin() + 8, qkv_b.data.begin() + 16, 0);   // k's part: zero
    v.push_back(qkv_b);
    matrix(l + "self_attention/linear_1/weight", {2, 2});
    v.push_back(f32_var(l + "self_attention/linear_1/bias", {2}, 0.0f));
    v.push_back(f32_var(l + "ffn/layer_norm/gamma", {2}, 1.0f));
    v.push_back(f32_var(l + "ffn/layer_norm/beta", {2}, 0.0f));
    matrix(l + "ffn/linear_0/weight", {2, 2});
    v.push_back(f32_var(l + "ffn/linear_0/bias", {2}, 0.0f));
    matrix(l + "ffn/linear_1/weight", {2, 2});
    v.push_back(f32_var(l + "ffn/linear_1/bias", {2}, 0.0f));
    return v;
}

std::vector<uint8_t> ct2_bytes(const std::vector<ct2_var> & vars, uint32_t version = 6,
                               const std::vector<std::pair<std::string, std::string>> & aliases = {}) {
    std::vector<uint8_t> b;
    put(b, version, 4);
    put_str(b, "WhisperSpec");
    put(b, 3, 4);                                   // spec revision
    put(b, vars.size(), 4);
    for (const ct2_var & v : vars) {
        put_str(b, v.name);
        put(b, v.dims.size(), 1);
        for (uint32_t d : v.dims) put(b, d, 4);
        put(b, v.dtype, 1);
        put(b, v.data.size(), 4);
        b.insert(b.end(), v.data.begin(), v.data.end());
    }
    put(b, aliases.size(), 4);
    for (auto & a : aliases) { put_str(b, a.first); put_str(b, a.second); }
    return b;
}

ct2_var * find(std::vector<ct2_var> & vars, const std::string & name) {
    for (ct2_var & v : vars) if (v.name == name) return &v;
    return nullptr;
}

// Loading fails with a one-line message that contains `expect`.
void check_fails(const std::vector<uint8_t> & bytes, const char * expect) {
    const std::string path = test_tmp("ct2-model.bin");
    write_bytes(path, bytes);
    whisper_audio_model * m = whisper_audio_model_load(path.c_str());
    remove(path.c_str());
    CHECK(m == nullptr);
    const std::string msg = whisper_audio_last_error();
    CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
    whisper_audio_model_free(m);
}

} // namespace

TEST_CASE("ct2: CTranslate2's own files match transformers float64 on their weights (CPU f32)") {
    struct { const char * dir; int n_mels; whisper_audio_weight_type type; } cases[] = {
        {"micro-80-float32", 80, WHISPER_AUDIO_WEIGHT_F32},       {"micro-80-float16", 80, WHISPER_AUDIO_WEIGHT_F16},
        {"micro-80-bfloat16", 80, WHISPER_AUDIO_WEIGHT_BF16},     {"micro-80-int8", 80, WHISPER_AUDIO_WEIGHT_F32},
        {"micro-80-int8_float16", 80, WHISPER_AUDIO_WEIGHT_F32},  {"micro-80-int16", 80, WHISPER_AUDIO_WEIGHT_F32},
        {"micro-128-int8", 128, WHISPER_AUDIO_WEIGHT_F32},
    };
    for (auto & c : cases) {
        const std::string name = c.dir;
        CAPTURE(name);
        const std::string dir = test_model_file(std::string("ct2/") + c.dir);
        whisper_audio_model * model = whisper_audio_model_load(dir.c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error() << TEST_MODEL_FILE_HINT);
        const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
        CHECK(hp->n_mels == c.n_mels);
        CHECK(hp->n_state == 128);
        CHECK(hp->n_layer == 2);
        CHECK(hp->n_head == 2);
        CHECK(hp->n_ff == (c.n_mels == 80 ? 512 : 256));
        CHECK(hp->weight_type == c.type);
        const std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel" + std::to_string(c.n_mels) + ".npy"), nullptr);
        // the reference holds the first 100 positions (each depends on every weight, through attention)
        const std::vector<float> ref = npy_load_f32(test_data(std::string("ct2/") + c.dir + "/speech_16k.last_hidden_state.npy"), nullptr);
        std::vector<float> got = encode_cpu(model, mel);
        got.resize(ref.size());
        const double err = rel_l2(got, ref);
        MESSAGE(name << ": rel L2 vs float64 " << err);
        CHECK(err < 2e-6);
        whisper_audio_model_free(model);
    }
}

TEST_CASE("ct2: the mel bank computed at load equals the converter's") {
    for (int n_mels : {80, 128}) {
        const std::string dir = test_model_file("ct2/micro-" + std::to_string(n_mels) + "-int8");
        const std::string gguf = "build/micro-" + std::to_string(n_mels) + "-f32.gguf";
        whisper_audio_model * a = whisper_audio_model_load(dir.c_str());
        whisper_audio_model * b = whisper_audio_model_load(gguf.c_str());
        REQUIRE_MESSAGE((a && b), whisper_audio_last_error());
        const float * fa = whisper_audio_model_mel_filters(a), * fb = whisper_audio_model_mel_filters(b);
        double worst = 0;
        for (int i = 0; i < n_mels * WHISPER_AUDIO_N_BINS; i++) worst = std::max(worst, (double)std::fabs(fa[i] - fb[i]));
        CHECK(worst <= 1e-9);
        whisper_audio_model_free(a);
        whisper_audio_model_free(b);
    }
}

TEST_CASE("ct2: model.bin loads as a file, by content; a directory without one says so") {
    whisper_audio_model * m = whisper_audio_model_load(test_model_file("ct2/micro-80-float16/model.bin").c_str());
    REQUIRE_MESSAGE(m, whisper_audio_last_error() << TEST_MODEL_FILE_HINT);
    whisper_audio_model_free(m);
    const std::string dir = test_tmp("ct2-empty-dir");
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    CHECK(whisper_audio_model_load(dir.c_str()) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("model.bin") != std::string::npos);
    rmdir(dir.c_str());
}

TEST_CASE("ct2: config.json beside model.bin is read and checked: JSON, an object, layer_norm_epsilon") {
    const std::string dir = test_tmp("ct2-config");
    mkdir(dir.c_str(), 0700);
    write_bytes(dir + "/model.bin", read_bytes(test_model_file("ct2/micro-80-float32/model.bin")));
    const std::string cfg = dir + "/config.json";
    auto load = [&](const char * json, std::string & error) {
        if (json) write_bytes(cfg, std::vector<uint8_t>(json, json + strlen(json)));
        else remove(cfg.c_str());
        whisper_audio_model * m = whisper_audio_model_load(dir.c_str());
        error = m ? "" : whisper_audio_last_error();
        const float eps = m ? whisper_audio_model_hparams(m)->eps : -1.0f;
        whisper_audio_model_free(m);
        return eps;
    };
    std::string error;
    CHECK(load(nullptr, error) == 1e-5f);                                         // none: a model.bin alone
    CHECK(load("{\"alignment_heads\": [[0, 0]], \"suppress_ids\": null}", error) == 1e-5f);   // CTranslate2's own
    CHECK(load("{\"layer_norm_epsilon\": null}", error) == 1e-5f);
    CHECK(load("{\"layer_norm_epsilon\": 1e-6}", error) == 1e-6f);
    for (const char * bad : { "{", "[1, 2]", "{\"layer_norm_epsilon\": \"1e-5\"}", "{\"layer_norm_epsilon\": 2}",
                              "{\"a\": 1, \"a\": 2}" }) {
        CAPTURE(bad);
        CHECK(load(bad, error) == -1.0f);
        CHECK(error.find("config.json") != std::string::npos);
        CHECK(error.find('\n') == std::string::npos);
    }
    remove(cfg.c_str());
    remove((dir + "/model.bin").c_str());
    rmdir(dir.c_str());
}

TEST_CASE("ct2: tiny models load, float32 and int8") {
    for (bool int8 : {false, true}) {
        const std::string path = test_tmp("ct2-tiny.bin");
        write_bytes(path, ct2_bytes(tiny_vars(int8)));
        whisper_audio_model * m = whisper_audio_model_load(path.c_str());
        remove(path.c_str());
        REQUIRE_MESSAGE(m, whisper_audio_last_error());
        CHECK(whisper_audio_model_hparams(m)->n_state == 2);
        CHECK(whisper_audio_model_hparams(m)->n_mels == 1);
        whisper_audio_model_free(m);
    }
}

// The fuzz seeds (tests/fuzz/corpus/ct2) are the tiny models above; WA_WRITE_CT2_SEEDS=1 rewrites them.
TEST_CASE("ct2: the fuzz seeds are the tiny models") {
    for (bool int8 : {false, true}) {
        const std::string path = std::string("tests/fuzz/corpus/ct2/tiny-") + (int8 ? "int8" : "f32") + ".bin";
        if (getenv("WA_WRITE_CT2_SEEDS")) write_bytes(path, ct2_bytes(tiny_vars(int8)));
        CHECK(read_bytes(path) == ct2_bytes(tiny_vars(int8)));
    }
}

TEST_CASE("ct2: hostile model.bin files give a one-line error") {
    const std::vector<uint8_t> good = ct2_bytes(tiny_vars(true));
    // every cut of the file
    for (size_t n = 18; n < good.size(); n += n < 600 ? 1 : 997) {
        CAPTURE(n);
        check_fails(std::vector<uint8_t>(good.begin(), good.begin() + n), "");
    }
    check_fails(ct2_bytes(tiny_vars(false), 5), "binary version 5");
    auto with = [](std::function<void(std::vector<ct2_var> &)> f, bool int8 = false) {
        std::vector<ct2_var> v = tiny_vars(int8);
        f(v);
        return ct2_bytes(v);
    };
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->dims = {9, 9, 9, 9, 9}; }), "rank 5");
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->dtype = 9; }), "dtype 9");
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->dims = {3}; }), "need 12");
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->dims = {65536, 65536}; }), "need 17179869184");
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->dtype = I32; }), "is int32");
    check_fails(with([](auto & v) { find(v, "encoder/layer_0/ffn/linear_1/bias")->name = "x"; }), "'encoder/layer_0/ffn/linear_1/bias' (encoder.layers.0.fc2.bias) is missing");
    check_fails(with([](auto & v) { v.push_back(v[1]); }), "duplicate variable");
    check_fails(with([](auto & v) { find(v, "encoder/num_heads")->data = {0, 0}; }), "encoder/num_heads = 0");
    check_fails(with([](auto & v) { find(v, "encoder/num_heads")->data = {3, 0}; }), "not a multiple");
    check_fails(with([](auto & v) { find(v, "encoder/num_heads")->dims = {2}; find(v, "encoder/num_heads")->data = {1, 0, 1, 0}; }), "integer scalar encoder/num_heads");
    check_fails(with([](auto & v) { find(v, "encoder/layer_0/self_attention/linear_0/bias")->data[8] = 1; }), "k_proj has no bias");
    check_fails(with([](auto & v) { *find(v, "encoder/position_encodings/encodings") = f32_var("encoder/position_encodings/encodings", {1499, 2}, 0); }),
                "has dims [1499, 2], the encoder needs [1500, 2]");
    check_fails(with([](auto & v) { find(v, "encoder/conv2/weight_scale")->name = "y"; }, true), "needs 'encoder/conv2/weight_scale'");
    check_fails(with([](auto & v) { *find(v, "encoder/conv2/weight_scale") = f32_var("encoder/conv2/weight_scale", {3}, 1); }, true),
                "needs 'encoder/conv2/weight_scale'");
    check_fails(with([](auto & v) { *find(v, "encoder/conv2/weight_scale") = f32_var("encoder/conv2/weight_scale", {2}, 0); }, true),
                "non-finite");
    check_fails(with([](auto & v) { find(v, "encoder/conv1/bias")->data[3] = 0x7f; find(v, "encoder/conv1/bias")->data[2] = 0x80; }), "non-finite");
    check_fails(with([](auto & v) { find(v, "encoder/layer_0/ffn/linear_0/weight")->dtype = I8; }), "need 4");
    std::vector<ct2_var> v = tiny_vars(false);
    check_fails(ct2_bytes(v, 6, {{"a", "nothing"}}), "alias 'a' names 'nothing'");
    // issue 23: a layer after a gap, not counted, was ignored (a truncated encoder ran)
    check_fails(with([](auto & v) { v.push_back(f32_var("encoder/layer_3/ffn/layer_norm/gamma", {2}, 1.0f)); }),
                "variable 'encoder/layer_3/ffn/layer_norm/gamma' is of layer 3, but the layers present end at encoder/layer_0");
    // issue 23: one layer's variables aliased as 255 more: 256 layers from one layer's data
    {
        std::vector<std::pair<std::string, std::string>> aliases;
        for (int il = 1; il < 256; il++)
            for (const ct2_var & x : tiny_vars(false))
                if (x.name.rfind("encoder/layer_0/", 0) == 0)
                    aliases.push_back({"encoder/layer_" + std::to_string(il) + x.name.substr(15), x.name});
        check_fails(ct2_bytes(tiny_vars(false), 6, aliases), "aliases stand in for layers the file does not hold");
    }
    // issue 23: n_vars past the variables present read the alias count as a name ("variable '' has
    // dtype 26"); a million dummy variables took 10 s
    {
        std::vector<uint8_t> b = ct2_bytes(tiny_vars(false));
        const uint32_t n = (uint32_t)tiny_vars(false).size() + 1;
        memcpy(b.data() + 4 + 2 + 12 + 4, &n, 4);
        check_fails(b, "has an empty name: n_vars too large");
        const uint32_t huge = 1000000;
        memcpy(b.data() + 4 + 2 + 12 + 4, &huge, 4);
        check_fails(b, "1000000 variables (at most 65536)");
        b = ct2_bytes(tiny_vars(false));
        memcpy(b.data() + b.size() - 4, &huge, 4);             // the alias count
        check_fails(b, "1000000 aliases (at most 65536)");
    }
    // a variable that claims 4 GiB - 4 bytes: its n_bytes (after name, rank, dims, dtype) patched
    v.push_back(ct2_var{"huge", {(1u << 30) - 1}, F32, {}});
    std::vector<uint8_t> b = ct2_bytes(v);
    const std::string key = "huge";
    const size_t at = std::search(b.begin(), b.end(), key.begin(), key.end()) - b.begin() + 5 + 1 + 4 + 1;
    for (int i = 0; i < 4; i++) b[at + i] = i == 0 ? 0xfc : 0xff;
    check_fails(b, "lies outside the file");
}
