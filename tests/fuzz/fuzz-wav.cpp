// fuzz-wav.cpp - libFuzzer target: whisper_audio_decode_memory on any bytes (WAV, and Ogg
// when built with WHISPER_AUDIO_OGG: the format is found from the content).
// Also decodes the same bytes from a file through the stream API, in odd-sized reads, and
// traps unless both paths agree bit for bit. make fuzz builds and runs it (docs/FUZZING.md).
#include "whisper-audio.h"
#include "fuzz-util.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    float * pcm = nullptr;
    size_t n = 0;
    whisper_audio_info info;
    const bool ok = whisper_audio_decode_memory(data, size, &pcm, &n, &info);
    if (!ok && (pcm || n || whisper_audio_last_error()[0] == 0)) __builtin_trap();

    char path[64];
    const int fd = fuzz_memfd(data, size, "fuzz-wav", path);
    whisper_audio_info sinfo;
    whisper_audio_stream * s = whisper_audio_stream_open(path, &sinfo);
    if (ok && !s) __builtin_trap();
    if (s) {
        // a decode error after the headers (a NaN sample, a cut Ogg): the samples before it,
        // then -1, where decode_memory fails
        static float buf[1237];
        size_t at = 0;
        int64_t got;
        while ((got = whisper_audio_stream_read(s, buf, 1 + at % 1237)) > 0) {
            if (ok && (at + (size_t) got > n || memcmp(buf, pcm + at, (size_t) got * sizeof(float)) != 0)) {
                __builtin_trap();  // the file stream and the memory decoder disagree
            }
            at += (size_t) got;
        }
        if (ok && (got < 0 || at != n)) __builtin_trap();
        if (!ok && got == 0 && at > 0) __builtin_trap();   // the stream decoded what decode_memory refused
        whisper_audio_stream_close(s);
    }
    close(fd);
    whisper_audio_pcm_free(pcm);
    return 0;
}
