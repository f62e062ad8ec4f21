// fuzz-mp3.cpp - libFuzzer target: MP3 (libmpg123 in feed mode behind our reader).
// The same harness as fuzz-ogg: each input is decoded from a file and from standard input fed
// by a pipe, and both must agree; the output is capped at 2^22 samples. Only the seeds differ
// (tests/fuzz/corpus/mp3): the format comes from the content. docs/FUZZING.md.
#include "fuzz-util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz_file_and_pipe(data, size, "fuzz-mp3");
    return 0;
}
