// whisper.cpp's legacy ggml-*.bin models (build/ggml, byte for byte the files whisper.cpp's own
// convert-h5-to-ggml.py and quantize made, written again by tests/data/make-model-files.py; their
// references in tests/data/ggml: see tests/data/README.md): loaded as they are and
// through the converter, against transformers' float64 forward of the files' own weights,
// and the loader's answers to broken files.
#include <doctest/doctest.h>

#include "test-util.h"
#include "whisper-audio.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

std::string ggml_file(const std::string & base) { return test_model_file("ggml/" + base + ".bin"); }

// The float64 reference's first REF_POSITIONS positions (all of them depend on every
// weight, through attention; a slice keeps the test data small).
const size_t REF_POSITIONS = 100;
std::vector<float> ggml_reference(const std::string & base) {
    return npy_load_f32(test_data("ggml/" + base + ".speech_16k.last_hidden_state.npy"), nullptr);
}

// (whisper.cpp's f32 mode rounds every tensor to f16 anyway, and micro-128's f16 file is
// left out to keep the test data small: its reference stays, for the q8_0 file's error)
const char * const GGML_FILES[] = {"micro-80-f16", "micro-80-q8_0", "micro-80-q5_1", "micro-80-q5_0",
                                   "micro-80-q4_1", "micro-80-q4_0", "micro-128-q8_0"};

// Loading the bytes must fail with a message that contains `expect`.
void check_ggml_fails(const std::vector<uint8_t> & bytes, const char * expect) {
    const std::string path = test_tmp("bad-ggml.bin");
    write_bytes(path, bytes);
    whisper_audio_model * m = whisper_audio_model_load(path.c_str());
    CHECK(m == nullptr);
    const std::string msg = whisper_audio_last_error();
    CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    CHECK(msg.find('\n') == std::string::npos);
    whisper_audio_model_free(m);
    remove(path.c_str());
}

void put_i32(std::vector<uint8_t> & b, size_t at, int32_t v) { memcpy(b.data() + at, &v, 4); }
int32_t get_i32(const std::vector<uint8_t> & b, size_t at) { int32_t v; memcpy(&v, b.data() + at, 4); return v; }

// Byte offsets in a ggml file: where the tensors start, and the header of the named tensor.
struct ggml_layout { size_t tensors = 0; size_t named = 0; };
ggml_layout ggml_find(const std::vector<uint8_t> & b, const std::string & name) {
    ggml_layout l;
    size_t pos = 48 + 8 + 4 * (size_t)get_i32(b, 48) * get_i32(b, 52);
    const int32_t n_vocab = get_i32(b, pos);
    pos += 4;
    for (int32_t i = 0; i < n_vocab; i++) pos += 4 + get_i32(b, pos);
    l.tensors = pos;
    static const size_t block[] = {4, 2, 18, 20, 0, 0, 22, 24, 34};   // bytes per element (f32, f16) or per 32
    while (pos < b.size()) {
        const int32_t n_dims = get_i32(b, pos), len = get_i32(b, pos + 4), type = get_i32(b, pos + 8);
        size_t n = 1;
        for (int d = 0; d < n_dims; d++) n *= get_i32(b, pos + 12 + 4 * d);
        const size_t head = 12 + 4 * n_dims + len;
        if (std::string((const char *)b.data() + pos + 12 + 4 * n_dims, len) == name) l.named = pos;
        pos += head + (type < 2 ? n * block[type] : n / 32 * block[type]);
    }
    return l;
}

} // namespace

TEST_CASE("whisper.cpp ggml files match transformers float64 on their own weights") {
    for (std::string base : GGML_FILES) {
        whisper_audio_model * model = whisper_audio_model_load(ggml_file(base).c_str());
        REQUIRE_MESSAGE(model, whisper_audio_last_error() << TEST_MODEL_FILE_HINT);
        const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
        CHECK(hp->n_state == 128);
        CHECK(hp->n_layer == 2);
        CHECK(hp->n_head == 2);
        CHECK(hp->n_ff == (hp->n_mels == 80 ? 512 : 256));          // not stored: fc1's shape says it (not 4 d)
        CHECK(hp->eps == 1e-5f);
        // f16 and f32 matrices stay as stored; the block types are dequantised to f32
        CHECK(hp->weight_type == (base.find("f16") != std::string::npos ? WHISPER_AUDIO_WEIGHT_F16 : WHISPER_AUDIO_WEIGHT_F32));

        // the file's own mel bank (whisper's mel_filters.npz), as stored after the hparams
        const std::vector<uint8_t> bytes = read_bytes(ggml_file(base));
        CHECK(memcmp(whisper_audio_model_mel_filters(model), bytes.data() + 56, (size_t)hp->n_mels * 201 * 4) == 0);

        const std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel" + std::to_string(hp->n_mels) + ".npy"), nullptr);
        std::vector<float> got = encode_cpu(model, mel);
        got.resize(REF_POSITIONS * hp->n_state);
        const std::vector<float> ref = ggml_reference(base);
        REQUIRE(got.size() == ref.size());
        const double err = rel_l2(got, ref);
        // the quantisation's own error: the output against the f16 file's float64 reference
        const std::string f16 = base.substr(0, base.rfind('-')) + "-f16";
        const double q_err = rel_l2(got, ggml_reference(f16));
        MESSAGE(base << ": relative L2 error " << err << " against its own weights in float64; " << q_err
                     << " against the f16 file's");
        CHECK(err < 2e-6);
        if (base.find("-q") != std::string::npos) CHECK(q_err > 1e-4);   // the weights really were quantised
        whisper_audio_model_free(model);
    }
}

TEST_CASE("the converter turns ggml files into GGUF files that give the same output") {
    if (system("python3 -c '' 2>/dev/null") != 0) {
        MESSAGE("skipped: no python3");
        return;
    }
    const std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    for (std::string base : {"micro-80-f16", "micro-80-q8_0", "micro-80-q5_1", "micro-80-q5_0", "micro-80-q4_0"}) {
        const std::string out = test_tmp(base + ".gguf");
        const std::string cmd = "python3 convert/convert-hf-to-gguf.py " + ggml_file(base) + " -o " + out + " 2>/dev/null";
        REQUIRE_MESSAGE(system(cmd.c_str()) == 0, cmd);
        // block types are kept as they are: the GGUF file is no larger than the ggml one
        CHECK(read_bytes(out).size() < read_bytes(ggml_file(base)).size());
        whisper_audio_model * direct = whisper_audio_model_load(ggml_file(base).c_str());
        whisper_audio_model * conv = whisper_audio_model_load(out.c_str());
        REQUIRE_MESSAGE(conv, whisper_audio_last_error());
        REQUIRE(direct);
        const std::vector<float> a = encode_cpu(direct, mel), b = encode_cpu(conv, mel);
        CHECK(memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        whisper_audio_model_free(direct);
        whisper_audio_model_free(conv);
        remove(out.c_str());
    }
}

TEST_CASE("broken ggml files are refused with a message") {
    const std::vector<uint8_t> good = read_bytes(ggml_file("micro-80-q8_0"));
    REQUIRE_MESSAGE(good.size() > 100000, ggml_file("micro-80-q8_0") << TEST_MODEL_FILE_HINT);
    const ggml_layout l = ggml_find(good, "encoder.blocks.0.attn.query.weight");
    REQUIRE(l.named > l.tensors);
    const ggml_layout dec = ggml_find(good, "decoder.token_embedding.weight");
    REQUIRE(dec.named > 0);

    // truncated: in the header, the mel bank, the vocabulary, a tensor header, a tensor's data
    for (size_t n : {(size_t)6, (size_t)30, (size_t)1000, l.tensors - 3, l.tensors + 5, l.named + 40, good.size() - 1}) {
        CAPTURE(n);
        check_ggml_fails(std::vector<uint8_t>(good.begin(), good.begin() + n), "truncated");
    }
    std::vector<uint8_t> b = good;
    put_i32(b, 4 + 4 * 2, 100000);                                  // n_audio_state
    check_ggml_fails(b, "n_audio_state = 100000 is outside");
    b = good;
    put_i32(b, 4 + 4 * 4, 1);                                       // n_audio_layer 1 over 2 layers (issue 23)
    check_ggml_fails(b, "tensor 'encoder.blocks.1.attn.key.weight' is of layer 1, but n_audio_layer says 1 layer");
    b = good;
    put_i32(b, 4 + 4 * 1, 448);                                     // n_audio_ctx
    check_ggml_fails(b, "n_audio_ctx = 448");
    b = good;
    put_i32(b, 48, 81);                                             // the mel bank's rows
    check_ggml_fails(b, "the mel filters are [81, 201]");
    b = good;
    put_i32(b, 56 + 80 * 201 * 4, 0x7fffffff);                      // the vocabulary's count
    check_ggml_fails(b, "implausible vocabulary size");
    b = good;
    put_i32(b, 56 + 80 * 201 * 4 + 4, 1 << 30);                     // the first token's length
    check_ggml_fails(b, "vocabulary entry 0");
    b = good;
    put_i32(b, l.named + 8, 99);                                    // unknown ttype
    check_ggml_fails(b, "has ggml type 99");
    b = good;
    put_i32(b, dec.named + 8, 13);                                  // unknown ttype in a skipped tensor: still refused
    check_ggml_fails(b, "has ggml type 13");
    b = good;
    put_i32(b, l.named, 7);                                         // n_dims
    check_ggml_fails(b, "bad header (7 dims");
    b = good;
    put_i32(b, l.named + 4, 1 << 20);                               // name length
    check_ggml_fails(b, "bad header");
    b = good;
    put_i32(b, l.named + 12 + 4, 1 << 24);                          // absurd dims: more than the file holds
    check_ggml_fails(b, "runs past the end of the file");
    b = good;
    put_i32(b, l.named + 12 + 4, -5);
    check_ggml_fails(b, "bad dimension -5");
    b = good;
    put_i32(b, l.named + 12, 100);                                  // a q8_0 row that is not whole blocks
    check_ggml_fails(b, "not whole blocks of 32");
    b = good;
    b[l.named + 12 + 8 + 22] = 'Q';                                 // encoder.blocks.0.attn.Query: missing
    check_ggml_fails(b, "'encoder.layers.0.self_attn.q_proj.weight' is missing");
    b = good;                                                       // a q8_0 scale of +inf
    b[l.named + 12 + 8 + 34] = 0x00;
    b[l.named + 12 + 8 + 35] = 0x7c;
    check_ggml_fails(b, "non-finite weight");
}

TEST_CASE("whisper_audio_model_save_gguf: blocks read again from an unchanged file; never over its own file") {
    const std::string src = test_tmp("save-q8_0.bin"), out = test_tmp("save-q8_0.gguf"), link = test_tmp("save-link.gguf");
    std::vector<uint8_t> bytes = read_bytes(ggml_file("micro-80-q8_0"));
    REQUIRE_MESSAGE(!bytes.empty(), ggml_file("micro-80-q8_0") << TEST_MODEL_FILE_HINT);
    write_bytes(src, bytes);
    whisper_audio_model * m = whisper_audio_model_load(src.c_str());
    REQUIRE_MESSAGE(m, whisper_audio_last_error());
    CHECK(!whisper_audio_model_save_gguf(m, src.c_str()));                      // its own file
    CHECK(std::string(whisper_audio_last_error()).find("the model's own file") != std::string::npos);
    CHECK(read_bytes(src) == bytes);
    CHECK(!whisper_audio_model_save_gguf(nullptr, out.c_str()));
    CHECK(!whisper_audio_model_save_gguf(m, ""));
    // a symlink: the file it leads to is written, the link stays
    write_bytes(out, {'o', 'l', 'd'});
    REQUIRE(symlink(out.c_str(), link.c_str()) == 0);
    REQUIRE_MESSAGE(whisper_audio_model_save_gguf(m, link.c_str()), whisper_audio_last_error());
    struct stat st;
    CHECK((lstat(link.c_str(), &st) == 0 && S_ISLNK(st.st_mode)));
    whisper_audio_model * back = whisper_audio_model_load(out.c_str());
    REQUIRE_MESSAGE(back, whisper_audio_last_error());
    const std::vector<float> mel = npy_load_f32(test_data("features/speech_16k.mel80.npy"), nullptr);
    const std::vector<float> x = encode_cpu(m, mel), y = encode_cpu(back, mel);
    CHECK(memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    whisper_audio_model_free(back);
    // the source's blocks changed after loading: refused, the old output kept
    const std::vector<uint8_t> saved = read_bytes(out);
    const size_t at = ggml_find(bytes, "encoder.blocks.0.attn.query.weight").named + 12 + 8 + 34 + 40;
    bytes[at] ^= 1;
    write_bytes(src, bytes);
    CHECK(!whisper_audio_model_save_gguf(m, out.c_str()));
    CHECK_MESSAGE(std::string(whisper_audio_last_error()).find("changed since") != std::string::npos, whisper_audio_last_error());
    CHECK(read_bytes(out) == saved);
    whisper_audio_model_free(m);
    remove(link.c_str());
    remove(out.c_str());
    remove(src.c_str());
}
