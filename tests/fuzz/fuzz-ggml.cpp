// fuzz-ggml.cpp - libFuzzer target: whisper_audio_model_load on whisper.cpp's legacy ggml-*.bin
// files (fuzz-model's loop, with its own seeds). The bytes are written to a memfd and loaded
// through its /proc/self/fd path, so the loader runs exactly as on a file (open, fstat, pread).
// Seeds: tests/fuzz/corpus/ggml (two tiny valid models, f16 and q8_0, and the first 64 KiB of
// a real micro file). docs/FUZZING.md.
#include "whisper-audio.h"
#include "fuzz-util.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    char path[64];
    const int fd = fuzz_memfd(data, size, "fuzz-ggml", path);
    whisper_audio_model * model = whisper_audio_model_load(path);
    if (model) {
        // a model that loads must describe itself consistently
        const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
        const float * mel = whisper_audio_model_mel_filters(model);
        volatile float sink = 0.0f;
        for (int i = 0; i < hp->n_mels * 201; i++) sink += mel[i];
        (void) sink;
        whisper_audio_model_free(model);
    } else if (whisper_audio_last_error()[0] == 0) {
        __builtin_trap();   // a failure must say why
    }
    close(fd);
    return 0;
}
