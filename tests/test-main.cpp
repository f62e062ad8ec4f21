// The test binary's main: doctest's, then one line when the CUDA tests were skipped because no
// CUDA device can be used here (test-util.h's no_gpu), so that a run without a GPU says so:
// [doctest] the CUDA tests: skipped: no CUDA device (<the CUDA backend's message>)
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test-util.h"

#include <cstdio>

int main(int argc, char ** argv) {
    doctest::Context context(argc, argv);
    const int rc = context.run();
    if (context.shouldExit()) return rc;            // --help, --list-test-cases, ...
    if (no_gpu()) printf("[doctest] the CUDA tests: skipped: no CUDA device (%s)\n", no_gpu_reason().c_str());
    return rc;
}
