// The encoder on the CPU against transformers' float64 activations (tests/data/encoder,
// copied from ../shared/fixtures/encoder: see tests/data/README.md), and the model
// loader's answers to broken files.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<float> encode(const whisper_audio_model * model, const std::vector<float> & mel, int n_windows,
                          int output_layer, int max_batch = 1) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = 2;
    p.output_layer = output_layer;
    p.max_batch = max_batch;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
    std::vector<float> out((size_t)n_windows * hp->n_ctx * hp->n_state, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel.data(), n_windows, out.data()), whisper_audio_last_error());
    whisper_audio_encoder_free(enc);
    return out;
}

// Loading must fail, and the message must contain `expect`.
void check_load_fails(const std::string & path, const char * expect) {
    whisper_audio_model * m = whisper_audio_model_load(path.c_str());
    CHECK(m == nullptr);
    const std::string msg = whisper_audio_last_error();
    CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    whisper_audio_model_free(m);
}

} // namespace

TEST_CASE("encoder matches transformers float64 at post_conv, layer 0 and the output") {
    for (std::string name : {"micro-80", "micro-128"}) {
        const std::string model_path = std::string("build/") + name + "-f32.gguf";
        whisper_audio_model * model = whisper_audio_model_load(model_path.c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        const int n_mels = whisper_audio_model_hparams(model)->n_mels;
        for (std::string clip : {"speech_16k", "long_70s_first30s"}) {
            const std::string mel_path = test_data("features/" + clip + ".mel" + std::to_string(n_mels) + ".npy");
            std::vector<float> mel = npy_load_f32(mel_path, nullptr);
            REQUIRE(mel.size() == (size_t)n_mels * 3000);
            struct { int layer; std::string ref; } stages[] = {
                {WHISPER_AUDIO_POST_CONV, "post_conv"}, {0, "layer0"}, {-1, "last_hidden_state"}};
            for (auto & s : stages) {
                const std::string ref_path = test_data("encoder/" + name + "/" + clip + "." + s.ref + ".npy");
                std::vector<float> ref = npy_load_f32(ref_path, nullptr);
                std::vector<float> got = encode(model, mel, 1, s.layer);
                REQUIRE(got.size() == ref.size());
                const double err = rel_l2(got.data(), ref.data(), ref.size());
                MESSAGE(name << " " << clip << " " << s.ref << ": relative L2 error " << err);
                CHECK(err < 2e-6);
            }
        }
        whisper_audio_model_free(model);
    }
}

TEST_CASE("unpadded windows (--no-pad) match transformers' modules on the shorter sequence") {
    for (std::string name : {"micro-80", "micro-128"}) {
        whisper_audio_model * model = whisper_audio_model_load(("build/" + name + "-f32.gguf").c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        for (std::string clip : {"speech_16k", "long_70s_last"}) {
            const std::string base = test_data("encoder/" + name + "/" + clip + ".nopad.");
            std::vector<int64_t> shape;
            std::vector<float> mel = npy_load_f32(base + "mel.npy", &shape);
            REQUIRE(shape.size() == 2);
            const int n_frames = (int)shape[1];
            struct { int layer; std::string ref; } stages[] = {
                {WHISPER_AUDIO_POST_CONV, "post_conv"}, {0, "layer0"}, {-1, "last_hidden_state"}};
            for (auto & st : stages) {
                std::vector<float> ref = npy_load_f32(base + st.ref + ".npy", nullptr);
                REQUIRE(ref.size() == (size_t)(n_frames / 2) * 128);
                whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
                p.device = WHISPER_AUDIO_DEVICE_CPU;
                p.output_layer = st.layer;
                whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
                REQUIRE(enc);
                std::vector<float> out(ref.size(), NAN);
                REQUIRE_MESSAGE(whisper_audio_encode_mel_frames(enc, mel.data(), 1, n_frames, out.data()), whisper_audio_last_error());
                const double err = rel_l2(out.data(), ref.data(), ref.size());
                MESSAGE(name << " " << clip << " unpadded (" << n_frames / 2 << " positions) " << st.ref << ": relative L2 error " << err);
                CHECK(err < 2e-6);
                whisper_audio_encoder_free(enc);
            }
        }
        whisper_audio_model_free(model);
    }
}

TEST_CASE("a batch of windows gives each window's own result") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE_MESSAGE(model, whisper_audio_last_error());
    std::vector<float> a = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    std::vector<float> b = npy_load_f32(test_data("features/long_70s_first30s.mel80.npy"), nullptr);
    std::vector<float> ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    ab.insert(ab.end(), a.begin(), a.end());
    const std::vector<float> one = encode(model, a, 1, -1);
    const std::vector<float> batched = encode(model, ab, 3, -1, 2);     // a batch of 2, then 1
    const size_t win = one.size();
    CHECK(std::memcmp(batched.data(), one.data(), win * sizeof(float)) == 0);
    CHECK(std::memcmp(batched.data() + 2 * win, one.data(), win * sizeof(float)) == 0);
    std::vector<float> ref_b = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(batched.data() + win, ref_b.data(), ref_b.size()) < 2e-6);
    whisper_audio_model_free(model);
}

TEST_CASE("f32, f16 and bf16 model files run on the CPU within their rounding") {
    whisper_audio_model * f32 = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(f32);
    CHECK(whisper_audio_model_hparams(f32)->weight_type == WHISPER_AUDIO_WEIGHT_F32);
    CHECK(whisper_audio_weight_type_name(WHISPER_AUDIO_WEIGHT_F32) == std::string("f32"));
    whisper_audio_model_free(f32);
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    for (std::string type : {"f16", "bf16"}) {
        const std::string path = std::string("build/micro-80-") + type + ".gguf";
        whisper_audio_model * model = whisper_audio_model_load(path.c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        const whisper_audio_weight_type wt = whisper_audio_model_hparams(model)->weight_type;
        CHECK(wt == (type == "f16" ? WHISPER_AUDIO_WEIGHT_F16 : WHISPER_AUDIO_WEIGHT_BF16));
        CHECK(whisper_audio_weight_type_name(wt) == type);
        const double err = rel_l2(encode(model, mel, 1, -1).data(), ref.data(), ref.size());
        MESSAGE(type << " weights: relative L2 error " << err);
        CHECK(err < (type[0] == 'f' ? 2e-3 : 1.5e-2));
        CHECK(err > 1e-6);                                             // the weights really were rounded
        whisper_audio_model_free(model);
    }
}

TEST_CASE("encoder parameters are checked") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.output_layer = 2;                                                // micro-80 has layers 0 and 1
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("output layer") != std::string::npos);
    p.output_layer = -1;
    p.max_batch = 0;
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    whisper_audio_model_free(model);
}

TEST_CASE("broken model files are refused with a message") {
    const std::string good_path = "build/micro-80-f32.gguf";
    const std::vector<uint8_t> good = read_bytes(good_path);
    REQUIRE_MESSAGE(!good.empty(), good_path);
    const std::string tmp = "build/test-broken.gguf";

    check_load_fails("build/does-not-exist.gguf", "cannot open");
    check_load_fails("build", "a model directory is a Hugging Face one, config.json + model.safetensors, or a CTranslate2");
    write_bytes(tmp, {});
    check_load_fails(tmp, "empty");
    write_bytes(tmp, std::vector<uint8_t>(good.begin(), good.begin() + 10));
    check_load_fails(tmp, "too small");
    std::vector<uint8_t> bad = good;
    memcpy(bad.data(), "GGML", 4);
    write_bytes(tmp, bad);
    check_load_fails(tmp, "bad magic");
    bad = good;
    bad[4] = 2;                                                        // version 2
    write_bytes(tmp, bad);
    check_load_fails(tmp, "version");
    for (size_t cut : {good.size() / 2, good.size() - 1, (size_t)200, (size_t)40}) {
        CAPTURE(cut);
        write_bytes(tmp, std::vector<uint8_t>(good.begin(), good.begin() + cut));
        whisper_audio_model * m = whisper_audio_model_load(tmp.c_str());
        CHECK(m == nullptr);
        const std::string e = whisper_audio_last_error();
        CHECK_MESSAGE(e.rfind(tmp + ": ", 0) == 0, e);                  // names the file
        CHECK_MESSAGE(e.find("truncated") != std::string::npos, e);    // and says what is wrong
    }
    // a hyperparameter that disagrees with the tensors: embedding_length 128 -> 256
    {
        bad = good;
        const char key[] = "whisper.encoder.embedding_length";
        auto it = std::search(bad.begin(), bad.end(), key, key + strlen(key));
        REQUIRE(it != bad.end());
        const size_t value_at = (it - bad.begin()) + strlen(key) + 4;  // after the uint32 type
        REQUIRE(bad[value_at] == 128);
        bad[value_at + 1] = 1;                                         // 128 + 256 = 384
        write_bytes(tmp, bad);
        check_load_fails(tmp, "the hyperparameters need");
    }
    // a tensor renamed: missing
    {
        bad = good;
        const char name[] = "encoder.layers.1.fc2.bias";
        auto it = std::search(bad.begin(), bad.end(), name, name + strlen(name));
        REQUIRE(it != bad.end());
        *(it + 8) = 'X';
        write_bytes(tmp, bad);
        check_load_fails(tmp, "missing");
    }
    // an absurd tensor count
    {
        bad = good;
        for (int i = 0; i < 8; i++) bad[8 + i] = 0xff;
        write_bytes(tmp, bad);
        check_load_fails(tmp, "implausible");
    }
    remove(tmp.c_str());
}

// --dtype bf16 on the CPU: GEMMs in bf16 on AMX where the CPU has them (the rest f32), f32
// bit for bit where it has not; the default (f16) computes in f32 there, as the f32 checks above.
TEST_CASE("the CPU's bf16 mode matches transformers float64 within bf16 rounding") {
    for (std::string name : {"micro-80", "micro-128"}) {
        whisper_audio_model * model = whisper_audio_model_load(("build/" + name + "-f32.gguf").c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        const int n_mels = whisper_audio_model_hparams(model)->n_mels;
        std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel" + std::to_string(n_mels) + ".npy"), nullptr);
        std::vector<float> ref = npy_load_f32(test_data("encoder/" + name + "/speech_16k.last_hidden_state.npy"), nullptr);
        std::vector<float> out[2], batched(2 * ref.size(), NAN), mel2 = mel;
        mel2.insert(mel2.end(), mel.begin(), mel.end());
        std::string dtype[2];
        for (int i = 0; i < 2; i++) {
            whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
            p.device = WHISPER_AUDIO_DEVICE_CPU;
            p.n_threads = 2;
            p.max_batch = 2;
            p.dtype = i ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
            whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
            REQUIRE_MESSAGE(enc, whisper_audio_last_error());
            dtype[i] = whisper_audio_encoder_dtype(enc);
            out[i].assign(ref.size(), NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel.data(), 1, out[i].data()), whisper_audio_last_error());
            if (i) REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel2.data(), 2, batched.data()), whisper_audio_last_error());
            whisper_audio_encoder_free(enc);
        }
        whisper_audio_model_free(model);
        // a batch of two (twice the rows per GEMM, other task splits) gives each window's own bytes
        CHECK(std::memcmp(batched.data(), out[1].data(), ref.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(batched.data() + ref.size(), out[1].data(), ref.size() * sizeof(float)) == 0);
        CHECK(dtype[0] == "f32");
        CHECK(rel_l2(out[0].data(), ref.data(), ref.size()) < 2e-6);
        const double err = rel_l2(out[1].data(), ref.data(), ref.size());
        MESSAGE(name << " on the CPU, --dtype bf16 (" << dtype[1] << "): relative L2 error " << err);
        if (!whisper_audio_cpu_bf16_isa()) {
            CHECK(dtype[1] == "f32");
            CHECK(std::memcmp(out[0].data(), out[1].data(), ref.size() * sizeof(float)) == 0);
            continue;
        }
        CHECK(dtype[1] == "bf16");
        CHECK(err < 5e-3);    // measured 2.5e-3 (micro-80), 2.6e-3 (micro-128): AMX, Xeon of the Sapphire Rapids class
        CHECK(err > 5e-4);    // it really computed in bf16
    }
}

TEST_CASE("encoder on CUDA matches transformers float64 within f16/bf16 rounding" * doctest::skip(no_gpu())) {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    for (whisper_audio_dtype dtype : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16, WHISPER_AUDIO_DTYPE_FP8}) {
        whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
        p.device = WHISPER_AUDIO_DEVICE_CUDA;
        p.dtype = dtype;
        whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
        REQUIRE_MESSAGE(enc, whisper_audio_last_error());
        std::vector<float> out((size_t)1500 * 128, NAN);
        REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()), whisper_audio_last_error());
        const double err = rel_l2(out.data(), ref.data(), ref.size());
        const char * names[] = {"f16", "bf16", "fp8"};
        MESSAGE(std::string(names[dtype]) << " on " << std::string(whisper_audio_encoder_backend(enc))
                << ": relative L2 error " << err);
        const double bound[] = {3e-3, 2.5e-2, 6e-2};   // fp8 measured 3.6e-2 on the H200
        CHECK(err < bound[dtype]);
        whisper_audio_encoder_free(enc);
    }
    whisper_audio_model_free(model);
}

// One encoder of a CPU (2 threads, batch max_batch) for output_layer / final_ln.
static whisper_audio_encoder * cpu_encoder(const whisper_audio_model * model, int output_layer, bool final_ln = true,
                                           int max_batch = 1) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = 2;
    p.output_layer = output_layer;
    p.final_ln = final_ln;
    p.max_batch = max_batch;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    return enc;
}

TEST_CASE("hidden states: every layer from one forward, each the encoder of its output_layer bit for bit") {
    float * pcm = nullptr;
    size_t n = 0;
    REQUIRE_MESSAGE(whisper_audio_decode_file(test_data("audio/long_70s_16k.wav").c_str(), &pcm, &n, nullptr),
                    whisper_audio_last_error());
    const int n_win = (int)whisper_audio_n_windows(n);
    REQUIRE(n_win == 3);
    // micro models of 2 layers (f32, f16), a tower of 3 (its Whisper encoder: state 2 is a middle layer's)
    for (std::string path : {"build/micro-80-f32.gguf", "build/micro-128-f16.gguf", "build/tower-qwen2a-f32.gguf"}) {
        CAPTURE(path);
        whisper_audio_model * model = whisper_audio_model_load(path.c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error());
        const whisper_audio_hparams hp = *whisper_audio_model_hparams(model);
        std::vector<float> mel((size_t)n_win * hp.n_mels * 3000);
        REQUIRE(whisper_audio_log_mel_windows(model, pcm, n, n_win, mel.data(), 2));
        // the first 702 frames of each window, packed: unpadded windows (--no-pad's shape)
        const int short_frames = 702;
        std::vector<float> mel_short((size_t)n_win * hp.n_mels * short_frames);
        for (size_t r = 0; r < (size_t)n_win * hp.n_mels; r++)
            std::copy_n(mel.begin() + r * 3000, short_frames, mel_short.begin() + r * short_frames);
        whisper_audio_encoder * all = cpu_encoder(model, -1, true, 2);     // a batch of 2, then 1
        for (int n_frames : {3000, short_frames}) {
            CAPTURE(n_frames);
            const std::vector<float> & in = n_frames == 3000 ? mel : mel_short;
            const size_t state = (size_t)n_win * (n_frames / 2) * hp.n_state;
            std::vector<float> states((hp.n_layer + 1) * state, NAN);
            REQUIRE_MESSAGE(whisper_audio_encode_mel_hidden_states(all, in.data(), n_win, n_frames, states.data()),
                            whisper_audio_last_error());
            for (int i = 0; i <= hp.n_layer; i++) {
                CAPTURE(i);
                const int layer = i == 0 ? WHISPER_AUDIO_POST_CONV : i == hp.n_layer ? -1 : i - 1;
                whisper_audio_encoder * one = cpu_encoder(model, layer);
                std::vector<float> ref(state, NAN);
                REQUIRE_MESSAGE(whisper_audio_encode_mel_frames(one, in.data(), n_win, n_frames, ref.data()),
                                whisper_audio_last_error());
                CHECK(std::memcmp(states.data() + i * state, ref.data(), state * sizeof(float)) == 0);
                whisper_audio_encoder_free(one);
            }
        }
        // the encoder's own output is the last state, and its other calls go on as before
        std::vector<float> out((size_t)n_win * 1500 * hp.n_state), states((hp.n_layer + 1) * out.size());
        REQUIRE(whisper_audio_encode_mel(all, mel.data(), n_win, out.data()));
        REQUIRE(whisper_audio_encode_mel_hidden_states(all, mel.data(), n_win, 3000, states.data()));
        CHECK(std::equal(out.begin(), out.end(), states.begin() + hp.n_layer * out.size()));
        whisper_audio_encoder_free(all);

        // an encoder of one layer, or without the final LayerNorm, is refused with a message
        for (int layer : {0, WHISPER_AUDIO_POST_CONV, -1}) {
            whisper_audio_encoder * enc = cpu_encoder(model, layer, layer != -1);
            CHECK_FALSE(whisper_audio_encode_mel_hidden_states(enc, mel.data(), 1, 3000, states.data()));
            CHECK_MESSAGE(std::string(whisper_audio_last_error()).find("output_layer -1, final_ln true") != std::string::npos,
                          whisper_audio_last_error());
            whisper_audio_encoder_free(enc);
        }
        whisper_audio_model_free(model);
    }
    whisper_audio_pcm_free(pcm);

    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder * enc = cpu_encoder(model, -1);
    std::vector<float> mel((size_t)80 * 3000, 0.0f), out((size_t)3 * 1500 * 128);
    CHECK_FALSE(whisper_audio_encode_mel_hidden_states(nullptr, mel.data(), 1, 3000, out.data()));
    CHECK_FALSE(whisper_audio_encode_mel_hidden_states(enc, nullptr, 1, 3000, out.data()));
    CHECK_FALSE(whisper_audio_encode_mel_hidden_states(enc, mel.data(), 1, 3000, nullptr));
    CHECK(std::string(whisper_audio_last_error()).find("NULL out") != std::string::npos);
    CHECK_FALSE(whisper_audio_encode_mel_hidden_states(enc, mel.data(), 0, 3000, out.data()));
    CHECK_FALSE(whisper_audio_encode_mel_hidden_states(enc, mel.data(), 1, 301, out.data()));
    CHECK(std::string(whisper_audio_last_error()).find("even count") != std::string::npos);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
}

TEST_CASE("hidden states on CUDA match transformers float64 within f16/bf16 rounding" * doctest::skip(no_gpu())) {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    const char * clips[] = {"speech_16k", "long_70s_first30s"};
    std::vector<float> mel;                                            // [2, 80, 3000]: one batch of 2
    for (const char * clip : clips) {
        std::vector<float> m = npy_load_f32(test_data(std::string("features/") + clip + ".mel80.npy"), nullptr);
        mel.insert(mel.end(), m.begin(), m.end());
    }
    const char * stages[] = {"post_conv", "layer0", "last_hidden_state"};   // micro-80: 2 layers, 3 states
    const size_t win = (size_t)1500 * 128;
    for (whisper_audio_dtype dtype : {WHISPER_AUDIO_DTYPE_F16, WHISPER_AUDIO_DTYPE_BF16}) {
        whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
        p.device = WHISPER_AUDIO_DEVICE_CUDA;
        p.dtype = dtype;
        p.max_batch = 2;
        whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
        REQUIRE_MESSAGE(enc, whisper_audio_last_error());
        std::vector<float> states(3 * 2 * win, NAN);
        REQUIRE_MESSAGE(whisper_audio_encode_mel_hidden_states(enc, mel.data(), 2, 3000, states.data()),
                        whisper_audio_last_error());
        for (int i = 0; i < 3; i++) {
            for (int w = 0; w < 2; w++) {
                std::vector<float> ref = npy_load_f32(test_data(std::string("encoder/micro-80/") + clips[w] + "." + stages[i] + ".npy"), nullptr);
                REQUIRE(ref.size() == win);
                const double err = rel_l2(states.data() + (i * 2 + w) * win, ref.data(), win);
                MESSAGE((dtype == WHISPER_AUDIO_DTYPE_F16 ? "f16" : "bf16") << " " << clips[w] << " state " << i << " ("
                        << stages[i] << "): relative L2 error " << err);
                CHECK(err < (dtype == WHISPER_AUDIO_DTYPE_F16 ? 3e-3 : 2.5e-2));
            }
        }
        whisper_audio_encoder_free(enc);
    }
    whisper_audio_model_free(model);
}

TEST_CASE("encode_pcm: audio of any length, windows and batches as main makes them") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    float * pcm = nullptr;
    size_t n = 0;
    REQUIRE_MESSAGE(whisper_audio_decode_file(test_data("audio/long_70s_16k.wav").c_str(), &pcm, &n, nullptr),
                    whisper_audio_last_error());
    REQUIRE(whisper_audio_n_windows(n) == 3);
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.max_batch = 2;                                                   // a batch of 2, then 1
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE(enc);
    std::vector<float> out((size_t)3 * 1500 * 128, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_pcm(enc, pcm, n, out.data()), whisper_audio_last_error());
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(out.data(), ref.data(), ref.size()) < 1e-5);        // audio in: our log-mel, then the encoder
    for (float v : out) REQUIRE(std::isfinite(v));
    const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
    CHECK(t.mel_ms > 0.0);
    CHECK(t.n_batches == 2);
    CHECK(t.n_windows == 3);
    // every window, the padded last one too, equals its own log-mel encoded alone
    std::vector<float> mel((size_t)80 * 3000), one((size_t)1500 * 128);
    for (size_t w = 0; w < 3; w++) {
        CAPTURE(w);
        const size_t at = w * WHISPER_AUDIO_N_SAMPLES;
        REQUIRE(whisper_audio_log_mel(model, pcm + at, std::min<size_t>(n - at, WHISPER_AUDIO_N_SAMPLES), mel.data()));
        REQUIRE(whisper_audio_encode_mel(enc, mel.data(), 1, one.data()));
        CHECK(std::equal(one.begin(), one.end(), out.begin() + w * one.size()));
    }
    whisper_audio_encoder_free(enc);
    whisper_audio_pcm_free(pcm);
    whisper_audio_model_free(model);
}

TEST_CASE("timings add up: each stage's time is the sum over its batches, across calls") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = 2;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, p);
    REQUIRE(enc);
    std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    std::vector<float> out((size_t)3 * 1500 * 128);
    auto stages = [](const whisper_audio_timings & t) {
        return std::vector<double>{t.encode_ms, t.upload_ms, t.compute_ms, t.download_ms, t.wall_ms};
    };

    // one window per call: each call adds a batch, and every stage's time grows by that call's
    whisper_audio_timings prev = whisper_audio_encoder_timings(enc);
    CHECK(prev.n_batches == 0);
    CHECK(prev.wall_ms == 0.0);
    std::vector<double> sum(5, 0.0), most(5, 0.0);
    for (int call = 1; call <= 3; call++) {
        CAPTURE(call);
        REQUIRE(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()));
        const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
        CHECK(t.n_batches == call);
        CHECK(t.n_windows == call);
        CHECK(t.encode_ms >= t.upload_ms + t.compute_ms + t.download_ms - 1e-9);   // stages inside the encoder
        CHECK(t.wall_ms >= t.encode_ms - 1e-9);
        for (size_t i = 0; i < sum.size(); i++) {
            const double step = stages(t)[i] - stages(prev)[i];
            CHECK(step > 0.0);
            sum[i] += step;
            most[i] = std::max(most[i], step);
        }
        prev = t;
    }
    for (size_t i = 0; i < sum.size(); i++) {
        CAPTURE(i);
        CHECK(stages(prev)[i] == doctest::Approx(sum[i]).epsilon(1e-9));
        CHECK(stages(prev)[i] > most[i]);
    }
    CHECK(prev.mel_ms == 0.0);                                         // encode_mel runs no log-mel

    // a reset starts the count again
    whisper_audio_encoder_reset_timings(enc);
    CHECK(whisper_audio_encoder_timings(enc).n_batches == 0);
    CHECK(whisper_audio_encoder_timings(enc).compute_ms == 0.0);
    std::vector<float> mel3;
    for (int i = 0; i < 3; i++) mel3.insert(mel3.end(), mel.begin(), mel.end());
    REQUIRE(whisper_audio_encode_mel(enc, mel3.data(), 3, out.data())); // max_batch 1: 3 batches in one call
    CHECK(whisper_audio_encoder_timings(enc).n_batches == 3);
    CHECK(whisper_audio_encoder_timings(enc).n_windows == 3);

    // encode_pcm over 3 windows at max_batch 1: 3 batches, each with its log-mel
    float * pcm = nullptr;
    size_t n = 0;
    REQUIRE(whisper_audio_decode_file(test_data("audio/long_70s_16k.wav").c_str(), &pcm, &n, nullptr));
    REQUIRE(whisper_audio_n_windows(n) == 3);
    whisper_audio_encoder_reset_timings(enc);
    REQUIRE(whisper_audio_encode_pcm(enc, pcm, n, out.data()));
    const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
    CHECK(t.n_batches == 3);
    CHECK(t.n_windows == 3);
    CHECK(t.mel_ms > 0.0);
    CHECK(t.wall_ms >= t.mel_ms + t.encode_ms - 1e-9);                // the stages, one after another
    whisper_audio_pcm_free(pcm);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
}

TEST_CASE("windows, positions and pooling: the rules that turn audio into rows") {
    CHECK(whisper_audio_n_windows(0) == 1);
    CHECK(whisper_audio_n_windows(480000) == 1);
    CHECK(whisper_audio_n_windows(480001) == 2);
    CHECK(whisper_audio_n_positions(0) == 0);
    CHECK(whisper_audio_n_positions(1) == 1);
    CHECK(whisper_audio_n_positions(320) == 1);
    CHECK(whisper_audio_n_positions(321) == 2);
    CHECK(whisper_audio_n_positions(112259) == 351);                  // speech_16k.wav: ceil(112259 / 320)
    CHECK(whisper_audio_n_positions(480000) == 1500);
    CHECK(whisper_audio_n_positions(10000000) == 1500);               // one window at most
    CHECK(whisper_audio_n_positions_total(70 * 16000) == 3500);       // 1500 + 1500 + 500
    CHECK(whisper_audio_n_positions_total(960000) == 3000);
    CHECK(whisper_audio_n_positions_total(0) == 0);
    // the mean over the positions that hold audio, and at least one
    const std::vector<float> emb = {1, 10, 3, 30, 100, 1000};         // [3 positions, 2 channels]
    float out[2];
    REQUIRE(whisper_audio_pool_mean(emb.data(), 3, 2, 640, out));    // two positions
    CHECK(out[0] == 2.0f);
    CHECK(out[1] == 20.0f);
    REQUIRE(whisper_audio_pool_mean(emb.data(), 3, 2, 0, out));      // none: the first
    CHECK(out[0] == 1.0f);
    REQUIRE(whisper_audio_pool_mean(emb.data(), 3, 2, 480000, out)); // more than there are: all 3
    CHECK(out[1] == 1040.0f / 3);
    CHECK(!whisper_audio_pool_mean(nullptr, 3, 2, 640, out));
    CHECK(std::string(whisper_audio_last_error()).find("whisper_audio_pool_mean") != std::string::npos);
    CHECK(!whisper_audio_pool_mean(emb.data(), 0, 2, 640, out));
}
