// whisper-cpp-encode.cpp - times whisper.cpp's encoder on given log-mel features, for
// tests/cpu/bench-cpu.py (built there against a whisper.cpp checkout; not part of our build).
//
//   whisper-cpp-encode MODEL.bin MEL.f32 N_MELS THREADS REPEAT
//
// MEL.f32 holds N_MELS x 3000 float32 features, row-major (whisper.cpp's own layout); they are
// set with whisper_set_mel, then whisper_encode runs once to warm up and REPEAT times timed.
// Prints one line per timed run: "ms <milliseconds>". The CPU only; whisper.cpp's defaults
// otherwise (flash attention on). whisper.cpp has no call that returns the encoder's output.
#include "whisper.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.bin MEL.f32 N_MELS THREADS REPEAT\n", argv[0]);
        return 2;
    }
    const int n_mels = atoi(argv[3]), n_threads = atoi(argv[4]), repeat = atoi(argv[5]);
    const int n_frames = 3000;
    std::vector<float> mel((size_t)n_mels * n_frames);
    FILE * f = fopen(argv[2], "rb");
    if (!f || fread(mel.data(), sizeof(float), mel.size(), f) != mel.size()) {
        fprintf(stderr, "error: cannot read %d x %d floats from %s\n", n_mels, n_frames, argv[2]);
        return 1;
    }
    fclose(f);

    whisper_context_params cparams = whisper_context_default_params();
    cparams.use_gpu = false;
    whisper_context * ctx = whisper_init_from_file_with_params(argv[1], cparams);
    if (!ctx) { fprintf(stderr, "error: whisper.cpp cannot load %s\n", argv[1]); return 1; }
    if (whisper_set_mel(ctx, mel.data(), n_frames, n_mels) != 0) { fprintf(stderr, "error: whisper_set_mel failed\n"); return 1; }
    for (int i = 0; i <= repeat; i++) {
        const auto t0 = std::chrono::steady_clock::now();
        if (whisper_encode(ctx, 0, n_threads) != 0) { fprintf(stderr, "error: whisper_encode failed\n"); return 1; }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) printf("ms %.3f\n", ms);   // run 0 warms up
    }
    whisper_free(ctx);
    return 0;
}
