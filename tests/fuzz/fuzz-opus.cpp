// fuzz-opus.cpp - libFuzzer target: Ogg Opus (opusfile behind our reader).
// The same harness as fuzz-ogg: each input is decoded from a file and from standard input fed
// by a pipe, and both must agree; the output is capped at 2^22 samples. Only the seeds differ
// (tests/fuzz/corpus/opus): the format comes from the content. docs/FUZZING.md.
#include "fuzz-util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz_file_and_pipe(data, size, "fuzz-opus");
    return 0;
}
