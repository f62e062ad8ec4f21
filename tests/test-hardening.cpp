// Hardening of the library against hostile model files, non-finite numbers, exhausted
// resources and misuse of the C API (issue 7): one test per finding, each checking the
// exact message or value that the unhardened code got wrong.
#include <doctest/doctest.h>

#include "test-util.h"
#include "vt.h"
#include "whisper-audio.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

// AddressSanitizer reserves terabytes of shadow memory: address-space limits cannot be tested under it
#if defined(__SANITIZE_ADDRESS__)
#define WA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WA_TEST_ASAN 1
#endif
#endif

namespace {

// ---- GGUF files built field by field -------------------------------------------------

struct gguf_tensor {
    std::string name;
    std::vector<uint64_t> ne;      // innermost first
    uint32_t type;                 // 0 F32, 1 F16, 30 BF16
    std::vector<uint8_t> data;
    uint64_t offset;               // from the data section's start
};

// A GGUF v3 file: key/values, tensor infos, data at each tensor's offset.
struct gguf_file {
    wav_bytes kv;                  // the little-endian field writer test-util.h has for WAV
    uint64_t n_kv = 0;
    std::vector<gguf_tensor> tensors;
    uint32_t alignment = 32;
    uint64_t data_end = 0;         // where add() puts the next tensor (aligned up)

    static void str(wav_bytes & w, const std::string & s) {
        w.u32((uint32_t)s.size()).u32(0);
        for (char c : s) w.u8((uint8_t)c);
    }
    void key(const std::string & k, uint32_t type) { str(kv, k); kv.u32(type); n_kv++; }
    void u32(const std::string & k, uint32_t v) { key(k, 4); kv.u32(v); }
    void f32(const std::string & k, float v) { key(k, 6); kv.f32(v); }
    void string(const std::string & k, const std::string & v) { key(k, 8); str(kv, v); }

    // a tensor after the last one, its values converted to the type
    void add(const std::string & name, std::vector<uint64_t> ne, uint32_t type, const std::vector<float> & v) {
        std::vector<uint8_t> data;
        for (float x : v) {
            uint32_t bits;
            memcpy(&bits, &x, 4);
            if (type != 0) bits = type == 1 ? vt_f32_to_f16(x) : vt_f32_to_bf16(x);
            for (int i = 0; i < (type == 0 ? 4 : 2); i++) data.push_back((uint8_t)(bits >> (8 * i)));
        }
        const uint64_t offset = (data_end + alignment - 1) / alignment * alignment;
        data_end = offset + data.size();
        tensors.push_back({name, ne, type, data, offset});
    }
    gguf_tensor & tensor(const std::string & name) {
        for (gguf_tensor & t : tensors) if (t.name == name) return t;
        FAIL("no tensor " << name);
        return tensors[0];
    }

    std::vector<uint8_t> bytes() const {
        wav_bytes w;
        w.id("GGUF").u32(3).u32((uint32_t)tensors.size()).u32(0).u32((uint32_t)n_kv).u32(0).raw(kv.b);
        for (const gguf_tensor & t : tensors) {
            str(w, t.name);
            w.u32((uint32_t)t.ne.size());
            for (uint64_t n : t.ne) w.u32((uint32_t)n).u32((uint32_t)(n >> 32));
            w.u32(t.type).u32((uint32_t)t.offset).u32((uint32_t)(t.offset >> 32));
        }
        while (w.b.size() % alignment) w.u8(0);
        const size_t start = w.b.size();
        for (const gguf_tensor & t : tensors) {
            if (w.b.size() < start + t.offset + t.data.size()) w.b.resize(start + t.offset + t.data.size());
            std::copy(t.data.begin(), t.data.end(), w.b.begin() + start + t.offset);
        }
        return w.b;
    }
};

std::vector<float> values(size_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = offset + scale * std::sin(0.7f * (float)i + 0.3f);
    return v;
}

// A whisper model of the smallest shape: 2 mels, d 8, 2 heads, 1 layer, ff 16 (1500
// positions, as every Whisper). Matrices in `type`, the rest f32.
gguf_file tiny_model(uint32_t type = 0) {
    const uint64_t n_mels = 2, d = 8, ff = 16, n_ctx = 1500;
    gguf_file f;
    f.string("general.architecture", "whisper");
    f.u32("whisper.encoder.context_length", (uint32_t)n_ctx);
    f.u32("whisper.encoder.embedding_length", (uint32_t)d);
    f.u32("whisper.encoder.block_count", 1);
    f.u32("whisper.encoder.mels_count", (uint32_t)n_mels);
    f.u32("whisper.encoder.attention.head_count", 2);
    f.u32("whisper.encoder.feed_forward_length", (uint32_t)ff);
    f.f32("whisper.encoder.attention.layer_norm_epsilon", 1e-5f);
    f.add("encoder.conv1.weight", {3, n_mels, d}, type, values(3 * n_mels * d, 0.3f));
    f.add("encoder.conv1.bias", {d}, 0, values(d, 0.1f));
    f.add("encoder.conv2.weight", {3, d, d}, type, values(3 * d * d, 0.2f));
    f.add("encoder.conv2.bias", {d}, 0, values(d, 0.1f));
    f.add("encoder.embed_positions.weight", {d, n_ctx}, 0, values(d * n_ctx, 0.5f));
    f.add("encoder.layer_norm.weight", {d}, 0, values(d, 0.1f, 1.0f));
    f.add("encoder.layer_norm.bias", {d}, 0, values(d, 0.1f));
    f.add("mel_filters", {201, n_mels}, 0, values(201 * n_mels, 0.01f, 0.01f));
    const std::string p = "encoder.layers.0.";
    for (const char * m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"}) {
        f.add(p + m + ".weight", {d, d}, type, values(d * d, 0.3f));
        if (std::string(m) != "self_attn.k_proj") f.add(p + m + ".bias", {d}, 0, values(d, 0.1f));
    }
    for (const char * ln : {"self_attn_layer_norm", "final_layer_norm"}) {
        f.add(p + ln + ".weight", {d}, 0, values(d, 0.1f, 1.0f));
        f.add(p + ln + ".bias", {d}, 0, values(d, 0.1f));
    }
    f.add(p + "fc1.weight", {d, ff}, type, values(d * ff, 0.3f));
    f.add(p + "fc1.bias", {ff}, 0, values(ff, 0.1f));
    f.add(p + "fc2.weight", {ff, d}, type, values(ff * d, 0.3f));
    f.add(p + "fc2.bias", {d}, 0, values(d, 0.1f));
    return f;
}

// Loads the bytes as a model file: the model, or NULL with the message in *msg.
whisper_audio_model * load_bytes(const std::vector<uint8_t> & b, std::string * msg = nullptr) {
    const std::string path = test_tmp("hardening.gguf");
    write_bytes(path, b);
    whisper_audio_model * m = whisper_audio_model_load(path.c_str());
    if (msg) *msg = m ? "" : whisper_audio_last_error();
    remove(path.c_str());
    return m;
}

// Loading must fail with a message that contains `expect`.
void check_refused(const gguf_file & f, const std::string & expect) {
    std::string msg;
    whisper_audio_model * m = load_bytes(f.bytes(), &msg);
    CHECK(m == nullptr);
    CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    whisper_audio_model_free(m);
}

whisper_audio_encoder * cpu_encoder(const whisper_audio_model * model, int n_threads = 1, int max_batch = 1) {
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.n_threads = n_threads;
    p.max_batch = max_batch;
    return whisper_audio_encoder_init(model, p);
}

// ---- processes with little address space ---------------------------------------------

// Bytes of address space this process has mapped (/proc/self/statm, in pages).
size_t mapped_bytes() {
    size_t pages = 0;
    if (FILE * f = fopen("/proc/self/statm", "r")) {
        if (fscanf(f, "%zu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

// Runs f in a fork()ed child whose address space may grow by `margin` bytes past what it
// has mapped when f starts: f's return value, or 128 + the signal that ended the child.
template <typename F> int in_small_child(size_t margin, F && f) {
    fflush(nullptr);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const rlimit lim = {mapped_bytes() + margin, RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(99);
        _exit(f());
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---- attention through vt, for the softmax's exp ---------------------------------------

// One query against T keys (one head of width 1: scores q * k[j]), on the CPU backend: the
// output of query 0.
float attend(float q, const std::vector<float> & k, const std::vector<float> & v) {
    const int T = (int)k.size();
    vt_context * ctx = vt_init(8);
    vt_tensor * tq = vt_new_tensor_3d(ctx, VT_TYPE_F32, 1, T, 1);
    vt_tensor * tk = vt_new_tensor_3d(ctx, VT_TYPE_F32, 1, T, 1);
    vt_tensor * tv = vt_new_tensor_3d(ctx, VT_TYPE_F32, 1, T, 1);
    vt_set_input(tq);
    vt_set_input(tk);
    vt_set_input(tv);
    vt_tensor * y = vt_attention(ctx, tq, tk, tv, 1, 1.0f);
    vt_graph * g = vt_graph_build(ctx, &y, 1);
    vt_backend * be = test_cpu_backend(1);
    REQUIRE(be);
    REQUIRE(vt_backend_alloc_graph(be, g));
    std::vector<float> qs(T, 0.0f), out(T);
    qs[0] = q;
    REQUIRE(vt_backend_set_tensor(be, tq, qs.data(), VT_TYPE_F32));
    REQUIRE(vt_backend_set_tensor(be, tk, k.data(), VT_TYPE_F32));
    REQUIRE(vt_backend_set_tensor(be, tv, v.data(), VT_TYPE_F32));
    REQUIRE(vt_backend_compute(be, g));
    REQUIRE(vt_backend_get_tensor_f32(be, y, out.data()));
    vt_graph_free(g);
    vt_backend_free(be);
    vt_free(ctx);
    return out[0];   // query 0
}

} // namespace

// ---- finding 4: non-finite numbers ------------------------------------------------------

TEST_CASE("the softmax's exp is total: very negative and -inf scores weigh 0, NaN and inf give NaN") {
    // scores 0, -100, -inf; the values behind the last two are huge, so any weight they get shows
    CHECK(attend(1.0f, {0.0f, -100.0f, -INFINITY}, {0.0f, 1e38f, 1e38f}) == 0.0f);   // clamped to e^-87 each: 3.3
    const std::vector<float> kf = {1.0f, 2.0f, 3.0f}, vf = {1.0f, 2.0f, 3.0f};
    CHECK(std::isnan(attend(NAN, kf, vf)));                            // NaN scores (UB before)
    CHECK(std::isnan(attend(1e30f, {1e30f, -1e30f, 0.0f}, vf)));       // inf - inf in the row
    // again on 37 keys, so that the scores fill vectors (2 x 16 and a tail of 5) as well as the
    // scalar tail: the 0 score at key 21, -100 and -inf in every other lane
    std::vector<float> k(37), v(37, 1e38f), ones(37, 1.0f);
    for (int j = 0; j < 37; j++) k[j] = j % 2 ? -100.0f : -INFINITY;
    k[21] = 0.0f;
    v[21] = 0.0f;
    CHECK(attend(1.0f, k, v) == 0.0f);
    CHECK(std::isnan(attend(NAN, ones, ones)));
    std::vector<float> kn(37, 0.0f);
    for (int at : {5, 20, 35}) {                                       // a NaN score in a vector, and in the tail
        CAPTURE(at);
        kn[at] = NAN;
        CHECK(std::isnan(attend(1.0f, kn, ones)));
        kn[at] = 0.0f;
    }
    kn[30] = 1e30f;
    CHECK(std::isnan(attend(1e30f, kn, ones)));                        // inf - inf in a vector
    CHECK(attend(1.0f, kn, v) == 1e38f);                               // a finite max in a vector: its value alone
}

TEST_CASE("non-finite weights are refused at load, naming the tensor") {
    struct { uint32_t type; float bad; const char * shows; } cases[] = {
        {0, NAN, "nan"}, {1, INFINITY, "inf"}, {30, -INFINITY, "-inf"}, {30, NAN, "nan"}};
    for (auto & c : cases) {
        CAPTURE(c.type);
        gguf_file f = tiny_model(c.type);
        whisper_audio_model * ok = load_bytes(f.bytes());
        CHECK(ok != nullptr);                                          // the same file, finite, loads
        whisper_audio_model_free(ok);
        gguf_tensor & t = f.tensor("encoder.layers.0.fc1.weight");
        const size_t es = c.type == 0 ? 4 : 2, at = 37;
        uint32_t bits;
        memcpy(&bits, &c.bad, 4);
        if (c.type != 0) bits = c.type == 1 ? vt_f32_to_f16(c.bad) : vt_f32_to_bf16(c.bad);
        for (size_t i = 0; i < es; i++) t.data[at * es + i] = (uint8_t)(bits >> (8 * i));
        check_refused(f, "tensor 'encoder.layers.0.fc1.weight' holds " + std::string(c.shows) + " at element 37");
    }
    gguf_file f = tiny_model();
    f.tensor("mel_filters").data[3] = 0x7f;                            // element 0: bits 0x7fc0...., a NaN
    f.tensor("mel_filters").data[2] = 0xc0;
    check_refused(f, "tensor 'mel_filters' holds nan at element 0");
}

// ---- finding 5: the file changes after load ----------------------------------------------

TEST_CASE("a model file truncated after load: encoders still init and encode (no SIGBUS)") {
    const std::string path = test_tmp("truncated.gguf");
    write_bytes(path, read_bytes("build/micro-80-f32.gguf"));
    whisper_audio_model * model = whisper_audio_model_load(path.c_str());
    REQUIRE_MESSAGE(model, whisper_audio_last_error());
    REQUIRE(truncate(path.c_str(), 8) == 0);                           // as `cp new.gguf model.gguf` begins

    std::vector<float> mel(80 * 3000, NAN);
    std::vector<float> pcm(16000, 0.25f);
    REQUIRE(whisper_audio_log_mel(model, pcm.data(), pcm.size(), mel.data()));   // the mel bank, after the cut
    whisper_audio_encoder * enc = cpu_encoder(model, 2);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    std::vector<float> out((size_t)1500 * 128, NAN);
    REQUIRE_MESSAGE(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()), whisper_audio_last_error());
    const std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(out, ref) < 2e-6);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
    remove(path.c_str());
}

// ---- finding 6: exhausted resources ------------------------------------------------------

TEST_CASE("memory and threads follow the work: batch and thread caps, buffers sized by the input") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    p.device = WHISPER_AUDIO_DEVICE_CPU;
    p.max_batch = 4096;                                                // asked 21 GB
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    CHECK(std::string(whisper_audio_last_error()) == "batch size 4096 is outside [1, 256]");

    // threads past the hardware's are capped: each would hold its own scratch
    std::vector<float> pcm(16000, 0.1f), out((size_t)1500 * 128);
    size_t bytes[2];
    for (int i = 0; i < 2; i++) {
        whisper_audio_encoder * enc = cpu_encoder(model, i == 0 ? 0 : 4096);
        REQUIRE_MESSAGE(enc, whisper_audio_last_error());
        REQUIRE(whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data()));
        bytes[i] = whisper_audio_encoder_memory(enc);
        whisper_audio_encoder_free(enc);
    }
    CHECK(bytes[1] == bytes[0]);

#ifndef WA_TEST_ASAN
    // a 1 s clip with max_batch 256 needs one window's buffers, not 256 (245 MB of mel)
    whisper_audio_encoder * enc = cpu_encoder(model, 1, 256);
    REQUIRE(enc);
    const int rc = in_small_child((size_t)64 << 20, [&] {
        if (whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data())) return 0;
        fprintf(stderr, "encode_pcm: %s\n", whisper_audio_last_error());
        return 1;
    });
    CHECK(rc == 0);
    // 256 windows (of the zero page: no memory) with no room for their mel: std::bad_alloc
    // ended the process
    const size_t n = (size_t)256 * WHISPER_AUDIO_N_SAMPLES;
    void * zeros = mmap(nullptr, n * sizeof(float), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(zeros != MAP_FAILED);
    const int rc2 = in_small_child(0, [&] {
        if (whisper_audio_encode_pcm(enc, (const float *)zeros, n, out.data())) return 1;
        return std::string(whisper_audio_last_error()) == "whisper_audio_encode_pcm: out of memory" ? 0 : 2;
    });
    CHECK(rc2 == 0);
    munmap(zeros, n * sizeof(float));
    whisper_audio_encoder_free(enc);
#endif
    whisper_audio_model_free(model);
}

TEST_CASE("threads that cannot start are an error value (std::system_error ended the process)") {
#ifdef WA_TEST_ASAN
    MESSAGE("skipped under AddressSanitizer (its shadow memory defeats RLIMIT_AS)");
#else
    if (std::thread::hardware_concurrency() < 2) {
        MESSAGE("skipped: one hardware thread, so the backend starts no thread");
        return;
    }
    whisper_audio_model * model = load_bytes(tiny_model().bytes());
    REQUIRE(model);
    // room for one more encoder, but not for a thread's stack, 64 MiB here: larger than the
    // stacks of threads that have ended, which glibc keeps mapped for reuse
    const int rc = in_small_child((size_t)8 << 20, [&] {
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, (size_t)64 << 20) != 0 ||
            pthread_setattr_default_np(&attr) != 0)
            return 5;
        whisper_audio_encoder * one = cpu_encoder(model, 1);
        if (!one) { fprintf(stderr, "control: %s\n", whisper_audio_last_error()); return 1; }
        whisper_audio_encoder_free(one);
        if (cpu_encoder(model, 2) != nullptr) return 2;
        const std::string msg = whisper_audio_last_error();
        if (msg.find("cpu backend: cannot start 2 threads") != 0) { fprintf(stderr, "got: %s\n", msg.c_str()); return 3; }
        // the log-mel goes on with the threads it has
        std::vector<float> pcm(16000, 0.1f), mel(2 * 2 * 3000);
        return whisper_audio_log_mel_windows(model, pcm.data(), pcm.size(), 2, mel.data(), 2) ? 0 : 4;
    });
    CHECK(rc == 0);
    whisper_audio_model_free(model);
#endif
}

// ---- finding 8: the tensor table ---------------------------------------------------------

TEST_CASE("GGUF tensor table: duplicates found in linear time, counts and name lengths capped") {
    gguf_file f = tiny_model();
    char name[65];                                                     // 64 bytes: each comparison reads them all
    for (int i = 0; i < 16000; i++) {
        snprintf(name, sizeof(name), "%s%05d", std::string(59, 'x').c_str(), i);
        f.add(name, {1}, 0, {1.0f});
    }
    f.add(name, {1}, 0, {1.0f});
    const std::string path = test_tmp("many-tensors.gguf");
    write_bytes(path, f.bytes());
    double best = 1e9;
    for (int i = 0; i < 3; i++) {
        const auto t0 = std::chrono::steady_clock::now();
        CHECK(whisper_audio_model_load(path.c_str()) == nullptr);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    remove(path.c_str());
    CHECK(std::string(whisper_audio_last_error()).find("duplicate tensor name '" + std::string(name) + "'") != std::string::npos);
    MESSAGE("16001 tensors: " << best * 1e3 << " ms");
    CHECK(best < 0.1);                                                 // a linear scan per name: 0.36 s at -O3

    f = tiny_model();
    std::vector<uint8_t> b = f.bytes();
    b[8] = 0x01; b[9] = 0x40;                                          // 16385 tensors
    std::string msg;
    CHECK(load_bytes(b, &msg) == nullptr);
    CHECK_MESSAGE(msg.find("implausible counts in GGUF header (16385 tensors") != std::string::npos, msg);

    f = tiny_model();
    f.add(std::string(64, 'n'), {1}, 0, {1.0f});                       // gguf.md's limit: loads
    whisper_audio_model * m = load_bytes(f.bytes(), &msg);
    CHECK_MESSAGE(m != nullptr, msg);
    whisper_audio_model_free(m);
    f.tensors.back().name += "n";
    check_refused(f, "name longer than 64 bytes");
}

// ---- the loader walks the tensor table ----------------------------------------------------

TEST_CASE("every tensor the encoder uses is checked, its full name in the message") {
    const gguf_file good = tiny_model(1);                              // matrices f16, the rest f32
    whisper_audio_model * m = load_bytes(good.bytes());
    REQUIRE(m);
    CHECK(whisper_audio_model_hparams(m)->weight_type == WHISPER_AUDIO_WEIGHT_F16);
    whisper_audio_model_free(m);
    REQUIRE(good.tensors.size() == 8 + 15);                            // 8 outside the layers, 15 in the one
    for (size_t i = 0; i < good.tensors.size(); i++) {
        const gguf_tensor & t = good.tensors[i];
        CAPTURE(t.name);
        gguf_file f = good;
        f.tensors.erase(f.tensors.begin() + i);
        check_refused(f, "tensor '" + t.name + "' is missing from the model file");
        f = good;                                                      // other dims, the same bytes
        f.tensors[i].ne = t.ne.size() == 1 ? std::vector<uint64_t>{t.ne[0] / 2, 2} : std::vector<uint64_t>{t.data.size() / (t.type ? 2 : 4)};
        check_refused(f, "tensor '" + t.name + "' has dims [");
        if (t.type == 0) {                                             // must stay f32
            f = good;
            f.tensors[i].type = 30;
            f.tensors[i].data.resize(t.data.size() / 2);
            check_refused(f, "tensor '" + t.name + "' is bf16, expected f32");
        }
    }
}

// ---- finding 9: tensor data regions -------------------------------------------------------

TEST_CASE("tensors whose data overlap are refused") {
    gguf_file f = tiny_model();
    f.tensor("encoder.layers.0.fc2.bias").offset = f.tensor("encoder.layers.0.fc2.weight").offset;
    check_refused(f, "tensors 'encoder.layers.0.fc2.weight' and 'encoder.layers.0.fc2.bias' overlap");
    // every tensor at offset 0: a small file asking for many times its size
    f = tiny_model();
    for (gguf_tensor & t : f.tensors) t.offset = 0;
    check_refused(f, "overlap");
}

// ---- finding 10: the C API's arguments, threads and lifetimes ------------------------------

TEST_CASE("C API: NULL and out-of-range arguments fail with a message") {
    auto failed_with = [](const char * expect) {
        const std::string msg = whisper_audio_last_error();
        CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    };
    float buf[4];
    whisper_audio_op_time times[4];
    CHECK(whisper_audio_model_hparams(nullptr) == nullptr);
    failed_with("whisper_audio_model_hparams: no model");
    CHECK(whisper_audio_model_mel_filters(nullptr) == nullptr);
    failed_with("whisper_audio_model_mel_filters: no model");
    CHECK(!whisper_audio_log_mel(nullptr, buf, 4, buf));
    failed_with("whisper_audio_log_mel: NULL model");
    CHECK(!whisper_audio_log_mel_windows(nullptr, buf, 4, 1, buf, 1));
    failed_with("whisper_audio_log_mel_windows: NULL model");
    CHECK(whisper_audio_encoder_backend(nullptr) == nullptr);
    failed_with("whisper_audio_encoder_backend: no encoder");
    CHECK(whisper_audio_encoder_memory(nullptr) == 0);
    failed_with("whisper_audio_encoder_memory: no encoder");
    CHECK(whisper_audio_encoder_timings(nullptr).encode_ms == 0.0);
    failed_with("whisper_audio_encoder_timings: no encoder");
    whisper_audio_encoder_reset_timings(nullptr);
    failed_with("whisper_audio_encoder_reset_timings: no encoder");
    CHECK(whisper_audio_weight_type_name(WHISPER_AUDIO_WEIGHT_COUNT) == nullptr);
    failed_with("whisper_audio_weight_type_name: 3 is not a weight type");
    CHECK(!whisper_audio_encode_mel(nullptr, buf, 1, buf));
    failed_with("whisper_audio_encode_mel: NULL encoder");
    CHECK(!whisper_audio_encode_pcm(nullptr, buf, 4, buf));
    failed_with("whisper_audio_encode_pcm: NULL encoder");
    CHECK(whisper_audio_encoder_profile(nullptr, buf, 1, times, 4) == -1);
    failed_with("whisper_audio_encoder_profile: NULL encoder");
    CHECK(whisper_audio_n_windows(SIZE_MAX) == SIZE_MAX / 480000 + 1);   // n + 479999 wrapped to 1
    CHECK(whisper_audio_n_windows(0) == 1);
    CHECK(whisper_audio_n_windows(480001) == 2);

    whisper_audio_model * model = load_bytes(tiny_model().bytes());
    REQUIRE(model);
    std::vector<float> mel(2 * 3000, 0.0f), out(1500 * 8);
    CHECK(!whisper_audio_log_mel_windows(model, buf, 4, -5, mel.data(), 1));
    failed_with("whisper_audio_log_mel_windows: -5 windows (at least 1)");
    CHECK(!whisper_audio_log_mel_windows(model, nullptr, 4, 1, mel.data(), 1));
    failed_with("whisper_audio_log_mel_windows: NULL pcm");

    // enum fields holding any int, as C allows (in C++ a cast to the enum would be UB)
    const int bad_device = 77, bad_dtype = 9;
    whisper_audio_encoder_params p = whisper_audio_encoder_default_params();
    memcpy(&p.device, &bad_device, sizeof(int));
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    failed_with("device 77 is not WHISPER_AUDIO_DEVICE_AUTO, _CPU or _CUDA");
    p = whisper_audio_encoder_default_params();
    memcpy(&p.dtype, &bad_dtype, sizeof(int));
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    failed_with("dtype 9 is not WHISPER_AUDIO_DTYPE_F16, _BF16 or _FP8");
    const int past_fp8 = WHISPER_AUDIO_DTYPE_FP8 + 1;                 // the first value past the enum
    memcpy(&p.dtype, &past_fp8, sizeof(int));
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    failed_with("dtype 3 is not");
    p = whisper_audio_encoder_default_params();
    p.gpu_device = -1;
    CHECK(whisper_audio_encoder_init(model, p) == nullptr);
    failed_with("gpu_device -1 is negative");

    whisper_audio_encoder * enc = cpu_encoder(model, 0);               // 0 threads: the hardware's
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    CHECK(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()));
    CHECK(whisper_audio_encoder_profile(enc, mel.data(), 1, times, -1) == -1);
    failed_with("whisper_audio_encoder_profile: max_times is -1 (0 or more)");
    CHECK(whisper_audio_encoder_profile(enc, mel.data(), 1, nullptr, 4) == -1);
    failed_with("whisper_audio_encoder_profile: NULL times");
    CHECK(whisper_audio_encoder_profile(enc, mel.data(), 1, nullptr, 0) == 0);  // none asked, none filled
    CHECK(!whisper_audio_encode_mel(enc, nullptr, 1, out.data()));
    failed_with("whisper_audio_encode_mel: NULL mel");
    CHECK(!whisper_audio_encode_pcm(enc, nullptr, 4, out.data()));
    failed_with("whisper_audio_encode_pcm: NULL pcm");
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
}

TEST_CASE("an encoder used from two threads at once: calls that would race fail as busy") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder * enc = cpu_encoder(model, 1);
    REQUIRE(enc);
    const std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    const std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    // two threads call 8 times each; a call either runs alone (right output) or is refused
    struct tally { int ran = 0, busy = 0, wrong = 0; std::string other; } t[2];
    auto hammer = [&](tally & c) {
        std::vector<float> out(ref.size());
        for (int i = 0; i < 8; i++) {
            std::fill(out.begin(), out.end(), NAN);
            if (whisper_audio_encode_mel(enc, mel.data(), 1, out.data())) {
                c.ran++;
                c.wrong += !(rel_l2(out, ref) < 2e-6);
            } else if (std::string(whisper_audio_last_error()).find("the encoder is busy") != std::string::npos) {
                c.busy++;
            } else {
                c.other = whisper_audio_last_error();
            }
        }
    };
    std::thread a(hammer, std::ref(t[0]));
    hammer(t[1]);
    a.join();
    MESSAGE("ran " << t[0].ran << " + " << t[1].ran << ", refused as busy " << t[0].busy << " + " << t[1].busy);
    CHECK(t[0].busy + t[1].busy > 0);
    CHECK(t[0].ran + t[1].ran > 0);
    CHECK(t[0].wrong + t[1].wrong == 0);
    const std::string other = t[0].other + t[1].other;
    CHECK_MESSAGE(other.empty(), other);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
}

TEST_CASE("the model may be freed before its encoders: they hold what they need") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder * enc = cpu_encoder(model, 2);
    REQUIRE(enc);
    float * pcm = nullptr;
    size_t n = 0;
    REQUIRE(whisper_audio_decode_file(test_data("audio/long_70s_16k.wav").c_str(), &pcm, &n, nullptr));
    std::vector<float> out((size_t)3 * 1500 * 128, NAN), again(out.size(), NAN);
    REQUIRE(whisper_audio_encode_pcm(enc, pcm, n, out.data()));
    whisper_audio_model_free(model);                                   // used after free before
    REQUIRE_MESSAGE(whisper_audio_encode_pcm(enc, pcm, n, again.data()), whisper_audio_last_error());
    CHECK(memcmp(out.data(), again.data(), out.size() * sizeof(float)) == 0);
    whisper_audio_pcm_free(pcm);
    whisper_audio_encoder_free(enc);
}

// ---- finding 15: messages that say what is wrong ------------------------------------------

TEST_CASE("model messages: unaligned offsets, bad eps and dims whose byte count wraps") {
    gguf_file f = tiny_model();
    f.tensor("encoder.conv1.bias").offset += 4;
    check_refused(f, "tensor 'encoder.conv1.bias' is at offset " + std::to_string(f.tensor("encoder.conv1.bias").offset) +
                     ", which is not a multiple of the alignment (32)");

    for (float eps : {NAN, INFINITY, 0.0f, -1.0f}) {
        CAPTURE(eps);
        f = tiny_model();
        const char key[] = "whisper.encoder.attention.layer_norm_epsilon";
        auto it = std::search(f.kv.b.begin(), f.kv.b.end(), key, key + strlen(key));
        REQUIRE(it != f.kv.b.end());
        memcpy(&*(it + strlen(key) + 4), &eps, 4);                     // the value after the type
        char want[128];
        snprintf(want, sizeof(want), "%s is %g; it must be a positive finite number", key, eps);
        check_refused(f, want);
    }

    // no eps key at all: Whisper's 1e-5
    {
        gguf_file t = tiny_model();
        const char key[] = "whisper.encoder.attention.layer_norm_epsilon";
        auto it = std::search(t.kv.b.begin(), t.kv.b.end(), key, key + strlen(key));
        REQUIRE(it != t.kv.b.end());
        t.kv.b.erase(it - 8, it + strlen(key) + 8);                    // length, key, type, value
        t.n_kv--;
        std::string msg;
        whisper_audio_model * m = load_bytes(t.bytes(), &msg);
        REQUIRE_MESSAGE(m, msg);
        CHECK(whisper_audio_model_hparams(m)->eps == 1e-5f);
        whisper_audio_model_free(m);
    }

    // an unused tensor of 2^24 x 2^24 x 2^14 f32: 2^64 bytes, which wrapped to 0
    f = tiny_model();
    f.add("unused", {1u << 24, 1u << 24, 1u << 14}, 0, {});
    check_refused(f, "tensor 'unused' has dims [16777216, 16777216, 16384, 1] (f32): more bytes than the file's");
}

// ---- round three (issue 23) ------------------------------------------------------------

TEST_CASE("hardening: the resampler takes 1 kHz to 1 MHz; other rates are refused at once") {
    const float one = 0.5f;
    float * y = nullptr;
    size_t n = 0;
    // a ratio of 1e7 asked for a vector past max_size (abort); 1 MHz -> 1 Hz ran 50 s into 3.5 GB
    // for 0 samples; 2^31 - 1 Hz overflowed the phase arithmetic
    const int bad[][2] = {{10000000, 1}, {1000000, 1}, {2147483647, 16000}, {16000, 2147483647}, {999, 16000}, {16000, 1000001}};
    for (const auto & r : bad) {
        CAPTURE(r[0]);
        CAPTURE(r[1]);
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_FALSE(whisper_audio_resample(&one, 1, r[0], r[1], &y, &n));
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
        CHECK(y == nullptr);
        CHECK(std::string(whisper_audio_last_error()).find("each must be 1000 to 1000000 Hz") != std::string::npos);
    }
    // the edges of the range work, and quickly
    for (const auto & r : {std::make_pair(1000000, 1000), std::make_pair(1000, 1000000), std::make_pair(16000, 1000000)}) {
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(whisper_audio_resample(&one, 1, r.first, r.second, &y, &n));
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
        CHECK(n == (size_t)llround((double)r.second / r.first));
        whisper_audio_pcm_free(y);
        y = nullptr;
    }
}

TEST_CASE("hardening: a FIFO as the model, or as a CTranslate2 directory's model.bin, is refused at once") {
    const std::string dir = test_tmp("fifo-model");
    REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir + "/ct2").c_str()) == 0);
    REQUIRE(mkfifo((dir + "/model.gguf").c_str(), 0644) == 0);
    REQUIRE(mkfifo((dir + "/ct2/model.bin").c_str(), 0644) == 0);
    for (const std::string & path : {dir + "/model.gguf", dir + "/ct2", dir + "/ct2/model.bin"}) {
        CAPTURE(path);
        // the load in a thread: were it to block in open(), a writer of our own releases it
        std::atomic<bool> done{false};
        std::string msg;
        whisper_audio_model * m = nullptr;
        std::thread t([&] {
            m = whisper_audio_model_load(path.c_str());
            msg = m ? "" : whisper_audio_last_error();
            done = true;
        });
        const auto t0 = std::chrono::steady_clock::now();
        while (!done && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const bool blocked = !done;
        if (blocked) {
            const std::string fifo = path.find("ct2") != std::string::npos && path.back() == '2' ? path + "/model.bin" : path;
            const int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
            if (w >= 0) close(w);
        }
        t.join();
        CHECK_FALSE(blocked);
        CHECK(m == nullptr);
        CHECK_MESSAGE(msg.find("not a regular file") != std::string::npos, msg);
        whisper_audio_model_free(m);
    }
    REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("hardening: tensors of layers past block_count are an error, not a truncated encoder") {
    gguf_file f = tiny_model();
    f.add("encoder.layers.1.fc1.weight", {8, 16}, 0, values(8 * 16, 0.3f));
    check_refused(f, "tensor 'encoder.layers.1.fc1.weight' is of layer 1, but whisper.encoder.block_count says 1 layer");
    f = tiny_model();
    f.add("encoder.layers.7.self_attn.q_proj.bias", {8}, 0, values(8, 0.1f));
    check_refused(f, "is of layer 7");
    f = tiny_model();
    f.add("encoder.layers.99999999999999999999.fc1.bias", {8}, 0, values(8, 0.1f));
    check_refused(f, "but whisper.encoder.block_count says 1 layer");
    // names that only look like a layer's are the file's own business
    f = tiny_model();
    f.add("encoder.layers.x", {8}, 0, values(8, 0.1f));
    std::string msg;
    whisper_audio_model * m = load_bytes(f.bytes(), &msg);
    CHECK_MESSAGE(m != nullptr, msg);
    whisper_audio_model_free(m);
}

// The whole stream of a file: its samples and the warning at its end (empty: none).
static std::pair<size_t, std::string> stream_to_end(const std::string & path) {
    whisper_audio_info info{};
    whisper_audio_stream * s = whisper_audio_stream_open(path.c_str(), &info);
    REQUIRE_MESSAGE(s, whisper_audio_last_error());
    CHECK(whisper_audio_stream_warning(s) == nullptr);             // nothing before the end
    std::vector<float> buf(40000);
    size_t n = 0;
    for (int64_t got; (got = whisper_audio_stream_read(s, buf.data(), buf.size())) != 0; n += (size_t)got)
        REQUIRE_MESSAGE(got > 0, whisper_audio_last_error());
    const char * w = whisper_audio_stream_warning(s);
    std::string warning = w ? w : "";
    whisper_audio_stream_close(s);
    return {n, warning};
}

TEST_CASE("hardening: a WAV, FLAC or MP3 cut short (or a FLAC longer than its header) decodes what is there, with a warning") {
    const std::string dir = test_tmp("cut");
    REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
    // WAV: the data chunk says 7.016 s, the file holds about 3 s (0.94 s decoded, no word)
    const std::vector<uint8_t> wav = read_bytes(test_data("audio/speech_16k.wav"));
    write_bytes(dir + "/cut.wav", std::vector<uint8_t>(wav.begin(), wav.begin() + 100044));
    auto r = stream_to_end(dir + "/cut.wav");
    CHECK(r.first == 50000);
    CHECK(r.second == dir + "/cut.wav: the input ends after 3.125 s of audio, but its header says 7.016 s (cut short?); "
                            "decoded what is there");
    auto [n_whole, none] = stream_to_end(test_data("audio/speech_16k.wav"));
    CHECK(n_whole == 112259);
    CHECK(none.empty());
#ifdef WHISPER_AUDIO_FLAC
    // FLAC: STREAMINFO's total (36 bits at byte 21) a quarter of the audio (cut silently to it),
    // three times it (an error), and a file cut in half (an error)
    const std::vector<uint8_t> flac = read_bytes(test_data("audio/speech_44k1_stereo_1s.flac"));
    REQUIRE(flac.size() > 1000);
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits = bits << 8 | flac[18 + i];
    const uint64_t total = bits & ((1ull << 36) - 1);
    REQUIRE(total == 44100);
    for (uint64_t said : {total / 4, total * 3}) {
        std::vector<uint8_t> b = flac;
        const uint64_t patched = (bits & ~((1ull << 36) - 1)) | said;
        for (int i = 0; i < 8; i++) b[18 + i] = (uint8_t)(patched >> (56 - 8 * i));
        write_bytes(dir + "/said.flac", b);
        CAPTURE(said);
        r = stream_to_end(dir + "/said.flac");
        CHECK(r.first == 16000);                                    // the whole second, either way
        CHECK(r.second.find(said < total ? "holds 1.000 s of audio, more than the 0.250 s its header says; decoded all of it"
                                         : "ends after 1.000 s of audio, but its header says 3.000 s") != std::string::npos);
    }
    write_bytes(dir + "/cut.flac", std::vector<uint8_t>(flac.begin(), flac.begin() + flac.size() / 2));
    r = stream_to_end(dir + "/cut.flac");
    CHECK(r.first > 1000);
    CHECK(r.first < 16000);
    CHECK(r.second.find("but its header says 1.000 s (cut short?); decoded what is there") != std::string::npos);
#endif
#ifdef WHISPER_AUDIO_MP3
    // MP3 with a LAME tag of 7.016 s, cut in half (an error)
    const std::vector<uint8_t> mp3 = read_bytes(test_data("audio/speech_44k1_stereo.mp3"));
    write_bytes(dir + "/cut.mp3", std::vector<uint8_t>(mp3.begin(), mp3.begin() + mp3.size() / 2));
    r = stream_to_end(dir + "/cut.mp3");
    CHECK(r.first > 16000);
    CHECK(r.second.find("but its header says 7.016 s (cut short?)") != std::string::npos);
#endif
    REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("hardening: model messages name the file and the field (issue 23, item 19)") {
    // no keys at all: "architecture is ''"
    {
        gguf_file f = tiny_model();
        f.kv.b.clear();
        f.n_kv = 0;
        check_refused(f, "no general.architecture key (0 keys)");
    }
    // a key of the wrong type: "missing key"
    {
        gguf_file f = tiny_model();
        const char key[] = "whisper.encoder.block_count";
        auto it = std::search(f.kv.b.begin(), f.kv.b.end(), key, key + strlen(key));
        REQUIRE(it != f.kv.b.end());
        *(it + strlen(key)) = 5;                                      // its type: int32, not uint32
        check_refused(f, "key whisper.encoder.block_count has GGUF type 5, not uint32 (4)");
    }
    // a projector type with a NUL inside: the message showed 'qwen2a'
    {
        gguf_file f = tiny_model();
        f.string("whisper.projector.type", std::string("qwen2a\0junk", 11));
        check_refused(f, "whisper.projector.type holds a NUL byte");
    }
    // CTranslate2: a model.bin under 18 bytes, or of another spec, was "not a GGUF model"
    const std::string dir = test_tmp("ct2-msg");
    REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
    write_bytes(dir + "/model.bin", {6, 0, 0, 0, 12, 0, 'W', 'h', 'i', 's'});
    whisper_audio_model * m = whisper_audio_model_load(dir.c_str());
    CHECK(m == nullptr);
    CHECK_MESSAGE(std::string(whisper_audio_last_error()).find("10 bytes: too short for a CTranslate2 model.bin") != std::string::npos,
                  whisper_audio_last_error());
    wav_bytes t;
    t.u32(6).u16(16);
    for (char c : std::string("TransformerSpec")) t.u8((uint8_t)c);
    t.u8(0).u32(1).u32(0).u32(0);
    write_bytes(dir + "/model.bin", t.b);
    m = whisper_audio_model_load(dir.c_str());
    CHECK(m == nullptr);
    CHECK_MESSAGE(std::string(whisper_audio_last_error()).find("a CTranslate2 model of spec TransformerSpec (binary version 6), not a "
                                                               "Whisper one") != std::string::npos, whisper_audio_last_error());
    REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("hardening: audio messages say what the file is (issue 23, item 19)") {
#ifdef WHISPER_AUDIO_OPUS
    // an Opus file cut at 30 bytes was "not a valid Ogg Vorbis stream"
    const std::vector<uint8_t> opus = read_bytes(test_data("audio/speech_16k.opus"));
    decoded_audio a = decode_memory(std::vector<uint8_t>(opus.begin(), opus.begin() + 30));
    CHECK_FALSE(a.ok);
    CHECK_MESSAGE(a.error.find("Ogg Opus") != std::string::npos, a.error);
    CHECK(a.error.find("Vorbis") == std::string::npos);
    a = decode_memory(std::vector<uint8_t>(opus.begin(), opus.begin() + 20));
    CHECK_MESSAGE(a.error.find("truncated Ogg file: the input ends after 20 bytes, inside its first page") != std::string::npos, a.error);
#endif
#ifdef WHISPER_AUDIO_FLAC
    // a FLAC behind an ID3v2 tag that the input ends inside was a "truncated MP3 file"
    std::vector<uint8_t> b = {'I', 'D', '3', 4, 0, 0, 0x7f, 0x7f, 0x7f, 0x7f};
    const std::vector<uint8_t> flac = read_bytes(test_data("audio/speech_44k1_stereo_1s.flac"));
    b.insert(b.end(), flac.begin(), flac.end());
    a = decode_memory(b);
    CHECK_FALSE(a.ok);
    CHECK_MESSAGE(a.error.find("the input ends inside its ID3v2 tag (268435465 bytes), before the MP3 or FLAC audio") != std::string::npos,
                  a.error);
    CHECK(a.error.find("MP3 file") == std::string::npos);
#endif
}

namespace {

struct misuse {                          // what the rows callback tries, and what it saw
    whisper_audio_pipeline * p = nullptr;
    whisper_audio_encoder * enc = nullptr;
    int rows = 0;
    std::vector<std::string> refusals;
};

bool misuse_rows(const whisper_audio_rows *, void * user) {
    misuse & m = *(misuse *)user;
    if (m.rows++ == 0) {                 // the first window: every call that would crash or hang
        whisper_audio_pipeline_free(m.p);
        m.refusals.push_back(whisper_audio_last_error());
        whisper_audio_encoder_free(m.enc);
        m.refusals.push_back(whisper_audio_last_error());
        if (!whisper_audio_pipeline_finish(m.p)) m.refusals.push_back(whisper_audio_last_error());
        const float x = 0.0f;
        if (!whisper_audio_pipeline_push(m.p, &x, 1)) m.refusals.push_back(whisper_audio_last_error());
    }
    return true;
}

} // namespace

TEST_CASE("pipeline misuse is refused with a message and leaves the pipeline usable (issue 23: 1, 5)") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE_MESSAGE(model, whisper_audio_last_error());
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    ep.device = WHISPER_AUDIO_DEVICE_CPU;
    ep.n_threads = 2;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, ep);
    REQUIRE_MESSAGE(enc, whisper_audio_last_error());
    misuse m;
    m.enc = enc;
    whisper_audio_pipeline_params pp = whisper_audio_pipeline_default_params();
    pp.on_rows = misuse_rows;
    pp.user = &m;
    m.p = whisper_audio_pipeline_init(&enc, 1, pp);
    REQUIRE_MESSAGE(m.p, whisper_audio_last_error());
    // the encoder belongs to the pipeline: freeing it is refused (it aborted at finish before)
    whisper_audio_encoder_free(enc);
    CHECK(std::string(whisper_audio_last_error()).find("the encoder is in use") != std::string::npos);
    std::vector<float> pcm(700000, 0.01f);
    REQUIRE(whisper_audio_pipeline_push(m.p, pcm.data(), pcm.size()));
    REQUIRE(whisper_audio_pipeline_end_input(m.p));
    // a second end_input is the caller's mistake: refused, and the ended input's rows still come
    CHECK_FALSE(whisper_audio_pipeline_end_input(m.p));
    CHECK(std::string(whisper_audio_last_error()).find("has no audio samples") != std::string::npos);
    CHECK_MESSAGE(whisper_audio_pipeline_finish(m.p), whisper_audio_last_error());
    CHECK(m.rows == 2);
    // inside on_rows: free, encoder_free, finish and push were each refused, none crashed or hung
    REQUIRE(m.refusals.size() == 4);
    CHECK(m.refusals[0].find("whisper_audio_pipeline_free: called from inside the rows callback") != std::string::npos);
    CHECK(m.refusals[1].find("the encoder is in use") != std::string::npos);
    CHECK(m.refusals[2].find("whisper_audio_pipeline_finish: called from inside the rows callback") != std::string::npos);
    CHECK(m.refusals[3].find("whisper_audio_pipeline_push: called from inside the rows callback") != std::string::npos);
    // still usable: another input, finished
    REQUIRE(whisper_audio_pipeline_push(m.p, pcm.data(), 1000));
    REQUIRE(whisper_audio_pipeline_end_input(m.p));
    REQUIRE(whisper_audio_pipeline_finish(m.p));
    CHECK(m.rows == 3);
    whisper_audio_pipeline_free(m.p);
    whisper_audio_encoder_free(enc);     // released with the pipeline: freed now
    whisper_audio_model_free(model);
}

// ---- lengths that lie, one rule for cut audio, messages that name the function called -----

// A whole decode from memory and from a file: samples, warning (whisper_audio_decode_warning) and error.
struct decoded_whole { bool ok = false; size_t n = 0; std::string warning, error; };
static decoded_whole decode_whole(const std::vector<uint8_t> & bytes, bool from_file) {
    decoded_whole d;
    float * pcm = nullptr;
    whisper_audio_info info{};
    const std::string path = test_tmp("whole.audio");
    if (from_file) write_bytes(path, bytes);
    d.ok = from_file ? whisper_audio_decode_file(path.c_str(), &pcm, &d.n, &info)
                     : whisper_audio_decode_memory(bytes.data(), bytes.size(), &pcm, &d.n, &info);
    if (!d.ok) d.error = whisper_audio_last_error();
    const char * w = whisper_audio_decode_warning();
    if (w) d.warning = w;
    whisper_audio_pcm_free(pcm);
    if (from_file) remove(path.c_str());
    return d;
}

// A FLAC whose STREAMINFO says total samples (36 bits at byte 18, after its rate, channels and bits).
static std::vector<uint8_t> flac_saying(uint64_t said) {
    std::vector<uint8_t> b = read_bytes(test_data("audio/speech_44k1_stereo_1s.flac"));
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits = bits << 8 | b[18 + i];
    const uint64_t patched = (bits & ~((1ull << 36) - 1)) | said;
    for (int i = 0; i < 8; i++) b[18 + i] = (uint8_t)(patched >> (56 - 8 * i));
    return b;
}

TEST_CASE("hardening: a header that claims 2^36 samples reserves nothing of it: every entry point decodes what is there") {
    const std::vector<uint8_t> lie = flac_saying((1ull << 36) - 1);
    const std::string path = test_tmp("lie.flac");
    write_bytes(path, lie);
    auto [n_stream, w_stream] = stream_to_end(path);             // main's way (it warned before as well)
    CHECK(n_stream == 16000);
    CHECK(w_stream.find("the input ends after 1.000 s of audio, but its header says 1558264.779 s (cut short?)") != std::string::npos);
    for (bool from_file : {false, true}) {
        CAPTURE(from_file);
        const decoded_whole d = decode_whole(lie, from_file);   // was "out of memory" (256 GB reserved)
        CHECK_MESSAGE(d.ok, d.error);
        CHECK(d.n == n_stream);
        CHECK(d.warning.find("but its header says 1558264.779 s (cut short?); decoded what is there") != std::string::npos);
    }
    // a good file: no warning, and a later decode clears an earlier one's
    const decoded_whole good = decode_whole(read_bytes(test_data("audio/speech_44k1_stereo_1s.flac")), false);
    CHECK(good.ok);
    CHECK(good.warning.empty());
    remove(path.c_str());
}

#if defined(WHISPER_AUDIO_OGG) || defined(WHISPER_AUDIO_OPUS) || defined(WHISPER_AUDIO_MP3)
// The same cut input through the stream, decode_memory and decode_file: its samples and warning.
static void check_cut(const std::vector<uint8_t> & bytes, const char * name, const char * want) {
    CAPTURE(name);
    const std::string path = test_tmp(name);
    write_bytes(path, bytes);
    auto [n, w] = stream_to_end(path);
    CHECK(n > 8000);
    CHECK_MESSAGE(w.find(want) != std::string::npos, w);
    for (bool from_file : {false, true}) {
        CAPTURE(from_file);
        const decoded_whole d = decode_whole(bytes, from_file);
        CHECK_MESSAGE(d.ok, d.error);
        CHECK(d.n == n);
        CHECK_MESSAGE(d.warning.find(want) != std::string::npos, d.warning);
    }
    remove(path.c_str());
}
#endif

TEST_CASE("hardening: every codec decodes a cut file's audio with a warning, from every entry point") {
#ifdef WHISPER_AUDIO_OGG
    {   // Ogg Vorbis cut in half: was an error ("convert it first")
        const std::vector<uint8_t> ogg = read_bytes(test_data("audio/speech_16k.ogg"));
        check_cut(std::vector<uint8_t>(ogg.begin(), ogg.begin() + ogg.size() / 2), "cut.ogg",
                  "without the stream's last page (the end-of-stream flag; cut short?); decoded what is there");
        CHECK(stream_to_end(test_data("audio/speech_16k.ogg")).second.empty());
    }
#endif
#ifdef WHISPER_AUDIO_OPUS
    {   // Ogg Opus cut in half: was decoded without a word
        const std::vector<uint8_t> opus = read_bytes(test_data("audio/speech_16k.opus"));
        check_cut(std::vector<uint8_t>(opus.begin(), opus.begin() + opus.size() / 2), "cut.opus",
                  "without the stream's last page (the end-of-stream flag; cut short?); decoded what is there");
        CHECK(stream_to_end(test_data("audio/speech_16k.opus")).second.empty());
        CHECK(stream_to_end(test_data("audio/speech_44k1_stereo.opus")).second.empty());
    }
#endif
#ifdef WHISPER_AUDIO_MP3
    {   // an MP3 whose Xing "Info" tag says its frame count, cut at a frame boundary: speech_16k.mp3's
        // 144-byte MPEG-2 layer III frames, an Info frame of the same header before them
        const std::vector<uint8_t> mp3 = read_bytes(test_data("audio/speech_16k.mp3"));
        const size_t fs = 144;
        REQUIRE(mp3.size() % fs == 0);
        const size_t n_frames = mp3.size() / fs;
        std::vector<uint8_t> info(fs, 0);
        std::copy(mp3.begin(), mp3.begin() + 4, info.begin());
        info[2] &= 0xFD;                                          // no padding bit: 144 bytes
        memcpy(info.data() + 4 + 9, "Info", 4);                   // after MPEG-2 mono's 9 bytes of side info
        info[4 + 9 + 7] = 1;                                      // flags: the frame count follows
        for (int i = 0; i < 4; i++) info[4 + 9 + 8 + i] = (uint8_t)(n_frames >> (24 - 8 * i));
        std::vector<uint8_t> tagged = info;
        tagged.insert(tagged.end(), mp3.begin(), mp3.end());
        write_bytes(test_tmp("tagged.mp3"), tagged);
        CHECK(stream_to_end(test_tmp("tagged.mp3")).second.empty());
        remove(test_tmp("tagged.mp3").c_str());
        std::vector<uint8_t> cut(tagged.begin(), tagged.begin() + (ptrdiff_t)(fs * (1 + n_frames / 2)));
        check_cut(cut, "cut-tagged.mp3", "but its header says 7.059 s (cut short?); decoded what is there");
    }
#endif
}

TEST_CASE("hardening: messages name the function the caller called") {
    whisper_audio_model * model = whisper_audio_model_load("build/micro-80-f32.gguf");
    REQUIRE(model);
    whisper_audio_encoder * enc = cpu_encoder(model, 1);
    REQUIRE(enc);
    std::vector<float> out(1500 * 128), pcm(16000, 0.0f), mel(80 * 3000, 0.0f);
    auto error = [] { return std::string(whisper_audio_last_error()); };
    // NULL arguments: encode_mel said encode_mel_frames, log_mel said log_mel_filters
    CHECK_FALSE(whisper_audio_encode_mel(enc, nullptr, 1, out.data()));
    CHECK(error() == "whisper_audio_encode_mel: NULL mel");
    CHECK_FALSE(whisper_audio_log_mel(model, nullptr, 10, out.data()));
    CHECK(error() == "whisper_audio_log_mel: NULL pcm");
    CHECK_FALSE(whisper_audio_log_mel(model, pcm.data(), pcm.size(), nullptr));
    CHECK(error() == "whisper_audio_log_mel: NULL out");
    pcm[5] = NAN;
    CHECK_FALSE(whisper_audio_log_mel(model, pcm.data(), pcm.size(), out.data()));
    CHECK(error().rfind("whisper_audio_log_mel: ", 0) == 0);
    pcm[5] = 0.0f;
    // an encoder a pipeline holds: encode_pcm said "whisper_audio_pipeline_init: encoder 0 is busy"
    whisper_audio_pipeline * p = whisper_audio_pipeline_init(&enc, 1, whisper_audio_pipeline_default_params());
    REQUIRE(p);
    CHECK_FALSE(whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data()));
    CHECK_MESSAGE(error().rfind("whisper_audio_encode_pcm: the encoder is busy", 0) == 0, error());
    CHECK_FALSE(whisper_audio_encode_mel(enc, mel.data(), 1, out.data()));
    CHECK(error().rfind("whisper_audio_encode_mel: the encoder is busy", 0) == 0);
    whisper_audio_pipeline_free(p);
    CHECK(whisper_audio_encode_pcm(enc, pcm.data(), pcm.size(), out.data()));
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);

    const std::string dir = test_tmp("msg-hf");
    REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir + "/m " + dir + "/cache/models--org--name/refs").c_str()) == 0);
    // a shard name with a NUL: "the shard a string"
    write_bytes(dir + "/m/config.json", read_bytes(test_data("micro-80/config.json")));
    const std::string index = "{\"weight_map\": {\"encoder.conv1.weight\": \"model\\u0000.safetensors\"}}";
    write_bytes(dir + "/m/model.safetensors.index.json", std::vector<uint8_t>(index.begin(), index.end()));
    whisper_audio_model * m = whisper_audio_model_load((dir + "/m").c_str());
    CHECK(m == nullptr);
    CHECK_MESSAGE(error().find("the shard \"model\\u0000.safetensors\": not a file name") != std::string::npos, error());
    // a FIFO as refs/main: "has no refs/main"
    REQUIRE(mkfifo((dir + "/cache/models--org--name/refs/main").c_str(), 0600) == 0);
    const char * old = getenv("HF_HUB_CACHE");
    const std::string saved = old ? old : "";
    setenv("HF_HUB_CACHE", (dir + "/cache").c_str(), 1);
    m = whisper_audio_model_load("org/name");
    if (old) setenv("HF_HUB_CACHE", saved.c_str(), 1); else unsetenv("HF_HUB_CACHE");
    CHECK(m == nullptr);
    CHECK_MESSAGE(error().find("refs/main is a FIFO, not a file holding a commit hash") != std::string::npos, error());
    REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}
