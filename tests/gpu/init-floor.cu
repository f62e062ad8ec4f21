// The floor under the encoder's init on CUDA (issue 21: base's init at most 0.3 s above it): what
// any program pays before its first GEMM: the CUDA context, cuBLASLt opened (dlopen, as the
// library opens it; a program linked with -lcublasLt pays this while it is loaded) and a handle
// made. Timed from the program's first line, as main times its init. Prints one JSON line; with
// an argument, opens that cuBLASLt file (default: libcublasLt.so.<major>, else the toolkit's).
//
//     nvcc -O2 tests/gpu/init-floor.cu -ldl -o build/init-floor && build/init-floor
#include <chrono>
#include <cstdio>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int main(int argc, char ** argv) {
    using clock = std::chrono::steady_clock;
    const auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    const auto t0 = clock::now();
    if (cudaFree(nullptr) != cudaSuccess) { fprintf(stderr, "init-floor: no CUDA device\n"); return 1; }   // the context
    const auto t1 = clock::now();
    void * h = dlopen(argc > 1 ? argv[1] : "libcublasLt.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!h && argc == 1) h = dlopen("/usr/local/cuda/lib64/libcublasLt.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "init-floor: %s\n", dlerror()); return 1; }
    const auto create = (cublasStatus_t (*)(cublasLtHandle_t *))dlsym(h, "cublasLtCreate");
    const auto t2 = clock::now();
    cublasLtHandle_t lt = nullptr;
    if (!create || create(&lt) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "init-floor: cublasLtCreate failed\n"); return 1; }
    const auto t3 = clock::now();
    void * pinned = nullptr;               // the price of pinned memory, a MiB of it
    const size_t mib = 64;
    if (cudaMallocHost(&pinned, mib << 20) != cudaSuccess) { fprintf(stderr, "init-floor: cudaMallocHost failed\n"); return 1; }
    const auto t4 = clock::now();
    printf("{\"context_ms\": %.3f, \"cublaslt_open_ms\": %.3f, \"cublaslt_create_ms\": %.3f, \"floor_ms\": %.3f, "
           "\"pinned_ms_per_mib\": %.4f}\n", ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t0, t3), ms(t3, t4) / mib);
    cudaFreeHost(pinned);
    return 0;
}
