// fuzz-ggml.cpp - libFuzzer target: whisper_audio_model_load on whisper.cpp's legacy
// ggml-*.bin files (fuzz_model_load in fuzz-util.h, with its own seeds: tests/fuzz/corpus/ggml,
// two tiny valid models, f16 and q8_0, and the first 64 KiB of a real micro file). docs/FUZZING.md.
#include "fuzz-util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz_model_load(data, size, "fuzz-ggml");
    return 0;
}
