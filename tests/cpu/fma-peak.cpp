// fma-peak: this CPU's f32 FMA throughput, the roof under the CPU encoder's GFLOP/s figures.
// Each thread runs 12 independent chains of 256-bit FMAs (AVX2) and, where the CPU has it, 16
// of 512-bit ones (AVX-512), enough to cover the FMA latency on every x86 core of the last
// decade, on values that stay normal. Prints one line per thread count and instruction set:
// GFLOP/s, the best of 3 (the AVX2 roof on an AVX-512 CPU is the one its avx2 kernels face).
//
//   build/fma-peak [THREADS...]        (default: 1 and every logical CPU)
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static const long ITERS = 100000000;   // FMA rounds a thread: about 0.2-0.5 s

__attribute__((target("avx2,fma"))) static float chains_avx2() {
    __m256 a[12];
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);   // a -> 1e-6 / (1 - m) = 1
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float) i);
    for (long n = 0; n < ITERS; n++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    float out[8], sum = 0;
    for (int i = 0; i < 12; i++) { _mm256_storeu_ps(out, a[i]); sum += out[0]; }
    return sum;
}

__attribute__((target("avx512f"))) static float chains_avx512() {
    __m512 a[16];
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float) i);
    for (long n = 0; n < ITERS; n++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    float sum = 0;
    for (int i = 0; i < 16; i++) sum += _mm512_reduce_add_ps(a[i]);
    return sum;
}

int main(int argc, char ** argv) {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f");
    if (!avx512 && !avx2) {
        printf("fma-peak: this CPU has neither AVX2 + FMA nor AVX-512\n");
        return 0;
    }
    std::vector<int> counts;
    for (int i = 1; i < argc; i++) counts.push_back(std::max(1, atoi(argv[i])));
    if (counts.empty()) counts = {1, (int) std::max(1u, std::thread::hardware_concurrency())};
    for (const bool wide : {true, false}) {
        if (wide ? !avx512 : !avx2) continue;
        const double flop_per_thread = (double) ITERS * (wide ? 16 * 16 : 12 * 8) * 2;
        for (int n : counts) {
            double best = 1e30;
            for (int round = 0; round < 3; round++) {
                std::vector<float> sink(n);
                const auto t0 = std::chrono::steady_clock::now();
                std::vector<std::thread> threads;
                for (int t = 0; t < n; t++) threads.emplace_back([&, t] { sink[t] = wide ? chains_avx512() : chains_avx2(); });
                for (std::thread & t : threads) t.join();
                best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                if (sink[0] != sink[0]) return 1;   // (the chains' results are used)
            }
            printf("fma-peak: %d threads, %s: %.1f GFLOP/s\n", n, wide ? "avx512" : "avx2", n * flop_per_thread / best / 1e9);
        }
    }
    return 0;
}
