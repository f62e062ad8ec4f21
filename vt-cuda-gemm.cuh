// vt-cuda-gemm.cuh - the GEMMs of the CUDA backend: cuBLASLt, opened at run time, and the FP8
// (e4m3) quantization that feeds its FP8 GEMMs.
//
//   the CUDA libraries, found at run time   cublaslt_load fills g_lt, once per process
//   cuBLASLt GEMM                           lt_gemm_plan (descriptors, heuristic), lt_gemm_run
//   FP8                                     e4m3x8, quantize_rows_kernel and launch_quantize
//
// The backend times the heuristic's candidates (cuda_backend::tune_gemm) and decides which
// linears run FP8 (cuda_backend::plan_fp8); this file holds what those plans are made of.
#pragma once

#include "vt-cuda-common.cuh"
#include "vt-cuda-ptx.cuh"   // tanh_approx

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        const cublasStatus_t st_ = (call);                                                 \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                \
            vt_set_error("cublasLt: %s failed: %s (%s:%d)", #call,                         \
                         g_lt.cublasLtGetStatusString(st_), __FILE__, __LINE__);                \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

static const size_t LT_WORKSPACE_BYTES = 32u << 20;    // cuBLASLt's recommended size on Hopper
static const int    LT_CANDIDATES = 8;                 // algorithms a linear's GEMM is timed with (tune_gemm)

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
// Process-wide, but written once: by cublaslt_load under its lock, which every backend takes
// before its first cuBLASLt call; read-only after that.
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
// every pointer passed later will have. gelu_tanh: GELU in cuBLASLt's epilogue (after the bias
// when there is one), its tanh form (cuda_backend::plan_linear says why). FP8 when w_scale is
// set: A and B are e4m3 and the
// product's (n, r) element is multiplied by w_scale[n] * x_scale[r] (cuBLASLt's outer-vector
// scaling: a scale per output channel and one per token), C and D stay `type`.
static bool lt_gemm_plan(cublasLtHandle_t lt, lt_gemm & gm, vt_type type, int64_t rows, int64_t N, int64_t K,
                         const void * bias, bool residual, uint32_t align_a, uint32_t align_b, uint32_t align_cd,
                         const char * name, const float * w_scale = nullptr, const float * x_scale = nullptr,
                         bool gelu_tanh = false) {
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
    if (gm.bias || gelu_tanh) {
        const cublasLtEpilogue_t epi = gelu_tanh ? (gm.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                                 : CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    }
    if (gm.bias) CUBLAS_CHECK(g_lt.cublasLtMatmulDescSetAttribute(gm.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
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

// ---- FP8: e4m3 operands for the GEMMs ----

// GELU's tanh form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), the tanh on the MUFU:
// the form cuBLASLt's epilogue gives f16/bf16 fc1 (cuda_backend::plan_linear), here for FP8's fc1,
// whose output e4m3 then rounds to 2^-4 relative; the form's departure from erf (at most 4.7e-4)
// and the MUFU's 2^-11 vanish in that. 6 instructions to gelu_erf's 16, which kept this pass
// bound by instruction issue (ncu) rather than by memory.
__device__ __forceinline__ float gelu_tanh(float x) {
    const float u = x * fmaf(0.0356774081f, x * x, 0.7978845608f);   // sqrt(2 / pi) (x + 0.044715 x^3)
    const float h = 0.5f * x;
    return fmaf(h, tanh_approx(u), h);
}

// quantize_rows_kernel: each row of x [n_rows, K] (T) to FP8 e4m3 with a scale of its own,
//   for the FP8 GEMMs (vt_backend_params.fp8): scale[r] = max_c |x[r, c]| / 448 (e4m3's
//   largest finite value; 1 for an all-zero row), q[r, c] = e4m3(x[r, c] / scale[r]),
//   rounded to nearest even and saturated (e4m3x8). The same kernel quantizes the weights at load
//   (a row is an output channel) and the activations before each GEMM (a row is a token).
//   GELU: x is a GEMM's output without its bias (may be null); the row becomes gelu_tanh(x + bias) first
//   (fc1's epilogue fused with fc2's quantization: the f16/bf16 row is never written).
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
            float bv[8] = {};
            if (GELU && bias) {   // two 16-byte loads (every tensor starts VT_ARENA_ALIGN-aligned)
                const float4 b0 = reinterpret_cast<const float4 *>(bias)[2 * c], b1 = reinterpret_cast<const float4 *>(bias)[2 * c + 1];
                bv[0] = b0.x; bv[1] = b0.y; bv[2] = b0.z; bv[3] = b0.w; bv[4] = b1.x; bv[5] = b1.y; bv[6] = b1.z; bv[7] = b1.w;
            }
#pragma unroll
            for (int e = 0; e < 8; e++) {
                if constexpr (GELU) v[j][e] = gelu_tanh(v[j][e] + bv[e]);
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

// The largest K quantize_rows_kernel takes (VPL 8); wider rows keep their GEMM in f16/bf16.
static const int QUANT_MAX_K = 8 * QUANT_THREADS * 8;

// VPL exactly the row's vectors a thread (with_vpl): the 8 instance on large-v3's fc1 rows (5 a
// thread) holds registers enough to leave too few blocks an SM, too few loads in flight for
// DRAM's bandwidth
template <typename T, bool GELU>
static bool launch_quantize_t(const launch_ctx & lc, void * q, float * scale, const T * x, const float * bias, int64_t rows, int K) {
    __nv_fp8_storage_t * qq = (__nv_fp8_storage_t *)q;
    with_vpl((int)ceil_div(K / 8, QUANT_THREADS), [&](auto v) {
        quantize_rows_kernel<T, decltype(v)::value, GELU><<<(unsigned)rows, QUANT_THREADS, 0, lc.stream>>>(qq, scale, x, bias, K);
    });
    LAUNCH_CHECK("quantize_rows_kernel");
    return true;
}

// rows x K of x (type xt, contiguous) -> e4m3 q and a scale per row; gelu: of gelu(x + bias)
static bool launch_quantize(const launch_ctx & lc, vt_type xt, void * q, float * scale, const void * x, bool gelu,
                            const float * bias, int64_t rows, int64_t K) {
    VT_ASSERT(K % 16 == 0 && K <= QUANT_MAX_K && rows <= INT32_MAX);
    if (xt == VT_TYPE_F16) {
        return gelu ? launch_quantize_t<__half, true>(lc, q, scale, (const __half *)x, bias, rows, (int)K)
                    : launch_quantize_t<__half, false>(lc, q, scale, (const __half *)x, nullptr, rows, (int)K);
    }
    return gelu ? launch_quantize_t<__nv_bfloat16, true>(lc, q, scale, (const __nv_bfloat16 *)x, bias, rows, (int)K)
                : launch_quantize_t<__nv_bfloat16, false>(lc, q, scale, (const __nv_bfloat16 *)x, nullptr, rows, (int)K);
}
