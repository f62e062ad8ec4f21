// fuzz-model.cpp - libFuzzer target: whisper_audio_model_load on any bytes, as a file
// (fuzz_model_load in fuzz-util.h). Seeds: tests/fuzz/corpus/model. docs/FUZZING.md.
#include "fuzz-util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz_model_load(data, size, "fuzz-model");
    return 0;
}
