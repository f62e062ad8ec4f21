// fuzz-ogg.cpp - libFuzzer target: the Ogg Vorbis path (libvorbisfile behind our reader).
// Each input is decoded twice through the stream API, from a file and from standard input
// fed by a pipe (both read as streams, never seeking), and both must agree; the output is
// capped at 2^22 samples (4.4 minutes). Seeds: tests/fuzz/corpus/ogg. docs/FUZZING.md.
#include "fuzz-util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz_file_and_pipe(data, size, "fuzz-ogg");
    return 0;
}
