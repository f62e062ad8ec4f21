// The command line: runs ./main (or $WA_MAIN) as a user would, on good and bad input.
#include <doctest/doctest.h>

#include "test-util.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct run_result {
    int status;
    std::string output;    // stdout and stderr together
};

// A shell command's exit status (or 128 + signal) and its stdout and stderr together.
run_result run_shell(const std::string & cmd) {
    FILE * p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

std::string main_bin() { return getenv("WA_MAIN") ? getenv("WA_MAIN") : "./main"; }

run_result run_main(const std::string & args) { return run_shell(main_bin() + " " + args); }

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
    const std::vector<uint8_t> f16_file = read_bytes(dir + "long_70s_16k.npy");
    REQUIRE(f16_file.size() == 128 + (size_t)3 * 1500 * 128 * 2);
    const std::string header(f16_file.begin(), f16_file.begin() + 128);
    CHECK(header.find("'descr': '<f2'") != std::string::npos);
    CHECK(header.find("'shape': (3, 1500, 128)") != std::string::npos);
    CHECK(exists(dir + "speech_16k.npy"));
    // every value is the f32 run's value rounded to f16: within half an f16 ulp (2^-11
    // relative; the values here are far from f16's subnormals)
    std::vector<int64_t> shape;
    const std::vector<float> f32 = run_npy("-f " + LONG, &shape);
    REQUIRE(f32.size() == (size_t)3 * 1500 * 128);
    size_t bad = 0;
    for (size_t i = 0; i < f32.size(); i++) {
        const uint16_t h = (uint16_t)(f16_file[128 + 2 * i] | f16_file[128 + 2 * i + 1] << 8);
        const int e = (h >> 10) & 31, m = h & 1023;                        // IEEE half, decoded by hand
        const float v = (h >> 15 ? -1.0f : 1.0f) * (e ? std::ldexp(1.0f + m / 1024.0f, e - 15) : std::ldexp(m / 1024.0f, -14));
        bad += !(e < 31 && std::fabs(v - f32[i]) <= std::ldexp(std::fabs(f32[i]), -11) + 1e-7f);
    }
    CHECK(bad == 0);
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
    // drawn from the pipeline's own rows of the first window (no extra encode, not booked under
    // init): the same image as a pooled run's, which has to encode its window for it (issue 23: 18)
    const std::string pooled = "build/test-cli-pooled.png";
    r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " --pool mean --png " + pooled + " --json");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK(read_bytes(png) == read_bytes(pooled));
    CHECK(r.output.find("\"png\": 0.000") == std::string::npos);
    r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " --json");
    CHECK(r.output.find("\"png\": 0.000") != std::string::npos);
    remove(pooled.c_str());
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
    CHECK(tty.find("0/3 windows") != std::string::npos);              // a line at once, before the first window
    CHECK(on_terminal(args + " --no-progress").find("windows/s") == std::string::npos);
    CHECK(run_main(args.substr(args.find(" -m "))).output.find("windows/s") == std::string::npos);   // a pipe
}

// ---- hostile and careless use (issue 7): nothing lost, nothing half-written -------------

namespace {

// A fresh scratch directory under build/ (not /tmp, which may be mounted nodev), this
// process's own, removed when the test is done.
struct scratch {
    std::string dir;
    explicit scratch(const std::string & name) : dir("build/test-cli-" + name + "-" + std::to_string(getpid())) {
        REQUIRE(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
    }
    ~scratch() { if (system(("rm -rf " + dir).c_str()) != 0) fprintf(stderr, "cannot remove %s\n", dir.c_str()); }
};

void copy_file(const std::string & from, const std::string & to) { write_bytes(to, read_bytes(from)); }

// The files in dir whose names start with prefix.
std::vector<std::string> files_starting(const std::string & dir, const std::string & prefix) {
    run_result r = run_shell("ls -A " + dir);
    std::vector<std::string> found;
    size_t i = 0;
    while (i < r.output.size()) {
        size_t j = r.output.find('\n', i);
        if (j == std::string::npos) j = r.output.size();
        const std::string name = r.output.substr(i, j - i);
        if (name.rfind(prefix, 0) == 0) found.push_back(name);
        i = j + 1;
    }
    return found;
}

const std::vector<float> & speech_ref() {
    static const std::vector<float> ref = npy_load_f32(test_data("encoder/micro-80/speech_16k.last_hidden_state.npy"), nullptr);
    return ref;
}

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#endif
#endif
    return false;
}

} // namespace

TEST_CASE("main -o DIR/: inputs with one base name keep their relative paths; clashes are refused before any work") {
    const scratch sd("samename");
    const std::string & d = sd.dir;
    REQUIRE(system(("mkdir -p " + d + "/in/a " + d + "/in/b").c_str()) == 0);
    copy_file(SPEECH, d + "/in/a/x.wav");
    copy_file(SPEECH, d + "/in/b/x.wav");
    copy_file(test_data("audio/speech_16k.ogg"), d + "/in/a/x.ogg");
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + d + "/in/a/x.wav -f " + d + "/in/b/x.wav -o " + d + "/out/");
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (const char * sub : {"/out/a/x.npy", "/out/b/x.npy"}) {
        CAPTURE(sub);
        std::vector<int64_t> shape;
        std::vector<float> got = npy_load_f32(d + sub, &shape);
        REQUIRE(shape == std::vector<int64_t>{1, 1500, 128});
        CHECK(rel_l2(got, speech_ref()) < 1e-5);
    }
    // x.wav and x.ogg, or one file twice, would share an output: refused, and the output
    // already there is left as it was
    write_bytes(d + "/out/x.npy", {'o', 'l', 'd'});
    for (const std::string & second : {d + "/in/a/x.ogg", d + "/in/a/x.wav"}) {
        CAPTURE(second);
        r = run_main("-m " + MODEL + " --device cpu -f " + d + "/in/a/x.wav -f " + second + " -o " + d + "/out/");
        INFO(r.output);
        CHECK(r.status == 1);
        CHECK(r.output.find("would both be written to '" + d + "/out/x.npy'") != std::string::npos);
        CHECK(r.output.find("backend") == std::string::npos);          // refused before the encoder was made
        CHECK(read_bytes(d + "/out/x.npy") == std::vector<uint8_t>{'o', 'l', 'd'});
        CHECK(files_starting(d + "/out", "x.npy.").empty());
    }
    // an output that is one of the inputs
    copy_file(d + "/out/a/x.npy", d + "/in/a/y.npy");
    r = run_main("-m " + MODEL + " -f " + d + "/in/a/x.wav -o " + d + "/in/a/x.wav");
    CHECK(r.status == 1);
    CHECK(r.output.find("is one of the inputs") != std::string::npos);
}

TEST_CASE("main -o: standard output, a FIFO, a device node and a symlink") {
    const scratch sd("targets");
    const std::string & d = sd.dir;
    const std::string want = d + "/want.npy";
    REQUIRE(run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + want).status == 0);
    const std::vector<uint8_t> want_bytes = read_bytes(want);
    REQUIRE(want_bytes.size() == 128 + 1500 * 128 * 4);

    // standard output: the array alone on stdout (the summary goes to stderr), from a file
    // of known length and from a pipe of unknown length (spooled)
    run_result r = run_shell(main_bin() + " -m " + MODEL + " --device cpu -f " + SPEECH + " -o - > " + d + "/stdout.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("output: [1, 1500, 128]") != std::string::npos);
    CHECK(read_bytes(d + "/stdout.npy") == want_bytes);
    r = run_shell("cat " + SPEECH + " | " + main_bin() + " -m " + MODEL + " --device cpu -f - -o - | cat > " + d + "/pipe.npy");
    CHECK(r.status == 0);
    CHECK(read_bytes(d + "/pipe.npy") == want_bytes);
    r = run_main("-m " + MODEL + " -f " + SPEECH + " -o - --json");
    CHECK(r.status == 2);
    CHECK(r.output.find("--json") != std::string::npos);

    // a FIFO is written through (a reader in the background), and stays a FIFO
    REQUIRE(mkfifo((d + "/fifo").c_str(), 0644) == 0);
    r = run_shell("timeout 60 cat " + d + "/fifo > " + d + "/from-fifo.npy & " + main_bin() + " -m " + MODEL + " --device cpu -f " +
                  SPEECH + " -o " + d + "/fifo; s=$?; wait; exit $s");
    CHECK(r.status == 0);
    CHECK(read_bytes(d + "/from-fifo.npy") == want_bytes);
    struct stat st;
    REQUIRE(lstat((d + "/fifo").c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(files_starting(d, "fifo.").empty());

    // a symlink: the file it points to gets the array, the link stays a link
    write_bytes(d + "/target.npy", {'o', 'l', 'd'});
    REQUIRE(symlink("target.npy", (d + "/link.npy").c_str()) == 0);
    r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/link.npy");
    CHECK(r.status == 0);
    REQUIRE(lstat((d + "/link.npy").c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(read_bytes(d + "/target.npy") == want_bytes);

    // device nodes made here (never the machine's own /dev files): a twin of /dev/null takes
    // the array and stays a device; a twin of /dev/full fails with the reason
    if (mknod((d + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 ||
        mknod((d + "/full").c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
        MESSAGE("skipped the device-node cases: mknod needs root (" << strerror(errno) << ")");
        return;
    }
    r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/null");
    CHECK(r.status == 0);
    REQUIRE(lstat((d + "/null").c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/full");
    CHECK(r.status == 1);
    CHECK(r.output.find("No space left on device") != std::string::npos);
    REQUIRE(lstat((d + "/full").c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK(files_starting(d, "full.").empty());
    CHECK(files_starting(d, "null.").empty());
}

TEST_CASE("main: unique temporary names; two runs on one output leave one whole array") {
    const scratch sd("tmpnames");
    const std::string & d = sd.dir;
    write_bytes(d + "/notes.npy.tmp", {'m', 'i', 'n', 'e'});            // a user's own file
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/notes.npy");
    CHECK(r.status == 0);
    CHECK(read_bytes(d + "/notes.npy.tmp") == std::vector<uint8_t>{'m', 'i', 'n', 'e'});
    // two runs at once, different inputs, one output: the survivor is entirely one of them
    const std::string out = d + "/both.npy";
    r = run_shell(main_bin() + " -m " + MODEL + " --device cpu -t 1 -f " + SPEECH + " -o " + out + " & " + main_bin() +
                  " -m " + MODEL + " --device cpu -t 1 -f " + LONG + " -o " + out + " & wait");
    std::vector<int64_t> shape;
    std::vector<float> got = npy_load_f32(out, &shape);
    REQUIRE(shape.size() == 3);
    CHECK((shape[0] == 1 || shape[0] == 3));
    std::vector<float> ref_long = npy_load_f32(test_data("encoder/micro-80/long_70s_first30s.last_hidden_state.npy"), nullptr);
    CHECK(rel_l2(got.data(), shape[0] == 1 ? speech_ref().data() : ref_long.data(), 1500 * 128) < 1e-5);
    CHECK(files_starting(d, "both.npy.").empty());
}

TEST_CASE("main: a signal removes the temporary and keeps the old output") {
    const scratch sd("signal");
    const std::string & d = sd.dir;
    // 4 minutes of audio: 8 windows at -b 1, long enough to be caught in the middle
    std::vector<int> pcm(16000 * 240);
    for (size_t i = 0; i < pcm.size(); i++) pcm[i] = (int)(8000 * std::sin(0.05 * i));
    write_bytes(d + "/long.wav", wav_file(1, 1, 16000, 16, wav_s16(pcm)));
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        CAPTURE(sig);
        write_bytes(d + "/out.npy", {'o', 'l', 'd'});
        fflush(stdout);                                         // or the child would repeat our buffered output
        fflush(stderr);
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            const std::string bin = main_bin();
            execl(bin.c_str(), bin.c_str(), "-m", MODEL.c_str(), "--device", "cpu", "-t", "1", "-b", "1", "-f",
                  (d + "/long.wav").c_str(), "-o", (d + "/out.npy").c_str(), (char *)nullptr);
            _exit(127);
        }
        // wait for the temporary to hold a row (past the header), then signal
        bool seen = false;
        for (int i = 0; i < 3000 && !seen; i++) {
            for (const std::string & t : files_starting(d, "out.npy."))
                if (read_bytes(d + "/" + t).size() > 128) seen = true;
            if (!seen) usleep(10000);
        }
        CHECK(seen);
        kill(pid, sig);
        int st = 0;
        REQUIRE(waitpid(pid, &st, 0) == pid);
        CHECK(WIFSIGNALED(st));
        CHECK((WIFSIGNALED(st) && WTERMSIG(st) == sig));
        CHECK(files_starting(d, "out.npy.").empty());
        CHECK(read_bytes(d + "/out.npy") == std::vector<uint8_t>{'o', 'l', 'd'});
    }
}

TEST_CASE("main: non-finite output is an error, and nothing is written") {
    const scratch sd("nonfinite");
    const std::string & d = sd.dir;
    std::vector<uint8_t> model = read_bytes(MODEL);
    const size_t at = gguf_tensor_data_at(model, "encoder.layer_norm.weight");
    REQUIRE(at > 0);
    const float huge = 3e38f;                                    // finite, but LN's output overflows
    for (int i = 0; i < 128; i++) memcpy(&model[at + 4 * i], &huge, 4);
    write_bytes(d + "/huge.gguf", model);
    write_bytes(d + "/out.npy", {'o', 'l', 'd'});
    run_result r = run_main("-m " + d + "/huge.gguf --device cpu -f " + SPEECH + " -o " + d + "/out.npy");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("non-finite") != std::string::npos);
    CHECK(r.output.find(SPEECH) != std::string::npos);
    CHECK(read_bytes(d + "/out.npy") == std::vector<uint8_t>{'o', 'l', 'd'});
    CHECK(files_starting(d, "out.npy.").empty());
}

TEST_CASE("main: empty paths, --png failures and the old output") {
    const scratch sd("png");
    const std::string & d = sd.dir;
    for (const char * args : {"-o ''", "--png ''"}) {
        CAPTURE(args);
        run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " " + args);
        CHECK(r.status == 2);
        CHECK(r.output.find("empty path") != std::string::npos);
    }
#ifdef WHISPER_AUDIO_PNG
    write_bytes(d + "/out.npy", {'o', 'l', 'd'});
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/out.npy --png " + d + "/no/such/dir/x.png");
    CHECK(r.status == 1);
    CHECK(r.output.find("No such file or directory") != std::string::npos);
    CHECK(read_bytes(d + "/out.npy") == std::vector<uint8_t>{'o', 'l', 'd'});
    if (mknod((d + "/full").c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0) {   // the PNG fails after the run began
        r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/out.npy --png " + d + "/full");
        CHECK(r.status == 1);
        CHECK(r.output.find("No space left on device") != std::string::npos);
        CHECK(read_bytes(d + "/out.npy") == std::vector<uint8_t>{'o', 'l', 'd'});
        CHECK(files_starting(d, "out.npy.").empty());
    } else {
        MESSAGE("skipped the /dev/full case: mknod needs root");
    }
#endif
}

TEST_CASE("main: thousands of inputs, a huge batch and many threads need no more than the work") {
    const scratch sd("many");
    const std::string & d = sd.dir;
    // 60 inputs under an open-files limit of 24: each is opened only when its turn comes
    std::vector<int> pcm(1600);
    for (size_t i = 0; i < pcm.size(); i++) pcm[i] = (int)(6000 * std::sin(0.02 * i * (1 + i % 7)));
    write_bytes(d + "/a.wav", wav_file(1, 1, 16000, 16, wav_s16(pcm)));
    {
        FILE * f = fopen((d + "/list.txt").c_str(), "w");
        REQUIRE(f);
        for (int i = 0; i < 60; i++) fprintf(f, "%s/a.wav\n", d.c_str());
        fclose(f);
    }
    run_result r = run_shell("ulimit -n 24 && " + main_bin() + " -m " + MODEL + " --device cpu -b 64 --pool mean --list " +
                             d + "/list.txt -o " + d + "/pooled.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    std::vector<int64_t> shape;
    npy_load_f32(d + "/pooled.npy", &shape);
    CHECK(shape == std::vector<int64_t>{60, 128});
    if (sanitized()) {
        MESSAGE("skipped the memory-limit cases: the sanitizer reserves terabytes of address space");
        return;
    }
    // -b 4096 and -t 4096 on a 0.1 s clip, in 2 GB of address space
    for (const char * opt : {"-b 4096", "-t 4096"}) {
        CAPTURE(opt);
        r = run_shell("ulimit -v 2000000 && " + main_bin() + " -m " + MODEL + " --device cpu " + opt + " -f " + d + "/a.wav -o " +
                      d + "/one.npy");
        INFO(r.output);
        CHECK(r.status == 0);
        if (std::string(opt) == "-b 4096") CHECK(r.output.find("-b 4096: the encoder takes at most") != std::string::npos);
    }
}

TEST_CASE("main --version; --json carries the version, the settings and the positions that hold audio") {
    run_result r = run_main("--version");
    CHECK(r.status == 0);
    CHECK(r.output == std::string("whisper-audio ") + WHISPER_AUDIO_VERSION + "\n");
    CHECK(std::string(whisper_audio_version()) == WHISPER_AUDIO_VERSION);
    r = run_shell(main_bin() + " -m " + MODEL + " --device cpu -f " + SPEECH + " -f " + LONG + " --layer 1 --pool mean --json 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.rfind(std::string("{\"version\": \"") + WHISPER_AUDIO_VERSION + "\"", 0) == 0);
    CHECK(r.output.find("\"settings\": {\"layer\": 1, \"final_ln\": false, \"pool\": \"mean\", \"no_pad\": false, \"batch\": 8") !=
          std::string::npos);
    CHECK(r.output.find("\"audio_positions\": [351]") != std::string::npos);           // ceil(112259 / 320)
    CHECK(r.output.find("\"audio_positions\": [1500, 1500, 500]") != std::string::npos); // 70 s
}

TEST_CASE("main: an audio-LLM model gives its tokens; --no-projector the tower's output; bad files exit 1") {
    const std::string dir = "build/test-cli-towers";
    mkdir(dir.c_str(), 0755);
    const std::string out = dir + "/out.npy";
    for (const char * name : {"qwen2a", "voxtral", "ultravox", "af3"}) {
        const std::string model = test_data(std::string("towers/") + name + ".mmproj.gguf");
        const std::string projector = std::string(name) == "af3" ? "musicflamingo" : name;   // llama.cpp's name for it
        remove(out.c_str());
        run_result r = run_main("-m " + model + " -f " + SPEECH + " -o " + out + " --device cpu -t 2 --json");
        REQUIRE_MESSAGE(r.status == 0, r.output);
        CHECK(r.output.find("\"projector\": \"" + projector + "\", \"tokens\": true") != std::string::npos);
        std::vector<int64_t> shape, ref_shape;
        std::vector<float> got = npy_load_f32(out, &shape);
        std::vector<float> ref = npy_load_f32(test_data(std::string("towers/") + name + ".speech_16k.audio.npy"), &ref_shape);
        REQUIRE(shape.size() == 2);
        CHECK(shape[1] == 32);
        CHECK(shape[0] == (std::string(name) == "voxtral" ? 375 : ref_shape[0]));
        REQUIRE(got.size() >= ref.size());
        CHECK(rel_l2(got.data(), ref.data(), ref.size()) < 1e-5);

        r = run_main("-m " + model + " -f " + SPEECH + " -o " + out + " --device cpu -t 2 --no-projector");
        REQUIRE_MESSAGE(r.status == 0, r.output);
        got = npy_load_f32(out, &shape);
        REQUIRE(shape.size() == 2);
        CHECK(shape[1] == 64);
        CHECK(shape[0] == (std::string(name) == "qwen2a" || std::string(name) == "af3" ? 175 : std::string(name) == "voxtral" ? 1500 : 351));
    }
    // two inputs: one array each, so a directory
    run_result r = run_main("-m " + test_data("towers/qwen2a.mmproj.gguf") + " -f " + SPEECH + " -f " + SPEECH + " -o " + out);
    CHECK(r.status == 2);
    CHECK(r.output.find("give -o a directory") != std::string::npos);
    // --no-projector on a Whisper model, and with the encoder's own options
    r = run_main("-m " + MODEL + " -f " + SPEECH + " --no-projector");
    CHECK(r.status == 2);
    CHECK(r.output.find("without an audio-LLM projector") != std::string::npos);
    r = run_main("-m " + test_data("towers/qwen2a.mmproj.gguf") + " -f " + SPEECH + " --no-projector --layer 1");
    CHECK(r.status == 2);
    // a projector whose shape disagrees with the tower: one line, exit 1, no output
    std::vector<uint8_t> b = read_bytes(test_data("towers/voxtral.mmproj.gguf"));
    const std::string key = "clip.audio.projection_dim";
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    *(it + key.size() + 4) = 31;                                        // 32 -> 31
    const std::string bad = dir + "/bad.mmproj.gguf";
    write_bytes(bad, b);
    remove(out.c_str());
    r = run_main("-m " + bad + " -f " + SPEECH + " -o " + out);
    CHECK(r.status == 1);
    CHECK_MESSAGE(r.output.find("error: " + bad + ": tensor 'mm.a.mlp.1.weight' has dims [256, 32], the hyperparameters need [256, 31]")
                  != std::string::npos, r.output);
    CHECK(!exists(out));
    remove(bad.c_str());
}

TEST_CASE("main: Qwen2-Audio reads an input only as far as its first 30 s and says so; 320 samples give (0, width)") {
    const std::string dir = "build/test-cli-towers-used/";
    const std::string model = "build/tower-qwen2a-f32.gguf";
    // 70 s: a note naming the input and what was kept; the JSON's coverage is the 30 s encoded
    run_result r = run_main("-m " + model + " -f " + LONG + " -o " + dir + " --device cpu -t 2 --json");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK_MESSAGE(r.output.find("main: '" + LONG + "': 70.000 s; qwen2a keeps its first 30 s") != std::string::npos, r.output);
    CHECK(r.output.find("\"seconds\": 30.000000, \"seconds_encoded\": 30.000000, \"windows\": 1") != std::string::npos);
    // from standard input too (the length not known ahead): the rest is not read
    r = run_main("-m " + model + " -f - -o " + dir + "stdin.npy --device cpu -t 2 < " + LONG);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK(r.output.find("; qwen2a keeps its first 30 s (its processor's rule): the rest is not read") != std::string::npos);
    std::vector<int64_t> shape;
    npy_load_f32(dir + "stdin.npy", &shape);
    CHECK(shape == std::vector<int64_t>{750, 32});
    // 320 samples: no tokens (the model's own output for it), alone and after another input alike
    const std::string tiny = dir + "tiny.wav";
    decoded_audio a = decode_file(SPEECH);
    REQUIRE(a.ok);
    std::vector<int> s16;
    for (int i = 0; i < 320; i++) s16.push_back((int)lrintf(a.pcm[i] * 32767.0f) & 0xffff);
    mkdir(dir.c_str(), 0755);
    write_bytes(tiny, wav_file(1, 1, 16000, 16, wav_s16(s16)));
    for (const std::string & files : {"-f " + tiny, "-f " + SPEECH + " -f " + tiny}) {
        r = run_main("-m " + model + " " + files + " -o " + dir + "out/ --device cpu -t 2");
        REQUIRE_MESSAGE(r.status == 0, r.output);
        npy_load_f32(dir + "out/tiny.npy", &shape);
        CHECK(shape == std::vector<int64_t>{0, 32});
    }
}

TEST_CASE("main: --device takes cpu, cuda, auto and lists of GPUs; bad lists are refused before any work") {
    for (const char * bad : {"cuda:", "cuda:0,0", "cuda:x", "cuda:-1", "cuda:1,", "gpu", "cuda:0 1"}) {
        CAPTURE(bad);
        run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " --device '" + bad + "'");
        CHECK(r.status == 2);
        CHECK(r.output.find("bad value") != std::string::npos);
    }
    if (no_gpu()) {       // without a device, asking for GPUs fails with a message, exit 1
        for (const char * d : {"cuda:all", "cuda:0,1"}) {
            CAPTURE(d);
            run_result r = run_main("-m " + MODEL + " -f " + SPEECH + " --device " + d);
            CHECK(r.status == 1);
            CHECK(r.output.find("error:") != std::string::npos);
        }
    }
}

TEST_CASE("main: no output may be the model, a --list file, an input or another output; refused before any work") {
    const scratch sd("collide");
    const std::string & d = sd.dir;
    const std::string model = d + "/model.gguf";
    copy_file(MODEL, model);
    const std::vector<uint8_t> model_bytes = read_bytes(model);
    REQUIRE(link(model.c_str(), (d + "/hard.npy").c_str()) == 0);
    REQUIRE(symlink("model.gguf", (d + "/soft.npy").c_str()) == 0);
    write_bytes(d + "/list.txt", std::vector<uint8_t>(SPEECH.begin(), SPEECH.end()));
    const std::vector<uint8_t> list_bytes = read_bytes(d + "/list.txt");
    const std::string base = "-m " + model + " --device cpu --no-progress ";
    struct clash { std::string args, message; };
    const clash cases[] = {
        {"-f " + SPEECH + " -o " + model, "the output '" + model + "' is the model"},
        {"-f " + SPEECH + " -o " + d + "/hard.npy", "is the model"},                  // a hard link to it
        {"-f " + SPEECH + " -o " + d + "/soft.npy", "is the model"},                  // a symlink to it
        {"-f " + SPEECH + " -o " + d + "/../" + d.substr(6) + "/model.gguf", "is the model"},
        {"--list " + d + "/list.txt -o " + d + "/list.txt", "is the --list file"},
        {"-f " + SPEECH + " -o " + d + "/x.npy --png " + model, "the --png image '" + model + "' is the model"},
        {"-f " + SPEECH + " -o " + d + "/x.npy --png " + d + "/./x.npy", "are the same file"},
        {"-f " + SPEECH + " -o " + d + "/out/ --png " + d + "/out/speech_16k.npy", "are the same file"},
        {"-f " + SPEECH + " -o " + d + "/y.npy --png " + SPEECH, "is one of the inputs"},
    };
    for (const clash & c : cases) {
#ifndef WHISPER_AUDIO_PNG
        if (c.args.find("--png") != std::string::npos) continue;     // a build without stb_image_write refuses --png first
#endif
        CAPTURE(c.args);
        run_result r = run_main(base + c.args);
        INFO(r.output);
        CHECK(r.status == 1);
        CHECK(r.output.find(c.message) != std::string::npos);
        CHECK(r.output.find("main: model") == std::string::npos);        // before the model was loaded
        CHECK(read_bytes(model) == model_bytes);
        CHECK(read_bytes(d + "/list.txt") == list_bytes);
        CHECK(!exists(d + "/x.npy"));
        CHECK(!exists(d + "/out"));
        CHECK(files_starting(d, "model.gguf.").empty());
    }
    // the model's own directory is fine as a place for outputs of other names
    run_result r = run_main(base + "-f " + SPEECH + " -o " + d + "/emb.npy");
    CHECK(r.status == 0);
}

TEST_CASE("main: a failed run leaves no directories it made under -o DIR/") {
    const scratch sd("dirs");
    const std::string & d = sd.dir;
    write_bytes(d + "/notes.wav", {'n', 'o', 't', ' ', 'a', 'u', 'd', 'i', 'o'});
    REQUIRE(system(("mkdir -p " + d + "/in/a " + d + "/in/b").c_str()) == 0);
    copy_file(SPEECH, d + "/in/a/x.wav");
    copy_file(d + "/notes.wav", d + "/in/b/y.wav");
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + d + "/in/a/x.wav -f " + d + "/in/b/y.wav -o " + d + "/new/deeper/");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(!exists(d + "/new"));
    // a directory that was there before stays
    REQUIRE(mkdir((d + "/mine").c_str(), 0755) == 0);
    r = run_main("-m " + MODEL + " --device cpu -f " + d + "/in/a/x.wav -f " + d + "/in/b/y.wav -o " + d + "/mine/");
    CHECK(r.status == 1);
    CHECK(exists(d + "/mine"));
    CHECK(!exists(d + "/mine/a"));
}

TEST_CASE("main -o /dev/stdout into a pipe is -o -") {
    const scratch sd("devstdout");
    const std::string & d = sd.dir;
    REQUIRE(run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -o " + d + "/want.npy").status == 0);
    run_result r = run_shell("{ " + main_bin() + " -m " + MODEL + " --device cpu -f " + SPEECH + " -o /dev/stdout; echo $? > " + d +
                             "/rc; } | cat > " + d + "/pipe.npy");
    INFO(r.output);
    CHECK(read_bytes(d + "/rc") == std::vector<uint8_t>{'0', '\n'});
    CHECK(read_bytes(d + "/pipe.npy") == read_bytes(d + "/want.npy"));
    CHECK(r.output.find("output: [1, 1500, 128]") != std::string::npos);     // the summary on stderr
}

TEST_CASE("main: a file cut short is encoded as far as it goes, with one warning line naming it and the length") {
    const scratch sd("cutshort");
    const std::string & d = sd.dir;
    const std::vector<uint8_t> wav = read_bytes(SPEECH);
    write_bytes(d + "/cut.wav", std::vector<uint8_t>(wav.begin(), wav.begin() + 100044));
    run_result r = run_main("-m " + MODEL + " --device cpu --no-progress -f " + d + "/cut.wav -o " + d + "/cut.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    const std::string line = "warning: " + d + "/cut.wav: the input ends after 3.125 s of audio, but its header says 7.016 s";
    CHECK(r.output.find(line) != std::string::npos);
    CHECK(r.output.find(line) == r.output.rfind("warning:"));        // once
    std::vector<int64_t> shape;
    npy_load_f32(d + "/cut.npy", &shape);
    CHECK(shape == std::vector<int64_t>{1, 1500, 128});
    r = run_main("-m " + MODEL + " --device cpu --no-progress -f " + SPEECH + " -o " + d + "/whole.npy");
    CHECK(r.output.find("warning") == std::string::npos);
}

TEST_CASE("main --json: valid JSON for a name that is not UTF-8; the threads used; f32 on the CPU") {
    const scratch sd("json");
    const std::string & d = sd.dir;
    const std::string odd = d + "/caf\xe9-\xff.wav";                    // Latin-1 bytes, and one no encoding has
    copy_file(SPEECH, odd);
    const std::string check = d + "/check.py";
    const std::string py = "import json, os, sys\n"
                           "d = json.load(sys.stdin)\n"
                           "print('path-ok' if os.fsencode(d['files'][0]['path']) == sys.argv[1].encode('latin-1') else 'path-bad')\n"
                           "print('threads', d['settings']['threads'], 'dtype', d['settings']['dtype'])\n";
    write_bytes(check, std::vector<uint8_t>(py.begin(), py.end()));
    run_result r = run_shell(main_bin() + " -m " + MODEL + " --device cpu -t 4096 --no-progress -f '" + odd + "' --json 2>/dev/null | python3 " +
                             check + " \"$(printf '%s' '" + odd + "' | python3 -c 'import sys; print(sys.stdin.buffer.read().decode(\"latin-1\"), end=\"\")')\"");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("path-ok") != std::string::npos);
    const long hw = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(r.output.find("threads " + std::to_string(hw) + " dtype f32") != std::string::npos);
    r = run_main("-m " + MODEL + " --device cpu -t 4096 --no-progress -f " + SPEECH);
    CHECK(r.output.find("main: backend cpu, " + std::to_string(hw) + " threads") != std::string::npos);
}

TEST_CASE("main --list: blanks at the end of a line are part of the file name") {
    const scratch sd("listblank");
    const std::string & d = sd.dir;
    copy_file(SPEECH, d + "/x.wav ");
    const std::string list = d + "/x.wav \n\n   \n# note\n";
    write_bytes(d + "/list.txt", std::vector<uint8_t>(list.begin(), list.end()));
    run_result r = run_main("-m " + MODEL + " --device cpu --no-progress --list " + d + "/list.txt -o " + d + "/x.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("'" + d + "/x.wav ': wav pcm s16") != std::string::npos);
}

// ---- corpora (issue 26): bad files skipped, quiet and verbose, positional inputs ---------

#ifdef WHISPER_AUDIO_OGG   // its damaged file is an Ogg Vorbis stream
namespace {

// speech_16k.ogg with 2000 bytes at 85% of it scrambled: its header reads, and decoding fails
// after 5.2 s of audio, when main has pushed its first 4 s block into the pipeline.
void write_late_damaged_ogg(const std::string & path) {
    std::vector<uint8_t> b = read_bytes(test_data("audio/speech_16k.ogg"));
    const size_t at = b.size() * 85 / 100;
    for (size_t i = at; i < at + 2000 && i < b.size(); i++) b[i] = (uint8_t)(i * 131);
    write_bytes(path, b);
}

} // namespace

TEST_CASE("main without -o says that nothing was written; the headers-read count after a bad header") {
    const scratch sd("first-hour");
    const std::string & d = sd.dir;
    run_result r = run_main("-m " + MODEL + " --device cpu --no-progress -f " + SPEECH);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("-> nowhere (no -o) rows 0-0") != std::string::npos);
    CHECK(r.output.find("main: no -o given: the embeddings were computed and not written") != std::string::npos);
    // 20 inputs, the last a bad header, no --keep-going: 19 headers read, not 20
    write_bytes(d + "/bad.wav", std::vector<uint8_t>{'R', 'I', 'F', 'F', 0, 0, 0, 0});
    std::string files;
    for (int i = 0; i < 19; i++) files += " " + SPEECH;
    r = run_main("-m " + MODEL + " --device cpu --no-progress" + files + " " + d + "/bad.wav -o " + d + "/x.npy");
    CHECK(r.status == 1);
    CHECK(r.output.find("main: 20 inputs, 19 with their headers read") != std::string::npos);
}

TEST_CASE("main --keep-going: a file that fails is reported and skipped, the others written, exit 3; --json lists it") {
    const scratch sd("keepgoing");
    const std::string & d = sd.dir;
    const std::string text = d + "/text-\xff.wav", late = d + "/late.ogg", empty = d + "/empty.wav";
    write_bytes(text, {'h', 'e', 'l', 'l', 'o', '\n'});
    write_late_damaged_ogg(late);
    write_bytes(empty, wav_file(1, 1, 16000, 16, {}));
    const std::string good = "--device cpu -b 1 --no-progress " + SPEECH + " " + LONG;
    const std::string all = "--device cpu -b 1 --no-progress " + SPEECH + " '" + text + "' " + late + " " + empty + " " + LONG;

    // without it: the first bad file stops the run (exit 1), and --json still prints one document
    run_result r = run_shell(main_bin() + " -m " + MODEL + " " + all + " -o " + d + "/stop.npy --json 2>/dev/null | python3 -c "
                             "'import json, sys; d = json.load(sys.stdin); print(\"status\", d[\"status\"], \"not a WAV\" in d[\"error\"])'");
    INFO(r.output);
    CHECK(r.output.find("status 1 True") != std::string::npos);
    CHECK(!exists(d + "/stop.npy"));
    r = run_main("-m " + MODEL + " " + all + " -o " + d + "/stop.npy");
    CHECK(r.status == 1);

    // one array: the good files' rows, as a run of them alone gives them
    r = run_main("-m " + MODEL + " " + good + " -o " + d + "/good.npy");
    REQUIRE(r.status == 0);
    r = run_main("-m " + MODEL + " " + all + " --keep-going -o " + d + "/all.npy");
    INFO(r.output);
    CHECK(r.status == 3);
    CHECK(read_bytes(d + "/all.npy") == read_bytes(d + "/good.npy"));
    for (const char * what : {"not a WAV file", "corrupt Ogg Vorbis stream", "no audio samples"}) {
        CAPTURE(what);
        const size_t at = r.output.find(what);
        REQUIRE(at != std::string::npos);
        const size_t bol = r.output.rfind('\n', at) + 1, eol = r.output.find('\n', at);
        CHECK(r.output.compare(bol, 7, "error: ") == 0);                           // one line each
        CHECK(r.output.substr(bol, eol - bol).find("skipped") != std::string::npos);
    }
    CHECK(r.output.find("3 of 5 inputs failed") != std::string::npos);
    CHECK(r.output.find("encode ") != std::string::npos);                          // the summary's wording stays
    CHECK(r.output.find(" ms per window, ") != std::string::npos);
    CHECK(r.output.find(LONG + ": 70.000 s, 3 windows -> " + d + "/all.npy rows 1-3") != std::string::npos);

    // one .npy per input: the good ones; --json: valid, the failed ones with their messages,
    // the name that is not UTF-8 as os.fsdecode has it
    const std::string py = d + "/check.py";
    const std::string src = "import json, os, sys\n"
                            "d = json.load(sys.stdin)\n"
                            "print('status', d['status'], 'files', len(d['files']), 'failed', len(d['failed']))\n"
                            "print('names-ok' if os.fsencode(d['failed'][0]['path']).endswith(b'text-\\xff.wav') else 'names-bad')\n"
                            "print('msg-ok' if 'not a WAV' in d['failed'][0]['error'] and 'Ogg' in d['failed'][1]['error'] else 'msg-bad')\n";
    write_bytes(py, std::vector<uint8_t>(src.begin(), src.end()));
    r = run_shell(main_bin() + " -m " + MODEL + " " + all + " --keep-going -o " + d + "/out/ --json 2>/dev/null | python3 " + py);
    INFO(r.output);
    CHECK(r.output.find("status 3 files 2 failed 3") != std::string::npos);
    CHECK(r.output.find("names-ok") != std::string::npos);
    CHECK(r.output.find("msg-ok") != std::string::npos);
    const std::string written = run_shell("cd " + d + "/out && find . -type f | sed 's,.*/,,' | sort").output;
    CHECK(written == "long_70s_16k.npy\nspeech_16k.npy\n");                   // no temporaries, no bad files

    // non-finite output is the file's failure too: every input fails, exit 3, nothing written
    std::vector<uint8_t> model = read_bytes(MODEL);
    const size_t at = gguf_tensor_data_at(model, "encoder.layer_norm.weight");
    REQUIRE(at > 0);
    const float huge = 3e38f;
    for (int i = 0; i < 128; i++) memcpy(&model[at + 4 * i], &huge, 4);
    write_bytes(d + "/huge.gguf", model);
    r = run_main("-m " + d + "/huge.gguf --device cpu --keep-going -f " + SPEECH + " -o " + d + "/nan/");
    INFO(r.output);
    CHECK(r.status == 3);
    CHECK(r.output.find("non-finite") != std::string::npos);
    CHECK(!exists(d + "/nan/speech_16k.npy"));
}
#endif

TEST_CASE("main -q: errors only; -v: a line per input beyond 16; --progress: lines with windows/s and an ETA on a pipe") {
    const scratch sd("quiet");
    const std::string & d = sd.dir;
    const std::vector<uint8_t> wav = read_bytes(SPEECH);
    write_bytes(d + "/cut.wav", std::vector<uint8_t>(wav.begin(), wav.begin() + 100044));   // a warning
    run_result r = run_main("-m " + MODEL + " --device cpu -q -f " + d + "/cut.wav -o " + d + "/cut.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.empty());
    CHECK(exists(d + "/cut.npy"));
    r = run_main("-m " + MODEL + " --device cpu -q -f " + d + "/missing.wav -o " + d + "/m.npy");
    CHECK(r.status == 1);
    CHECK(r.output.rfind("error: ", 0) == 0);
    CHECK(r.output.find("main:") == std::string::npos);

    // 20 inputs: one line for them all, unless -v
    std::string files;
    for (int i = 0; i < 20; i++) files += " " + SPEECH;
    r = run_main("-m " + MODEL + " --device cpu --pool mean --no-progress" + files + " -o " + d + "/p.npy");
    CHECK(r.status == 0);
    CHECK(r.output.find("20 inputs") != std::string::npos);
    CHECK(r.output.find("wav pcm s16") == std::string::npos);
    r = run_main("-m " + MODEL + " --device cpu --pool mean --no-progress -v" + files + " -o " + d + "/p.npy");
    CHECK(r.status == 0);
    size_t n = 0;
    for (size_t at = 0; (at = r.output.find("wav pcm s16", at)) != std::string::npos; at++) n++;
    CHECK(n == 20);

    r = run_main("-m " + MODEL + " --device cpu -b 1 --progress -f " + LONG);
    INFO(r.output);
    CHECK(r.output.find("main: 3/3 windows, ") != std::string::npos);
    CHECK(r.output.find(" windows/s, ETA 0:00:00") != std::string::npos);
    CHECK(r.output.find('\r') == std::string::npos);                    // lines, not a redrawn one
}

TEST_CASE("main: audio files as arguments, --opt=value for every option, '--'; --keep-ext for x.wav and x.snd") {
    const scratch sd("positional");
    const std::string & d = sd.dir;
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + SPEECH + " -f " + LONG + " -o " + d + "/a.npy");
    REQUIRE(r.status == 0);
    r = run_main("--model=" + MODEL + " --device=cpu --batch=2 --threads=2 --outtype=f32 " + SPEECH + " " + LONG + " --output=" + d + "/b.npy");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(read_bytes(d + "/a.npy") == read_bytes(d + "/b.npy"));
    copy_file(SPEECH, d + "/-dash.wav");
    r = run_main("-m " + MODEL + " --device cpu -o " + d + "/c.npy -- " + d + "/-dash.wav");
    CHECK(r.status == 0);
    r = run_main("-m " + MODEL + " --json=yes " + SPEECH);
    CHECK(r.status == 2);
    CHECK(r.output.find("--json takes no value") != std::string::npos);
    r = run_main("-m " + MODEL + " --layer=x " + SPEECH);
    CHECK(r.status == 2);
    CHECK(r.output.find("bad value 'x' for --layer") != std::string::npos);

    copy_file(SPEECH, d + "/x.wav");
    copy_file(SPEECH, d + "/x.snd");          // a WAV under another extension: formats go by content
    r = run_main("-m " + MODEL + " --device cpu " + d + "/x.wav " + d + "/x.snd -o " + d + "/out/");
    CHECK(r.status == 1);
    CHECK(r.output.find("(--keep-ext keeps their extensions)") != std::string::npos);
    r = run_main("-m " + MODEL + " --device cpu --keep-ext " + d + "/x.wav " + d + "/x.snd -o " + d + "/out/");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(exists(d + "/out/x.wav.npy"));
    CHECK(exists(d + "/out/x.snd.npy"));
    CHECK(!exists(d + "/out/x.npy"));
}

// Issue 22: each format has one reader, the library; a GGUF of any of them is written by it.
TEST_CASE("main --save-gguf: our GGUF of every model file, encoding bit for bit as its source") {
    auto npy = [](const std::string & model, const std::string & out) {
        const run_result r = run_main("-m " + model + " -f " + SPEECH + " -o " + out + " --device cpu --no-progress");
        REQUIRE_MESSAGE(r.status == 0, model << ": " << r.output);
        return read_bytes(out);
    };
    const std::string gguf = test_tmp("saved.gguf"), a = test_tmp("source.npy"), b = test_tmp("saved.npy");
    std::vector<std::string> sources;
    for (const char * f : {"micro-80-f16", "micro-80-q8_0", "micro-80-q5_1", "micro-80-q5_0", "micro-80-q4_1", "micro-80-q4_0",
                           "micro-128-q8_0"})
        sources.push_back(test_model_file(std::string("ggml/") + f + ".bin"));
    for (const char * d : {"micro-80-float32", "micro-80-float16", "micro-80-bfloat16", "micro-80-int8", "micro-80-int8_float16",
                           "micro-80-int16", "micro-128-int8"})
        sources.push_back(test_model_file(std::string("ct2/") + d));
    for (const char * t : {"qwen2a", "voxtral", "ultravox", "af3"}) sources.push_back(test_data(std::string("towers/") + t + ".mmproj.gguf"));
    for (const std::string & src : sources) {
        CAPTURE(src);
        REQUIRE_MESSAGE(exists(src), src << TEST_MODEL_FILE_HINT);
        const run_result r = run_main("-m " + src + " --save-gguf " + gguf);
        REQUIRE_MESSAGE(r.status == 0, r.output);
        CHECK(npy(src, a) == npy(gguf, b));
        // quantised blocks stay blocks: no larger than the source
        if (src.find("-q") != std::string::npos) CHECK(read_bytes(gguf).size() < read_bytes(src).size());
    }
    // the converter's GGUF of a Hugging Face checkpoint (and of a tower) comes back byte for byte
    for (const std::string & src : {std::string("build/micro-80-f32.gguf"), std::string("build/micro-128-bf16.gguf"),
                                    std::string("build/tower-voxtral-f32.gguf"), std::string("build/tower-ultravox-f32.gguf"),
                                    std::string("build/tower-af3-f32.gguf"), std::string("build/tower-glmasr-f32.gguf"),
                                    std::string("build/tower-minicpmo-f32.gguf"), std::string("build/tower-kimiaudio-f32.gguf"),
                                    std::string("build/tower-stepaudio2-f32.gguf"), std::string("build/tower-meralion-f32.gguf")}) {
        CAPTURE(src);
        const run_result r = run_main("-m " + src + " --save-gguf " + gguf);
        REQUIRE_MESSAGE(r.status == 0, r.output);
        CHECK(read_bytes(gguf) == read_bytes(src));
    }
    // what it refuses: audio options beside it, the model's own file, a directory; no temporary left
    run_result r = run_main("-m " + MODEL + " --save-gguf " + gguf + " -f " + SPEECH);
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.output.find("--save-gguf writes the model alone") != std::string::npos, r.output);
    r = run_main("-m " + MODEL + " --save-gguf " + MODEL);
    CHECK(r.status != 0);
    CHECK_MESSAGE(r.output.find("is the model") != std::string::npos, r.output);
    const std::string ct2 = test_model_file("ct2/micro-80-int8");
    r = run_main("-m " + ct2 + " --save-gguf " + ct2 + "/model.bin");
    CHECK(r.status != 0);
    r = run_main("-m " + MODEL + " --save-gguf /tmp");
    CHECK(r.status == 1);
    CHECK_MESSAGE(r.output.find("is a directory") != std::string::npos, r.output);
    const run_result left = run_shell("ls " + gguf + ".* 2>/dev/null | wc -l");
    CHECK(left.output == "0\n");
    remove(gguf.c_str());
    remove(a.c_str());
    remove(b.c_str());
}

namespace {

// main --stream's output: .npy arrays one after another (each of our 128-byte header, f32), each
// as [n_rows, n_state] floats; stops at the end or at a partial array.
std::vector<std::vector<float>> npy_stream_load(const std::string & path) {
    const std::vector<uint8_t> b = read_bytes(path);
    std::vector<std::vector<float>> arrays;
    size_t at = 0;
    while (at + 128 <= b.size() && memcmp(b.data() + at, "\x93NUMPY", 6) == 0) {
        const std::string h((const char *)b.data() + at + 10, 118);
        const size_t s = h.find("'shape': (");
        if (s == std::string::npos || h.find("'<f4'") == std::string::npos) break;
        size_t n = 1;
        for (const char * c = h.c_str() + s + 10; *c && *c != ')'; ) {
            char * end;
            n *= strtoull(c, &end, 10);
            c = end;
            while (*c == ',' || *c == ' ') c++;
        }
        if (at + 128 + n * 4 > b.size()) break;
        arrays.emplace_back(n);
        memcpy(arrays.back().data(), b.data() + at + 128, n * 4);
        at += 128 + n * 4;
    }
    return arrays;
}

// Waits up to timeout_s for path to hold `want` whole arrays; how many it holds.
size_t wait_for_arrays(const std::string & path, size_t want, double timeout_s) {
    size_t n = 0;
    for (int i = 0; i < (int)(timeout_s * 100) && (n = npy_stream_load(path).size()) < want; i++) usleep(10000);
    return n;
}

// The whole file's windows, as main writes them without --stream.
std::vector<std::vector<float>> whole_windows(const std::string & audio, size_t * n_windows) {
    const std::string out = "build/test-cli-stream-whole.npy";
    run_result r = run_main("-m " + MODEL + " --device cpu -f " + audio + " -o " + out);
    REQUIRE(r.status == 0);
    std::vector<int64_t> shape;
    const std::vector<float> all = npy_load_f32(out, &shape);
    REQUIRE(shape.size() == 3);
    *n_windows = (size_t)shape[0];
    std::vector<std::vector<float>> w;
    const size_t per = (size_t)shape[1] * shape[2];
    for (size_t i = 0; i < *n_windows; i++) w.emplace_back(all.begin() + i * per, all.begin() + (i + 1) * per);
    remove(out.c_str());
    return w;
}

} // namespace

TEST_CASE("main --stream: raw PCM on standard input in 20 ms pieces, each window's array out before the input ends, "
          "the whole file's bit for bit") {
    size_t n_windows = 0;
    const std::vector<std::vector<float>> want = whole_windows(LONG, &n_windows);   // 70 s: 3 windows
    REQUIRE(n_windows == 3);
    const decoded_audio longer = decode_file(LONG);
    REQUIRE(longer.ok);
    signal(SIGPIPE, SIG_IGN);           // a main that stops reading fails the test, not the test binary
    for (const char * raw : {"f32le", "s16le"}) {
        CAPTURE(raw);
        const std::string out = "build/test-cli-stream.npy", lines = "build/test-cli-stream.jsonl", log = "build/test-cli-stream.log";
        remove(out.c_str());
        FILE * w = popen((main_bin() + " -m " + MODEL + " --device cpu --stream --raw " + raw + " -f - -o " + out + " --json > " +
                          lines + " 2> " + log).c_str(), "w");
        REQUIRE(w);
        // 20 ms pieces at 50x real time; after 31 s of them, the first window's array is out while
        // the input is still open (its latency: the pipeline's own test)
        const size_t piece = 320, first = 31 * WHISPER_AUDIO_SAMPLE_RATE;
        const auto t0 = std::chrono::steady_clock::now();
        size_t arrays_before_end = 0;
        for (size_t at = 0; at < longer.pcm.size(); at += piece) {
            const size_t k = std::min(piece, longer.pcm.size() - at);
            if (strcmp(raw, "f32le") == 0) {
                REQUIRE(fwrite(longer.pcm.data() + at, 4, k, w) == k);
            } else {
                std::vector<int16_t> s16(k);      // the decoded s16 samples back to their integers
                for (size_t i = 0; i < k; i++) s16[i] = (int16_t)lrintf(longer.pcm[at + i] * 32768.0f);
                REQUIRE(fwrite(s16.data(), 2, k, w) == k);
            }
            fflush(w);
            if (at + k == first) arrays_before_end = wait_for_arrays(out, 1, 20.0);
            std::this_thread::sleep_until(t0 + std::chrono::microseconds((long long)((at + k) * 1e6 / WHISPER_AUDIO_SAMPLE_RATE / 50)));
        }
        const int st = pclose(w);
        INFO(std::string((const char *)read_bytes(log).data(), read_bytes(log).size()));
        REQUIRE(WIFEXITED(st));
        REQUIRE(WEXITSTATUS(st) == 0);
        CHECK(arrays_before_end >= 1);
        const std::vector<std::vector<float>> got = npy_stream_load(out);
        REQUIRE(got.size() == 3);
        for (size_t i = 0; i < 3; i++) CHECK(got[i] == want[i]);
        const std::vector<uint8_t> jl = read_bytes(lines);
        const std::string text(jl.begin(), jl.end());
        CHECK(text.find("{\"window\": 0, \"samples\": 480000, \"audio_positions\": 1500, \"rows\": 1500, \"width\": 128") == 0);
        CHECK(text.find("{\"done\": true, \"samples\": 1120000, \"windows\": 3, \"rows\": 4500") != std::string::npos);
        remove(out.c_str());
        remove(lines.c_str());
        remove(log.c_str());
    }
}

TEST_CASE("main --stream --follow: a WAV file that grows, each window's array out while it grows; it ends when the file "
          "stops growing") {
    size_t n_windows = 0;
    const std::vector<std::vector<float>> want = whole_windows(LONG, &n_windows);
    const std::vector<uint8_t> wav = read_bytes(LONG);
    const std::string grow = "build/test-cli-grow.wav", out = "build/test-cli-grow.npy", log = "build/test-cli-grow.log";
    remove(out.c_str());
    FILE * f = fopen(grow.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(fwrite(wav.data(), 1, 44, f) == 44);   // its header: the sizes are the whole file's, as a recorder may leave them
    fflush(f);
    FILE * m = popen((main_bin() + " -m " + MODEL + " --device cpu --follow 1.5 -f " + grow + " -o " + out + " 2> " + log).c_str(), "w");
    REQUIRE(m);
    // 0.5 s of audio every 5 ms up to 31 s; then, until the first window's array is out, 0.1 s every
    // 0.25 s (the file keeps growing well within --follow's 1.5 s however slow main is, a sanitizer's);
    // then the rest
    const size_t second = 2 * WHISPER_AUDIO_SAMPLE_RATE;       // bytes of 1 s of s16 mono
    size_t arrays_while_growing = 0;
    for (size_t at = 44; at < wav.size();) {
        const bool waiting = at - 44 >= 31 * second && arrays_while_growing == 0;
        const size_t k = std::min(waiting ? second / 10 : second / 2, wav.size() - at);
        REQUIRE(fwrite(wav.data() + at, 1, k, f) == k);
        fflush(f);
        at += k;
        if (waiting) arrays_while_growing = wait_for_arrays(out, 1, 0.25);
        else usleep(5000);
    }
    fclose(f);
    const auto t_last = std::chrono::steady_clock::now();
    const int st = pclose(m);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_last).count();
    const std::vector<uint8_t> lb = read_bytes(log);
    INFO(std::string(lb.begin(), lb.end()));
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    CHECK(arrays_while_growing >= 1);
    CHECK(waited >= 1.0);                               // it waited for more before it ended
    const std::vector<std::vector<float>> got = npy_stream_load(out);
    REQUIRE(got.size() == n_windows);
    for (size_t i = 0; i < n_windows; i++) CHECK(got[i] == want[i]);
    remove(grow.c_str());
    remove(out.c_str());
    remove(log.c_str());
}

TEST_CASE("main --stream: what it refuses, with a message") {
    struct { std::string args, says; int status; } cases[] = {
        {"-f " + SPEECH + " --raw s16le", "--raw reads headerless PCM as it comes: add --stream", 2},
        {"--stream -f " + SPEECH + " -f " + SPEECH, "takes one input", 2},
        {"--follow 1 -f -", "standard input ends when its writer closes it", 2},
        {"--follow 0 -f " + SPEECH, "bad value '0' for --follow", 2},
        {"--stream -f " + SPEECH + " -o build/", "not a directory", 2},
        {"--raw pcm --stream -f -", "bad value 'pcm' for --raw", 2},
    };
    for (const auto & c : cases) {
        CAPTURE(c.args);
        run_result r = run_main("-m " + MODEL + " " + c.args + " < /dev/null");
        CHECK(r.status == c.status);
        CHECK(r.output.find(c.says) != std::string::npos);
    }
    // a tower whose log-mel is one over the whole input: refused before any audio is read
    run_result r = run_main("-m build/tower-voxtral-f32.gguf --device cpu --stream -f - < /dev/null");
    CHECK(r.status == 2);
    CHECK(r.output.find("--stream: whisper_audio_can_stream: voxtral's tokens cannot stream: its log-mel is one over the "
                        "whole input") != std::string::npos);
    // an empty input
    r = run_main("-m " + MODEL + " --device cpu --stream --raw s16le -f - < /dev/null");
    CHECK(r.status == 1);
    CHECK(r.output.find("no audio samples") != std::string::npos);
}
