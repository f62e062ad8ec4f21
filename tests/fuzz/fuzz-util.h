// fuzz-util.h - what the fuzz targets share: the input bytes as a file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
