// The command line: runs ./main (or $WA_MAIN) as a user would, on good and bad input.
#include <doctest/doctest.h>

#include "test-util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <vector>

namespace {

struct run_result {
    int status;
    std::string output;    // stdout and stderr together
};

run_result run_main(const std::string & args) {
    const char * bin = getenv("WA_MAIN") ? getenv("WA_MAIN") : "./main";
    const std::string cmd = std::string(bin) + " " + args + " 2>&1";
    FILE * p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

bool exists(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

const std::string MODEL = "build/micro-80-f32.gguf";
const std::string SPEECH = test_data("audio/speech_16k.wav");
const std::string LONG = test_data("audio/long_70s_16k.wav");

} // namespace

TEST_CASE("main -h and argument errors") {
    run_result r = run_main("-h");
    CHECK(r.status == 0);
    CHECK(r.output.find("usage:") != std::string::npos);
    r = run_main("");
    CHECK(r.status == 2);
    CHECK(r.output.find("no model given") != std::string::npos);
    r = run_main("-m " + MODEL);
    CHECK(r.status == 2);
    CHECK(r.output.find("no audio file") != std::string::npos);
    for (const char * bad : {"-t 0", "-b x", "--device tpu", "--dtype f8", "--bogus", "-m"}) {
        CAPTURE(bad);
        r = run_main("-f " + SPEECH + " -m " + MODEL + " " + bad);
        CHECK(r.status == 2);
        CHECK(r.output.find("error:") != std::string::npos);
    }
}

TEST_CASE("main: audio in, the reference embeddings out") {
    const std::string out = "build/test-cli-speech.npy";
    remove(out.c_str());
    run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " -o " + out + " --device cpu -t 2");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("output: [1, 1500, 128]") != std::string::npos);
    CHECK(r.output.find("timings:") != std::string::npos);
    std::vector<int64_t> shape;
    std::vector<float> got = npy_load_f32(out.c_str(), &shape);
    REQUIRE(shape == std::vector<int64_t>{1, 1500, 128});
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    const double err = rel_l2(got.data(), ref.data(), ref.size());
    MESSAGE("main on speech_16k.wav vs transformers float64: relative L2 error " << err);
    CHECK(err < 1e-5);
    remove(out.c_str());
}

TEST_CASE("main: several files share one array, rows in order") {
    const std::string out = "build/test-cli-two.npy";
    run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " -f " + LONG + " -o " + out + " --device cpu -b 2");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find(SPEECH + ": 7.016 s, 1 window -> " + out + " rows 0-0") != std::string::npos);
    CHECK(r.output.find(LONG + ": 70.000 s, 3 windows -> " + out + " rows 1-3") != std::string::npos);
    std::vector<int64_t> shape;
    std::vector<float> got = npy_load_f32(out.c_str(), &shape);
    REQUIRE(shape == std::vector<int64_t>{4, 1500, 128});
    std::vector<float> ref0 = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    std::vector<float> ref1 = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(got.data(), ref0.data(), ref0.size()) < 1e-5);
    CHECK(rel_l2(got.data() + ref1.size(), ref1.data(), ref1.size()) < 1e-5);
    remove(out.c_str());
}

TEST_CASE("main: bad input gets a message and a non-zero exit, and no output file") {
    const std::string dir = "build/test-cli-bad";
    mkdir(dir.c_str(), 0755);
    const std::string out = dir + "/out.npy";
    std::vector<uint8_t> model;
    {
        FILE * f = fopen(MODEL.c_str(), "rb");
        REQUIRE(f);
        int c;
        while ((c = fgetc(f)) != EOF) model.push_back((uint8_t)c);
        fclose(f);
    }
    std::vector<uint8_t> pcm(3200, 0);                                  // 0.1 s of s16 silence
    struct bad_case { std::string name; std::vector<uint8_t> bytes; bool is_model; const char * expect; };
    std::vector<uint8_t> wrong_magic = model;
    memcpy(wrong_magic.data(), "LMGG", 4);
    std::vector<uint8_t> truncated(model.begin(), model.begin() + model.size() / 3);
    std::vector<uint8_t> shapes = model;
    {
        const char key[] = "whisper.encoder.feed_forward_length";
        auto it = std::search(shapes.begin(), shapes.end(), key, key + strlen(key));
        REQUIRE(it != shapes.end());
        *(it + strlen(key) + 4) ^= 1;                                   // 512 -> 513
    }
    std::vector<bad_case> cases = {
        {"empty.wav", {}, false, "empty"},
        {"text.wav", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'}, false, "not a WAV"},
        {"alaw.wav", wav_file(6, 1, 8000, 8, pcm), false, "ffmpeg"},
        {"zero-channels.wav", wav_file(1, 0, 16000, 16, pcm), false, "channel"},
        {"rate0.wav", wav_file(1, 1, 0, 16, pcm), false, "rate"},
        {"no-samples.wav", wav_file(1, 1, 16000, 16, {}), false, "no audio samples"},
        {"wrong-magic.gguf", wrong_magic, true, "magic"},
        {"truncated.gguf", truncated, true, "truncated"},
        {"shapes.gguf", shapes, true, "the hyperparameters need"},
        {"empty.gguf", {}, true, "empty"},
    };
    for (const bad_case & c : cases) {
        CAPTURE(c.name);
        const std::string path = dir + "/" + c.name;
        write_bytes(path, c.bytes);
        const std::string args = c.is_model ? "-m " + path + " -f " + SPEECH : "-m " + MODEL + " -f " + path;
        run_result r = run_main(args + " -o " + out + " --device cpu");
        INFO(r.output);
        CHECK(r.status == 1);
        CHECK(r.output.find("error:") != std::string::npos);
        CHECK(r.output.find(c.expect) != std::string::npos);
        CHECK(!exists(out));
        CHECK(!exists(out + ".tmp"));
    }
    run_result r = run_main("-m " + MODEL + " -f " + dir + "/missing.wav -o " + out);
    CHECK(r.status == 1);
    CHECK(r.output.find("missing.wav") != std::string::npos);
    r = run_main("-m " + dir + "/missing.gguf -f " + SPEECH + " -o " + out);
    CHECK(r.status == 1);
    CHECK(r.output.find("cannot open") != std::string::npos);
    CHECK(!exists(out));
}

namespace {

std::vector<float> run_npy(const std::string & args, std::vector<int64_t> * shape, const char * out = "build/test-cli-opt.npy") {
    remove(out);
    run_result r = run_main("-m " + MODEL + " --device cpu " + args + " -o " + out);
    INFO(r.output);
    REQUIRE(r.status == 0);
    std::vector<float> v = npy_load_f32(out, shape);
    remove(out);
    return v;
}

} // namespace

TEST_CASE("main: --layer, --no-final-ln, --pool mean") {
    std::vector<int64_t> shape;
    std::vector<float> layer0 = run_npy("-f " + SPEECH + " --layer 0", &shape);
    REQUIRE(shape == std::vector<int64_t>{1, 1500, 128});
    std::vector<float> ref0 = npy_load_f32(test_data("encoder/micro-80/speech_16k.layer0.npy"), nullptr);
    CHECK(rel_l2(layer0.data(), ref0.data(), ref0.size()) < 1e-5);

    // micro-80 has two layers: the last layer's output without the final LayerNorm
    std::vector<float> last_raw = run_npy("-f " + SPEECH + " --no-final-ln", &shape);
    std::vector<float> layer1 = run_npy("-f " + SPEECH + " --layer 1", &shape);
    CHECK(last_raw == layer1);
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(layer1.data(), ref.data(), ref.size()) > 0.1);       // it really lacks the final norm

    // mean over the positions that cover audio: ceil(112259 / 320) = 351 of them
    std::vector<float> pooled = run_npy("-f " + SPEECH + " -f " + LONG + " --pool mean", &shape);
    REQUIRE(shape == std::vector<int64_t>{4, 128});
    std::vector<double> want(128, 0.0);
    for (int t = 0; t < 351; t++)
        for (int c = 0; c < 128; c++) want[c] += ref[t * 128 + c] / 351.0;
    std::vector<float> want_f(want.begin(), want.end());
    CHECK(rel_l2(pooled.data(), want_f.data(), want_f.size()) < 1e-5);
    // the long file's full windows average over all 1500 positions
    std::vector<float> ref_long = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    std::vector<float> want_long(128, 0.0f);
    for (int t = 0; t < 1500; t++)
        for (int c = 0; c < 128; c++) want_long[c] += ref_long[t * 128 + c] / 1500.0f;
    CHECK(rel_l2(pooled.data() + 128, want_long.data(), want_long.size()) < 1e-5);

    run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " --layer 2");
    CHECK(r.status == 2);
    CHECK(r.output.find("layers 0 to 1") != std::string::npos);
}

TEST_CASE("main: --outtype f16, -o DIR/ one file per input, --json, --list") {
    const std::string dir = "build/test-cli-dir/";
    mkdir(dir.c_str(), 0755);
    remove((dir + "speech_16k.npy").c_str());
    remove((dir + "long_70s_16k.npy").c_str());
    const std::string list = "build/test-cli-list.txt";
    {
        FILE * f = fopen(list.c_str(), "w");
        REQUIRE(f);
        fprintf(f, "%s\n# a comment\n\n%s\n", SPEECH.c_str(), LONG.c_str());
        fclose(f);
    }
    run_result r = run_main("-m " + MODEL + " --device cpu --list " + list + " -o " + dir + " --outtype f16 --json");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("\"files\": [") != std::string::npos);
    CHECK(r.output.find("\"path\": \"" + LONG + "\"") != std::string::npos);
    CHECK(r.output.find("\"windows\": 3") != std::string::npos);
    CHECK(r.output.find("\"timings_ms\"") != std::string::npos);
    // f16 .npy: header says <f2; values are the f32 ones rounded
    FILE * f = fopen((dir + "long_70s_16k.npy").c_str(), "rb");
    REQUIRE(f);
    char head[128];
    REQUIRE(fread(head, 1, sizeof(head), f) == sizeof(head));
    fclose(f);
    const std::string header(head, sizeof(head));
    CHECK(header.find("'descr': '<f2'") != std::string::npos);
    CHECK(header.find("'shape': (3, 1500, 128)") != std::string::npos);
    CHECK(exists(dir + "speech_16k.npy"));
}

TEST_CASE("main: --no-pad") {
    std::vector<int64_t> shape;
    std::vector<float> v = run_npy("-f " + SPEECH + " --no-pad", &shape);
    REQUIRE(shape == std::vector<int64_t>{351, 128});                // ceil(112259 / 320) positions
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.nopad.last_hidden_state.npy"), nullptr);
    const double err = rel_l2(v.data(), ref.data(), ref.size());
    MESSAGE("main --no-pad on speech_16k.wav vs transformers float64: relative L2 error " << err);
    CHECK(err < 1e-5);
    // 70 s: two full windows and 10 s: 1500 + 1500 + 500 positions, in one array
    v = run_npy("-f " + LONG + " --no-pad -b 4", &shape);
    REQUIRE(shape == std::vector<int64_t>{3500, 128});
    std::vector<float> ref1 = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(v.data(), ref1.data(), ref1.size()) < 1e-5);        // full windows are unchanged
    std::vector<float> ref_last = npy_load_f32(test_data("encoder/micro-80/long_70s_last.nopad.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(v.data() + 3000 * 128, ref_last.data(), ref_last.size()) < 1e-5);  // the last 10 s, unpadded
    // several inputs into one file cannot be joined
    run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " -f " + LONG + " --no-pad -o build/x.npy");
    CHECK(r.status == 2);
    CHECK(r.output.find("directory") != std::string::npos);
}

#ifdef WHISPER_AUDIO_PNG
TEST_CASE("main: --png draws an image") {
    const std::string png = "build/test-cli.png";
    remove(png.c_str());
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " --png " + png);
    INFO(r.output);
    REQUIRE(r.status == 0);
    FILE * f = fopen(png.c_str(), "rb");
    REQUIRE(f);
    unsigned char magic[8];
    REQUIRE(fread(magic, 1, 8, f) == 8);
    fclose(f);
    CHECK(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0);
}
#endif

TEST_CASE("main: standard input and Ogg Vorbis") {
    // a WAV through a pipe (the reader sees no file size) gives the same rows as the file
    std::vector<int64_t> shape;
    const char * out = "build/test-cli-stdin.npy";
    remove(out);
    run_result r = run_main("-m " + MODEL + " --device cpu -f - -o " + std::string(out) + " < " + SPEECH);
    INFO(r.output);
    REQUIRE(r.status == 0);
    std::vector<float> got = npy_load_f32(out, &shape);
    std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(got.data(), ref.data(), ref.size()) < 1e-5);
    remove(out);
    r = run_main("-m " + MODEL + " -f - -f - < " + SPEECH);
    CHECK(r.status == 1);
    CHECK(r.output.find("only once") != std::string::npos);
#ifdef WHISPER_AUDIO_OGG
    // Ogg Vorbis is lossy: the embeddings are close to the WAV's, not equal
    got = run_npy("-f " + test_data("audio/speech_16k.ogg"), &shape);
    REQUIRE(shape == std::vector<int64_t>{1, 1500, 128});
    const double err = rel_l2(got.data(), ref.data(), ref.size());
    MESSAGE("main on speech_16k.ogg vs the WAV's float64 reference: relative L2 error " << err);
    CHECK(err < 0.05);
#else
    r = run_main("-m " + MODEL + " -f " + test_data("audio/speech_16k.ogg"));
    CHECK(r.status == 1);
    CHECK(r.output.find("ffmpeg") != std::string::npos);
#endif
}

TEST_CASE("main: a progress line on a terminal only, and never with --no-progress") {
    if (system("command -v script >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: util-linux's script (to run main on a pseudo-terminal) is not installed");
        return;
    }
    const char * bin = getenv("WA_MAIN") ? getenv("WA_MAIN") : "./main";
    const std::string args = std::string(bin) + " -m " + MODEL + " -f " + LONG + " --device cpu -b 1";
    auto on_terminal = [](const std::string & cmd) {       // stdout and stderr on a pseudo-terminal
        FILE * p = popen(("script -qec '" + cmd + "' /dev/null 2>&1").c_str(), "r");
        REQUIRE(p);
        std::string out;
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
        pclose(p);
        return out;
    };
    const std::string tty = on_terminal(args);
    INFO(tty);
    CHECK(tty.find("3/3 windows") != std::string::npos);
    CHECK(tty.find("windows/s") != std::string::npos);
    CHECK(on_terminal(args + " --no-progress").find("windows/s") == std::string::npos);
    CHECK(run_main(args.substr(args.find(" -m "))).output.find("windows/s") == std::string::npos);   // a pipe
}
