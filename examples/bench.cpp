// bench: times the encoder on random log-mel input, batch after batch.
//
//   ./bench -m model.gguf [-b 32] [--dtype bf16] [-n 20] [--profile]
//   ./bench --decode-only [-t N] --list FILE     (or -f AUDIO, repeated)
//
// Prints ms per batch and per 30 s clip, clips/s, TFLOP/s against the H200's measured bf16
// GEMM peak, and memory: our own allocations and, on CUDA, the device's used-memory delta.
// --decode-only times our decoder alone, no model: every file decoded to 16 kHz mono as main
// decodes it (whisper_audio_reader, N workers, default: all the hardware runs); it prints
// files/s, seconds of audio per second and the busy time summed over the workers (the
// host-side limit of a run over those files).
#include "whisper-audio.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

static const double H200_BF16_PEAK_TFLOPS = 762.0;   // measured, 8192^3 GEMM (see docs/BENCHMARKS.md)

// FLOPs of one 30 s window (2 per multiply-add): conv stem, then per layer the QKV,
// attention (QK^T and PV), output projection and the two FFN GEMMs.
static double encoder_flops(const whisper_audio_hparams & hp) {
    const double T = hp.n_ctx, d = hp.n_state, ff = hp.n_ff;
    const double conv = 2.0 * 2 * T * d * 3 * hp.n_mels + 2.0 * T * d * 3 * d;
    const double layer = 2.0 * T * d * 3 * d + 4.0 * T * T * d + 2.0 * T * d * d + 4.0 * T * d * ff;
    return conv + hp.n_layer * layer;
}

// --decode-only: decodes every file to its end through the library's reader on n_threads
// workers, as main reads them (several files at once; a long WAV or FLAC in segments on
// several workers), the calling thread draining them in order; returns the exit code.
static int decode_only(const std::vector<std::string> & files, int n_threads) {
    std::vector<const char *> paths;
    for (const std::string & f : files) paths.push_back(f.c_str());
    whisper_audio_reader_params rp = whisper_audio_reader_default_params();
    rp.n_workers = std::max(1, n_threads);
    const auto t0 = std::chrono::steady_clock::now();
    whisper_audio_reader * r = whisper_audio_reader_init(paths.data(), paths.size(), rp);
    if (!r) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
    std::vector<float> buf((size_t)1 << 16);                        // 4 s of 16 kHz mono a read
    int64_t samples = 0;
    for (size_t k = 0; k < paths.size(); k++) {
        int64_t got;
        while ((got = whisper_audio_reader_read(r, k, buf.data(), buf.size())) > 0) samples += got;
        if (got < 0) {                                               // the library's message names the file
            fprintf(stderr, "error: %s\n", whisper_audio_last_error());
            whisper_audio_reader_free(r);
            return 1;
        }
    }
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double busy = whisper_audio_reader_busy_ms(r), audio_s = (double)samples / WHISPER_AUDIO_SAMPLE_RATE;
    whisper_audio_reader_free(r);
    printf("decode-only: %zu files, %.3f s of audio (16 kHz mono), %d workers: wall %.3f ms, busy %.3f ms (CPU time summed "
           "over the workers), %.2f files/s, %.1f s of audio per second\n", files.size(), audio_s, rp.n_workers, wall, busy,
           1000.0 * files.size() / wall, 1000.0 * audio_s / wall);
    return 0;
}

static void usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL [options]\n"
            "       %s --decode-only [-t N] --list FILE   (or -f AUDIO, repeated)\n"
            "  -m, --model FILE   model file (.gguf); a --random one is fine\n"
            "  -b, --batch N      windows per encoder call (default 1)\n"
            "  -n, --iters N      timed batches (default 10, after 3 warm-up batches)\n"
            "  -t, --threads N    CPU threads\n"
            "  --device D         cpu, cuda or auto (default auto)\n"
            "  --dtype T          f16, bf16 or fp8 on CUDA (default f16)\n"
            "  --profile          also time each op (node by node, no graph replay)\n"
            "  --decode-only      decode the audio files to 16 kHz mono, no model (-t: decoding workers, default all)\n"
            "  --list FILE        audio file names, one per line (--decode-only)\n"
            "  -f, --file AUDIO   an audio file (--decode-only; repeat for several)\n",
            argv0, argv0);
}

int main(int argc, char ** argv) {
    std::string model_path, device = "auto", dtype = "f16";
    int batch = 1, iters = 10, threads = 0;
    bool profile = false, decode = false;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        if (a == "-h" || a == "--help") { usage(argv[0]); return 0; }
        else if ((a == "-m" || a == "--model") && has) model_path = argv[++i];
        else if ((a == "-b" || a == "--batch") && has) batch = atoi(argv[++i]);
        else if ((a == "-n" || a == "--iters") && has) iters = atoi(argv[++i]);
        else if ((a == "-t" || a == "--threads") && has) threads = atoi(argv[++i]);
        else if (a == "--device" && has) device = argv[++i];
        else if (a == "--dtype" && has) dtype = argv[++i];
        else if (a == "--profile") profile = true;
        else if (a == "--decode-only") decode = true;
        else if ((a == "-f" || a == "--file") && has) files.push_back(argv[++i]);
        else if (a == "--list" && has) {
            std::ifstream in(argv[++i]);
            if (!in) { fprintf(stderr, "error: cannot read the list '%s'\n", argv[i]); return 1; }
            for (std::string line; std::getline(in, line);) if (!line.empty()) files.push_back(line);
        }
        else { fprintf(stderr, "error: bad argument '%s'\n", a.c_str()); usage(argv[0]); return 2; }
    }
    if (decode) {
        if (files.empty()) { fprintf(stderr, "error: --decode-only needs --list FILE or -f AUDIO\n"); return 2; }
        return decode_only(files, threads > 0 ? threads : (int)std::max(1u, std::thread::hardware_concurrency()));
    }
    if (model_path.empty() || batch < 1 || iters < 1 || (dtype != "f16" && dtype != "bf16" && dtype != "fp8") ||
        (device != "cpu" && device != "cuda" && device != "auto")) {
        usage(argv[0]);
        return 2;
    }

    size_t used_before = 0;
    const bool have_mem = whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, 0, &used_before);

    whisper_audio_model * model = whisper_audio_model_load(model_path.c_str());
    if (!model) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
    const whisper_audio_hparams & hp = *whisper_audio_model_hparams(model);
    whisper_audio_encoder_params ep = whisper_audio_encoder_default_params();
    ep.device = device == "cpu" ? WHISPER_AUDIO_DEVICE_CPU : device == "cuda" ? WHISPER_AUDIO_DEVICE_GPU : WHISPER_AUDIO_DEVICE_AUTO;
    ep.dtype = dtype == "fp8" ? WHISPER_AUDIO_DTYPE_FP8 : dtype == "bf16" ? WHISPER_AUDIO_DTYPE_BF16 : WHISPER_AUDIO_DTYPE_F16;
    ep.max_batch = batch;
    if (threads > 0) ep.n_threads = threads;
    whisper_audio_encoder * enc = whisper_audio_encoder_init(model, ep);
    if (!enc) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
    const bool cpu = strcmp(whisper_audio_encoder_backend(enc), "cpu") == 0;

    // random log-mel in the range a real one has ((log10 + 4) / 4: about -1 to 1.5)
    const size_t mel_win = (size_t)hp.n_mels * WHISPER_AUDIO_N_FRAMES, out_win = (size_t)hp.n_ctx * hp.n_state;
    std::vector<float> mel(mel_win * batch), out(out_win * batch);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-0.8f, 1.2f);
    for (float & v : mel) v = dist(rng);

    for (int i = 0; i < 3; i++) {
        if (!whisper_audio_encode_mel(enc, mel.data(), batch, out.data())) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
    }
    std::vector<double> ms, compute_ms, transfer_ms;
    for (int i = 0; i < iters; i++) {
        whisper_audio_encoder_reset_timings(enc);                       // they add up over calls: this call's alone
        const auto t0 = std::chrono::steady_clock::now();
        if (!whisper_audio_encode_mel(enc, mel.data(), batch, out.data())) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        const whisper_audio_timings t = whisper_audio_encoder_timings(enc);
        compute_ms.push_back(t.compute_ms);
        transfer_ms.push_back(t.upload_ms + t.download_ms);
    }
    auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2], med_compute = median(compute_ms), med_transfer = median(transfer_ms);
    const double tflops = encoder_flops(hp) * batch / (med * 1e-3) / 1e12;
    size_t used_after = 0;
    const bool have_after = have_mem && whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, 0, &used_after);

    printf("bench: model %s (n_state %d, n_layer %d, n_mels %d), backend %s%s%s, batch %d\n", model_path.c_str(), hp.n_state,
           hp.n_layer, hp.n_mels, whisper_audio_encoder_backend(enc), ", ", cpu ? whisper_audio_cpu_isa() : dtype.c_str(), batch);
    printf("bench: %.3f ms per batch (median of %d; min %.3f, max %.3f), %.3f ms per clip, %.1f clips/s\n", med, iters,
           ms.front(), ms.back(), med / batch, batch * 1000.0 / med);
    printf("bench: of which compute %.3f ms (%.3f ms per clip), mel upload + f32 download %.3f ms\n", med_compute,
           med_compute / batch, med_transfer);
    const double tflops_compute = encoder_flops(hp) * batch / (med_compute * 1e-3) / 1e12;
    if (cpu)        // the H200's peak means nothing next to a CPU's figure
        printf("bench: %.1f GFLOP per clip, %.1f GFLOP/s end to end, %.1f GFLOP/s in the forward\n", encoder_flops(hp) / 1e9,
               tflops * 1e3, tflops_compute * 1e3);
    else
        printf("bench: %.1f GFLOP per clip, %.1f TFLOP/s end to end, %.1f TFLOP/s in the forward (%.1f%% of the H200's %.0f TFLOP/s bf16 GEMM peak)\n",
               encoder_flops(hp) / 1e9, tflops, tflops_compute, 100.0 * tflops_compute / H200_BF16_PEAK_TFLOPS, H200_BF16_PEAK_TFLOPS);
    printf("bench: own allocations %.1f MiB (weights, arena, workspaces)", whisper_audio_encoder_memory(enc) / 1048576.0);
    if (have_after) printf(", device used-memory delta %.1f MiB", ((double)used_after - (double)used_before) / 1048576.0);
    printf("\n");

    if (profile) {
        std::vector<whisper_audio_op_time> times(8192);
        const int n = whisper_audio_encoder_profile(enc, mel.data(), batch, times.data(), (int)times.size());
        if (n < 0) { fprintf(stderr, "error: %s\n", whisper_audio_last_error()); return 1; }
        // per op kind, and the conv stem / layers / final norm
        std::map<std::string, double> by_op;
        double total = 0.0;
        for (int i = 0; i < n; i++) { by_op[times[i].op] += times[i].ms; total += times[i].ms; }
        printf("profile (batch %d, op by op, %.3f ms in all):\n", batch, total);
        for (auto & kv : by_op) printf("  %-12s %9.3f ms  %5.1f%%\n", kv.first.c_str(), kv.second, 100.0 * kv.second / total);
        // the linears of one layer in order: qkv, out, fc1, fc2
        printf("  layer 0 ops:");
        for (int i = 0; i < n; i++) if (times[i].layer == 0) printf(" %s %.3f", times[i].op, times[i].ms);
        printf("\n");
    }

    whisper_audio_encoder_free(enc);
    whisper_audio_model_free(model);
    return 0;
}
