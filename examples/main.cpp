// main: audio files in, Whisper encoder embeddings out (a float32 .npy).
//
//   ./main -m model.gguf -f audio.wav [-f more.wav ...] -o emb.npy
//
// Each file is cut into 30 s windows (the last one zero-padded, as transformers does);
// the windows of all files, in the order given, share batches and become the rows of
// one [n_windows, 1500, d_model] array.
#include "whisper-audio.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

struct params {
    std::string model;
    std::vector<std::string> files;
    std::string output;
    int n_threads = 0;            // 0: the library's default
    int batch = 0;                // 0: 8
    std::string device = "auto";
    std::string dtype = "f16";
    bool progress = true;
};

static void print_usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL -f AUDIO [-f AUDIO ...] [options]\n"
            "\n"
            "Whisper encoder embeddings of audio files, as one float32 .npy [n_windows, 1500, d_model].\n"
            "\n"
            "options:\n"
            "  -h, --help           show this help and exit\n"
            "  -m, --model FILE     model file (.gguf, from convert/convert-hf-to-gguf.py)\n"
            "  -f, --file FILE      audio file (WAV: PCM 8/16/24/32-bit or float, any rate and channels);\n"
            "                       repeat for several files\n"
            "  -o, --output FILE    write the embeddings to FILE (.npy, float32)\n"
            "  -t, --threads N      CPU threads (default: up to 8)\n"
            "  -b, --batch N        30 s windows per encoder call (default: 8)\n"
            "  --device D           cpu, cuda or auto (default: auto, CUDA when a GPU is present)\n"
            "  --dtype T            CUDA compute type: f16 or bf16 (default: f16)\n"
            "  --no-progress        no progress line on stderr\n",
            argv0);
}

static bool parse_int(const char * s, int lo, int hi, int * out) {
    char * end = nullptr;
    const long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

// Returns 0 to go on, 1 after -h, -1 on a bad argument (message printed).
static int parse_args(int argc, char ** argv, params & p) {
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", arg.c_str()); return nullptr; }
            return argv[++i];
        };
        const char * v = nullptr;
        if (arg == "-h" || arg == "--help") { print_usage(argv[0]); return 1; }
        else if (arg == "--no-progress") p.progress = false;
        else if (arg == "-m" || arg == "--model") { if (!(v = value())) return -1; p.model = v; }
        else if (arg == "-f" || arg == "--file") { if (!(v = value())) return -1; p.files.push_back(v); }
        else if (arg == "-o" || arg == "--output") { if (!(v = value())) return -1; p.output = v; }
        else if (arg == "-t" || arg == "--threads") {
            if (!(v = value())) return -1;
            if (!parse_int(v, 1, 1024, &p.n_threads)) { fprintf(stderr, "error: bad thread count '%s'\n", v); return -1; }
        } else if (arg == "-b" || arg == "--batch") {
            if (!(v = value())) return -1;
            if (!parse_int(v, 1, 4096, &p.batch)) { fprintf(stderr, "error: bad batch size '%s'\n", v); return -1; }
        } else if (arg == "--device") {
            if (!(v = value())) return -1;
            p.device = v;
            if (p.device != "cpu" && p.device != "cuda" && p.device != "auto") {
                fprintf(stderr, "error: --device must be cpu, cuda or auto, not '%s'\n", v);
                return -1;
            }
        } else if (arg == "--dtype") {
            if (!(v = value())) return -1;
            p.dtype = v;
            if (p.dtype != "f16" && p.dtype != "bf16") { fprintf(stderr, "error: --dtype must be f16 or bf16, not '%s'\n", v); return -1; }
        } else {
            fprintf(stderr, "error: unknown argument '%s'\n", arg.c_str());
            print_usage(argv[0]);
            return -1;
        }
    }
    if (p.model.empty()) { fprintf(stderr, "error: no model given (-m MODEL)\n"); print_usage(argv[0]); return -1; }
    if (p.files.empty()) { fprintf(stderr, "error: no audio file given (-f AUDIO)\n"); print_usage(argv[0]); return -1; }
    return 0;
}

// A float32 .npy (format 1.0): magic, header dict padded to 64 bytes, raw data. Written to
// a temporary name and renamed, so that an error leaves no partial file behind.
static bool write_npy(const std::string & path, const float * data, const std::vector<size_t> & shape) {
    std::string dims;
    size_t n = 1;
    for (size_t d : shape) { dims += std::to_string(d) + ", "; n *= d; }
    if (shape.size() > 1) dims.resize(dims.size() - 2);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    const std::string tmp = path + ".tmp";
    FILE * f = fopen(tmp.c_str(), "wb");
    if (!f) { fprintf(stderr, "error: cannot write '%s': %s\n", tmp.c_str(), strerror(errno)); return false; }
    const uint16_t hlen = (uint16_t)header.size();
    bool ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&hlen, 2, 1, f) == 1 &&
              fwrite(header.data(), 1, header.size(), f) == header.size() && fwrite(data, sizeof(float), n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        fprintf(stderr, "error: writing '%s' failed: %s\n", path.c_str(), strerror(errno));
        remove(tmp.c_str());
        return false;
    }
    return true;
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char ** argv) {
    params p;
    const int rc = parse_args(argc, argv, p);
    if (rc != 0) return rc > 0 ? 0 : 2;
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

    // audio: every file is decoded before any encoding, so that a bad file stops the
    // run before the expensive part
    struct input { float * pcm = nullptr; size_t n = 0; size_t first_window = 0, n_windows = 0; };
    std::vector<input> inputs(p.files.size());
    t0 = std::chrono::steady_clock::now();
    size_t n_windows = 0;
    bool ok = true;
    for (size_t i = 0; i < p.files.size() && ok; i++) {
        whisper_audio_info info;
        if (!whisper_audio_decode_file(p.files[i].c_str(), &inputs[i].pcm, &inputs[i].n, &info)) {
            fprintf(stderr, "error: %s\n", whisper_audio_last_error());
            ok = false;
            break;
        }
        inputs[i].first_window = n_windows;
        inputs[i].n_windows = whisper_audio_n_windows(inputs[i].n);
        n_windows += inputs[i].n_windows;
        fprintf(stderr, "main: '%s': %s, %d Hz, %d channel%s, %.3f s -> %zu window%s (rows %zu-%zu)\n",
                p.files[i].c_str(), info.format, info.sample_rate, info.channels, info.channels == 1 ? "" : "s",
                (double)inputs[i].n / WHISPER_AUDIO_SAMPLE_RATE, inputs[i].n_windows, inputs[i].n_windows == 1 ? "" : "s",
                inputs[i].first_window, n_windows - 1);
    }
    const double decode_ms = ms_since(t0);

    // encoder
    whisper_audio_encoder * enc = nullptr;
    if (ok) {
        whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
        ep.device = p.device == "cpu" ? WHISPER_AUDIO_DEVICE_CPU : p.device == "cuda" ? WHISPER_AUDIO_DEVICE_CUDA
                                                                                         : WHISPER_AUDIO_DEVICE_AUTO;
        ep.dtype = p.dtype == "bf16" ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
        if (p.n_threads > 0) ep.n_threads = p.n_threads;
        ep.max_batch = p.batch > 0 ? p.batch : 8;   // a shorter run uses a graph of its own size
        t0 = std::chrono::steady_clock::now();
        enc = whisper_audio_encoder_init(model, ep);
        if (!enc) {
            fprintf(stderr, "error: %s\n", whisper_audio_last_error());
            ok = false;
        } else {
            if (strcmp(whisper_audio_encoder_backend(enc), "cpu") == 0)
                fprintf(stderr, "main: backend cpu, %d threads, batch %d\n", ep.n_threads, ep.max_batch);
            else
                fprintf(stderr, "main: backend %s, %s, batch %d\n", whisper_audio_encoder_backend(enc), p.dtype.c_str(), ep.max_batch);
            p.batch = ep.max_batch;
            p.n_threads = ep.n_threads;
        }
    }
    const double init_ms = ok ? ms_since(t0) : 0.0;

    // mel + encode, batch by batch over the windows of all files
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES, out_win = (size_t)hp.n_ctx * hp.n_state;
    std::vector<float> out, mel;
    double mel_ms = 0.0, encode_ms = 0.0;
    if (ok) {
        out.resize(n_windows * out_win);
        mel.resize((size_t)p.batch * mel_win);
        std::vector<std::pair<size_t, size_t>> windows;          // (file, window in file)
        for (size_t i = 0; i < inputs.size(); i++)
            for (size_t w = 0; w < inputs[i].n_windows; w++) windows.push_back({i, w});
        const bool show_progress = p.progress && isatty(2) && n_windows > (size_t)p.batch;
        const auto t_enc = std::chrono::steady_clock::now();
        for (size_t w0 = 0; w0 < n_windows && ok; w0 += p.batch) {
            const int nb = (int)std::min<size_t>(p.batch, n_windows - w0);
            t0 = std::chrono::steady_clock::now();
            std::atomic<int> next{0}, failed{0};
            auto work = [&] {
                for (int b; (b = next.fetch_add(1)) < nb;) {
                    const input & in = inputs[windows[w0 + b].first];
                    const size_t start = windows[w0 + b].second * WHISPER_AUDIO_N_SAMPLES;
                    if (!whisper_audio_log_mel(model, in.pcm + start, in.n - start, mel.data() + b * mel_win)) failed = 1;
                }
            };
            std::vector<std::thread> threads;
            for (int t = 1; t < std::min(nb, p.n_threads); t++) threads.emplace_back(work);
            work();
            for (std::thread & t : threads) t.join();
            mel_ms += ms_since(t0);
            if (failed) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); ok = false; break; }
            t0 = std::chrono::steady_clock::now();
            if (!whisper_audio_encode_mel(enc, mel.data(), nb, out.data() + w0 * out_win)) {
                fprintf(stderr, "error: %s\n", whisper_audio_last_error());
                ok = false;
                break;
            }
            encode_ms += ms_since(t0);
            if (show_progress) {
                const double s = ms_since(t_enc) / 1000.0;
                fprintf(stderr, "\rmain: %zu/%zu windows, %.1f windows/s", w0 + nb, n_windows, (w0 + nb) / s);
                if (w0 + nb == n_windows) fprintf(stderr, "\n");
            }
        }
    }

    // summary and output
    if (ok) {
        double sum = 0.0, sum2 = 0.0;
        float mn = INFINITY, mx = -INFINITY;
        size_t n_bad = 0;
        for (float v : out) {
            if (!std::isfinite(v)) { n_bad++; continue; }
            sum += v; sum2 += (double)v * v;
            mn = std::min(mn, v); mx = std::max(mx, v);
        }
        const double mean = sum / out.size(), sd = std::sqrt(std::max(0.0, sum2 / out.size() - mean * mean));
        printf("output: [%zu, %d, %d] float32: mean %.6f, std %.6f, min %.6f, max %.6f%s\n", n_windows, hp.n_ctx,
               hp.n_state, mean, sd, mn, mx, n_bad ? " (NON-FINITE VALUES PRESENT)" : "");
        for (size_t i = 0; i < inputs.size(); i++)
            printf("  rows %zu-%zu: %s\n", inputs[i].first_window, inputs[i].first_window + inputs[i].n_windows - 1, p.files[i].c_str());
        if (!p.output.empty()) {
            ok = write_npy(p.output, out.data(), {n_windows, (size_t)hp.n_ctx, (size_t)hp.n_state});
            if (ok) printf("wrote %s\n", p.output.c_str());
        }
        fprintf(stderr, "\ntimings: load %.1f ms, decode %.1f ms, init %.1f ms, mel %.1f ms, encode %.1f ms (%.1f ms per window), total %.1f ms\n",
                load_ms, decode_ms, init_ms, mel_ms, encode_ms, encode_ms / n_windows, ms_since(t_start));
    }

    for (input & in : inputs) whisper_audio_pcm_free(in.pcm);
    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
    return ok ? 0 : 1;
}
