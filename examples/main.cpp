// main: audio files in, Whisper encoder embeddings out (.npy).
//
//   ./main -m model.gguf -f audio.wav [-f more.ogg ...] -o emb.npy
//
// Each file is cut into 30 s windows (the last one zero-padded, as transformers does);
// the windows of all files, in the order given, share batches. Audio is decoded, log-mel'd
// and encoded a batch at a time, and the output is written as it comes, so memory does
// not grow with the length of the input.
#include "vt.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <unistd.h>

#ifdef WHISPER_AUDIO_PNG
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#endif

// =====================================================================================
// command line
// =====================================================================================

struct params {
    std::string model;
    std::vector<std::string> files;
    std::string output;
    std::string outtype = "f32";
    std::string png;
    int n_threads = 0;            // 0: the library's default
    int batch = 8;
    std::string device = "auto";
    std::string dtype = "f16";
    int layer = -1;               // -1: the last layer
    bool final_ln = true;
    bool pool_mean = false;
    bool no_pad = false;
    bool json = false;
    bool progress = true;
};

static void print_usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL -f AUDIO [-f AUDIO ...] [options]\n"
            "\n"
            "Whisper encoder embeddings of audio files. By default one float32 .npy [n_windows, 1500, d_model]:\n"
            "every file is cut into 30 s windows (the last one zero-padded), one row per window.\n"
            "\n"
            "options:\n"
            "  -h, --help           show this help and exit\n"
            "  -m, --model FILE     model file (.gguf, from convert/convert-hf-to-gguf.py)\n"
            "  -f, --file FILE      audio file, WAV or OGG Vorbis, any rate and channels; '-' reads standard\n"
            "                       input; repeat for several files\n"
            "  --list FILE          read audio file names from FILE, one per line\n"
            "  -o, --output PATH    write the embeddings: PATH.npy, or one .npy per input when PATH ends in '/'\n"
            "                       or is a directory\n"
            "  --outtype T          f32 (default) or f16 for the .npy\n"
            "  --layer N            the hidden state after encoder layer N (0-based), without the final LayerNorm\n"
            "  --no-final-ln        the last layer's output before the final LayerNorm\n"
            "  --pool mean          one vector per window: the mean over the positions that cover audio\n"
            "  --no-pad             encode the last window (or a clip under 30 s) without its zero padding; each\n"
            "                       input becomes one [n_positions, d_model] array\n"
            "  --json               print a machine-readable summary on stdout (the human one goes to stderr)\n"
            "  --png FILE           draw the first window's log-mel and embedding as a PNG image\n"
            "  -t, --threads N      CPU threads for decoding, log-mel and the CPU backend (default: up to 8)\n"
            "  -b, --batch N        30 s windows per encoder call (default: 8)\n"
            "  --device D           cpu, cuda or auto (default: auto, CUDA when a GPU is present)\n"
            "  --dtype T            CUDA compute type: f16 or bf16 (default: f16)\n"
            "  --no-progress        no progress line on stderr (it shows only on a terminal anyway)\n",
            argv0);
}

static bool parse_int(const char * s, int lo, int hi, int * out) {
    char * end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool read_list(const char * path, std::vector<std::string> & files) {
    FILE * f = fopen(path, "r");
    if (!f) { fprintf(stderr, "error: cannot open list '%s': %s\n", path, strerror(errno)); return false; }
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        std::string s(line);
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
        if (!s.empty() && s[0] != '#') files.push_back(s);
    }
    fclose(f);
    return true;
}

// Returns 0 to go on, 1 after -h, -1 on a bad argument (message printed).
static int parse_args(int argc, char ** argv, params & p) {
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const char * v = nullptr;
        auto value = [&]() -> bool {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", arg.c_str()); return false; }
            v = argv[++i];
            return true;
        };
        auto choice = [&](std::string & dst, std::initializer_list<const char *> allowed) -> bool {
            if (!value()) return false;
            for (const char * a : allowed) if (strcmp(v, a) == 0) { dst = v; return true; }
            fprintf(stderr, "error: bad value '%s' for %s\n", v, arg.c_str());
            return false;
        };
        if (arg == "-h" || arg == "--help") { print_usage(argv[0]); return 1; }
        else if (arg == "--no-progress") p.progress = false;
        else if (arg == "--no-final-ln") p.final_ln = false;
        else if (arg == "--no-pad") p.no_pad = true;
        else if (arg == "--json") p.json = true;
        else if (arg == "-m" || arg == "--model") { if (!value()) return -1; p.model = v; }
        else if (arg == "-f" || arg == "--file") { if (!value()) return -1; p.files.push_back(v); }
        else if (arg == "--list") { if (!value() || !read_list(v, p.files)) return -1; }
        else if (arg == "-o" || arg == "--output") { if (!value()) return -1; p.output = v; }
        else if (arg == "--png") { if (!value()) return -1; p.png = v; }
        else if (arg == "--outtype") { if (!choice(p.outtype, {"f32", "f16"})) return -1; }
        else if (arg == "--device") { if (!choice(p.device, {"cpu", "cuda", "auto"})) return -1; }
        else if (arg == "--dtype") { if (!choice(p.dtype, {"f16", "bf16"})) return -1; }
        else if (arg == "--pool") { std::string m; if (!choice(m, {"mean"})) return -1; p.pool_mean = true; }
        else if (arg == "-t" || arg == "--threads" || arg == "-b" || arg == "--batch" || arg == "--layer") {
            int * dst = arg == "--layer" ? &p.layer : (arg == "-b" || arg == "--batch") ? &p.batch : &p.n_threads;
            if (!value() || !parse_int(v, arg == "--layer" ? 0 : 1, 4096, dst)) {
                if (v) fprintf(stderr, "error: bad value '%s' for %s\n", v, arg.c_str());
                return -1;
            }
        } else {
            fprintf(stderr, "error: unknown argument '%s'\n", arg.c_str());
            print_usage(argv[0]);
            return -1;
        }
    }
    if (p.model.empty()) { fprintf(stderr, "error: no model given (-m MODEL)\n"); print_usage(argv[0]); return -1; }
    if (p.files.empty()) { fprintf(stderr, "error: no audio file given (-f AUDIO)\n"); print_usage(argv[0]); return -1; }
#ifndef WHISPER_AUDIO_PNG
    if (!p.png.empty()) { fprintf(stderr, "error: --png needs stb_image_write (Debian's libstb-dev) at build time\n"); return -1; }
#endif
    return 0;
}

// =====================================================================================
// .npy output, written as rows come: a header with room for any shape, rewritten at the
// end; a temporary name renamed on success, so that an error leaves nothing behind
// =====================================================================================

struct npy_writer {
    std::string path, tmp;
    FILE * f = nullptr;
    bool f16 = false;
    size_t rows = 0;                // leading dimension so far
    bool done = false;              // finished and renamed
    std::vector<size_t> row_shape;  // the other dimensions
    static const size_t HEADER = 128;

    bool open(const std::string & p, bool half, std::vector<size_t> shape_of_row) {
        path = p;
        tmp = p + ".tmp";
        f16 = half;
        row_shape = shape_of_row;
        f = fopen(tmp.c_str(), "wb");
        if (!f) { fprintf(stderr, "error: cannot write '%s': %s\n", tmp.c_str(), strerror(errno)); return false; }
        return write_header();
    }
    bool write_header() {
        std::string dims = std::to_string(rows) + ",";
        for (size_t d : row_shape) dims += " " + std::to_string(d) + ",";
        if (row_shape.size() > 0) dims.pop_back();
        std::string h = std::string("{'descr': '") + (f16 ? "<f2" : "<f4") + "', 'fortran_order': False, 'shape': (" + dims + "), }";
        h.append(HEADER - 10 - 1 - h.size(), ' ');
        h += '\n';
        const uint16_t len = (uint16_t)h.size();
        return fseek(f, 0, SEEK_SET) == 0 && fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&len, 2, 1, f) == 1 &&
               fwrite(h.data(), 1, h.size(), f) == h.size() && fseek(f, 0, SEEK_END) == 0;
    }
    bool append(const float * data, size_t n_rows) {
        size_t n = n_rows;
        for (size_t d : row_shape) n *= d;
        bool ok;
        if (f16) {
            std::vector<uint16_t> h(n);
            vt_convert(h.data(), VT_TYPE_F16, data, VT_TYPE_F32, n);
            ok = fwrite(h.data(), 2, n, f) == n;
        } else {
            ok = fwrite(data, 4, n, f) == n;
        }
        if (!ok) fprintf(stderr, "error: writing '%s' failed: %s\n", tmp.c_str(), strerror(errno));
        rows += n_rows;
        return ok;
    }
    bool finish() {
        bool ok = write_header();
        ok = (fclose(f) == 0) && ok;
        f = nullptr;
        if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
            fprintf(stderr, "error: writing '%s' failed: %s\n", path.c_str(), strerror(errno));
            remove(tmp.c_str());
            return false;
        }
        done = true;
        return true;
    }
    void abandon() {
        if (f) { fclose(f); f = nullptr; remove(tmp.c_str()); }
    }
};

// =====================================================================================
// PNG: the log-mel over the embedding, time running left to right
// =====================================================================================

#ifdef WHISPER_AUDIO_PNG
// A blue-to-yellow ramp for values scaled to [0, 1].
static void colour(float x, uint8_t * rgb) {
    x = std::min(1.0f, std::max(0.0f, x));
    rgb[0] = (uint8_t)(255 * std::min(1.0f, 2.0f * x));
    rgb[1] = (uint8_t)(255 * x);
    rgb[2] = (uint8_t)(255 * std::max(0.0f, 1.0f - 2.0f * x) * 0.8f + 40 * x);
}

// mel [n_mels, 3000] (two frames to a pixel), emb [n_pos, d]; each panel scaled by its own range.
static bool write_png(const std::string & path, const float * mel, int n_mels, const float * emb, int n_pos, int d) {
    const int W = n_pos, gap = 4, H = n_mels + gap + d;
    std::vector<uint8_t> img((size_t)W * H * 3, 255);
    auto range = [](const float * v, size_t n, float & lo, float & hi) {
        lo = INFINITY; hi = -INFINITY;
        for (size_t i = 0; i < n; i++) { lo = std::min(lo, v[i]); hi = std::max(hi, v[i]); }
        if (hi <= lo) hi = lo + 1;
    };
    float lo, hi;
    range(mel, (size_t)n_mels * 2 * n_pos, lo, hi);
    for (int m = 0; m < n_mels; m++)                         // low frequencies at the bottom of the panel
        for (int x = 0; x < W; x++) {
            const float v = 0.5f * (mel[(size_t)m * 3000 + 2 * x] + mel[(size_t)m * 3000 + 2 * x + 1]);
            colour((v - lo) / (hi - lo), &img[((size_t)(n_mels - 1 - m) * W + x) * 3]);
        }
    // the embedding: clip at +-3 standard deviations
    double s = 0, s2 = 0;
    const size_t n = (size_t)n_pos * d;
    for (size_t i = 0; i < n; i++) { s += emb[i]; s2 += (double)emb[i] * emb[i]; }
    const float mean = (float)(s / n), sd = (float)std::sqrt(std::max(1e-12, s2 / n - (s / n) * (s / n)));
    for (int c = 0; c < d; c++)
        for (int x = 0; x < W; x++)
            colour((emb[(size_t)x * d + c] - mean) / (6 * sd) + 0.5f, &img[((size_t)(n_mels + gap + c) * W + x) * 3]);
    if (!stbi_write_png(path.c_str(), W, H, 3, img.data(), W * 3)) {
        fprintf(stderr, "error: cannot write '%s'\n", path.c_str());
        return false;
    }
    return true;
}
#endif

// =====================================================================================
// main
// =====================================================================================

static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static std::string json_escape(const std::string & s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", c); o += b; }
        else o += c;
    }
    return o;
}

static bool is_dir_output(const std::string & p) {
    struct stat st;
    return !p.empty() && (p.back() == '/' || (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)));
}

// The .npy name for an input in an output directory: its base name, extension replaced.
static std::string output_name(const std::string & dir, const std::string & input) {
    std::string base = input == "-" ? "stdin" : input.substr(input.find_last_of('/') + 1);
    const size_t dot = base.find_last_of('.');
    if (dot != std::string::npos && dot > 0) base.resize(dot);
    return dir + (dir.back() == '/' ? "" : "/") + base + ".npy";
}

// One input being read, and what has come out of it.
struct input {
    std::string path;
    whisper_audio_stream * stream = nullptr;
    whisper_audio_info info{};
    size_t samples = 0;           // 16 kHz samples read so far
    size_t first_row = 0, rows = 0, windows = 0;
};

// One window of a batch: where its samples came from.
struct window {
    size_t input;
    size_t samples;               // of audio in it (the rest is padding)
};

int main(int argc, char ** argv) {
    params p;
    const int rc = parse_args(argc, argv, p);
    if (rc != 0) return rc > 0 ? 0 : 2;
    FILE * human = p.json ? stderr : stdout;      // stdout carries only the JSON with --json
    const auto t_start = std::chrono::steady_clock::now();

    // model
    auto t0 = std::chrono::steady_clock::now();
    whisper_audio_model * model = whisper_audio_model_load(p.model.c_str());
    if (!model) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
    const whisper_audio_hparams & hp = *whisper_audio_model_hparams(model);
    const double load_ms = ms_since(t0);
    const char * wtype = hp.weight_type == 0 ? "f32" : hp.weight_type == 1 ? "f16" : "bf16";
    fprintf(stderr, "main: model '%s': n_mels %d, n_ctx %d, n_state %d, n_head %d, n_layer %d, n_ff %d, weights %s\n",
            p.model.c_str(), hp.n_mels, hp.n_ctx, hp.n_state, hp.n_head, hp.n_layer, hp.n_ff, wtype);

    bool ok = true;
    auto fail = [&](const char * what) { fprintf(stderr, "error: %s\n", what); ok = false; };
    if (p.layer >= hp.n_layer) {
        fprintf(stderr, "error: --layer %d: the model has layers 0 to %d\n", p.layer, hp.n_layer - 1);
        whisper_audio_model_free(model);
        return 2;
    }
    const bool per_file = is_dir_output(p.output);
    if (p.no_pad && !p.output.empty() && !per_file && p.files.size() > 1) {
        fprintf(stderr, "error: --no-pad makes one array per input: with %zu inputs, give -o a directory (ending in '/')\n",
                p.files.size());
        whisper_audio_model_free(model);
        return 2;
    }

    // inputs: all opened (headers checked) before any encoding, so that a bad file stops
    // the run before the expensive part
    t0 = std::chrono::steady_clock::now();
    std::vector<input> inputs(p.files.size());
    size_t stdin_uses = 0;
    for (size_t i = 0; i < inputs.size() && ok; i++) {
        inputs[i].path = p.files[i];
        if (p.files[i] == "-" && ++stdin_uses > 1) { fail("standard input ('-') can be read only once"); break; }
        inputs[i].stream = whisper_audio_stream_open(p.files[i].c_str(), &inputs[i].info);
        if (!inputs[i].stream) { fail(whisper_audio_last_error()); break; }
        const whisper_audio_info & in = inputs[i].info;
        if (in.frames >= 0)
            fprintf(stderr, "main: '%s': %s, %d Hz, %d channel%s, %.3f s\n", p.files[i].c_str(), in.format, in.sample_rate,
                    in.channels, in.channels == 1 ? "" : "s", (double)in.frames / in.sample_rate);
        else
            fprintf(stderr, "main: '%s': %s, %d Hz, %d channel%s, length not known ahead\n", p.files[i].c_str(), in.format,
                    in.sample_rate, in.channels, in.channels == 1 ? "" : "s");
    }
    double decode_ms = ms_since(t0);

    // encoder
    whisper_audio_encoder * enc = nullptr;
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    double init_ms = 0.0;
    if (ok) {
        ep.device = p.device == "cpu" ? WHISPER_AUDIO_DEVICE_CPU : p.device == "cuda" ? WHISPER_AUDIO_DEVICE_CUDA
                                                                                         : WHISPER_AUDIO_DEVICE_AUTO;
        ep.dtype = p.dtype == "bf16" ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
        if (p.n_threads > 0) ep.n_threads = p.n_threads;
        ep.max_batch = p.batch;
        ep.output_layer = p.layer;
        ep.final_ln = p.final_ln;
        t0 = std::chrono::steady_clock::now();
        enc = whisper_audio_encoder_init(model, ep);
        init_ms = ms_since(t0);
        if (!enc) fail(whisper_audio_last_error());
        else if (strcmp(whisper_audio_encoder_backend(enc), "cpu") == 0)
            fprintf(stderr, "main: backend cpu, %d threads, batch %d\n", ep.n_threads, ep.max_batch);
        else
            fprintf(stderr, "main: backend %s, %s, batch %d\n", whisper_audio_encoder_backend(enc), p.dtype.c_str(), ep.max_batch);
    }

    // outputs: one array, or one per input. A row is [1500, d] (a window), [d] (pooled), or
    // with --no-pad [d] per position.
    const size_t d = hp.n_state;
    const bool rows_are_positions = p.no_pad && !p.pool_mean;
    const std::vector<size_t> row_shape = p.pool_mean || rows_are_positions ? std::vector<size_t>{d}
                                                                            : std::vector<size_t>{(size_t)hp.n_ctx, d};
    std::vector<npy_writer> writers(per_file ? inputs.size() : (p.output.empty() ? 0 : 1));
    if (ok && !p.output.empty() && !per_file && !writers[0].open(p.output, p.outtype == "f16", row_shape)) ok = false;
    if (ok && per_file) {
        for (size_t i = 0; i < inputs.size() && ok; i++)
            if (!writers[i].open(output_name(p.output, p.files[i]), p.outtype == "f16", row_shape)) ok = false;
    }

    // batch by batch: read a window per slot, log-mel the slots in parallel, encode, write
    const int B = p.batch;
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES, out_win = (size_t)hp.n_ctx * d;
    std::vector<float> pcm(ok ? (size_t)B * WHISPER_AUDIO_N_SAMPLES : 0), mel(ok ? B * mel_win : 0), out(ok ? B * out_win : 0);
    std::vector<float> png_mel, png_emb;
    double mel_ms = 0.0, encode_ms = 0.0, sum = 0.0, sum2 = 0.0;
    float vmin = INFINITY, vmax = -INFINITY;
    size_t n_values = 0, n_nonfinite = 0, n_windows = 0, n_rows = 0, cur = 0;   // cur: the input being read
    size_t expected_windows = 0;                // for the progress line, when lengths are known
    for (const input & in : inputs)
        if (in.stream && in.info.frames >= 0)
            expected_windows += whisper_audio_n_windows((size_t)llround((double)in.info.frames * WHISPER_AUDIO_SAMPLE_RATE / in.info.sample_rate));
    const bool show_progress = p.progress && isatty(2);
    const auto t_work = std::chrono::steady_clock::now();

    // the rows of one encoded window into the statistics and the writer(s)
    auto emit = [&](const window & w, const float * emb, int n_pos) -> bool {
        input & in = inputs[w.input];
        std::vector<float> pooled;
        const float * rows = emb;
        size_t n_out_rows = rows_are_positions ? (size_t)n_pos : 1;
        if (p.pool_mean) {                      // the positions that cover audio: ceil(samples / 320)
            const int n_audio = std::max(1, std::min(n_pos, (int)((w.samples + 319) / 320)));
            pooled.assign(d, 0.0f);
            for (int t = 0; t < n_audio; t++)
                for (size_t c = 0; c < d; c++) pooled[c] += emb[(size_t)t * d + c];
            for (float & v : pooled) v /= n_audio;
            rows = pooled.data();
        }
        const size_t n = n_out_rows * (p.pool_mean ? d : rows_are_positions ? d : out_win);
        for (size_t i = 0; i < n; i++) {
            const float v = rows[i];
            if (!std::isfinite(v)) { n_nonfinite++; continue; }
            sum += v; sum2 += (double)v * v; vmin = std::min(vmin, v); vmax = std::max(vmax, v);
            n_values++;
        }
        if (in.rows == 0) in.first_row = per_file ? 0 : n_rows;
        in.rows += n_out_rows;
        in.windows++;
        n_rows += n_out_rows;
        n_windows++;
        npy_writer * wr = per_file ? &writers[w.input] : writers.empty() ? nullptr : &writers[0];
        return !wr || wr->append(rows, n_out_rows);
    };

    // the next window of audio into dst (zero-padded): 1, or 0 when every input is done, or -1
    auto next_window = [&](float * dst, window & w) -> int {
        while (cur < inputs.size()) {
            input & in = inputs[cur];
            size_t got = 0;
            while (got < WHISPER_AUDIO_N_SAMPLES) {
                const int64_t n = whisper_audio_stream_read(in.stream, dst + got, WHISPER_AUDIO_N_SAMPLES - got);
                if (n < 0) { fail(whisper_audio_last_error()); return -1; }
                if (n == 0) break;
                got += (size_t)n;
            }
            if (got == 0) {                     // this input is done
                if (in.samples == 0) {
                    fprintf(stderr, "error: %s: no audio samples\n", in.path.c_str());
                    ok = false;
                    return -1;
                }
                cur++;
                continue;
            }
            in.samples += got;
            std::fill(dst + got, dst + WHISPER_AUDIO_N_SAMPLES, 0.0f);
            w = {cur, got};
            if (got < WHISPER_AUDIO_N_SAMPLES) cur++; // a short window is the last one
            return 1;
        }
        return 0;
    };

    // log-mel of n windows (in parallel), encoded with n_frames frames each, rows emitted
    auto encode = [&](const window * ws, int n, const float * pcm_base, int n_frames) -> bool {
        auto t = std::chrono::steady_clock::now();
        if (!whisper_audio_log_mel_windows(model, pcm_base, (size_t)n * WHISPER_AUDIO_N_SAMPLES, n, mel.data(), ep.n_threads)) {
            fail(whisper_audio_last_error());
            return false;
        }
        if (!p.png.empty() && n_windows == 0) png_mel.assign(mel.begin(), mel.begin() + mel_win);
        if (n_frames < WHISPER_AUDIO_N_FRAMES) {  // keep the first n_frames of each mel row, packed
            for (int b = 0; b < n; b++)
                for (int m = 0; m < hp.n_mels; m++)
                    memmove(mel.data() + ((size_t)b * hp.n_mels + m) * n_frames, mel.data() + b * mel_win + (size_t)m * WHISPER_AUDIO_N_FRAMES,
                            n_frames * sizeof(float));
        }
        mel_ms += ms_since(t);
        t = std::chrono::steady_clock::now();
        if (!whisper_audio_encode_mel_frames(enc, mel.data(), n, n_frames, out.data())) { fail(whisper_audio_last_error()); return false; }
        encode_ms += ms_since(t);
        const int n_pos = n_frames / 2;
        if (!p.png.empty() && n_windows == 0) png_emb.assign(out.begin(), out.begin() + (size_t)n_pos * d);
        for (int b = 0; b < n; b++)
            if (!emit(ws[b], out.data() + (size_t)b * n_pos * d, n_pos)) { ok = false; return false; }
        if (show_progress) {
            const double s = ms_since(t_work) / 1000.0;
            if (expected_windows >= n_windows)
                fprintf(stderr, "\rmain: %zu/%zu windows, %.1f windows/s   ", n_windows, expected_windows, n_windows / s);
            else
                fprintf(stderr, "\rmain: %zu windows, %.1f windows/s   ", n_windows, n_windows / s);
        }
        return true;
    };

    // batch by batch; with --no-pad a short last window goes alone, after the batch before it
    std::vector<window> slots(B);
    for (bool more = ok; more && ok;) {
        int n = 0;
        t0 = std::chrono::steady_clock::now();
        while (n < B) {
            window w;
            const int r = next_window(pcm.data() + (size_t)n * WHISPER_AUDIO_N_SAMPLES, w);
            if (r <= 0) { more = false; break; }
            if (p.no_pad && w.samples < WHISPER_AUDIO_N_SAMPLES) {
                decode_ms += ms_since(t0);
                if (n > 0 && !encode(slots.data(), n, pcm.data(), WHISPER_AUDIO_N_FRAMES)) break;
                if (!encode(&w, 1, pcm.data() + (size_t)n * WHISPER_AUDIO_N_SAMPLES, 2 * (int)((w.samples + 319) / 320))) break;
                n = 0;
                t0 = std::chrono::steady_clock::now();
                continue;
            }
            slots[n++] = w;
        }
        decode_ms += ms_since(t0);
        if (ok && n > 0) encode(slots.data(), n, pcm.data(), WHISPER_AUDIO_N_FRAMES);
    }
    if (show_progress && n_windows > 0) fprintf(stderr, "\n");

    // finish the outputs, or remove them all
    for (npy_writer & w : writers) {
        if (ok) ok = w.finish();
        else w.abandon();
    }
    if (!ok)                                    // an error after some outputs were finished
        for (npy_writer & w : writers) if (w.done) remove(w.path.c_str());
#ifdef WHISPER_AUDIO_PNG
    if (ok && !p.png.empty())
        ok = write_png(p.png, png_mel.data(), hp.n_mels, png_emb.data(), (int)(png_emb.size() / d), (int)d);
#endif

    // summary
    const double total_ms = ms_since(t_start);
    if (ok) {
        const double mean = n_values ? sum / n_values : 0.0;
        const double sd = n_values ? std::sqrt(std::max(0.0, sum2 / n_values - mean * mean)) : 0.0;
        std::string shape = std::to_string(n_rows);
        for (size_t x : row_shape) shape += ", " + std::to_string(x);
        fprintf(human, "output: %s[%s] %s: mean %.6f, std %.6f, min %.6f, max %.6f%s\n", per_file ? "per file, in all " : "",
                shape.c_str(), p.outtype == "f16" ? "float16" : "float32", mean, sd, vmin, vmax,
                n_nonfinite ? " (NON-FINITE VALUES PRESENT)" : "");
        for (size_t i = 0; i < inputs.size(); i++) {
            const input & in = inputs[i];
            fprintf(human, "  %s: %.3f s, %zu window%s -> %s rows %zu-%zu\n", in.path.c_str(),
                    (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE, in.windows, in.windows == 1 ? "" : "s",
                    per_file ? writers[i].path.c_str() : (p.output.empty() ? "output" : p.output.c_str()), in.first_row,
                    in.first_row + in.rows - 1);
        }
        fprintf(stderr, "\ntimings: load %.1f ms, decode %.1f ms, init %.1f ms, mel %.1f ms, encode %.1f ms (%.1f ms per window), total %.1f ms\n",
                load_ms, decode_ms, init_ms, mel_ms, encode_ms, n_windows ? encode_ms / n_windows : 0.0, total_ms);
        if (p.json) {
            printf("{\"model\": \"%s\", \"backend\": \"%s\", \"n_state\": %d, \"n_layer\": %d, \"n_mels\": %d,\n",
                   json_escape(p.model).c_str(), json_escape(whisper_audio_encoder_backend(enc)).c_str(), hp.n_state, hp.n_layer, hp.n_mels);
            printf(" \"output\": %s, \"outtype\": \"%s\", \"per_file\": %s, \"shape\": [%s], \"windows\": %zu,\n",
                   p.output.empty() ? "null" : ("\"" + json_escape(p.output) + "\"").c_str(), p.outtype.c_str(),
                   per_file ? "true" : "false", shape.c_str(), n_windows);
            printf(" \"files\": [");
            for (size_t i = 0; i < inputs.size(); i++) {
                const input & in = inputs[i];
                printf("%s\n  {\"path\": \"%s\", \"format\": \"%s\", \"sample_rate\": %d, \"channels\": %d, \"seconds\": %.6f, "
                       "\"windows\": %zu, \"first_row\": %zu, \"rows\": %zu%s%s%s}",
                       i ? "," : "", json_escape(in.path).c_str(), json_escape(in.info.format).c_str(), in.info.sample_rate,
                       in.info.channels, (double)in.samples / WHISPER_AUDIO_SAMPLE_RATE, in.windows, in.first_row, in.rows,
                       per_file ? ", \"output\": \"" : "", per_file ? json_escape(writers[i].path).c_str() : "", per_file ? "\"" : "");
            }
            printf("],\n \"timings_ms\": {\"load\": %.3f, \"decode\": %.3f, \"init\": %.3f, \"mel\": %.3f, \"encode\": %.3f, \"total\": %.3f}}\n",
                   load_ms, decode_ms, init_ms, mel_ms, encode_ms, total_ms);
        }
    }

    for (input & in : inputs) whisper_audio_stream_close(in.stream);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
    return ok ? 0 : 1;
}
