// vt-cuda.cu - the CUDA backend of vt: f16/bf16 compute with f32 accumulation (and FP8 GEMMs).
//
// What runs where (one stream per backend; the whole forward captured once per graph as a
// CUDA graph and replayed by later vt_backend_compute calls):
//
//   linear      cuBLASLt GEMM (f32 compute), bias in its BIAS epilogue, residual as
//               beta = 1 with C = residual; exact-erf GELU as one elementwise pass after it;
//               the algorithm timed among the heuristic's best 8 at alloc_graph (tune_gemm;
//               VT_GEMM_TUNE=0 keeps the heuristic's first). FP8 mode
//               (vt_backend_cuda_init_fp8, weights flagged vt_set_fp8): e4m3 operands, the
//               input quantized per row by quantize_rows_kernel, or by the LayerNorm or fc1's
//               GELU epilogue before it (plan_fp8), per-channel x per-token scales in cuBLASLt
//   conv1d_k3   im2col_k3_kernel (on device, any input strides and type) + cuBLASLt GEMM,
//               then epilogue_kernel: bias + exact GELU + the positional add, in f32
//   layer_norm  layer_norm_vec_kernel: a warp per row, 16-byte loads, the row in registers,
//               two-pass f32 statistics (layer_norm_kernel for the odd shapes)
//   attention   on compute capability 9.0 (H100/H200): attention_wgmma_kernel, FlashAttention-3
//               style: a TMA producer warpgroup fills a 3-stage K/V ring (mbarriers), two
//               consumer warpgroups of 64 query rows run S = Q K^T and O += P V on wgmma
//               (P from registers), the softmax of one key tile beside the P V of the last.
//               Elsewhere (and with VT_ATTENTION=fa2): attention_kernel, FlashAttention-2
//               style, mma.sync m16n8k16, K/V tiles double-buffered with cp.async. Both: head_dim
//               64, online softmax in f32, exact key count (the tail of the last tile masked)
//
// Biases live in f32 (as the model file has them); for the GEMM's BIAS epilogue, which
// wants the output's type, alloc_weights keeps a compute-type shadow of every f32 weight,
// filled by set_tensor.
//
// Limits (checked at alloc_graph, which fails with a message): attention needs head_dim
// 64 and 16-byte aligned rows (row strides and view offsets multiples of 16 bytes; the wgmma
// kernel's TMA maps need the same, and a view whose strides TMA still refuses runs on
// attention_kernel); GEMM operands must share one type (f16 or bf16; the conv input may be
// anything). cuBLASLt takes any M, N, K (odd sizes run on its slower, less aligned kernels).
//
// Environment: VT_ATTENTION=fa2 runs attention_kernel on every device (to compare, or as a
// fallback); VT_ATTENTION=wgmma insists on attention_wgmma_kernel (the backend does not start
// off cc 9.0), wgmma-nopp the same without its ping-pong between consumers, wgmma-1tile with
// a block per work tile instead of persistent blocks (both to measure what they bring);
// unset: wgmma on cc 9.0 when the build has sm_90a code (the Makefile's and CMake's do),
// fa2 elsewhere. Read when a backend starts. WHISPER_AUDIO_CUBLASLT and
// WHISPER_AUDIO_NVIDIA_LIB_DIRS: where cuBLASLt is looked for ("the CUDA libraries, found at run
// time", below).
//
// Sections: utilities, kernels, launchers, the backend.
//
// attention versions (H200, T 1500, 20 heads, B 32, f16; bf16 the same within 1%;
// VT_CUDA_BENCH in tests/test-cuda.cpp, tests/gpu/attention.py beside torch):
//   v1  attention_kernel, FA2 as above, 128 query rows per block:        249 TFLOP/s
//       (64 rows per block: 204, 221 with v2's changes: half the reuse of each K/V fragment)
//   v2  per-lane ldmatrix offsets precomputed (the swizzle term depends on lane % 8
//       only), ex2.approx.ftz instead of exp2f:                            280 TFLOP/s
//   v3  attention_wgmma_kernel (sm_90a): persistent blocks, TMA + mbarrier ring of 3 K/V
//       stages, 128 x 128 tiles, wgmma with P from registers, intra-warpgroup overlap and
//       ping-pong between the two consumer warpgroups, setmaxnreg 24/240:  398-401 TFLOP/s
//       (B 1: 274-281; no ping-pong: 404-405 at B 32, 245 at B 1; torch's cuDNN attention in
//       the same run 367 at B 32; docs/BENCHMARKS.md, issue 12)

#define VT_BACKEND_IMPL
#include "vt.h"

#include <cublasLt.h>
#include <cuda.h>   // CUtensorMap and its enums (types only: the driver call is found at run time)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

// =====================================================================================
// utilities
// =====================================================================================

// A failed CUDA call becomes an error value: the call, the error string, file:line.
#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        const cudaError_t err_ = (call);                                                   \
        if (err_ != cudaSuccess) {                                                         \
            vt_set_error("cuda: %s failed: %s (%s:%d)", #call, cudaGetErrorString(err_),   \
                         __FILE__, __LINE__);                                              \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        const cublasStatus_t st_ = (call);                                                 \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                \
            vt_set_error("cublasLt: %s failed: %s (%s:%d)", #call,                         \
                         g_lt.cublasLtGetStatusString(st_), __FILE__, __LINE__);                \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

// Every device allocation of the backend goes through here. VT_CUDA_MEMORY_LIMIT (bytes; for
// tests) fails those past that total since the process started, as a full GPU fails them, so
// that running out of memory mid-run can be tested on a GPU of any size.
static std::atomic<size_t> g_device_allocated{0};
static cudaError_t device_malloc_bytes(void ** p, size_t bytes) {
    const char * limit = getenv("VT_CUDA_MEMORY_LIMIT");
    if (limit && *limit && g_device_allocated + bytes > (size_t)strtoull(limit, nullptr, 10)) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    const cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaSuccess) g_device_allocated += bytes;
    return err;
}
template <typename T> static cudaError_t device_malloc(T ** p, size_t bytes) {
    return device_malloc_bytes((void **)p, bytes);
}

size_t vt_cuda_bytes_allocated(void) { return g_device_allocated; }

// After a kernel launch: a bad configuration shows up here.
#define LAUNCH_CHECK(name)                                                                 \
    do {                                                                                   \
        const cudaError_t err_ = cudaGetLastError();                                       \
        if (err_ != cudaSuccess) {                                                         \
            vt_set_error("cuda: launch of %s failed: %s (%s:%d)", name,                    \
                         cudaGetErrorString(err_), __FILE__, __LINE__);                    \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// The largest power of two (at most 256) that divides an address or a byte count.
static inline uint32_t alignment_of(uintptr_t x) {
    uint32_t a = 256;
    while (a > 1 && (x % a) != 0) a /= 2;
    return a;
}

static const size_t LT_WORKSPACE_BYTES = 32u << 20;    // cuBLASLt's recommended size on Hopper
static const int    LT_CANDIDATES = 8;                 // algorithms a linear's GEMM is timed with (tune_gemm)
static const size_t IM2COL_CAP_BYTES   = 96u << 20;    // conv GEMMs run in chunks of windows

// ---- the CUDA libraries, found at run time ----
//
// No file we build lists a CUDA library as NEEDED, so that a CUDA build starts (and runs on the
// CPU) on a machine without them: the CUDA runtime is linked in statically (-cudart static),
// and it opens the driver (libcuda.so.1) itself when a backend starts; cuBLASLt is opened here
// with dlopen, and every cuBLASLt function the backend calls goes through g_lt, a table of
// their addresses filled once per process by cublaslt_load (the library stays loaded until
// exit). The places tried, in order (the first that loads wins):
//
//   1. $WHISPER_AUDIO_CUBLASLT: a path to the file; when set, nothing else is tried
//   2. each folder of $WHISPER_AUDIO_NVIDIA_LIB_DIRS (':'-separated): the Python package sets it
//      at import to the lib folders of the nvidia-cublas wheel beside it (nvidia/cu13/lib)
//   3. libcublasLt.so.<major>: the system's, as the dynamic loader finds it (LD_LIBRARY_PATH,
//      /etc/ld.so.cache, /lib, /usr/lib): a CUDA Toolkit whose folder is in ld.so.conf
//   4. /usr/local/cuda/lib64/libcublasLt.so.<major>: the toolkit's default place otherwise
//
// <major> is the cuBLAS major version of the headers we were built with (CUBLAS_VER_MAJOR);
// the library found must report that major.

#define CUBLASLT_FUNCTIONS(X)                                                                  \
    X(cublasLtGetVersion) X(cublasLtGetStatusString) X(cublasLtCreate) X(cublasLtDestroy)      \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                               \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                       \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct cublaslt_api {
#define CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
    CUBLASLT_FUNCTIONS(CUBLASLT_MEMBER)
#undef CUBLASLT_MEMBER
};
static cublaslt_api g_lt;

#define CUBLASLT_STR2(x) #x
#define CUBLASLT_STR(x) CUBLASLT_STR2(x)
static const char * const CUBLASLT_SONAME = "libcublasLt.so." CUBLASLT_STR(CUBLAS_VER_MAJOR);

// The NVIDIA driver a CUDA major version needs (NVIDIA's minor version compatibility table:
// CUDA 12.x needs 525 or newer, 13.x 580 or newer).
static const char * driver_needed(int cuda_major) {
    return cuda_major == 12 ? "525" : cuda_major == 13 ? "580" : "its";
}

// Opens one candidate and fills g_lt from it; on failure the reason, and g_lt left empty.
static bool cublaslt_open(const std::string & path, std::string & why) {
    void * h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char * e = dlerror();
        why = e && !strstr(e, "No such file or directory") ? e : "not found";
        return false;
    }
    cublaslt_api api;
    const char * missing = nullptr;
#define CUBLASLT_FIND(name) \
    if (!missing && !(api.name = (decltype(api.name))dlsym(h, #name))) missing = #name;
    CUBLASLT_FUNCTIONS(CUBLASLT_FIND)
#undef CUBLASLT_FIND
    if (missing) {
        why = std::string("it has no ") + missing;
        dlclose(h);
        return false;
    }
    const size_t version = api.cublasLtGetVersion();   // major * 10000 + minor * 100 + patch
    if ((int)(version / 10000) != CUBLAS_VER_MAJOR) {
        why = "it is cuBLASLt " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
              ", not " CUBLASLT_STR(CUBLAS_VER_MAJOR) ".x";
        dlclose(h);
        return false;
    }
    g_lt = api;
    return true;
}

// Fills g_lt, once per process (the first backend to start); false with the reason in `error`,
// a sentence naming each place tried, when no candidate loads.
static bool cublaslt_load(std::string & error) {
    static std::mutex m;
    static bool tried = false, loaded = false;
    static std::string err;
    std::lock_guard<std::mutex> lock(m);
    if (!tried) {
        tried = true;
        std::vector<std::string> candidates;
        const char * file = getenv("WHISPER_AUDIO_CUBLASLT");
        if (file && *file) {
            candidates.push_back(file);
        } else {
            const char * dirs = getenv("WHISPER_AUDIO_NVIDIA_LIB_DIRS");
            for (const char * p = dirs ? dirs : ""; *p;) {
                const char * end = strchr(p, ':');
                const std::string dir(p, end ? end : p + strlen(p));
                if (!dir.empty()) candidates.push_back(dir + "/" + CUBLASLT_SONAME);
                p = end ? end + 1 : p + strlen(p);
            }
            candidates.push_back(CUBLASLT_SONAME);
            candidates.push_back(std::string("/usr/local/cuda/lib64/") + CUBLASLT_SONAME);
        }
        std::string tries;
        for (const std::string & c : candidates) {
            std::string why;
            if (cublaslt_open(c, why)) { loaded = true; break; }
            tries += (tries.empty() ? "" : ", ") + c + (c == CUBLASLT_SONAME ? " (the system's)" : "") +
                     (why == "not found" ? "" : ": " + why);
        }
        if (!loaded)
            err = std::string("cuBLASLt " CUBLASLT_STR(CUBLAS_VER_MAJOR) " not found (tried ") + tries +
                  "): install the CUDA Toolkit " CUBLASLT_STR(CUBLAS_VER_MAJOR) " or, for Python, nvidia-cublas "
                  CUBLASLT_STR(CUBLAS_VER_MAJOR) " (the wheel's extra [cuda]), or set WHISPER_AUDIO_CUBLASLT to the file";
    }
    error = err;
    return loaded;
}

// Element conversion on the device; T is float, __half or __nv_bfloat16.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Eight 16-bit elements in one 16-byte word, to and from f32.
template <typename T> __device__ __forceinline__ void unpack8(const uint4 & u, float (&f)[8]) {
    const T * h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = to_f32(h[i]);
}
template <typename T> __device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 u;
    T * h = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = from_f32<T>(f[i]);
    return u;
}

// Two f32 into one register of two 16-bit elements, the first in the low half.
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

// 2^x on the special-function unit, subnormals flushed (exp2(-inf) = 0)
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The exact (erf) GELU, 0.5 x (1 + erf(x / sqrt 2)), as Whisper's. CPU twin: vt.cpp's gelu_erf.
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- PTX wrappers (sm_80+): cp.async, ldmatrix, mma.sync ----

__device__ __forceinline__ uint32_t smem_addr(const void * p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, asynchronous; when !pred nothing is read and 16 zeros land.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void * src, bool pred) {
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col), f32 accumulators.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- PTX wrappers (sm_90a only): mbarrier, TMA, wgmma, setmaxnreg ----
// Compiled in the sm_90a pass only (VT_SM90A); the compute_80 PTX pass never sees them, and
// attention_wgmma_kernel's body is empty there (the host never launches it off cc 9.0).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VT_SM90A 1
#else
#define VT_SM90A 0
#endif

// 1 in the code compiled for sm_90a (where attention_wgmma_kernel has its body), 0 in the
// rest: init reads the copy this device runs, so a build without sm_90a code (say, for plain
// sm_90) never launches the empty kernel.
__device__ int g_wgmma_built = VT_SM90A;

#if VT_SM90A
// mbarrier: a 64-bit word in shared memory counting arrivals (and, for TMA, bytes) per phase.
// A waiter names the phase by its parity: wait(bar, ph) returns once phase ph has completed,
// at once if the barrier is already past it (so a first wait on parity 1 passes).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// makes the inits visible to the async proxy (TMA) before any thread uses the barriers
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// one arrival, and `bytes` more to come from TMA copies completing on this barrier
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// (the retry loop inside one asm block, labels local to it: to the compiler a straight line,
// so the warp reaches the .aligned wgmma instructions after it converged)
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT;\n}\n"
                 ::"r"(bar), "r"(parity) : "memory");
}

// TMA: the box at coordinates (c0, c1, c2) of the tensor map -> shared memory at dst, swizzled as
// the map says; out-of-bounds elements land as zeros; completion counted in bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap * map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// Registers per thread of the whole warpgroup, moved between warpgroups at run time.
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

// named barriers (ids 1..15; 0 is __syncthreads): sync waits until n threads arrived (itself
// included), arrive counts this thread without waiting
__device__ __forceinline__ void named_barrier_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_barrier_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// orders this thread's generic-proxy shared memory accesses with the async proxy's (TMA, wgmma)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// wgmma: a warpgroup (4 warps, 128 threads) issues D (64 x N, f32 in registers) += A (64 x 16)
// * B (16 x N) asynchronously. fence: before the first wgmma and after this thread touched
// registers a wgmma uses; commit: closes a group of issued wgmmas; wait<N>: until at most N
// groups are in flight (their accumulators readable, their shared memory reusable).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Pins registers in place around asynchronous wgmma: the compiler may not move, reuse or read
// them across this point (an async wgmma still reads or writes them until its wait).
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

// Matrix descriptor of a wgmma operand in shared memory, 128-byte swizzle (the layout TMA's
// SWIZZLE_128B writes): rows of 128 bytes (64 16-bit elements), 16-byte chunk c of row r at
// chunk c ^ (r % 8), in 1024-byte blocks of 8 rows (the tile 1024-byte aligned).
//   bits  0-13  start address >> 4
//   bits 16-29  leading byte offset >> 4
//   bits 32-45  stride byte offset >> 4: 1024, from one 8-row block to the next
//   bits 49-51  base offset: 0 (tiles 1024-byte aligned)
//   bits 62-63  swizzle: 1 = 128B
// K-major (Q, K: the reduction dim contiguous): a k16 step is 32 bytes inside each 128-byte
// row, so the leading offset is unused; the next k step is start + 32 bytes (the hardware
// applies the XOR to the final address, so a 32-byte step inside the swizzled row is right).
// MN-major (V, transposed: the N dim contiguous): the 64 columns of a row are one swizzle atom
// along N (the leading offset would step to the next 64 columns: unused with N = 64), and
// the 16 keys of a k step are two 8-row blocks, 1024 bytes apart (stride offset); the next k
// step is start + 2048 bytes. Both offsets are set to 1024, so the descriptor is right
// whichever of the two the hardware takes as the 8-row step.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

#define VT_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (64 x 128) = (acc ? d : 0) + A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major).
// Accumulator layout (m64nNk16): warp w of the warpgroup owns rows 16w..16w+15; lane l holds
// row 16w + l/4 (d[4j], d[4j+1]) and row 16w + l/4 + 8 (d[4j+2], d[4j+3]), at columns
// 8j + 2(l%4) and +1, j = 0..N/8-1: per 8 columns, mma.sync m16n8's C fragment.
#define VT_WGMMA_SS_N128(ty)                                                                                   \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                                \
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty "\n"                                \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                   \
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"         \
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"         \
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"        \
                 " %64, %65, p, 1, 1, 0, 0;\n}\n"                                                              \
                 : VT_F8(d, 0), VT_F8(d, 8), VT_F8(d, 16), VT_F8(d, 24), VT_F8(d, 32), VT_F8(d, 40),          \
                   VT_F8(d, 48), VT_F8(d, 56)                                                                  \
                 : "l"(da), "l"(db), "r"(acc))
template <typename T> __device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t da, uint64_t db, int acc);
template <> __device__ __forceinline__ void wgmma_m64n128k16_ss<__half>(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    VT_WGMMA_SS_N128("f16");
}
template <> __device__ __forceinline__ void wgmma_m64n128k16_ss<__nv_bfloat16>(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    VT_WGMMA_SS_N128("bf16");
}

// d (64 x 64) += A (64 x 16, registers) * B (16 x 64, shared, MN-major: trans-b = 1).
// A's fragment (per warp, 16 rows): a[0] = row l/4, columns 2(l%4), +1; a[1] = row l/4 + 8,
// same columns; a[2], a[3] = the same rows at columns + 8: mma.sync m16n8k16's A fragment,
// i.e. the accumulator layout above for two 8-column tiles, packed to 16-bit pairs.
#define VT_WGMMA_RS_N64(ty)                                                                                    \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"                                                \
                 " wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty "\n"                                 \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                   \
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"        \
                 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                \
                 : VT_F8(d, 0), VT_F8(d, 8), VT_F8(d, 16), VT_F8(d, 24)                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <typename T> __device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t * a, uint64_t db);
template <> __device__ __forceinline__ void wgmma_m64n64k16_rs<__half>(float (&d)[32], const uint32_t * a, uint64_t db) {
    VT_WGMMA_RS_N64("f16");
}
template <> __device__ __forceinline__ void wgmma_m64n64k16_rs<__nv_bfloat16>(float (&d)[32], const uint32_t * a, uint64_t db) {
    VT_WGMMA_RS_N64("bf16");
}
#endif // VT_SM90A

// =====================================================================================
// kernels
// =====================================================================================

// im2col_k3_kernel: the GEMM operand of conv1d_k3 for windows [b0, b0 + n_rows / T_out).
//   cols[r, i*3 + k] = x[b0 + r / T_out, (r % T_out) * stride + k - 1, i], 0 outside [0, T_in)
//   (the column order of PyTorch's [C_out, C_in, 3] weight, so W needs no reshuffle).
//   One thread per (r, i) in [0, n_rows) x [0, C_in), grid-stride: it reads x's three taps
//   (strides sx* in elements: any layout, e.g. the transposed f32 mel) and writes three
//   neighbouring columns. CPU twin: the col[] gather in vt.cpp's cpu_backend::conv1d_k3.
template <typename Tin, typename T>
__global__ void im2col_k3_kernel(T * __restrict__ cols, const Tin * __restrict__ x, int64_t b0, int64_t n_rows,
                                 int64_t T_out, int64_t T_in, int64_t C_in, int stride,
                                 int64_t sx0, int64_t sx1, int64_t sx2) {
    const int64_t n = n_rows * C_in;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / C_in, i = idx % C_in;
        const int64_t b = b0 + r / T_out, t = r % T_out;
        const Tin * xb = x + b * sx2 + i * sx0;
        T * dst = cols + r * 3 * C_in + i * 3;
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int64_t ti = t * stride + k - 1;
            dst[k] = from_f32<T>(ti >= 0 && ti < T_in ? to_f32(xb[ti * sx1]) : 0.0f);
        }
    }
}

// epilogue_kernel: in place on y [rows, N] (row-major), in f32:
//   y[r, n] = act(y[r, n] + bias[n]) + res[r, n] + add[r % add_rows, n]
//   (bias, res, add each optional; the order of vt.cpp's apply_epilogue, its CPU twin).
//   VEC = 8: each thread owns 8 consecutive elements of one row (16-byte loads/stores;
//   needs N % 8 == 0 and 16-byte aligned y/res); VEC = 1 for the rest. Grid-stride over
//   rows * N / VEC.
template <typename T, int VEC>
__global__ void epilogue_kernel(T * __restrict__ y, const float * __restrict__ bias, const T * __restrict__ res,
                                const float * __restrict__ add, int64_t add_rows, int64_t rows, int64_t N, int act) {
    const int64_t nv = N / VEC, n = rows * nv;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / nv, c0 = (idx % nv) * VEC;
        float v[VEC], rv[VEC];
        if constexpr (VEC == 8) {
            unpack8<T>(*reinterpret_cast<const uint4 *>(y + r * N + c0), v);
            if (res) unpack8<T>(*reinterpret_cast<const uint4 *>(res + r * N + c0), rv);
        } else {
            v[0] = to_f32(y[r * N + c0]);
            if (res) rv[0] = to_f32(res[r * N + c0]);
        }
        const float * a = add ? add + (r % add_rows) * N + c0 : nullptr;
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            float x = v[e];
            if (bias) x += bias[c0 + e];
            if (act == VT_ACT_GELU) x = gelu_erf(x);
            if (res) x += rv[e];
            if (a) x += a[e];
            v[e] = x;
        }
        if constexpr (VEC == 8) {
            *reinterpret_cast<uint4 *>(y + r * N + c0) = pack8<T>(v);
        } else {
            y[r * N + c0] = from_f32<T>(v[0]);
        }
    }
}

// epilogue_vec8_kernel: the same epilogue with no index division in the loop. Thread x owns
//   the 8 columns [c0, c0 + 8), c0 = 8 * (blockIdx.x * blockDim.x + threadIdx.x) < N, and
//   keeps their bias in registers; blocks in y walk the rows (grid-stride). Needs N % 8 == 0
//   and 16-byte aligned y/res.
template <typename T>
__global__ void epilogue_vec8_kernel(T * __restrict__ y, const float * __restrict__ bias, const T * __restrict__ res,
                                     const float * __restrict__ add, int add_rows, int rows, int N, int act) {
    const int c0 = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c0 >= N) return;
    float bv[8];
#pragma unroll
    for (int e = 0; e < 8; e++) bv[e] = bias ? bias[c0 + e] : 0.0f;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t off = (size_t)r * N + c0;
        float v[8], rv[8];
        unpack8<T>(*reinterpret_cast<const uint4 *>(y + off), v);
        if (res) unpack8<T>(*reinterpret_cast<const uint4 *>(res + off), rv);
        const float * a = add ? add + (size_t)(r % add_rows) * N + c0 : nullptr;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float x = v[e] + bv[e];
            if (act == VT_ACT_GELU) x = gelu_erf(x);
            if (res) x += rv[e];
            if (a) x += a[e];
            v[e] = x;
        }
        *reinterpret_cast<uint4 *>(y + off) = pack8<T>(v);
    }
}

// Eight f32 times inv as eight e4m3 bytes (round to nearest even, saturated), in order.
__device__ __forceinline__ uint2 e4m3x8(const float (&f)[8], float inv) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h] * inv, f[4 * h + 1] * inv), __NV_SATFINITE, __NV_E4M3);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h + 2] * inv, f[4 * h + 3] * inv), __NV_SATFINITE, __NV_E4M3);
        w[h] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    return make_uint2(w[0], w[1]);
}

static const float E4M3_MAX = 448.0f;   // e4m3's largest finite value

// layer_norm_vec_kernel: y = (x - mean) / sqrt(var + eps) * w + b over each row of C.
//   A warp owns one row (rows in [0, n_rows), blockDim.x / 32 rows per block); lane l holds
//   the 8-element vectors l, l + 32, ..., (VPL of them, C / 8 in all) in registers: one read
//   of x, one write of y, f32 statistics in two passes over the registers. Needs C % 8 == 0,
//   C <= 256 * VPL and 16-byte aligned rows. CPU twin: cpu_backend::layer_norm (double stats).
//   q non-null (FP8 mode, the norm's one use an FP8 GEMM): the row is written quantized to
//   e4m3 into q with its scale in qscale (quantize_rows_kernel's rule) instead of into y.
template <typename T, int VPL>
__global__ void layer_norm_vec_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                      const float * __restrict__ b, int64_t n_rows, int C, float eps,
                                      __nv_fp8_storage_t * __restrict__ q, float * __restrict__ qscale) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const int nv = C / 8;
    const uint4 * xr = reinterpret_cast<const uint4 *>(x + row * C);
    float v[VPL][8];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = lane + 32 * j;
        if (c < nv) {
            unpack8<T>(xr[c], v[j]);
#pragma unroll
            for (int e = 0; e < 8; e++) sum += v[j][e];
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[j][e] = 0.0f;
        }
    }
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        if (lane + 32 * j < nv) {
#pragma unroll
            for (int e = 0; e < 8; e++) { const float d = v[j][e] - mean; sq += d * d; }
        }
    }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = lane + 32 * j;
        if (c < nv) {
            const float4 w0 = reinterpret_cast<const float4 *>(w)[2 * c], w1 = reinterpret_cast<const float4 *>(w)[2 * c + 1];
            const float4 b0 = reinterpret_cast<const float4 *>(b)[2 * c], b1 = reinterpret_cast<const float4 *>(b)[2 * c + 1];
            const float ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int e = 0; e < 8; e++) {
                v[j][e] = (v[j][e] - mean) * rstd * ww[e] + bb[e];
                amax = fmaxf(amax, fabsf(v[j][e]));
            }
            if (!q) reinterpret_cast<uint4 *>(y + row * C)[c] = pack8<T>(v[j]);
        }
    }
    if (!q) return;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.0f ? amax / E4M3_MAX : 1.0f, inv = 1.0f / s;
    if (lane == 0) qscale[row] = s;
    uint2 * qr = reinterpret_cast<uint2 *>(q + row * C);
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = lane + 32 * j;
        if (c < nv) qr[c] = e4m3x8(v[j], inv);
    }
}

// layer_norm_kernel: the same for any C and type (f32 too): a warp per row, three passes
// over the row in global memory (sum, squared deviations, write). CPU twin as above.
template <typename T>
__global__ void layer_norm_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                  const float * __restrict__ b, int64_t n_rows, int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const T * xr = x + row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(xr[c]);
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) { const float d = to_f32(xr[c]) - mean; sq += d * d; }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
    T * yr = y + row * C;
    for (int c = lane; c < C; c += 32) yr[c] = from_f32<T>((to_f32(xr[c]) - mean) * rstd * w[c] + b[c]);
}

// quantize_rows_kernel: each row of x [n_rows, K] (T) to FP8 e4m3 with a scale of its own,
//   for the FP8 GEMMs (vt_backend_cuda_init_fp8): scale[r] = max_c |x[r, c]| / 448 (e4m3's
//   largest finite value; 1 for an all-zero row), q[r, c] = e4m3(x[r, c] / scale[r]),
//   rounded to nearest even and saturated (e4m3x8). The same kernel quantizes the weights at load
//   (a row is an output channel) and the activations before each GEMM (a row is a token).
//   GELU: x is a GEMM's output without its bias (may be null); the row becomes gelu(x + bias) first (fc1's
//   epilogue fused with fc2's quantization: the f16/bf16 row is never written).
//   A block of QUANT_THREADS per row; thread t holds the 8-element vectors t, t + 128, ...
//   (VPL of them) in registers: one read of x, one write of q. Needs K % 16 == 0 (checked
//   where the plan is made) and K <= 8 * QUANT_THREADS * VPL.
//   CPU twin: the test's e4m3 emulation in tests/test-cuda.cpp.
static const int QUANT_THREADS = 128;

template <typename T, int VPL, bool GELU>
__global__ void __launch_bounds__(QUANT_THREADS)
quantize_rows_kernel(__nv_fp8_storage_t * __restrict__ q, float * __restrict__ scale, const T * __restrict__ x,
                     const float * __restrict__ bias, int K) {
    __shared__ float warp_max[QUANT_THREADS / 32];
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x, nv = K / 8;
    const uint4 * xr = reinterpret_cast<const uint4 *>(x + row * K);
    float v[VPL][8];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = tid + QUANT_THREADS * j;
        if (c < nv) {
            unpack8<T>(xr[c], v[j]);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                if constexpr (GELU) v[j][e] = gelu_erf(v[j][e] + (bias ? bias[8 * c + e] : 0.0f));
                amax = fmaxf(amax, fabsf(v[j][e]));
            }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (tid % 32 == 0) warp_max[tid / 32] = amax;
    __syncthreads();
    amax = warp_max[0];
#pragma unroll
    for (int w = 1; w < QUANT_THREADS / 32; w++) amax = fmaxf(amax, warp_max[w]);
    const float s = amax > 0.0f ? amax / E4M3_MAX : 1.0f, inv = 1.0f / s;
    if (tid == 0) scale[row] = s;
    uint2 * qr = reinterpret_cast<uint2 *>(q + row * K);
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        const int c = tid + QUANT_THREADS * j;
        if (c < nv) qr[c] = e4m3x8(v[j], inv);
    }
}

// attention_kernel: out[b, i, h*64 + d] = sum_j softmax_j(q_i . k_j * scale) v[j, d], over
// all n_ctx keys (non-causal), for one (query tile, head, window) per block:
//   grid (ceil(n_ctx / BR), n_head, B), 128 threads = 4 warps, BR = 64 * MT query rows;
//   warp w owns rows [w * 16 * MT, (w + 1) * 16 * MT) of the tile: MT m16 tiles whose Q
//   fragments stay in registers for the whole key loop.
//   Keys go by tiles of 64 (BC): K and V tiles double-buffered in shared memory through
//   cp.async (tile j + 1 loads while tile j computes). Per tile, per warp:
//     S = Q K^T (mma m16n8k16, f32), masked to -inf past n_ctx on the last tile,
//     online softmax in f32 (running max m and sum l per row, exp2 with the scale folded
//     into scale_log2 = scale * log2 e), P rounded to T and fed from registers as the A
//     operand of O += P V (V fragments via ldmatrix.trans).
//   Rows past n_ctx compute on zero queries and are not stored; keys past n_ctx are
//   zero-filled (so P = 0 meets finite V) and masked.
//   kv_len (vt_attention_masked; may be null): window b's keys from kv_len[b] on are masked
//   the same way, and the tiles wholly past it are skipped.
//   Shared memory rows are 64 elements = 8 chunks of 16 bytes; chunk c of row r sits at
//   slot c ^ (r & 7), so ldmatrix's 8 row reads and cp.async's row writes hit distinct banks.
//   q/k/v rows: strides in elements (row, window); head h starts at column h * 64.
//   CPU twin: cpu_backend::attention in vt.cpp.
static const int ATT_HD = 64, ATT_BC = 64, ATT_THREADS = 128;

template <typename T, int MT>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_kernel(const T * __restrict__ q, const T * __restrict__ k, const T * __restrict__ v, T * __restrict__ out,
                 int n_ctx, int n_head, int64_t q_row, int64_t q_win, int64_t k_row, int64_t k_win,
                 int64_t v_row, int64_t v_win, float scale_log2, const float * __restrict__ kv_len) {
    constexpr int BR = 16 * MT * 4;
    extern __shared__ uint4 smem[];
    uint4 * sQ = smem;                       // [BR][8] chunks; reused to stage the output
    uint4 * sK = smem + BR * 8;              // [2][BC][8]
    uint4 * sV = sK + 2 * ATT_BC * 8;        // [2][BC][8]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
    const T * qg = q + b * q_win + h * ATT_HD;
    const T * kg = k + b * k_win + h * ATT_HD;
    const T * vg = v + b * v_win + h * ATT_HD;
    const int n_kv = kv_len ? max(1, min(n_ctx, (int)kv_len[b])) : n_ctx;   // keys this window attends to

    // Q tile (rows past n_ctx zero-filled)
#pragma unroll
    for (int c = tid; c < BR * 8; c += ATT_THREADS) {
        const int r = c / 8, ch = c % 8, qi = q0 + r;
        const bool ok = qi < n_ctx;
        cp_async16(smem_addr(&sQ[r * 8 + (ch ^ (r & 7))]), qg + (int64_t)(ok ? qi : 0) * q_row + ch * 8, ok);
    }
    auto load_kv = [&](int tile, int buf) {
        uint4 * dk = sK + buf * ATT_BC * 8;
        uint4 * dv = sV + buf * ATT_BC * 8;
#pragma unroll
        for (int c = tid; c < ATT_BC * 8; c += ATT_THREADS) {
            const int r = c / 8, ch = c % 8, kj = tile * ATT_BC + r;
            const bool ok = kj < n_kv;
            const int slot = r * 8 + (ch ^ (r & 7));
            cp_async16(smem_addr(&dk[slot]), kg + (int64_t)(ok ? kj : 0) * k_row + ch * 8, ok);
            cp_async16(smem_addr(&dv[slot]), vg + (int64_t)(ok ? kj : 0) * v_row + ch * 8, ok);
        }
    };
    load_kv(0, 0);
    cp_async_commit();

    const int g = lane / 4, t4 = lane % 4;      // mma fragment coordinates: row group, thread in quad
    const int wr = warp * 16 * MT;              // this warp's first row in the tile
    const int n_tiles = (n_kv + ATT_BC - 1) / ATT_BC;

    // ldmatrix addresses: every row this lane points at is = lane (mod 8), so the swizzle
    // term is a per-lane constant; what varies in the loop is a compile-time offset.
    //   K (S = Q K^T): row jn*8 + lane%8, chunk (p*4 + lane/8) ^ (lane%8)
    //   V (O += P V):  row kk*16 + lane%8 + (lane/8 & 1)*8, chunk (dp*2 + lane/16) ^ (lane%8)
    const uint32_t sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);
    uint32_t k_off[2], v_off[4];
#pragma unroll
    for (int p = 0; p < 2; p++) k_off[p] = ((lane % 8) * 8 + ((p * 4 + lane / 8) ^ (lane % 8))) * 16;
#pragma unroll
    for (int dp = 0; dp < 4; dp++)
        v_off[dp] = ((lane % 8 + ((lane / 8) & 1) * 8) * 8 + ((dp * 2 + lane / 16) ^ (lane % 8))) * 16;

    uint32_t qf[MT][4][4];                      // Q as A fragments: [m tile][k step of 16 dims]
    float o[MT][8][4];                          // O accumulators: [m tile][8-dim n tile]
    float m_run[MT][2], l_run[MT][2];           // per row (g, g + 8): running max and partial sum
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dn = 0; dn < 8; dn++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][dn][e] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    for (int j = 0; j < n_tiles; j++) {
        if (j + 1 < n_tiles) load_kv(j + 1, (j + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();                     // everything but the newest group: tile j (and Q)
        __syncthreads();

        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int mi = lane / 8;
                    const int r = wr + mt * 16 + (lane % 8) + (mi & 1) * 8, ch = ks * 2 + (mi >> 1);
                    ldmatrix_x4(qf[mt][ks], smem_addr(&sQ[r * 8 + (ch ^ (r & 7))]));
                }
        }
        const uint32_t tK = sK_addr + (j & 1) * ATT_BC * 8 * 16;   // this tile's buffers (bytes)
        const uint32_t tV = sV_addr + (j & 1) * ATT_BC * 8 * 16;

        // S = Q K^T: s[mt][n tile of 8 keys][4]
        float s[MT][8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][jn][e] = 0.0f;
#pragma unroll
        for (int jn = 0; jn < 8; jn++) {
            uint32_t kf[2][4];                  // [pair of k steps] -> b0, b1 of k step 2p, then of 2p + 1
#pragma unroll
            for (int p = 0; p < 2; p++) ldmatrix_x4(kf[p], tK + jn * 8 * 8 * 16 + k_off[p]);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int ks = 0; ks < 4; ks++)
                    mma_16816<T>(s[mt][jn], qf[mt][ks], kf[ks / 2][(ks % 2) * 2], kf[ks / 2][(ks % 2) * 2 + 1]);
        }

        // mask keys past n_kv (last tile only)
        if ((j + 1) * ATT_BC > n_kv) {
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = j * ATT_BC + jn * 8 + t4 * 2 + (e & 1);
                    if (key >= n_kv) {
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) s[mt][jn][e] = -INFINITY;
                    }
                }
        }

        // online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3) of each m tile
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float mx = -INFINITY;
#pragma unroll
                for (int jn = 0; jn < 8; jn++) mx = fmaxf(mx, fmaxf(s[mt][jn][2 * hf], s[mt][jn][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m_run[mt][hf], mx);          // finite: each tile has a key
                const float alpha = exp2_ftz((m_run[mt][hf] - m_new) * scale_log2);
                const float ms = m_new * scale_log2;
                m_run[mt][hf] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int jn = 0; jn < 8; jn++)
#pragma unroll
                    for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                        const float p = exp2_ftz(fmaf(s[mt][jn][e], scale_log2, -ms));
                        s[mt][jn][e] = p;
                        sum += p;
                    }
                l_run[mt][hf] = l_run[mt][hf] * alpha + sum;
#pragma unroll
                for (int dn = 0; dn < 8; dn++) {
                    o[mt][dn][2 * hf] *= alpha;
                    o[mt][dn][2 * hf + 1] *= alpha;
                }
            }

        // O += P V: k steps of 16 keys; P's A fragment is two S n tiles
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < 4; dp++) {
                uint32_t vf[4];                 // b0, b1 of dim tile 2dp, then of 2dp + 1
                ldmatrix_x4_trans(vf, tV + kk * 16 * 8 * 16 + v_off[dp]);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_16816<T>(o[mt][2 * dp], pa[mt], vf[0], vf[1]);
                    mma_16816<T>(o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
                }
            }
        }
        __syncthreads();                        // buffer j & 1 is free for tile j + 2
    }

    // normalise, stage this warp's rows in sQ (its own rows only), then 16-byte stores
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = l_run[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.0f / l;
            const int r = wr + mt * 16 + g + hf * 8;
#pragma unroll
            for (int dn = 0; dn < 8; dn++) {
                uint32_t * dst = reinterpret_cast<uint32_t *>(&sQ[r * 8 + (dn ^ (r & 7))]) + t4;
                *dst = pack2<T>(o[mt][dn][2 * hf] * inv, o[mt][dn][2 * hf + 1] * inv);
            }
        }
    __syncwarp();
    const int64_t o_row = (int64_t)n_head * ATT_HD;
    T * og = out + (int64_t)b * n_ctx * o_row + h * ATT_HD;
#pragma unroll
    for (int c = lane; c < 16 * MT * 8; c += 32) {
        const int r = wr + c / 8, ch = c % 8, qi = q0 + r;
        if (qi < n_ctx) *reinterpret_cast<uint4 *>(og + qi * o_row + ch * 8) = sQ[r * 8 + (ch ^ (r & 7))];
    }
}

// attention_wgmma_kernel: the same op as attention_kernel, for Hopper (sm_90a): wgmma, TMA and
// mbarriers in FlashAttention-3's structure. Work tile: (128 queries, head, window), n_work =
// ceil(n_ctx / 128) * n_head * B of them, numbered query tile fastest (neighbouring blocks
// share a head's K/V in L2). Persistent: grid = min(n_work, SMs) blocks of 384 threads = 3
// warpgroups, one block per SM; block i takes work tiles i, i + grid, ... (a grid of n_work
// gives one tile a block: VT_ATTENTION=wgmma-1tile, to measure the difference).
//   Roles (warp-specialised):
//     warpgroup 0, the producer: gives its registers away (setmaxnreg.dec 24); one thread
//       issues TMA copies: per work tile the Q tile (once the consumers released the last),
//       then K and V tiles of 128 keys into a ring of ATT_WG_STAGES stages that runs on
//       across work tiles, each stage refilled once both consumers released it.
//     warpgroups 1 and 2, the consumers (setmaxnreg.inc 240): consumer c owns query rows
//       [64c, 64c + 64) of the tile. Per key tile j:
//         S = Q K^T     wgmma m64n128k16 x 4 (k = 64 dims), A = Q and B = K from shared memory
//         softmax       online, f32 in registers: S is 64 x 128, each thread 2 rows x 32 keys
//                       (the wgmma accumulator layout), row max/sum over the 4 lanes of a quad
//         O += P V      wgmma m64n64k16 x 8 (k = 128 keys), A = P from registers (the S
//                       accumulator converted to 16-bit pairs is exactly wgmma's register-A
//                       fragment), B = V from shared memory, transposed (MN-major)
//       pipelined inside the warpgroup (FA3's intra-warpgroup overlap): S of tile j is issued
//       before P V of tile j - 1, and the softmax of tile j runs while P V of tile j - 1 is
//       still on the tensor cores; O is rescaled and P rewritten only after that P V is done.
//       PP (FA3's ping-pong; VT_ATTENTION=wgmma-nopp leaves it out): the consumers take
//       turns issuing their GEMMs (named barriers 3 and 4), so one's softmax runs while the
//       other's GEMMs hold the tensor cores.
//       O goes from registers straight to global memory (normalised, 4-byte pairs), so the
//       next work tile's Q may land while this one finishes.
//   Barriers (mbarrier, one phase per use, waited on by parity): q_full (TMA bytes of Q),
//   q_empty (8 arrivals: one per consumer warp once its last S of the work tile is done),
//   k_full[s], v_full[s] (TMA bytes of a stage's K, V: S needs only K, so it starts before V
//   lands), kv_empty[s] (8 arrivals: one per consumer warp after its P V of that stage).
//   Shared memory (1024-byte aligned; every tile 128 rows x 128 bytes = 16 KB, as TMA's
//   SWIZZLE_128B writes it: 16-byte chunk c of row r at chunk c ^ (r % 8)):
//     sQ [128 rows]  |  sK [STAGES][128 keys]  |  sV [STAGES][128 keys]  |  mbarriers
//   Masking: Q and K/V rows past n_ctx arrive from TMA as zeros (its bounds are the view's
//   n_ctx rows of window b); keys from n_kv on (n_ctx, or kv_len[b]) are set to -inf in S on
//   the last tile, and tiles wholly past n_kv are never loaded.
//   Registers: ptxas gives each thread 168 at launch (65536 / 384, in steps of 8); the
//   producer drops to 24 and the consumers take 240 (24 + 2 x 240 = 3 x 168).
//   q/k/v: TMA maps over [B][n_ctx][n_head * 64] with the views' strides (made at launch).
//   CPU twin: cpu_backend::attention in vt.cpp.
static const int ATT_WG_BR = 128, ATT_WG_BC = 128, ATT_WG_STAGES = 3, ATT_WG_THREADS = 384;
static const int ATT_WG_TILE = 128 * 128;       // bytes of one Q, K or V tile: 128 rows x 64 16-bit elements

static size_t attention_wgmma_smem_bytes() {
    return 1024 + (size_t)ATT_WG_TILE * (1 + 2 * ATT_WG_STAGES) + 8 * (2 + 3 * ATT_WG_STAGES);
}

template <typename T, bool PP>
__global__ void __launch_bounds__(ATT_WG_THREADS, 1)
attention_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, T * __restrict__ out, int n_ctx, int n_head, int B,
                       float scale_log2, const float * __restrict__ kv_len) {
#if VT_SM90A
    constexpr int BC = ATT_WG_BC, ST = ATT_WG_STAGES, TILE = ATT_WG_TILE;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;     // shared-space addresses (bytes)
    const uint32_t sK = sQ + TILE;
    const uint32_t sV = sK + ST * TILE;
    const uint32_t bars = sV + ST * TILE;
    const uint32_t q_full = bars, q_empty = bars + 8;
    auto k_full = [&](int s) { return bars + 8 * (2 + s); };
    auto v_full = [&](int s) { return bars + 8 * (2 + ST + s); };
    auto kv_empty = [&](int s) { return bars + 8 * (2 + 2 * ST + s); };

    const int tid = threadIdx.x, wg = tid / 128;
    const int n_qt = (n_ctx + ATT_WG_BR - 1) / ATT_WG_BR, n_work = n_qt * n_head * B;
    // work tile w: query tile, head, window, and the number of key tiles it reads
    struct work { int q0, h, b, n_kv, n_tiles; };
    auto decode = [&](int w) {
        work t;
        t.q0 = (w % n_qt) * ATT_WG_BR;
        t.h = (w / n_qt) % n_head;
        t.b = w / (n_qt * n_head);
        t.n_kv = kv_len ? max(1, min(n_ctx, (int)kv_len[t.b])) : n_ctx;   // keys this window attends to
        t.n_tiles = (t.n_kv + BC - 1) / BC;
        return t;
    };

    if (tid == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 8);
        for (int s = 0; s < ST; s++) {
            mbar_init(k_full(s), 1);
            mbar_init(v_full(s), 1);
            mbar_init(kv_empty(s), 8);
        }
        mbar_fence_init();
    }
    __syncthreads();

    // ---- producer ----
    if (wg == 0) {
        setmaxnreg_dec<24>();
        if (tid == 0) {
            int it = 0;                                 // K/V tiles loaded so far: stage it % ST, round it / ST
            int wi = 0;                                 // work tiles so far: Q's round
            for (int w = blockIdx.x; w < n_work; w += gridDim.x, wi++) {
                const work t = decode(w);
                mbar_wait(q_empty, (wi & 1) ^ 1);       // the last Q released (passes at once the first time)
                mbar_arrive_expect_tx(q_full, TILE);
                tma_load_3d(sQ, &tm_q, q_full, t.h * 64, t.q0, t.b);
                for (int j = 0; j < t.n_tiles; j++, it++) {
                    const int s = it % ST;
                    mbar_wait(kv_empty(s), ((it / ST) & 1) ^ 1);
                    mbar_arrive_expect_tx(k_full(s), TILE);
                    tma_load_3d(sK + s * TILE, &tm_k, k_full(s), t.h * 64, j * BC, t.b);
                    mbar_arrive_expect_tx(v_full(s), TILE);
                    tma_load_3d(sV + s * TILE, &tm_v, v_full(s), t.h * 64, j * BC, t.b);
                }
            }
        }
        return;
    }

    // ---- consumers ----
    setmaxnreg_inc<240>();
    const int cw = wg - 1;                              // rows [64 cw, 64 cw + 64) of the tile
    const int warp = (tid % 128) / 32, lane = tid % 32, t4 = lane % 4;
    const uint64_t dq = sw128_desc(sQ + cw * 64 * 128);
    const uint64_t dk = sw128_desc(sK), dv = sw128_desc(sV);
    // descriptor + bytes: the start address field counts 16-byte units in the low bits
    auto at = [](uint64_t d, uint32_t bytes) { return d + (bytes >> 4); };

    float s[64];            // S accumulator: s[4j + e], key column 8j + 2 t4 + (e & 1), row +8 if e >= 2
    float o[32];            // O accumulator, the same layout over 64 dims
    uint32_t p[32];         // P as register-A fragments: p[4kk .. 4kk + 3] for keys [16kk, 16kk + 16)
    float m_run[2], l_run[2];                           // rows l/4, l/4 + 8 of this warp's 16

    // S = Q K^T for the tile in stage st (issued, not waited on)
    auto issue_s = [&](int st) {
#pragma unroll
        for (int ks = 0; ks < 4; ks++) wgmma_m64n128k16_ss<T>(s, at(dq, ks * 32), at(dk, st * TILE + ks * 32), ks > 0);
        wgmma_commit();
    };
    // O += P V for the tile in stage st (issued, not waited on)
    auto issue_pv = [&](int st) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) wgmma_m64n64k16_rs<T>(o, &p[4 * kk], at(dv, st * TILE + kk * 16 * 128));
        wgmma_commit();
    };
    // Masks key tile j past n_kv, updates the running max and sum, turns S into exp values in
    // place; alpha: what O's rows must be scaled by.
    auto softmax = [&](int j, int n_kv, float (&alpha)[2]) {
        if ((j + 1) * BC > n_kv) {
#pragma unroll
            for (int i = 0; i < 64; i++)
                if (j * BC + (i / 4) * 8 + 2 * t4 + (i & 1) >= n_kv) s[i] = -INFINITY;
        }
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float mx = -INFINITY;
#pragma unroll
            for (int jn = 0; jn < 16; jn++) mx = fmaxf(mx, fmaxf(s[4 * jn + 2 * hf], s[4 * jn + 2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[hf], mx);              // finite: each tile has a key
            alpha[hf] = exp2_ftz((m_run[hf] - m_new) * scale_log2); // 0 on the first tile
            const float ms = m_new * scale_log2;
            m_run[hf] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int jn = 0; jn < 16; jn++)
#pragma unroll
                for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    const float pv = exp2_ftz(fmaf(s[4 * jn + e], scale_log2, -ms));
                    s[4 * jn + e] = pv;
                    sum += pv;
                }
            l_run[hf] = l_run[hf] * alpha[hf] + sum;
        }
    };
    // O *= alpha (per row), P = S in T, packed as register-A fragments
    auto rescale_and_pack = [&](const float (&alpha)[2]) {
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            p[4 * kk + 0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);   // row r,     keys 16kk + 2t4 (+1)
            p[4 * kk + 1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);   // row r + 8, the same keys
            p[4 * kk + 2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);   // row r,     keys + 8
            p[4 * kk + 3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);   // row r + 8, keys + 8
        }
    };
    // a stage's K and V (or the Q tile) may be overwritten: one arrival per warp, after the
    // wgmma wait that covers its last reader
    auto release = [&](uint32_t bar) {
        if (lane == 0) mbar_arrive(bar);
    };
    // ping-pong: before issuing GEMMs a consumer waits for its turn (barrier 3 + cw: its own
    // 128 threads and the other's 128 arrivals), after them it passes the turn. Both take the
    // same turns (n_tiles + 1 a work tile); consumer 1 hands consumer 0 the first turn and
    // keeps its very last pass (consumer 0 takes no turn after it): every phase is matched.
    auto turn_wait = [&]() {
        if (PP) named_barrier_sync(3 + cw, 256);
    };
    auto turn_pass = [&](bool last) {
        if (PP && !(last && cw == 1)) named_barrier_arrive(3 + (1 - cw), 256);
    };
    if (PP && cw == 1) named_barrier_arrive(3, 256);

    int it = 0;                                         // K/V tiles consumed so far (as the producer counts)
    int wi = 0;                                         // work tiles so far
    for (int w = blockIdx.x; w < n_work; w += gridDim.x, wi++) {
        const work t = decode(w);
        const bool last_work = w >= n_work - (int)gridDim.x;
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.0f;
        m_run[0] = m_run[1] = -INFINITY;
        l_run[0] = l_run[1] = 0.0f;

        // key tile 0: S, softmax, P
        mbar_wait(q_full, wi & 1);
        mbar_wait(k_full(it % ST), (it / ST) & 1);
        turn_wait();
        wgmma_fence();
        issue_s(it % ST);
        turn_pass(false);
        wgmma_wait<0>();
        reg_fence(s);
        if (t.n_tiles == 1) release(q_empty);
        {
            float alpha[2];
            softmax(0, t.n_kv, alpha);
            rescale_and_pack(alpha);
        }
        // key tile j: S of j and P V of j - 1 on the tensor cores, then softmax of j beside P V
        for (int j = 1; j < t.n_tiles; j++) {
            const int ic = it + j, ip = it + j - 1;     // ring positions of tiles j and j - 1
            mbar_wait(k_full(ic % ST), (ic / ST) & 1);
            turn_wait();
            wgmma_fence();                              // p and o were written since the last wgmma
            issue_s(ic % ST);
            mbar_wait(v_full(ip % ST), (ip / ST) & 1);
            wgmma_fence();
            issue_pv(ip % ST);
            turn_pass(false);
            wgmma_wait<1>();                            // S of tile j is ready
            reg_fence(s);
            if (j == t.n_tiles - 1) release(q_empty);   // Q's last reader is done
            float alpha[2];
            softmax(j, t.n_kv, alpha);
            wgmma_wait<0>();                            // P V of tile j - 1 is done
            reg_fence(o);
            reg_fence(p);
            release(kv_empty(ip % ST));
            rescale_and_pack(alpha);
        }
        {
            const int il = it + t.n_tiles - 1;
            mbar_wait(v_full(il % ST), (il / ST) & 1);
            turn_wait();
            wgmma_fence();
            issue_pv(il % ST);
            turn_pass(last_work);
            wgmma_wait<0>();
            reg_fence(o);
            reg_fence(p);
            release(kv_empty(il % ST));
        }
        it += t.n_tiles;

        // normalise; rows warp*16 + l/4 (+8) of this consumer's 64, dims 8dn + 2 t4 (+1)
        const int64_t o_row = (int64_t)n_head * 64;
        T * og = out + (int64_t)t.b * n_ctx * o_row + t.h * 64 + 2 * t4;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = l_run[hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.0f / l;
            const int qi = t.q0 + cw * 64 + warp * 16 + lane / 4 + hf * 8;
            if (qi < n_ctx) {
#pragma unroll
                for (int dn = 0; dn < 8; dn++)
                    *reinterpret_cast<uint32_t *>(og + (int64_t)qi * o_row + dn * 8) =
                        pack2<T>(o[4 * dn + 2 * hf] * inv, o[4 * dn + 2 * hf + 1] * inv);
            }
        }
    }
#else
    __trap();   // never launched: the host picks attention_kernel off sm_90a
#endif
}

// The projector's kernels: a handful of rows per window, so plain grid-stride loops.

// avg_pool2: y[b, t, c] = (x[b, 2t, c] + x[b, 2t + 1, c]) / 2 for t < T (x has T_in rows a
// window); one element per thread per step. CPU twin: cpu_backend::avg_pool2.
template <typename T>
__global__ void avg_pool2_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t C, int64_t T_out,
                                 int64_t T_in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, t = (i / C) % T_out, b = i / (C * T_out);
        const T * a = x + (b * T_in + 2 * t) * C + c;
        y[i] = from_f32<T>((to_f32(a[0]) + to_f32(a[C])) * 0.5f);
    }
}

// rms_norm: a warp per row: y = x / sqrt(mean(x^2) + eps) * w, the sum in f32.
// CPU twin: cpu_backend::rms_norm.
template <typename T>
__global__ void rms_norm_kernel(T * __restrict__ y, const T * __restrict__ x, const float * __restrict__ w,
                                int64_t rows, int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const T * xr = x + row * C;
    T * yr = y + row * C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) { const float v = to_f32(xr[c]); sq += v * v; }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
    for (int c = lane; c < C; c += 32) yr[c] = from_f32<T>(to_f32(xr[c]) * rstd * w[c]);
}

// swiglu: y[r, i] = x[r, i] * silu(x[r, N + i]) for i < N; one element per thread per step.
// CPU twin: cpu_backend::swiglu.
template <typename T>
__global__ void swiglu_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t N, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / N, c = i % N;
        const float g = to_f32(x[r * 2 * N + N + c]);
        y[i] = from_f32<T>(to_f32(x[r * 2 * N + c]) * (g / (1.0f + __expf(-g))));
    }
}

// rope_qk: row r (position r % T of its window) of a q|k|v tensor, element j of its 3d: in q
// and k (j < 2d), the first n_rot of each head's hd dimensions turn in pairs (i, i + n_rot/2) by
// the float32 angle (r % T) * inv_freq[i]; the rest, and v, are copied. One element per thread
// per step. CPU twin: cpu_backend::rope_qk (the same float32 inv_freq and angle, cos/sin in double).
template <typename T>
__global__ void rope_qk_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t d, int64_t hd, int n_rot,
                               float theta, int64_t T_pos, int64_t n) {
    const int half = n_rot / 2;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / (3 * d), j = idx % (3 * d), c = j % hd;
        if (j >= 2 * d || c >= n_rot) { y[idx] = x[idx]; continue; }
        const int i = (int)(c % half);
        const float inv_freq = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)n_rot));
        const float ang = (float)(r % T_pos) * inv_freq;
        double sn, cs;
        sincos((double)ang, &sn, &cs);
        const float xc = to_f32(x[idx]);
        const float xp = c < half ? to_f32(x[idx + half]) : to_f32(x[idx - half]);
        y[idx] = from_f32<T>(c < half ? xc * (float)cs - xp * (float)sn : xc * (float)cs + xp * (float)sn);
    }
}

// stack: window b's rows laid end to end and cut into rows of `row` elements, the tail past
// the window's n_in elements zero. One element per thread per step. CPU twin: cpu_backend::stack.
template <typename T>
__global__ void stack_kernel(T * __restrict__ y, const T * __restrict__ x, int64_t row, int64_t rows_out,
                             int64_t n_in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / (row * rows_out), j = i % (row * rows_out);
        y[i] = j < n_in ? x[b * n_in + j] : from_f32<T>(0.0f);
    }
}

static size_t attention_smem_bytes(int mt) { return (size_t)(64 * mt) * 128 + 4 * ATT_BC * 128; }

// convert_kernel: y[i] = x[i] in y's type, through f32 (round to nearest even), for i in
// [0, n); a grid-stride loop. The f32 copy of a graph output (inside the captured graph, so
// the download is one plain copy), the f16 download of a bf16 forward, weights converted
// after their upload. CPU twin: vt_convert.
template <typename Tin, typename Tout>
__global__ void convert_kernel(Tout * __restrict__ y, const Tin * __restrict__ x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = from_f32<Tout>(to_f32(x[i]));
}

// ---- log-mel: whisper-audio.cpp's log_mel_frames on the GPU ----
//
// The window's 3000 frames of 400 samples every 160, read from its row of VT_MEL_ROW samples
// (the caller put the padding, reflection or neighbours' samples in the row's context); per frame the power spectrum |DFT_400(hann * frame)|^2 in double, then the mel sums in
// double, log10 in float, and over the whole window max(x, max - 8) then (x + 4) / 4.
// The 400-point DFT splits as 20 x 20 (n = 20 n1 + n2, k = k1 + 20 k2):
//   X[k1 + 20 k2] = sum_n2 W20^(n2 k2) [ W400^(n2 k1) sum_n1 x[20 n1 + n2] W20^(n1 k1) ]
// two passes of 20-point sums (32k double FMAs a frame against 160k for the plain DFT);
// only k <= 200 is needed. Tables are made on the host in double, as the CPU's.
static const int MEL_FPB = 8;                 // frames a block (divides 3000)
static const int MEL_THREADS = 256;
static const int MEL_BLOCKS = 3000 / MEL_FPB; // per window

struct mel_tables {
    double window[400];                       // periodic Hann
    double2 tw20[20];                         // exp(-2 pi i j / 20)
    double2 tw400[400];                       // exp(-2 pi i j / 400)
};
__device__ mel_tables g_mel_tables;           // per device, set at backend init

static size_t log_mel_smem_bytes() {
    return sizeof(double2) * (MEL_FPB * 400 + 20 + 400) + sizeof(double) * MEL_FPB * 400;
}

// mel_ranges_kernel: each mel row's non-zero bins [k0, k1) (the filters are triangles; the
// skipped products are 0 * finite, so the sums are exact as the CPU's).
__global__ void mel_ranges_kernel(int2 * __restrict__ ranges, const float * __restrict__ filters, int n_mels) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= n_mels) return;
    const float * row = filters + (size_t)m * 201;
    int a = 0, b = 201;
    while (a < b && row[a] == 0.0f) a++;
    while (b > a && row[b - 1] == 0.0f) b--;
    ranges[m] = make_int2(a, b);
}

// log_mel_frames_kernel: grid (MEL_BLOCKS, B); block (x, b) makes frames [8x, 8x + 8) of
// window b: out[b, m, t] = log10(max(mel, 1e-10)) for the frames t < valid that hold the
// signal (0 past them), and the block's max over those in block_max[b, x]. out NULL: the max
// alone (vt_log_mel_max). params[b] = {valid, clamp max} (NULL: all 3000 valid).
__global__ void __launch_bounds__(MEL_THREADS) log_mel_frames_kernel(float * __restrict__ out, float * __restrict__ block_max,
        const float * __restrict__ pcm, const float * __restrict__ filters, const int2 * __restrict__ ranges, int n_mels,
        const float * __restrict__ params) {
    extern __shared__ double2 mel_smem[];
    double2 * y     = mel_smem;                            // [MEL_FPB][n2 20][k1 20] after pass 1
    double2 * tw20  = y + MEL_FPB * 400;
    double2 * tw400 = tw20 + 20;
    double  * xw    = (double *)(tw400 + 400);             // [MEL_FPB][400] windowed frames
    double  * power = xw;                                  // [MEL_FPB][201], once xw is spent
    __shared__ float red[MEL_THREADS / 32];

    const int b = blockIdx.y, t0 = blockIdx.x * MEL_FPB, tid = threadIdx.x;
    const int valid = params ? (int)params[2 * b] : 3000;
    const float * x = pcm + (size_t)b * VT_MEL_ROW;        // frame t: x[160 t, 160 t + 400)
    for (int i = tid; i < 20; i += MEL_THREADS) tw20[i] = g_mel_tables.tw20[i];
    for (int i = tid; i < 400; i += MEL_THREADS) tw400[i] = g_mel_tables.tw400[i];
    for (int i = tid; i < MEL_FPB * 400; i += MEL_THREADS) {
        const int f = i / 400, n = i % 400;
        xw[i] = g_mel_tables.window[n] * (double)x[(t0 + f) * 160 + n];
    }
    __syncthreads();

    // pass 1: y[f][n2][k1] = W400^(n2 k1) sum_n1 xw[f][20 n1 + n2] W20^(n1 k1)
    for (int i = tid; i < MEL_FPB * 400; i += MEL_THREADS) {
        const int f = i / 400, n2 = (i % 400) / 20, k1 = i % 20;
        const double * xf = xw + f * 400 + n2;
        double re = 0.0, im = 0.0;
        for (int n1 = 0, e = 0; n1 < 20; n1++) {
            re = fma(xf[20 * n1], tw20[e].x, re);
            im = fma(xf[20 * n1], tw20[e].y, im);
            e += k1;
            if (e >= 20) e -= 20;
        }
        const double2 w = tw400[n2 * k1];
        y[i] = make_double2(re * w.x - im * w.y, re * w.y + im * w.x);
    }
    __syncthreads();

    // pass 2: power[f][k] = |sum_n2 y[f][n2][k1] W20^(n2 k2)|^2, k = k1 + 20 k2 <= 200
    for (int i = tid; i < MEL_FPB * 201; i += MEL_THREADS) {
        const int f = i / 201, k = i % 201, k1 = k % 20, k2 = k / 20;
        const double2 * yf = y + f * 400 + k1;
        double re = 0.0, im = 0.0;
        for (int n2 = 0, e = 0; n2 < 20; n2++) {
            const double2 a = yf[20 * n2], w = tw20[e];
            re = fma(a.x, w.x, fma(-a.y, w.y, re));
            im = fma(a.x, w.y, fma(a.y, w.x, im));
            e += k2;
            if (e >= 20) e -= 20;
        }
        power[i] = re * re + im * im;
    }
    __syncthreads();

    // mel sums, log10; frames fastest so that the stores are coalesced
    float mx = -INFINITY;
    for (int i = tid; i < MEL_FPB * n_mels; i += MEL_THREADS) {
        const int f = i % MEL_FPB, m = i / MEL_FPB;
        const int2 r = ranges[m];
        const float * row = filters + (size_t)m * 201;
        const double * pf = power + f * 201;
        double sum = 0.0;
        for (int k = r.x; k < r.y; k++) sum += (double)row[k] * pf[k];
        const float v = log2f(fmaxf((float)sum, 1e-10f)) * 0.30102999566398119521f;
        const bool in_signal = t0 + f < valid;
        if (out) out[((size_t)b * n_mels + m) * 3000 + t0 + f] = in_signal ? v : 0.0f;
        if (in_signal) mx = fmaxf(mx, v);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (tid % 32 == 0) red[tid / 32] = mx;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < MEL_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
        block_max[(size_t)b * MEL_BLOCKS + blockIdx.x] = mx;
    }
}

// The largest of window b's frame blocks' maxima, in every thread of the block.
__device__ float log_mel_window_max(const float * __restrict__ block_max, int b) {
    __shared__ float red[32];
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < MEL_BLOCKS; i += blockDim.x) mx = fmaxf(mx, block_max[(size_t)b * MEL_BLOCKS + i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) mx = fmaxf(mx, red[w]);
    return mx;
}

// log_mel_norm_kernel: grid (x, B): every block of window b takes the clamp's max (params[b].y,
// or when that is NaN the window's own, from the frame blocks') and applies out = (max(out,
// max - 8) + 4) / 4 to its part of the frames that hold the signal, grid-stride.
__global__ void log_mel_norm_kernel(float * __restrict__ out, const float * __restrict__ block_max, size_t per_window,
                                    const float * __restrict__ params) {
    const int b = blockIdx.y;
    const int valid = params ? (int)params[2 * b] : 3000;
    const float given = params ? params[2 * b + 1] : NAN;
    const float mx = isnan(given) ? log_mel_window_max(block_max, b) : given;
    const float floor_v = mx - 8.0f;
    float * o = out + (size_t)b * per_window;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per_window; i += (size_t)gridDim.x * blockDim.x)
        if ((int)(i % 3000) < valid) o[i] = (fmaxf(o[i], floor_v) + 4.0f) / 4.0f;
}

// log_mel_max_kernel: grid B: out[b] = window b's max (vt_log_mel_max).
__global__ void log_mel_max_kernel(float * __restrict__ out, const float * __restrict__ block_max) {
    const float mx = log_mel_window_max(block_max, blockIdx.x);
    if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

// =====================================================================================
// launchers (one per op; they do the grid maths, launch on the stream and check)
// =====================================================================================

static int g_sm_count = 132;   // set at init; sizes the grid-stride launches

static int grid_for(int64_t n, int threads) {
    return (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, threads), (int64_t)g_sm_count * 32));
}

template <typename T>
static bool launch_epilogue_t(cudaStream_t st, T * y, const float * bias, const T * res, const float * add,
                              int64_t add_rows, int64_t rows, int64_t N, int act) {
    const bool vec = N % 8 == 0 && (uintptr_t)y % 16 == 0 && (!res || (uintptr_t)res % 16 == 0);
    const int threads = 256;
    if (vec && rows < INT32_MAX && N < INT32_MAX) {
        const int nv = (int)(N / 8);
        const int tx = std::min(256, (nv + 31) / 32 * 32);
        const int gx = (nv + tx - 1) / tx;
        const int gy = (int)std::min<int64_t>(rows, std::max(1, g_sm_count * 16 / gx));
        epilogue_vec8_kernel<T><<<dim3(gx, gy), tx, 0, st>>>(y, bias, res, add, (int)std::max<int64_t>(add_rows, 1),
                                                              (int)rows, (int)N, act);
    } else if (vec) {
        epilogue_kernel<T, 8><<<grid_for(rows * N / 8, threads), threads, 0, st>>>(y, bias, res, add, add_rows, rows, N, act);
    } else {
        epilogue_kernel<T, 1><<<grid_for(rows * N, threads), threads, 0, st>>>(y, bias, res, add, add_rows, rows, N, act);
    }
    LAUNCH_CHECK("epilogue_kernel");
    return true;
}

static bool launch_epilogue(cudaStream_t st, vt_type type, void * y, const float * bias, const void * res,
                            const float * add, int64_t add_rows, int64_t rows, int64_t N, int act) {
    if (type == VT_TYPE_F16)
        return launch_epilogue_t<__half>(st, (__half *)y, bias, (const __half *)res, add, add_rows, rows, N, act);
    return launch_epilogue_t<__nv_bfloat16>(st, (__nv_bfloat16 *)y, bias, (const __nv_bfloat16 *)res, add, add_rows, rows, N, act);
}

template <typename Tin, typename T>
static bool launch_im2col_t(cudaStream_t st, void * cols, const vt_tensor * x, int64_t b0, int64_t n_rows,
                            int64_t T_out, int stride) {
    const size_t es = sizeof(Tin);
    const int threads = 256;
    im2col_k3_kernel<Tin, T><<<grid_for(n_rows * x->ne[0], threads), threads, 0, st>>>(
        (T *)cols, (const Tin *)x->data, b0, n_rows, T_out, x->ne[1], x->ne[0], stride,
        (int64_t)(x->nb[0] / es), (int64_t)(x->nb[1] / es), (int64_t)(x->nb[2] / es));
    LAUNCH_CHECK("im2col_k3_kernel");
    return true;
}

static bool launch_im2col(cudaStream_t st, vt_type out_type, void * cols, const vt_tensor * x, int64_t b0,
                          int64_t n_rows, int64_t T_out, int stride) {
    const bool f16 = out_type == VT_TYPE_F16;
    switch (x->type) {
        case VT_TYPE_F32:
            return f16 ? launch_im2col_t<float, __half>(st, cols, x, b0, n_rows, T_out, stride)
                       : launch_im2col_t<float, __nv_bfloat16>(st, cols, x, b0, n_rows, T_out, stride);
        case VT_TYPE_F16:
            return f16 ? launch_im2col_t<__half, __half>(st, cols, x, b0, n_rows, T_out, stride)
                       : launch_im2col_t<__half, __nv_bfloat16>(st, cols, x, b0, n_rows, T_out, stride);
        case VT_TYPE_BF16:
            return f16 ? launch_im2col_t<__nv_bfloat16, __half>(st, cols, x, b0, n_rows, T_out, stride)
                       : launch_im2col_t<__nv_bfloat16, __nv_bfloat16>(st, cols, x, b0, n_rows, T_out, stride);
    }
    vt_set_error("cuda: conv1d_k3: unsupported input type");
    return false;
}

// A norm layer_norm_vec_kernel takes (and so can quantize for an FP8 GEMM): 16-bit, C % 8 == 0,
// C <= 2048, every row 16-byte aligned.
static bool layer_norm_vec_ok(const vt_tensor * t) {
    const int64_t C = t->src[0]->ne[0];
    bool ok = t->type != VT_TYPE_F32 && C % 8 == 0 && ceil_div(C / 8, 32) <= 8;
    const vt_tensor * all[] = {t, t->src[0], t->src[1], t->src[2]};
    for (const vt_tensor * u : all) ok = ok && (uintptr_t)u->data % 16 == 0;
    return ok;
}

// q non-null: the norm's output quantized into q / qscale (layer_norm_vec_kernel), not into t
template <typename T>
static bool launch_layer_norm_t(cudaStream_t st, vt_tensor * t, void * q, float * qscale) {
    const vt_tensor * x = t->src[0];
    const int C = (int)x->ne[0];
    const int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
    const float eps = t->fparams[0];
    T * y = (T *)t->data;
    const T * xp = (const T *)x->data;
    const float * w = (const float *)t->src[1]->data;
    const float * b = (const float *)t->src[2]->data;
    const int threads = 128, rows_per_block = threads / 32;
    const int grid = (int)ceil_div(rows, rows_per_block);
    const int vpl = (int)ceil_div(C / 8, 32);
    const bool vec = layer_norm_vec_ok(t);
    __nv_fp8_storage_t * qq = (__nv_fp8_storage_t *)q;
    VT_ASSERT(!q || (vec && sizeof(T) == 2));   // plan_fp8 fuses only such norms
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            switch (vpl) {
                case 1: layer_norm_vec_kernel<T, 1><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 2: layer_norm_vec_kernel<T, 2><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 3: layer_norm_vec_kernel<T, 3><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 4: layer_norm_vec_kernel<T, 4><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 5: layer_norm_vec_kernel<T, 5><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 6: layer_norm_vec_kernel<T, 6><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                case 7: layer_norm_vec_kernel<T, 7><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
                default: layer_norm_vec_kernel<T, 8><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps, qq, qscale); break;
            }
            LAUNCH_CHECK("layer_norm_vec_kernel");
            return true;
        }
    }
    layer_norm_kernel<T><<<grid, threads, 0, st>>>(y, xp, w, b, rows, C, eps);
    LAUNCH_CHECK("layer_norm_kernel");
    return true;
}

// The largest K quantize_rows_kernel takes (VPL 8); wider rows keep their GEMM in f16/bf16.
static const int QUANT_MAX_K = 8 * QUANT_THREADS * 8;

template <typename T, bool GELU>
static bool launch_quantize_t(cudaStream_t st, void * q, float * scale, const T * x, const float * bias, int64_t rows, int K) {
    const int vpl = (int)ceil_div(K / 8, QUANT_THREADS);
    __nv_fp8_storage_t * qq = (__nv_fp8_storage_t *)q;
    const unsigned grid = (unsigned)rows;
    if (vpl <= 1)      quantize_rows_kernel<T, 1, GELU><<<grid, QUANT_THREADS, 0, st>>>(qq, scale, x, bias, K);
    else if (vpl <= 2) quantize_rows_kernel<T, 2, GELU><<<grid, QUANT_THREADS, 0, st>>>(qq, scale, x, bias, K);
    else if (vpl <= 4) quantize_rows_kernel<T, 4, GELU><<<grid, QUANT_THREADS, 0, st>>>(qq, scale, x, bias, K);
    else               quantize_rows_kernel<T, 8, GELU><<<grid, QUANT_THREADS, 0, st>>>(qq, scale, x, bias, K);
    LAUNCH_CHECK("quantize_rows_kernel");
    return true;
}

// rows x K of x (type xt, contiguous) -> e4m3 q and a scale per row; gelu: of gelu(x + bias)
static bool launch_quantize(cudaStream_t st, vt_type xt, void * q, float * scale, const void * x, bool gelu,
                            const float * bias, int64_t rows, int64_t K) {
    VT_ASSERT(K % 16 == 0 && K <= QUANT_MAX_K && rows <= INT32_MAX);
    if (xt == VT_TYPE_F16) {
        return gelu ? launch_quantize_t<__half, true>(st, q, scale, (const __half *)x, bias, rows, (int)K)
                    : launch_quantize_t<__half, false>(st, q, scale, (const __half *)x, nullptr, rows, (int)K);
    }
    return gelu ? launch_quantize_t<__nv_bfloat16, true>(st, q, scale, (const __nv_bfloat16 *)x, bias, rows, (int)K)
                : launch_quantize_t<__nv_bfloat16, false>(st, q, scale, (const __nv_bfloat16 *)x, nullptr, rows, (int)K);
}

static bool launch_layer_norm(cudaStream_t st, vt_tensor * t, void * q = nullptr, float * qscale = nullptr) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_layer_norm_t<__half>(st, t, q, qscale);
        case VT_TYPE_BF16: return launch_layer_norm_t<__nv_bfloat16>(st, t, q, qscale);
        case VT_TYPE_F32:  return launch_layer_norm_t<float>(st, t, q, qscale);
    }
    vt_set_error("cuda: layer_norm: unsupported type");
    return false;
}

template <typename T>
static bool launch_projector_op_t(cudaStream_t st, vt_tensor * t) {
    const vt_tensor * x = t->src[0];
    T * y = (T *)t->data;
    const T * xp = (const T *)x->data;
    const int64_t n = vt_nelements(t), rows = t->ne[1] * t->ne[2] * t->ne[3];
    const int threads = 256;
    switch (t->op) {
        case VT_OP_AVG_POOL2:
            avg_pool2_kernel<T><<<grid_for(n, threads), threads, 0, st>>>(y, xp, t->ne[0], t->ne[1], x->ne[1], n);
            LAUNCH_CHECK("avg_pool2_kernel");
            return true;
        case VT_OP_RMS_NORM:
            rms_norm_kernel<T><<<(unsigned)ceil_div(rows, 4), 128, 0, st>>>(y, xp, (const float *)t->src[1]->data, rows,
                                                                            (int)t->ne[0], t->fparams[0]);
            LAUNCH_CHECK("rms_norm_kernel");
            return true;
        case VT_OP_SWIGLU:
            swiglu_kernel<T><<<grid_for(n, threads), threads, 0, st>>>(y, xp, t->ne[0], n);
            LAUNCH_CHECK("swiglu_kernel");
            return true;
        case VT_OP_STACK:
            stack_kernel<T><<<grid_for(n, threads), threads, 0, st>>>(y, xp, t->ne[0], t->ne[1], x->ne[0] * x->ne[1], n);
            LAUNCH_CHECK("stack_kernel");
            return true;
        case VT_OP_ROPE_QK:
            rope_qk_kernel<T><<<grid_for(n, threads), threads, 0, st>>>(y, xp, t->ne[0] / 3, t->ne[0] / 3 / t->iparams[0],
                                                                        t->iparams[1], t->fparams[0], t->ne[1], n);
            LAUNCH_CHECK("rope_qk_kernel");
            return true;
        default:
            break;
    }
    vt_set_error("cuda: '%s': %s is not a projector op", t->name, vt_op_name(t->op));
    return false;
}

// avg_pool2, rms_norm, swiglu, stack: the ops of the audio LLMs' projectors; rope_qk (GLM-ASR's encoder).
static bool launch_projector_op(cudaStream_t st, vt_tensor * t) {
    switch (t->type) {
        case VT_TYPE_F16:  return launch_projector_op_t<__half>(st, t);
        case VT_TYPE_BF16: return launch_projector_op_t<__nv_bfloat16>(st, t);
        case VT_TYPE_F32:  return launch_projector_op_t<float>(st, t);
    }
    vt_set_error("cuda: '%s': unsupported type", t->name);
    return false;
}

// The checks attention_kernel and attention_wgmma_kernel rely on; alloc_graph runs them so
// compute cannot fail. TMA (the wgmma kernel) wants the same 16-byte aligned base and strides;
// a map it still refuses (make_attention_map) sends that launch to attention_kernel.
static bool attention_supported(const vt_tensor * t) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    if (q->type != VT_TYPE_F16 && q->type != VT_TYPE_BF16) {
        vt_set_error("cuda: attention '%s': type %s; f16 or bf16 only", t->name, vt_type_name(q->type));
        return false;
    }
    if (q->ne[0] != (int64_t)n_head * ATT_HD) {
        vt_set_error("cuda: attention '%s': head_dim %lld; the CUDA kernel needs 64",
                     t->name, (long long)(q->ne[0] / n_head));
        return false;
    }
    if (q->ne[1] > INT32_MAX || q->ne[2] > 65535 || n_head > 65535) {
        vt_set_error("cuda: attention '%s': too large (T %lld, B %lld)", t->name, (long long)q->ne[1], (long long)q->ne[2]);
        return false;
    }
    for (const vt_tensor * s : {q, k, v}) {
        if (s->nb[0] != vt_type_size(s->type) || s->nb[1] % 16 != 0 || s->nb[2] % 16 != 0 || (uintptr_t)s->data % 16 != 0) {
            vt_set_error("cuda: attention '%s': rows of '%s' must be 16-byte aligned (row stride %zu bytes)",
                         t->name, s->name, s->nb[1]);
            return false;
        }
    }
    if (!vt_is_contiguous(t)) {
        vt_set_error("cuda: attention '%s': output must be contiguous", t->name);
        return false;
    }
    return true;
}

// 128 query rows a block (MT = 2 tiles of 64): 280 TFLOP/s at T = 1500 on an H200, against
// 221 with 64 rows (docs/BENCHMARKS.md)
static const int ATT_MT = 2;

template <typename T, int MT>
static bool launch_attention_mt(cudaStream_t st, vt_tensor * t) {
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    const int n_ctx = (int)q->ne[1], B = (int)q->ne[2];
    const float scale_log2 = t->fparams[0] * 1.4426950408889634f;
    const size_t es = sizeof(T);
    const dim3 grid((unsigned)ceil_div(n_ctx, 64 * MT), (unsigned)n_head, (unsigned)B);
    attention_kernel<T, MT><<<grid, ATT_THREADS, attention_smem_bytes(MT), st>>>(
        (const T *)q->data, (const T *)k->data, (const T *)v->data, (T *)t->data, n_ctx, n_head,
        (int64_t)(q->nb[1] / es), (int64_t)(q->nb[2] / es), (int64_t)(k->nb[1] / es), (int64_t)(k->nb[2] / es),
        (int64_t)(v->nb[1] / es), (int64_t)(v->nb[2] / es), scale_log2,
        t->src[3] ? (const float *)t->src[3]->data : nullptr);
    LAUNCH_CHECK("attention_kernel");
    return true;
}

// ---- attention_wgmma_kernel (sm_90a) ----

// cuTensorMapEncodeTiled, found in the driver at init through the runtime (no -lcuda); null
// when the driver has none (then attention_kernel runs).
typedef CUresult (*tensor_map_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                         const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                         CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static tensor_map_encode_fn g_encode_tiled = nullptr;

static bool find_tensor_map_encode() {
    if (g_encode_tiled) return true;
    void * fn = nullptr;
    cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &qr);
#endif
    if (err != cudaSuccess || qr != cudaDriverEntryPointSuccess || !fn) {
        cudaGetLastError();
        return false;
    }
    g_encode_tiled = (tensor_map_encode_fn)fn;
    return true;
}

// A TMA map over one of q, k, v: [B windows][n_ctx rows][n_head * 64 columns] with the view's
// strides; boxes of 64 columns (one head) x 128 rows, 128-byte swizzle, out of bounds -> 0.
static bool make_attention_map(CUtensorMap * map, const vt_tensor * x, int n_ctx, int B) {
    const cuuint64_t row = x->nb[1];
    const cuuint64_t win = B > 1 ? (cuuint64_t)x->nb[2] : row * (cuuint64_t)n_ctx;   // unused when B = 1
    const cuuint64_t dims[3] = {(cuuint64_t)x->ne[0], (cuuint64_t)n_ctx, (cuuint64_t)B};
    const cuuint64_t strides[2] = {row, win};
    static_assert(ATT_WG_BR == ATT_WG_BC, "one box shape serves the Q tile and the K/V tiles");
    const cuuint32_t box[3] = {64, (cuuint32_t)ATT_WG_BC, 1}, elem_strides[3] = {1, 1, 1};
    const CUtensorMapDataType dt = x->type == VT_TYPE_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return g_encode_tiled(map, dt, 3, x->data, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// false (nothing launched, no error) when a view's strides do not fit TMA's rules: the caller
// then runs attention_kernel.
// one_tile: a block per work tile (not persistent)
template <typename T, bool PP>
static bool launch_attention_wgmma(cudaStream_t st, vt_tensor * t, bool one_tile, bool * launched) {
    *launched = false;
    const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
    const int n_head = t->iparams[0];
    const int n_ctx = (int)q->ne[1], B = (int)q->ne[2];
    alignas(64) CUtensorMap mq, mk, mv;
    if (!make_attention_map(&mq, q, n_ctx, B) || !make_attention_map(&mk, k, n_ctx, B) ||
        !make_attention_map(&mv, v, n_ctx, B)) return true;
    const int64_t n_work = ceil_div(n_ctx, ATT_WG_BR) * n_head * B;
    if (n_work > INT32_MAX / 2) return true;          // (w += grid must not overflow an int)
    const float scale_log2 = t->fparams[0] * 1.4426950408889634f;
    const int grid = one_tile ? (int)n_work : (int)std::min<int64_t>(n_work, g_sm_count);
    attention_wgmma_kernel<T, PP><<<grid, ATT_WG_THREADS, attention_wgmma_smem_bytes(), st>>>(
        mq, mk, mv, (T *)t->data, n_ctx, n_head, B, scale_log2, t->src[3] ? (const float *)t->src[3]->data : nullptr);
    LAUNCH_CHECK("attention_wgmma_kernel");
    *launched = true;
    return true;
}

// The attention kernels a backend can run (VT_ATTENTION, read at init): attention_kernel;
// attention_wgmma_kernel persistent with ping-pong, without ping-pong, a block per work tile.
enum att_kernel { ATT_FA2, ATT_WGMMA, ATT_WGMMA_NOPP, ATT_WGMMA_1TILE };

static bool launch_attention(cudaStream_t st, vt_tensor * t, att_kernel kind) {
    if (kind != ATT_FA2) {
        bool launched = false;
        const bool f16 = t->type == VT_TYPE_F16, pp = kind != ATT_WGMMA_NOPP, one = kind == ATT_WGMMA_1TILE;
        const bool ok = f16 ? (pp ? launch_attention_wgmma<__half, true>(st, t, one, &launched)
                                  : launch_attention_wgmma<__half, false>(st, t, one, &launched))
                            : (pp ? launch_attention_wgmma<__nv_bfloat16, true>(st, t, one, &launched)
                                  : launch_attention_wgmma<__nv_bfloat16, false>(st, t, one, &launched));
        if (!ok || launched) return ok;
    }
    if (t->type == VT_TYPE_F16) return launch_attention_mt<__half, ATT_MT>(st, t);
    return launch_attention_mt<__nv_bfloat16, ATT_MT>(st, t);
}

// convert: n elements of x (type xt) into y (type yt); f32, f16 and bf16
template <typename Tin>
static void launch_convert_from(cudaStream_t st, void * y, vt_type yt, const Tin * x, size_t n, int blocks) {
    if (yt == VT_TYPE_F32) convert_kernel<<<blocks, 256, 0, st>>>((float *)y, x, n);
    else if (yt == VT_TYPE_F16) convert_kernel<<<blocks, 256, 0, st>>>((__half *)y, x, n);
    else convert_kernel<<<blocks, 256, 0, st>>>((__nv_bfloat16 *)y, x, n);
}

static bool launch_convert(cudaStream_t st, void * y, vt_type yt, const void * x, vt_type xt, size_t n) {
    if (n == 0) return true;
    const int blocks = (int)std::min<int64_t>(ceil_div((int64_t)n, 256), (int64_t)g_sm_count * 16);
    if (xt == VT_TYPE_F32) launch_convert_from(st, y, yt, (const float *)x, n, blocks);
    else if (xt == VT_TYPE_F16) launch_convert_from(st, y, yt, (const __half *)x, n, blocks);
    else launch_convert_from(st, y, yt, (const __nv_bfloat16 *)x, n, blocks);
    CUDA_CHECK(cudaGetLastError());
    return true;
}

// log_mel: ranges, frames, then the normalisation over each window (or its max alone)
static bool launch_log_mel(cudaStream_t st, vt_tensor * t, float * block_max, int2 * ranges) {
    const vt_tensor * pcm = t->src[0], * filters = t->src[1];
    const float * params = t->src[2] ? (const float *)t->src[2]->data : nullptr;
    const bool max_only = t->iparams[0];
    const int n_mels = (int)filters->ne[1], B = (int)pcm->ne[1];
    mel_ranges_kernel<<<(unsigned)ceil_div(n_mels, 128), 128, 0, st>>>(ranges, (const float *)filters->data, n_mels);
    CUDA_CHECK(cudaGetLastError());
    log_mel_frames_kernel<<<dim3(MEL_BLOCKS, B), MEL_THREADS, log_mel_smem_bytes(), st>>>(
        max_only ? nullptr : (float *)t->data, block_max, (const float *)pcm->data, (const float *)filters->data, ranges,
        n_mels, params);
    CUDA_CHECK(cudaGetLastError());
    if (max_only) {
        log_mel_max_kernel<<<B, 256, 0, st>>>((float *)t->data, block_max);
        CUDA_CHECK(cudaGetLastError());
        return true;
    }
    const size_t per_window = (size_t)n_mels * 3000;
    const int bx = (int)std::max<int64_t>(1, std::min<int64_t>(ceil_div((int64_t)per_window, 256 * 4), 4 * g_sm_count / B));
    log_mel_norm_kernel<<<dim3(bx, B), 256, 0, st>>>((float *)t->data, block_max, per_window, params);
    CUDA_CHECK(cudaGetLastError());
    return true;
}

// ---- cuBLASLt GEMM: D[rows, N] = X[rows, K] W[N, K]^T (+ bias[N]) (+ beta C) ----
//
// cuBLASLt is column-major: D^T (N x rows, ld N) = op(A) B with A = W stored K x N (ld K,
// transposed: op(A) is N x K) and B = X^T stored K x rows (ld K). The bias vector runs
// along D^T's N rows, as the BIAS epilogue wants.

struct lt_gemm {
    cublasLtMatmulDesc_t   op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;   // c is also D's layout
    cublasLtMatmulAlgo_t   algo;
    std::vector<cublasLtMatmulAlgo_t> candidates;   // the heuristic's best few, algo among them
    bool bias = false;      // BIAS epilogue on
    float beta = 0.0f;      // 1: C is a residual

    void destroy() {
        if (op) g_lt.cublasLtMatmulDescDestroy(op);
        if (a) g_lt.cublasLtMatrixLayoutDestroy(a);
        if (b) g_lt.cublasLtMatrixLayoutDestroy(b);
        if (c) g_lt.cublasLtMatrixLayoutDestroy(c);
        op = nullptr; a = b = c = nullptr;
    }
};

static cudaDataType_t cuda_type(vt_type t) {
    switch (t) {
        case VT_TYPE_F16:  return CUDA_R_16F;
        case VT_TYPE_BF16: return CUDA_R_16BF;
        case VT_TYPE_F32:  return CUDA_R_32F;
    }
    return CUDA_R_32F;
}

// Builds descriptors and picks an algorithm (heuristic, once). align_*: the byte alignment
// every pointer passed later will have. FP8 when w_scale is set: A and B are e4m3 and the
// product's (n, r) element is multiplied by w_scale[n] * x_scale[r] (cuBLASLt's outer-vector
// scaling: a scale per output channel and one per token), C and D stay `type`.
static bool lt_gemm_plan(cublasLtHandle_t lt, lt_gemm & gm, vt_type type, int64_t rows, int64_t N, int64_t K,
                         const void * bias, bool residual, uint32_t align_a, uint32_t align_b, uint32_t align_cd,
                         const char * name, const float * w_scale = nullptr, const float * x_scale = nullptr) {
    const cudaDataType_t dt = cuda_type(type), ab = w_scale ? CUDA_R_8F_E4M3 : dt;
    CUBLAS_CHECK(g_lt.cublasLtMatmulDescCreate(&gm.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (w_scale) {
        const cublasLtMatmulMatrixScale_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof(vec)));
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof(vec)));
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)));
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)));
    }
    gm.bias = bias != nullptr;
    gm.beta = residual ? 1.0f : 0.0f;
    if (gm.bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    CUBLAS_CHECK(g_lt.cublasLtMatrixLayoutCreate(&gm.a, ab, (uint64_t)K, (uint64_t)N, K));
    CUBLAS_CHECK(g_lt.cublasLtMatrixLayoutCreate(&gm.b, ab, (uint64_t)K, (uint64_t)rows, K));
    CUBLAS_CHECK(g_lt.cublasLtMatrixLayoutCreate(&gm.c, dt, (uint64_t)N, (uint64_t)rows, N));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(g_lt.cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = LT_WORKSPACE_BYTES;
    cublasStatus_t st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof(align_cd));
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof(align_cd));
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int n_res = 0;
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulAlgoGetHeuristic(lt, gm.op, gm.a, gm.b, gm.c, gm.c, pref, LT_CANDIDATES, res, &n_res);
    g_lt.cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || n_res == 0) {
        vt_set_error("cublasLt: no algorithm for '%s' (%s%s, rows %lld, N %lld, K %lld, alignment %u/%u/%u): %s",
                     name, w_scale ? "fp8 e4m3 -> " : "", vt_type_name(type), (long long)rows, (long long)N, (long long)K, align_a, align_b, align_cd,
                     st != CUBLAS_STATUS_SUCCESS ? g_lt.cublasLtGetStatusString(st) : "heuristic returned none");
        return false;
    }
    gm.algo = res[0].algo;
    gm.candidates.clear();
    for (int i = 0; i < n_res; i++) if (res[i].state == CUBLAS_STATUS_SUCCESS) gm.candidates.push_back(res[i].algo);
    return true;
}

static bool lt_gemm_run(cublasLtHandle_t lt, cudaStream_t stream, const lt_gemm & gm, const void * w, const void * x,
                        const void * c, void * d, const void * bias, void * ws) {
    const float alpha = 1.0f;
    if (gm.bias) CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    CUBLAS_CHECK(g_lt.cublasLtMatmul(lt, gm.op, &alpha, w, gm.a, x, gm.b, &gm.beta, gm.beta != 0.0f ? c : d, gm.c, d, gm.c,
                                &gm.algo, ws, LT_WORKSPACE_BYTES, stream));
    return true;
}

// =====================================================================================
// the backend
// =====================================================================================

namespace {

// What alloc_graph decides for one node, so that compute only launches.
struct node_plan {
    lt_gemm gemm;                // linear, conv1d_k3
    bool epilogue = false;       // run epilogue_kernel after the GEMM
    bool epi_bias = false;       // ... adding the f32 bias there (not in the GEMM)
    bool epi_res = false;        // ... adding the residual there
    int64_t chunk_windows = 0;   // conv1d_k3: windows per im2col chunk
    bool fp8 = false;            // linear: an FP8 GEMM on the quantized input (graph_state's fp8_x)
    bool x_quantized = false;    // ... which the node before it left there (no quantize here)
    bool quantize_out = false;   // linear with GELU, layer_norm: writes gelu(y + b) / the norm quantized
                                 // into fp8_x for the next node (its one use), not y itself
};

struct graph_state {
    void * arena = nullptr;
    size_t arena_bytes = 0;
    std::vector<std::pair<const vt_tensor *, float *>> f32_outputs;   // outputs and their f32 copies
    size_t f32_bytes = 0;
    void * im2col = nullptr;
    size_t im2col_bytes = 0;
    std::vector<node_plan> plans;          // per g->nodes entry
    cudaGraphExec_t exec = nullptr;        // the captured forward
    uint64_t weights_gen = 0;              // weights generation it was captured with
    float * mel_max = nullptr;             // log_mel: per window, each frame block's max
    int2 * mel_ranges = nullptr;           // log_mel: each mel row's non-zero bins
    size_t mel_bytes = 0;
    void * fp8_x = nullptr;                // FP8 mode: the current linear's quantized input
    float * fp8_scale = nullptr;           // ... and its scale per row
    size_t fp8_bytes = 0;
};

// One of vt_backend_submit's two slots: device copies of the input and the converted output,
// and the events that order the three streams.
struct submit_slot {
    void * in = nullptr;  size_t in_bytes = 0;
    void * out = nullptr; size_t out_bytes = 0;
    cudaEvent_t uploaded = nullptr;        // in holds the host input (upload stream)
    cudaEvent_t consumed = nullptr;        // in copied into the graph (compute stream)
    cudaEvent_t computed = nullptr;        // out holds the result (compute stream)
    cudaEvent_t done = nullptr;            // out copied to the host (download stream)
};

struct cuda_backend : vt_backend {
    int device = 0;
    vt_type ctype = VT_TYPE_F16;
    char label[300] = {0};
    att_kernel att = ATT_FA2;                   // attention_wgmma_kernel on cc 9.0, else attention_kernel
    cudaStream_t stream = nullptr;
    cublasLtHandle_t lt = nullptr;
    void * lt_ws = nullptr;                     // cuBLASLt workspace, allocated with the first graph

    std::vector<void *> weight_buffers;         // one per alloc_weights call
    size_t weight_bytes = 0;
    uint64_t weights_gen = 1;                   // bumped by alloc_weights: captured graphs re-capture
    std::unordered_map<const vt_tensor *, void *> shadow;   // f32 weight -> its compute-type copy

    // FP8 mode (vt_backend_cuda_init_fp8): each 2-D weight that an FP8 GEMM can take gets an
    // e4m3 copy with a scale per row (output channel), made on the device at set_tensor.
    struct fp8_weight { void * q; float * scale; };
    bool fp8 = false;
    std::unordered_map<const vt_tensor *, fp8_weight> fp8_weights;
    std::unordered_map<std::string, cublasLtMatmulAlgo_t> tuned;   // tune_gemm's choices

    std::unordered_map<const vt_tensor *, float *> f32_copies;   // graph outputs -> their f32 copies
    void * staging = nullptr;                   // pinned host memory for uploads/downloads
    size_t staging_bytes = 0;

    std::set<vt_graph *> graphs;                // allocated here, released by the destructor
    size_t graph_bytes = 0;

    cudaStream_t up = nullptr, down = nullptr;  // submit's copies in and out
    submit_slot slots[2];

    ~cuda_backend() override {
        cudaSetDevice(device);
        if (stream) cudaStreamSynchronize(stream);
        for (cudaStream_t st : {up, down}) if (st) { cudaStreamSynchronize(st); cudaStreamDestroy(st); }
        for (submit_slot & sl : slots) {
            if (sl.in) cudaFree(sl.in);
            if (sl.out) cudaFree(sl.out);
            for (cudaEvent_t e : {sl.uploaded, sl.consumed, sl.computed, sl.done}) if (e) cudaEventDestroy(e);
        }
        std::vector<vt_graph *> gs(graphs.begin(), graphs.end());
        for (vt_graph * g : gs) {
            release_graph(g);
            g->backend = nullptr;
        }
        for (void * p : weight_buffers) cudaFree(p);
        if (lt_ws) cudaFree(lt_ws);
        if (staging) cudaFreeHost(staging);
        if (lt) g_lt.cublasLtDestroy(lt);
        if (stream) cudaStreamDestroy(stream);
    }

    bool init(int dev, vt_type type, bool fp8_gemms) {
        device = dev;
        ctype = type;
        fp8 = fp8_gemms;
        CUDA_CHECK(cudaSetDevice(device));
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
        if (prop.major < 8) {
            vt_set_error("cuda: device %d (%s) has compute capability %d.%d; vt needs 8.0 or newer",
                         device, prop.name, prop.major, prop.minor);
            return false;
        }
        if (fp8 && prop.major * 10 + prop.minor < 89) {
            vt_set_error("cuda: device %d (%s) has compute capability %d.%d; FP8 GEMMs need 8.9 or newer",
                         device, prop.name, prop.major, prop.minor);
            return false;
        }
        g_sm_count = prop.multiProcessorCount;
        snprintf(label, sizeof(label), "cuda (%s)%s", prop.name, fp8 ? " fp8" : "");
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
        for (submit_slot & sl : slots)
            for (cudaEvent_t * e : {&sl.uploaded, &sl.consumed, &sl.computed, &sl.done})
                CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        CUBLAS_CHECK(g_lt.cublasLtCreate(&lt));
        mel_tables tables;                              // the CPU's tables (whisper-audio.cpp)
        const double two_pi = 6.283185307179586476925286766559;
        for (int i = 0; i < 400; i++) {
            tables.window[i] = 0.5 - 0.5 * std::cos(two_pi * i / 400);
            tables.tw400[i] = make_double2(std::cos(two_pi * i / 400), -std::sin(two_pi * i / 400));
        }
        for (int i = 0; i < 20; i++) tables.tw20[i] = make_double2(std::cos(two_pi * i / 20), -std::sin(two_pi * i / 20));
        CUDA_CHECK(cudaMemcpyToSymbol(g_mel_tables, &tables, sizeof(tables)));
        CUDA_CHECK(cudaFuncSetAttribute(log_mel_frames_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)log_mel_smem_bytes()));
        CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__half, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)attention_smem_bytes(ATT_MT)));
        CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)attention_smem_bytes(ATT_MT)));
        // the attention kernel: wgmma on cc 9.0 (its sm_90a code runs there only); VT_ATTENTION
        // = fa2 forces attention_kernel, = wgmma (or a variant) insists on the new one
        const char * env = getenv("VT_ATTENTION");
        const std::string want = env ? env : "";
        const bool hopper = prop.major == 9 && prop.minor == 0;
        const bool insist = want == "wgmma" || want == "wgmma-nopp" || want == "wgmma-1tile";
        if (!want.empty() && want != "fa2" && !insist) {
            vt_set_error("cuda: VT_ATTENTION=%s; fa2, wgmma, wgmma-nopp or wgmma-1tile (unset: wgmma on compute "
                         "capability 9.0, else fa2)", env);
            return false;
        }
        if (insist && !hopper) {
            vt_set_error("cuda: VT_ATTENTION=%s: %s is compute capability %d.%d; the wgmma kernel needs 9.0",
                         env, prop.name, prop.major, prop.minor);
            return false;
        }
        int built = 0;
        if (hopper) CUDA_CHECK(cudaMemcpyFromSymbol(&built, g_wgmma_built, sizeof(built)));
        if (insist && hopper && !built) {
            vt_set_error("cuda: VT_ATTENTION=%s: this build has no sm_90a code (nvcc "
                         "-gencode=arch=compute_90a,code=sm_90a, as the Makefile does)", env);
            return false;
        }
        if (hopper && built && want != "fa2" && find_tensor_map_encode()) {
            att = want == "wgmma-nopp" ? ATT_WGMMA_NOPP : want == "wgmma-1tile" ? ATT_WGMMA_1TILE : ATT_WGMMA;
        } else if (insist) {
            vt_set_error("cuda: VT_ATTENTION=%s: the driver has no cuTensorMapEncodeTiled (TMA)", env);
            return false;
        }
        if (att != ATT_FA2) {
            const int smem = (int)attention_wgmma_smem_bytes();
            CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<__half, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<__half, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<__nv_bfloat16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<__nv_bfloat16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        }
        return true;
    }

    const char * name() const override { return label; }
    vt_type compute_type() const override { return ctype; }

    // ---- memory ----

    bool alloc_weights(vt_context * ctx) override {
        CUDA_CHECK(cudaSetDevice(device));
        size_t total = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            const vt_tensor * t = vt_get_tensor_at(ctx, i);
            shadow.erase(t);   // an earlier context's tensor may have lived at this address
            fp8_weights.erase(t);
            if (!(t->flags & VT_FLAG_WEIGHT)) continue;
            total += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
            if (t->type == VT_TYPE_F32) total += align_up((size_t)vt_nelements(t) * vt_type_size(ctype), VT_ARENA_ALIGN);
            if (fp8_eligible(t)) total += align_up((size_t)vt_nelements(t), VT_ARENA_ALIGN) + align_up(t->ne[1] * sizeof(float), VT_ARENA_ALIGN);
        }
        char * buf = nullptr;
        CUDA_CHECK(device_malloc((void **)&buf, std::max<size_t>(total, VT_ARENA_ALIGN)));
        weight_buffers.push_back(buf);
        weight_bytes += total;
        weights_gen++;
        size_t off = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (!(t->flags & VT_FLAG_WEIGHT)) continue;
            t->data = buf + off;
            off += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
            if (t->type == VT_TYPE_F32) {
                shadow[t] = buf + off;
                off += align_up((size_t)vt_nelements(t) * vt_type_size(ctype), VT_ARENA_ALIGN);
            }
            if (fp8_eligible(t)) {
                fp8_weight & f = fp8_weights[t];
                f.q = buf + off;
                off += align_up((size_t)vt_nelements(t), VT_ARENA_ALIGN);
                f.scale = (float *)(buf + off);
                off += align_up(t->ne[1] * sizeof(float), VT_ARENA_ALIGN);
            }
        }
        return true;
    }

    // A weight [N, K] whose GEMMs run in FP8: flagged so (vt_set_fp8), 16-bit, 2-D, N and K
    // multiples of 16 (the FP8 GEMMs' rule), rows no wider than the quantize kernel takes.
    bool fp8_eligible(const vt_tensor * t) const {
        return fp8 && (t->flags & VT_FLAG_FP8) && (t->type == VT_TYPE_F16 || t->type == VT_TYPE_BF16) &&
               t->ne[2] == 1 && t->ne[3] == 1 &&
               t->ne[0] % 16 == 0 && t->ne[1] % 16 == 0 && t->ne[0] <= QUANT_MAX_K;
    }

    bool ensure_staging(size_t bytes) {
        if (bytes <= staging_bytes) return true;
        if (staging) CUDA_CHECK(cudaFreeHost(staging));
        staging = nullptr;
        staging_bytes = 0;
        CUDA_CHECK(cudaMallocHost(&staging, bytes));
        staging_bytes = bytes;
        return true;
    }

    // Host data of any type -> the tensor's type (and its shadow's), converted on the host
    // into pinned staging, then one copy.
    // The host data as it is, then converted on the device (a 1.3 GB model's f16 -> bf16 on
    // one host core took about 1 s); a tensor in pieces of 64 MB.
    bool upload(void * dst, vt_type dst_type, const void * src, vt_type src_type, size_t n) {
        const size_t es = vt_type_size(src_type), chunk = std::min(n, ((size_t)64 << 20) / es);
        void * raw = nullptr;
        if (!ensure_staging(chunk * es)) return false;
        CUDA_CHECK(device_malloc(&raw, chunk * es));
        bool ok = true;
        for (size_t i = 0; ok && i < n; i += chunk) {
            const size_t k = std::min(chunk, n - i);
            memcpy(staging, (const char *)src + i * es, k * es);
            ok = cudaMemcpyAsync(raw, staging, k * es, cudaMemcpyHostToDevice, stream) == cudaSuccess &&
                 launch_convert(stream, (char *)dst + i * vt_type_size(dst_type), dst_type, raw, src_type, k) &&
                 cudaStreamSynchronize(stream) == cudaSuccess;
        }
        cudaFree(raw);
        if (!ok) vt_set_error("cuda: uploading %zu elements failed: %s", n, cudaGetErrorString(cudaGetLastError()));
        return ok;
    }

    bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) override {
        CUDA_CHECK(cudaSetDevice(device));
        const size_t n = (size_t)vt_nelements(t);
        if (src_type == t->type && shadow.find(t) == shadow.end()) {   // as is: one copy, no staging
            CUDA_CHECK(cudaMemcpyAsync(t->data, src, n * vt_type_size(src_type), cudaMemcpyHostToDevice, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
        } else {
            if (!upload(t->data, t->type, src, src_type, n)) return false;
            auto it = shadow.find(t);
            if (it != shadow.end() && !upload(it->second, ctype, src, src_type, n)) return false;
        }
        auto f = fp8_weights.find(t);   // the e4m3 copy, from the 16-bit one just written
        if (f != fp8_weights.end()) {
            if (!launch_quantize(stream, t->type, f->second.q, f->second.scale, t->data, false, nullptr, t->ne[1], t->ne[0])) return false;
            CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        return true;
    }

    bool get_tensor_f32(const vt_tensor * t, float * dst) override {
        CUDA_CHECK(cudaSetDevice(device));
        auto copy = f32_copies.find(t);
        if (t->type == VT_TYPE_F32 || copy != f32_copies.end()) {   // f32 on the device: one copy
            const void * src = t->type == VT_TYPE_F32 ? t->data : copy->second;
            CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)vt_nelements(t) * sizeof(float), cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            return true;
        }
        const size_t bytes = vt_nbytes(t);
        if (!ensure_staging(bytes)) return false;
        CUDA_CHECK(cudaMemcpyAsync(staging, t->data, bytes, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        vt_convert(dst, VT_TYPE_F32, staging, t->type, (size_t)vt_nelements(t));
        return true;
    }

    size_t allocated_bytes() const override {
        return weight_bytes + graph_bytes + (lt_ws ? LT_WORKSPACE_BYTES : 0);
    }

    // ---- graphs ----

    bool plan_linear(vt_tensor * t, node_plan & p, const graph_state * s, bool tune) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
        const int act = t->iparams[1];
        if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
            vt_set_error("cuda: linear '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
            return false;
        }
        const int64_t K = x->ne[0], N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
        // Act NONE: bias (its shadow) in the GEMM's epilogue, residual as beta = 1: one kernel.
        // GELU: a plain GEMM, then epilogue_kernel (f32 bias, exact GELU, residual after it).
        const void * lt_bias = nullptr;
        if (act == VT_ACT_NONE && b) {
            auto it = shadow.find(b);
            if (it != shadow.end()) lt_bias = it->second;
        }
        const bool lt_res = act == VT_ACT_NONE && res;
        p.epi_bias = b && !lt_bias;
        p.epi_res = res && !lt_res;
        p.epilogue = p.epi_bias || p.epi_res || act != VT_ACT_NONE;
        uint32_t align_cd = alignment_of((uintptr_t)t->data);
        if (lt_res) align_cd = std::min(align_cd, alignment_of((uintptr_t)res->data));
        const void * wq = p.fp8 ? fp8_weights.at(w).q : w->data, * xq = p.fp8 ? s->fp8_x : x->data;
        const uint32_t align_a = alignment_of((uintptr_t)wq), align_b = alignment_of((uintptr_t)xq);
        if (!lt_gemm_plan(lt, p.gemm, t->type, rows, N, K, lt_bias, lt_res, align_a, align_b, align_cd, t->name,
                          p.fp8 ? fp8_weights.at(w).scale : nullptr, p.fp8 ? s->fp8_scale : nullptr)) {
            return false;
        }
        char key[160];
        snprintf(key, sizeof(key), "%d %d %lld %lld %lld %d %d %u %u %u", (int)t->type, (int)p.fp8, (long long)rows,
                 (long long)N, (long long)K, (int)(lt_bias != nullptr), (int)lt_res, align_a, align_b, align_cd);
        if (tune) {
            tune_gemm(p.gemm, key, wq, xq, lt_res ? res->data : nullptr, t->data, lt_bias);
        } else {                                          // a shape timed before keeps its choice
            auto it = tuned.find(key);
            if (it != tuned.end()) p.gemm.algo = it->second;
        }
        return true;
    }

    // Picks the fastest of the heuristic's candidate algorithms for a GEMM by timing each on
    // the graph's own buffers (3 runs after a warm one), once per shape and setting; the
    // heuristic's first choice is kept when VT_GEMM_TUNE=0. Writes only the node's output.
    void tune_gemm(lt_gemm & gm, const std::string & key, const void * w, const void * x, const void * c, void * d,
                   const void * bias) {
        auto it = tuned.find(key);
        if (it != tuned.end()) { gm.algo = it->second; return; }
        const char * env = getenv("VT_GEMM_TUNE");
        if (gm.candidates.size() > 1 && !(env && strcmp(env, "0") == 0)) {
            cudaEvent_t e0 = nullptr, e1 = nullptr;
            float best = INFINITY;
            cublasLtMatmulAlgo_t best_algo = gm.algo;
            if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
                for (const cublasLtMatmulAlgo_t & a : gm.candidates) {
                    gm.algo = a;
                    bool ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws) && cudaEventRecord(e0, stream) == cudaSuccess;
                    for (int r = 0; ok && r < 3; r++) ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws);
                    float ms = INFINITY;
                    ok = ok && cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                         cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
                    if (ok && ms < best) { best = ms; best_algo = a; }
                }
            }
            cudaStreamSynchronize(stream);
            cudaGetLastError();   // a candidate that failed to run is simply not chosen
            if (e0) cudaEventDestroy(e0);
            if (e1) cudaEventDestroy(e1);
            gm.algo = best_algo;
        }
        tuned[key] = gm.algo;
    }

    // FP8 mode: which linear nodes run FP8 GEMMs, which GELU epilogues quantize for the node
    // after them, and the scratch for the quantized inputs (sized for the largest).
    bool plan_fp8(vt_graph * g, graph_state * s) {
        std::unordered_map<const vt_tensor *, int> uses;
        for (const vt_tensor * t : g->nodes) for (const vt_tensor * src : t->src) if (src) uses[src]++;
        for (const vt_tensor * t : g->views) uses[t->src[0]]++;
        size_t x_bytes = 0, rows_max = 0;
        for (size_t i = 0; i < g->nodes.size(); i++) {
            const vt_tensor * t = g->nodes[i];
            if (t->op != VT_OP_LINEAR || fp8_weights.find(t->src[1]) == fp8_weights.end()) continue;
            const vt_tensor * x = t->src[0];
            const int64_t K = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
            s->plans[i].fp8 = true;
            x_bytes = std::max(x_bytes, (size_t)(rows * K));
            rows_max = std::max(rows_max, (size_t)rows);
            // x made by the node just before and used only here, a GELU linear (fc1) or a
            // LayerNorm: that node writes x quantized (x never exists in f16/bf16)
            const vt_tensor * b = x->src[2];
            const bool gelu = x->op == VT_OP_LINEAR && x->iparams[1] == VT_ACT_GELU && !x->src[3] && (!b || b->type == VT_TYPE_F32);
            const bool norm = x->op == VT_OP_LAYER_NORM && layer_norm_vec_ok(x);
            if (i > 0 && g->nodes[i - 1] == x && (gelu || norm) && uses[x] == 1 && !(x->flags & VT_FLAG_OUTPUT)) {
                s->plans[i - 1].quantize_out = true;
                s->plans[i].x_quantized = true;
            }
        }
        if (x_bytes == 0) return true;
        cudaError_t err = device_malloc(&s->fp8_x, x_bytes);
        if (err == cudaSuccess) err = device_malloc((void **)&s->fp8_scale, rows_max * sizeof(float));
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaMalloc of the %zu-byte FP8 input scratch failed: %s", x_bytes, cudaGetErrorString(err));
            return false;
        }
        s->fp8_bytes = x_bytes + rows_max * sizeof(float);
        graph_bytes += s->fp8_bytes;
        return true;
    }

    bool plan_conv(vt_tensor * t, node_plan & p, size_t & im2col_need) {
        const vt_tensor * x = t->src[0], * w = t->src[1];
        if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
            vt_set_error("cuda: conv1d_k3 '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
            return false;
        }
        for (int d = 0; d < 3; d++) {
            if (x->nb[d] % vt_type_size(x->type) != 0) {
                vt_set_error("cuda: conv1d_k3 '%s': input strides must be whole elements", t->name);
                return false;
            }
        }
        const int64_t C_in = x->ne[0], K = 3 * C_in, N = w->ne[2], T_out = t->ne[1], B = t->ne[2];
        const size_t es = vt_type_size(t->type);
        const size_t per_window = (size_t)T_out * K * es;
        int64_t cw = 1;                                    // the largest divisor of B that fits the cap
        for (int64_t d = B; d >= 1; d--) {
            if (B % d == 0 && (d == 1 || (size_t)d * per_window <= IM2COL_CAP_BYTES)) { cw = d; break; }
        }
        p.chunk_windows = cw;
        im2col_need = std::max(im2col_need, align_up((size_t)cw * per_window, VT_ARENA_ALIGN));
        p.epilogue = p.epi_bias = true;
        // D of chunk c starts at out + c * cw * T_out * N elements
        const uint32_t align_d = std::min(alignment_of((uintptr_t)t->data), alignment_of((uintptr_t)(cw * T_out * N * es)));
        return lt_gemm_plan(lt, p.gemm, t->type, cw * T_out, N, K, nullptr, false, alignment_of((uintptr_t)w->data),
                            256, align_d, t->name);
    }

    void free_state(graph_state * s) {
        for (node_plan & p : s->plans) p.gemm.destroy();
        if (s->exec) cudaGraphExecDestroy(s->exec);
        if (s->arena) cudaFree(s->arena);
        if (s->im2col) cudaFree(s->im2col);
        if (s->mel_max) cudaFree(s->mel_max);
        if (s->mel_ranges) cudaFree(s->mel_ranges);
        if (s->fp8_x) cudaFree(s->fp8_x);
        if (s->fp8_scale) cudaFree(s->fp8_scale);
        for (auto & o : s->f32_outputs) {
            cudaFree(o.second);
            f32_copies.erase(o.first);
        }
        graph_bytes -= s->arena_bytes + s->im2col_bytes + s->f32_bytes + s->mel_bytes + s->fp8_bytes;
        delete s;
    }

    bool alloc_graph(vt_graph * g) override {
        CUDA_CHECK(cudaSetDevice(device));
        for (vt_tensor * t : g->leaves) {
            if ((t->flags & VT_FLAG_WEIGHT) && !(t->flags & VT_FLAG_INPUT) && !t->data) {
                vt_set_error("cuda: weight '%s' has no storage: call vt_backend_alloc_weights first", t->name);
                return false;
            }
        }
        for (vt_tensor * t : g->nodes) {
            if (t->type == VT_TYPE_F32 && t->op != VT_OP_LAYER_NORM && t->op != VT_OP_LOG_MEL) {
                vt_set_error("cuda: '%s' (%s) is f32; the CUDA backend computes in f16/bf16", t->name, vt_op_name(t->op));
                return false;
            }
        }
        graph_state * s = new graph_state;
        s->arena_bytes = std::max<size_t>(g->arena_size, VT_ARENA_ALIGN);
        cudaError_t err = device_malloc(&s->arena, s->arena_bytes);
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaMalloc of the %zu-byte arena failed: %s", s->arena_bytes, cudaGetErrorString(err));
            s->arena_bytes = 0;
            delete s;
            return false;
        }
        graph_bytes += s->arena_bytes;
        for (vt_tensor * t : g->leaves) if (t->flags & VT_FLAG_INPUT) t->data = (char *)s->arena + t->arena_offset;
        for (vt_tensor * t : g->nodes) t->data = (char *)s->arena + t->arena_offset;
        vt_graph_resolve_views(g);

        if (!lt_ws) {
            err = device_malloc(&lt_ws, LT_WORKSPACE_BYTES);
            if (err != cudaSuccess) {
                lt_ws = nullptr;
                vt_set_error("cuda: cudaMalloc of the cuBLASLt workspace failed: %s", cudaGetErrorString(err));
                free_state(s);
                return false;
            }
        }

        s->plans.resize(g->nodes.size());
        size_t im2col_need = 0, mel_windows = 0, mel_rows = 0;
        bool ok = !fp8 || plan_fp8(g, s);
        for (size_t i = 0; ok && i < g->nodes.size(); i++) {
            vt_tensor * t = g->nodes[i];
            switch (t->op) {
                case VT_OP_LINEAR:     ok = plan_linear(t, s->plans[i], s, g->tune); break;
                case VT_OP_CONV1D_K3:  ok = plan_conv(t, s->plans[i], im2col_need); break;
                case VT_OP_ATTENTION:  ok = attention_supported(t); break;
                case VT_OP_LAYER_NORM: break;
                case VT_OP_LOG_MEL:
                    mel_windows = std::max(mel_windows, (size_t)t->src[0]->ne[1]);
                    mel_rows = std::max(mel_rows, (size_t)t->src[1]->ne[1]);
                    break;
                case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK: break;
                default:
                    vt_set_error("cuda: op %s ('%s') has no CUDA kernel", vt_op_name(t->op), t->name);
                    ok = false;
            }
        }
        if (ok && im2col_need > 0) {
            err = device_malloc(&s->im2col, im2col_need);
            if (err != cudaSuccess) {
                s->im2col = nullptr;
                vt_set_error("cuda: cudaMalloc of the %zu-byte im2col buffer failed: %s", im2col_need, cudaGetErrorString(err));
                ok = false;
            } else {
                s->im2col_bytes = im2col_need;
                graph_bytes += im2col_need;
            }
        }
        if (ok && mel_windows > 0) {                // log_mel's scratch, shared by its nodes (one after another)
            err = device_malloc(&s->mel_max, mel_windows * MEL_BLOCKS * sizeof(float));
            if (err == cudaSuccess) err = device_malloc(&s->mel_ranges, mel_rows * sizeof(int2));
            if (err != cudaSuccess) {
                vt_set_error("cuda: cudaMalloc of the log-mel scratch failed: %s", cudaGetErrorString(err));
                ok = false;
            } else {
                s->mel_bytes = mel_windows * MEL_BLOCKS * sizeof(float) + mel_rows * sizeof(int2);
                graph_bytes += s->mel_bytes;
            }
        }
        // each output that is not f32 gets an f32 copy, made at the end of the forward
        for (vt_tensor * t : g->nodes) {
            if (!ok || !(t->flags & VT_FLAG_OUTPUT) || t->type == VT_TYPE_F32) continue;
            float * copy = nullptr;
            const size_t bytes = (size_t)vt_nelements(t) * sizeof(float);
            err = device_malloc(&copy, bytes);
            if (err != cudaSuccess) {
                vt_set_error("cuda: cudaMalloc of the %zu-byte f32 output copy failed: %s", bytes, cudaGetErrorString(err));
                ok = false;
                break;
            }
            s->f32_outputs.push_back({t, copy});
            s->f32_bytes += bytes;
            graph_bytes += bytes;
            f32_copies[t] = copy;
        }
        if (!ok) {
            free_state(s);
            return false;
        }
        g->backend_state = s;
        graphs.insert(g);
        return true;
    }

    void release_graph(vt_graph * g) override {
        graph_state * s = (graph_state *)g->backend_state;
        graphs.erase(g);
        if (!s) return;
        cudaSetDevice(device);
        cudaStreamSynchronize(stream);
        free_state(s);
        g->backend_state = nullptr;
    }

    // ---- running ----

    bool run_node(graph_state * s, size_t i, vt_tensor * t) {
        node_plan & p = s->plans[i];
        switch (t->op) {
            case VT_OP_LINEAR: {
                const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
                const int64_t N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
                const void * lt_bias = p.gemm.bias ? shadow[b] : nullptr;
                if (p.fp8) {
                    const int64_t K = x->ne[0];
                    if (!p.x_quantized && !launch_quantize(stream, x->type, s->fp8_x, s->fp8_scale, x->data, false, nullptr, rows, K))
                        return false;
                    if (!lt_gemm_run(lt, stream, p.gemm, fp8_weights.at(w).q, s->fp8_x, res ? res->data : nullptr, t->data, lt_bias, lt_ws))
                        return false;
                } else if (!lt_gemm_run(lt, stream, p.gemm, w->data, x->data, res ? res->data : nullptr, t->data, lt_bias, lt_ws)) {
                    return false;
                }
                if (p.quantize_out) {   // gelu(y + b), quantized for the next node (plan_fp8)
                    return launch_quantize(stream, t->type, s->fp8_x, s->fp8_scale, t->data, true,
                                           b ? (const float *)b->data : nullptr, rows, N);
                }
                if (p.epilogue) {
                    return launch_epilogue(stream, t->type, t->data, p.epi_bias ? (const float *)b->data : nullptr,
                                           p.epi_res ? res->data : nullptr, nullptr, 1, rows, N, t->iparams[1]);
                }
                return true;
            }
            case VT_OP_CONV1D_K3: {
                const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * add = t->src[3];
                const int64_t N = w->ne[2], T_out = t->ne[1], B = t->ne[2];
                const int64_t cw = p.chunk_windows, chunk_rows = cw * T_out;
                const size_t es = vt_type_size(t->type);
                for (int64_t b0 = 0; b0 < B; b0 += cw) {
                    if (!launch_im2col(stream, t->type, s->im2col, x, b0, chunk_rows, T_out, t->iparams[0])) return false;
                    void * d = (char *)t->data + (size_t)(b0 * T_out * N) * es;
                    if (!lt_gemm_run(lt, stream, p.gemm, w->data, s->im2col, nullptr, d, nullptr, lt_ws)) return false;
                }
                return launch_epilogue(stream, t->type, t->data, (const float *)b->data, nullptr,
                                       add ? (const float *)add->data : nullptr, T_out, B * T_out, N, t->iparams[1]);
            }
            case VT_OP_LAYER_NORM:
                return p.quantize_out ? launch_layer_norm(stream, t, s->fp8_x, s->fp8_scale) : launch_layer_norm(stream, t);
            case VT_OP_ATTENTION:  return launch_attention(stream, t, att);
            case VT_OP_LOG_MEL:    return launch_log_mel(stream, t, s->mel_max, s->mel_ranges);
            case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK:
                return launch_projector_op(stream, t);
            default:
                vt_set_error("cuda: op %s ('%s') has no CUDA kernel", vt_op_name(t->op), t->name);
                return false;
        }
    }

    bool run_all(vt_graph * g, graph_state * s) {
        for (size_t i = 0; i < g->nodes.size(); i++) {
            if (!run_node(s, i, g->nodes[i])) return false;
        }
        return convert_outputs(s);
    }

    bool convert_outputs(graph_state * s) {
        for (auto & o : s->f32_outputs)
            if (!launch_convert(stream, o.second, VT_TYPE_F32, o.first->data, o.first->type, (size_t)vt_nelements(o.first))) return false;
        return true;
    }

    // Captures the whole forward as a CUDA graph, once (again after alloc_weights moved the
    // weights); launch replays it.
    bool capture(graph_state * s, vt_graph * g) {
        if (s->exec && s->weights_gen != weights_gen) {
            CUDA_CHECK(cudaGraphExecDestroy(s->exec));
            s->exec = nullptr;
        }
        if (!s->exec) {
            CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            const bool ok = run_all(g, s);
            cudaGraph_t graph = nullptr;
            const cudaError_t end = cudaStreamEndCapture(stream, &graph);
            if (!ok) {
                if (graph) cudaGraphDestroy(graph);
                return false;   // run_all's message stands
            }
            if (end != cudaSuccess) {
                if (graph) cudaGraphDestroy(graph);
                vt_set_error("cuda: cudaStreamEndCapture failed: %s", cudaGetErrorString(end));
                return false;
            }
            const cudaError_t inst = cudaGraphInstantiate(&s->exec, graph, 0);
            cudaGraphDestroy(graph);
            if (inst != cudaSuccess) {
                s->exec = nullptr;
                vt_set_error("cuda: cudaGraphInstantiate failed: %s", cudaGetErrorString(inst));
                return false;
            }
            s->weights_gen = weights_gen;
        }
        return true;
    }

    bool launch(graph_state * s, vt_graph * g) {
        if (!capture(s, g)) return false;
        CUDA_CHECK(cudaGraphLaunch(s->exec, stream));
        return true;
    }

    bool prepare(vt_graph * g) override {
        graph_state * s = (graph_state *)g->backend_state;
        if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
        CUDA_CHECK(cudaSetDevice(device));
        return capture(s, g);
    }

    bool compute(vt_graph * g) override {
        graph_state * s = (graph_state *)g->backend_state;
        if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
        CUDA_CHECK(cudaSetDevice(device));
        if (!launch(s, g)) return false;
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return true;
    }

    // ---- asynchronous runs: upload | forward | download on three streams ----

    bool supports(vt_op) const override { return true; }

    void * host_alloc(size_t bytes) override {
        void * p = nullptr;
        cudaSetDevice(device);
        // portable: pinned for every device's copies (a pipeline over several GPUs shares it)
        const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaHostAlloc of %zu bytes failed: %s", bytes, cudaGetErrorString(err));
            return nullptr;
        }
        return p;
    }

    void host_free(void * p) override { cudaFreeHost(p); }

    // A slot's device buffer of at least `bytes`; growing it waits for the work in flight.
    bool ensure_slot_buffer(void *& buf, size_t & have, size_t bytes) {
        if (bytes <= have) return true;
        CUDA_CHECK(cudaDeviceSynchronize());
        if (buf) CUDA_CHECK(cudaFree(buf));
        buf = nullptr;
        have = 0;
        const cudaError_t err = device_malloc(&buf, bytes);
        if (err != cudaSuccess) {
            buf = nullptr;
            vt_set_error("cuda: cudaMalloc of a %zu-byte transfer buffer failed: %s", bytes, cudaGetErrorString(err));
            return false;
        }
        have = bytes;
        return true;
    }

    // upload stream: host -> slot.in (the inputs back to back); compute stream: slot.in -> the
    // graph's inputs, the forward, its output converted into slot.out; download stream: slot.out
    // -> host. The events keep each slot's buffers from being overwritten while another stream
    // reads them.
    bool submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                void * out_host, vt_type out_type, int slot) override {
        graph_state * s = (graph_state *)g->backend_state;
        if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
        CUDA_CHECK(cudaSetDevice(device));
        submit_slot & sl = slots[slot];
        size_t at[VT_MAX_SUBMIT_INPUTS + 1] = {0};          // each input's offset in slot.in, 256-aligned
        for (int i = 0; i < n_in; i++) at[i + 1] = at[i] + (vt_nbytes(in[i]) + 255) / 256 * 256;
        const size_t n_out = (size_t)vt_nelements(out), out_bytes = n_out * vt_type_size(out_type);
        if (!ensure_slot_buffer(sl.in, sl.in_bytes, at[n_in]) || !ensure_slot_buffer(sl.out, sl.out_bytes, out_bytes)) return false;

        CUDA_CHECK(cudaStreamWaitEvent(up, sl.consumed, 0));
        for (int i = 0; i < n_in; i++)
            CUDA_CHECK(cudaMemcpyAsync((char *)sl.in + at[i], in_host[i], vt_nbytes(in[i]), cudaMemcpyHostToDevice, up));
        CUDA_CHECK(cudaEventRecord(sl.uploaded, up));

        CUDA_CHECK(cudaStreamWaitEvent(stream, sl.uploaded, 0));
        for (int i = 0; i < n_in; i++)
            CUDA_CHECK(cudaMemcpyAsync(in[i]->data, (char *)sl.in + at[i], vt_nbytes(in[i]), cudaMemcpyDeviceToDevice, stream));
        CUDA_CHECK(cudaEventRecord(sl.consumed, stream));
        if (!launch(s, g)) return false;
        CUDA_CHECK(cudaStreamWaitEvent(stream, sl.done, 0));
        if (out->type == out_type) CUDA_CHECK(cudaMemcpyAsync(sl.out, out->data, out_bytes, cudaMemcpyDeviceToDevice, stream));
        else if (!launch_convert(stream, sl.out, out_type, out->data, out->type, n_out)) return false;
        CUDA_CHECK(cudaEventRecord(sl.computed, stream));

        CUDA_CHECK(cudaStreamWaitEvent(down, sl.computed, 0));
        CUDA_CHECK(cudaMemcpyAsync(out_host, sl.out, out_bytes, cudaMemcpyDeviceToHost, down));
        CUDA_CHECK(cudaEventRecord(sl.done, down));
        return true;
    }

    bool wait(int slot) override {
        CUDA_CHECK(cudaSetDevice(device));
        CUDA_CHECK(cudaEventSynchronize(slots[slot].done));
        return true;
    }

    // Node by node, outside any CUDA graph, with an event pair around each node.
    bool profile(vt_graph * g, double * ms) override {
        graph_state * s = (graph_state *)g->backend_state;
        if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
        CUDA_CHECK(cudaSetDevice(device));
        const size_t n = g->nodes.size();
        std::vector<cudaEvent_t> ev(n + 1, nullptr);
        bool ok = true;
        for (size_t i = 0; i <= n && ok; i++) {
            const cudaError_t err = cudaEventCreate(&ev[i]);
            if (err != cudaSuccess) {
                ev[i] = nullptr;
                vt_set_error("cuda: cudaEventCreate failed: %s", cudaGetErrorString(err));
                ok = false;
            }
        }
        if (ok) {
            cudaError_t err = cudaEventRecord(ev[0], stream);
            for (size_t i = 0; i < n && ok && err == cudaSuccess; i++) {
                ok = run_node(s, i, g->nodes[i]);
                if (ok) err = cudaEventRecord(ev[i + 1], stream);
            }
            if (ok && err == cudaSuccess) ok = convert_outputs(s);
            if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
            for (size_t i = 0; i < n && ok && err == cudaSuccess; i++) {
                float t = 0.0f;
                err = cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
                ms[i] = t;
            }
            if (ok && err != cudaSuccess) {
                vt_set_error("cuda: profiling failed: %s", cudaGetErrorString(err));
                ok = false;
            }
        }
        for (cudaEvent_t e : ev) if (e) cudaEventDestroy(e);
        return ok;
    }
};

} // namespace

static vt_backend * cuda_init(int device, vt_type compute_type, bool fp8) {
    if (compute_type != VT_TYPE_F16 && compute_type != VT_TYPE_BF16) {
        vt_set_error("cuda: compute type must be f16 or bf16, not %s", vt_type_name(compute_type));
        return nullptr;
    }
    // what is missing, all of it in one message: a driver for our CUDA major, cuBLASLt
    const int cuda_major = CUDART_VERSION / 1000;
    std::string missing;
    int driver = 0;   // CUDA version the driver supports, major * 1000 + minor * 10; 0: no driver
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    char buf[200];
    if (driver == 0) {
        snprintf(buf, sizeof(buf), "no NVIDIA driver (libcuda.so.1 not found; CUDA %d needs driver %s or newer)",
                 cuda_major, driver_needed(cuda_major));
        missing = buf;
    } else if (driver / 1000 < cuda_major) {
        snprintf(buf, sizeof(buf), "the NVIDIA driver supports CUDA %d.%d, this build needs CUDA %d (driver %s or newer)",
                 driver / 1000, driver % 1000 / 10, cuda_major, driver_needed(cuda_major));
        missing = buf;
    }
    std::string lt_error;
    if (!cublaslt_load(lt_error)) missing += (missing.empty() ? "" : "; ") + lt_error;
    if (!missing.empty()) {
        vt_set_error("cuda: %s", missing.c_str());
        cudaGetLastError();
        return nullptr;
    }
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        vt_set_error("no CUDA device (%s)", err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
        cudaGetLastError();   // clear the sticky-free error state for later calls
        return nullptr;
    }
    if (device < 0 || device >= n) {
        vt_set_error("cuda: device %d does not exist (%d present)", device, n);
        return nullptr;
    }
    cuda_backend * be = new cuda_backend;
    if (!be->init(device, compute_type, fp8)) {
        delete be;
        return nullptr;
    }
    return be;
}

vt_backend * vt_backend_cuda_init(int device, enum vt_type compute_type) { return cuda_init(device, compute_type, false); }
vt_backend * vt_backend_cuda_init_fp8(int device) { return cuda_init(device, VT_TYPE_BF16, true); }

bool vt_cuda_built(void) { return true; }

int vt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool vt_cuda_memory_used(int device, size_t * used) {
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(device));
    size_t free_b = 0, total_b = 0;
    const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(prev);
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaMemGetInfo failed: %s", cudaGetErrorString(err));
        return false;
    }
    *used = total_b - free_b;
    return true;
}
