// fuzz-ogg.cpp - libFuzzer target: the Ogg Vorbis path (libvorbisfile behind our reader).
// Each input is decoded twice through the stream API: from a file (seekable: vorbisfile
// scans for the length) and from standard input fed by a pipe (not seekable). The output
// is capped at 2^22 samples (4.4 minutes), since a few bytes of Vorbis can legitimately
// expand to minutes of audio. Seeds: tests/fuzz/corpus/ogg. docs/FUZZING.md.
#include "whisper-audio.h"
#include "fuzz-util.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static const size_t FUZZ_MAX_SAMPLES = (size_t) 1 << 22;

static void fuzz_drain(whisper_audio_stream * s) {
    static float buf[4096];
    size_t total = 0;
    while (total < FUZZ_MAX_SAMPLES) {
        const int64_t got = whisper_audio_stream_read(s, buf, 4096);
        if (got <= 0) break;
        total += (size_t) got;
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    // from a file
    char path[64];
    const int fd = fuzz_memfd(data, size, "fuzz-ogg", path);
    whisper_audio_info info;
    whisper_audio_stream * s = whisper_audio_stream_open(path, &info);
    if (!s && whisper_audio_last_error()[0] == 0) __builtin_trap();   // a failure must say why
    if (s) {
        fuzz_drain(s);
        whisper_audio_stream_close(s);
    }
    close(fd);

    // from standard input: a pipe that holds the whole input (inputs are at most 1 MiB)
    int p[2];
    if (pipe(p) != 0) abort();
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    if (size > (size_t) fcntl(p[1], F_GETPIPE_SZ)) {
        close(p[0]);
        close(p[1]);
        return 0;
    }
    if (write(p[1], data, size) != (ssize_t) size) abort();
    close(p[1]);
    if (dup2(p[0], 0) < 0) abort();
    close(p[0]);
    clearerr(stdin);
    s = whisper_audio_stream_open("-", &info);
    if (s) {
        fuzz_drain(s);
        whisper_audio_stream_close(s);
    }
    // leave nothing buffered in stdin for the next input
    static char sink[4096];
    while (fread(sink, 1, sizeof(sink), stdin) > 0) {}
    clearerr(stdin);
    return 0;
}
