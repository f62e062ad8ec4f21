// fuzz-ct2.cpp - libFuzzer target: whisper_audio_model_load on any bytes as a CTranslate2
// model.bin. The loader tells a model.bin by its content (the spec name "WhisperSpec" after the
// version), so the bytes go through a memfd like fuzz-model's; an input that lacks that prefix
// gets it, so that every input reaches the CTranslate2 reader. Seeds: tests/fuzz/corpus/ct2.
#include "whisper-audio.h"
#include "fuzz-util.h"

#include <cstdint>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const uint8_t prefix[18] = {6, 0, 0, 0, 12, 0, 'W', 'h', 'i', 's', 'p', 'e', 'r', 'S', 'p', 'e', 'c', 0};
    std::vector<uint8_t> bytes;
    if (size < 18 || memcmp(data + 4, prefix + 4, 14) != 0) bytes.assign(prefix, prefix + 18);
    bytes.insert(bytes.end(), data, data + size);
    char path[64];
    const int fd = fuzz_memfd(bytes.data(), bytes.size(), "fuzz-ct2", path);
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
