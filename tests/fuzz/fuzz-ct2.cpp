// fuzz-ct2.cpp - libFuzzer target: whisper_audio_model_load on any bytes as a CTranslate2
// model.bin. The loader tells a model.bin by its content (the spec name "WhisperSpec" after the
// version), so the bytes go through a memfd like fuzz-model's; an input that lacks that prefix
// gets it, so that every input reaches the CTranslate2 reader. Seeds: tests/fuzz/corpus/ct2.
#include "fuzz-util.h"

#include <cstdint>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const uint8_t prefix[18] = {6, 0, 0, 0, 12, 0, 'W', 'h', 'i', 's', 'p', 'e', 'r', 'S', 'p', 'e', 'c', 0};
    std::vector<uint8_t> bytes;
    if (size < 18 || memcmp(data + 4, prefix + 4, 14) != 0) bytes.assign(prefix, prefix + 18);
    bytes.insert(bytes.end(), data, data + size);
    fuzz_model_load(bytes.data(), bytes.size(), "fuzz-ct2");
    return 0;
}
