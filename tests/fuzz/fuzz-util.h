// fuzz-util.h - what the fuzz targets share: the input bytes as a file, and the audio
// targets' decode from a file and from a pipe.
#pragma once

#include "whisper-audio.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

// The bytes in a memfd (no temp files left behind); path gets "/proc/self/fd/N", which
// opens like any file. Returns the fd, for the caller to close.
static inline int fuzz_memfd(const uint8_t * data, size_t size, const char * name, char (&path)[64]) {
    const int fd = memfd_create(name, 0);
    if (fd < 0) abort();
    for (size_t done = 0; done < size;) {
        const ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) abort();
        done += (size_t)k;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return fd;
}

// What a stream gave: the samples' count and a hash of their bits, up to FUZZ_MAX_SAMPLES (a
// few bytes of Vorbis or Opus can legitimately expand to minutes of audio), and whether it
// ended in an error.
static const size_t FUZZ_MAX_SAMPLES = (size_t) 1 << 22;

struct fuzz_decoded {
    bool     opened = false, failed = false;
    size_t   n = 0;
    uint64_t hash = 1469598103934665603ull;   // FNV-1a
};

static inline fuzz_decoded fuzz_drain(const char * path) {
    fuzz_decoded d;
    whisper_audio_info info;
    whisper_audio_stream * s = whisper_audio_stream_open(path, &info);
    if (!s) {
        if (whisper_audio_last_error()[0] == 0) __builtin_trap();   // a failure must say why
        return d;
    }
    d.opened = true;
    static float buf[4096];
    while (d.n < FUZZ_MAX_SAMPLES) {
        const int64_t got = whisper_audio_stream_read(s, buf, 4096);
        if (got < 0) {
            if (whisper_audio_last_error()[0] == 0) __builtin_trap();
            d.failed = true;
        }
        if (got <= 0) break;
        const uint8_t * b = (const uint8_t *) buf;
        for (size_t i = 0; i < (size_t) got * sizeof(float); i++) d.hash = (d.hash ^ b[i]) * 1099511628211ull;
        d.n += (size_t) got;
    }
    whisper_audio_stream_close(s);
    return d;
}

// Decodes the bytes through the stream API from a file (a memfd) and from standard input fed
// by a pipe (no seeking); traps if a failure says nothing, or if both decode without an error
// and give different samples.
static inline void fuzz_file_and_pipe(const uint8_t * data, size_t size, const char * name) {
    char path[64];
    const int fd = fuzz_memfd(data, size, name, path);
    const fuzz_decoded from_file = fuzz_drain(path);
    close(fd);

    // standard input: a pipe that holds the whole input (inputs are at most 1 MiB)
    int p[2];
    if (pipe(p) != 0) abort();
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    if (size > (size_t) fcntl(p[1], F_GETPIPE_SZ)) {
        close(p[0]);
        close(p[1]);
        return;
    }
    if (write(p[1], data, size) != (ssize_t) size) abort();
    close(p[1]);
    if (dup2(p[0], 0) < 0) abort();
    close(p[0]);
    clearerr(stdin);
    const fuzz_decoded from_pipe = fuzz_drain("-");
    // leave nothing buffered in stdin for the next input
    static char sink[4096];
    while (fread(sink, 1, sizeof(sink), stdin) > 0) {}
    clearerr(stdin);

    if (from_file.opened && from_pipe.opened && !from_file.failed && !from_pipe.failed &&
        (from_file.n != from_pipe.n || from_file.hash != from_pipe.hash)) {
        __builtin_trap();   // a file and a pipe decode the same bytes differently
    }
}

// Loads the model at path: one that loads must describe itself consistently (its mel bank
// readable), and a failure must say why. fuzz-hf loads its directories through it.
static inline void fuzz_load_path(const char * path) {
    whisper_audio_model * model = whisper_audio_model_load(path);
    if (model) {
        const whisper_audio_hparams * hp = whisper_audio_model_hparams(model);
        const float * mel = whisper_audio_model_mel_filters(model);
        volatile float sink = 0.0f;
        for (int i = 0; i < hp->n_mels * 201; i++) sink += mel[i];
        (void) sink;
        whisper_audio_model_free(model);
    } else if (whisper_audio_last_error()[0] == 0) {
        __builtin_trap();
    }
}

// Loads the bytes as a model file (a memfd through its /proc/self/fd path, so the loader
// runs exactly as on a file: open, fstat, pread), as fuzz_load_path. fuzz-model, fuzz-ggml
// and fuzz-ct2 share it.
static inline void fuzz_model_load(const uint8_t * data, size_t size, const char * name) {
    char path[64];
    const int fd = fuzz_memfd(data, size, name, path);
    fuzz_load_path(path);
    close(fd);
}
