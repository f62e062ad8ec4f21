// dev/cuda/attention.cu - the attention kernels' measurement-only variants beside the library's
// own, in the manner of llm.c's dev/cuda: every version is checked against a CPU reference (in
// double, on a sample of rows) and against the kernel the library runs, then timed. Not part of
// the library or of `make all`: `make dev-cuda` builds build/dev/attention, tests/gpu/run-all.sh
// runs it (STEPS=dev, and tests/gpu/attention.py for its table beside torch).
//
// Versions (wgmma*: attention_wgmma_kernel of vt-cuda-attention-wgmma.cuh, compute capability 9.0
// and a build with sm_90a code only; "n/a" elsewhere):
//   fa2          attention_kernel (vt-cuda-attention.cuh): FlashAttention-2 on mma.sync, K/V
//                double-buffered by cp.async, 128 query rows a block. The library's kernel off cc 9.0
//                (and with VT_ATTENTION=fa2).
//   wgmma        the library's kernel on cc 9.0: persistent blocks, a TMA producer warpgroup, the
//                consumers taking turns (ping-pong), 128- or 192-row tiles by attention_wgmma_consumers
//   wgmma-128    2 consumer warpgroups (128-row tiles) whatever the shape
//   wgmma-192    3 consumer warpgroups (192-row tiles) whatever the shape
//   wgmma-nopp   the library's tile height without the ping-pong between consumers (PP = false)
//   wgmma-1tile  the library's tile height with a block per work tile instead of persistent blocks
// What each measured, and when, is in docs/BENCHMARKS.md.
//
//   build/dev/attention [B ...]       batches (default 1 32); T 1500, 20 heads, head_dim 64 (large-v3)
//
// Output, per dtype and batch: one check line per version, then the timings in test-all's
// benchmark format (tests/test-cuda.cpp), which tests/gpu/attention.py reads:
//   bench f16 attention B=32 T=1500 H=20:  fa2 1.300 ms 283.6 TFLOP/s  wgmma 0.926 ms 398.1 TFLOP/s ...
// Exit status 1 when a version fails its check.
#define VT_BACKEND_IMPL
#include "vt.h"

#include "vt-cuda-attention.cuh"
#include "vt-cuda-attention-wgmma.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// ------------------------------------------------------------------------------------
// CPU reference
// ------------------------------------------------------------------------------------

// out[h*64 + d] of query row i of window b: softmax_j(q_i . k_j * scale) v_j, in double, from the
// fused [B][T][3 * n_head * 64] qkv (q, k, v side by side in a row, as the encoder's QKV GEMM
// writes them).
static void attention_row_cpu(double * out, const std::vector<float> & qkv, int T, int n_head, int b, int i, int h,
                              double scale) {
    const int d = n_head * 64, row = 3 * d;
    const float * q = &qkv[((size_t)b * T + i) * row + h * 64];
    std::vector<double> s(T);
    double mx = -INFINITY;
    for (int j = 0; j < T; j++) {
        const float * k = &qkv[((size_t)b * T + j) * row + d + h * 64];
        double dot = 0.0;
        for (int e = 0; e < 64; e++) dot += (double)q[e] * k[e];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
    }
    double sum = 0.0;
    for (int j = 0; j < T; j++) sum += (s[j] = std::exp(s[j] - mx));
    for (int e = 0; e < 64; e++) out[e] = 0.0;
    for (int j = 0; j < T; j++) {
        const float * v = &qkv[((size_t)b * T + j) * row + 2 * d + h * 64];
        for (int e = 0; e < 64; e++) out[e] += s[j] / sum * v[e];
    }
}

// ------------------------------------------------------------------------------------
// versions
// ------------------------------------------------------------------------------------

struct version {
    const char * name;
    bool wgmma;   // needs the sm_90a kernel
    std::function<bool(const launch_ctx &, vt_tensor *)> run;
};

template <typename T, bool PP, int NC> static bool run_wgmma(const launch_ctx & lc, vt_tensor * t, bool one_tile) {
    bool launched = false;
    if (!launch_attention_wgmma_nc<T, PP, NC>(lc, t, one_tile, &launched)) return false;
    if (!launched) vt_set_error("the TMA maps refused the views");
    return launched;
}

// The library's tile height for t (2 or 3 consumers).
static int library_nc(const launch_ctx & lc, const vt_tensor * t) {
    return attention_wgmma_consumers((int)t->src[0]->ne[1], t->iparams[0], (int)t->src[0]->ne[2], lc.n_sm);
}

template <typename T> static std::vector<version> versions() {
    return {
        {"fa2", false, [](const launch_ctx & lc, vt_tensor * t) { return launch_attention_mt<T, ATT_MT>(lc, t); }},
        {"wgmma", true, [](const launch_ctx & lc, vt_tensor * t) {
             bool launched = false;
             if (!launch_attention_wgmma<T>(lc, t, &launched)) return false;
             if (!launched) vt_set_error("the TMA maps refused the views");
             return launched;
         }},
        {"wgmma-128", true, [](const launch_ctx & lc, vt_tensor * t) { return run_wgmma<T, true, 2>(lc, t, false); }},
        {"wgmma-192", true, [](const launch_ctx & lc, vt_tensor * t) { return run_wgmma<T, true, 3>(lc, t, false); }},
        {"wgmma-nopp", true, [](const launch_ctx & lc, vt_tensor * t) {
             return library_nc(lc, t) == 3 ? run_wgmma<T, false, 3>(lc, t, false) : run_wgmma<T, false, 2>(lc, t, false);
         }},
        {"wgmma-1tile", true, [](const launch_ctx & lc, vt_tensor * t) {
             return library_nc(lc, t) == 3 ? run_wgmma<T, true, 3>(lc, t, true) : run_wgmma<T, true, 2>(lc, t, true);
         }},
    };
}

template <typename T> static bool allow_smem(bool wgmma) {
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<T, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_smem_bytes(ATT_MT)));
    if (!wgmma) return true;
    return allow_attention_wgmma_smem_nc<T, true, 2>() && allow_attention_wgmma_smem_nc<T, true, 3>() &&
           allow_attention_wgmma_smem_nc<T, false, 2>() && allow_attention_wgmma_smem_nc<T, false, 3>();
}

// ------------------------------------------------------------------------------------
// check and time
// ------------------------------------------------------------------------------------

#define DEV_CHECK(call)                                                                            \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double rel_l2(const std::vector<double> & a, const std::vector<double> & ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// One dtype, one batch: every version checked, then timed. False when a check failed.
template <typename T>
static bool run_case(vt_type type, int B, const launch_ctx & lc, bool wgmma_ok) {
    const int T_ctx = 1500, n_head = 20, d = n_head * 64;
    const size_t es = sizeof(T), n_qkv = (size_t)B * T_ctx * 3 * d, n_out = (size_t)B * T_ctx * d;
    const char * tname = vt_type_name(type);

    // inputs: uniform [-2, 2), rounded to the type (the CPU reference reads the rounded values)
    std::vector<float> qkv(n_qkv);
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(B + 1);
    for (float & x : qkv) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x = ((float)(s >> 40) / (float)(1ull << 24) * 2.0f - 1.0f) * 2.0f;
    }
    std::vector<uint16_t> qkv_t(n_qkv);
    vt_convert(qkv_t.data(), type, qkv.data(), VT_TYPE_F32, n_qkv);
    vt_convert(qkv.data(), VT_TYPE_F32, qkv_t.data(), type, n_qkv);
    void * d_qkv = nullptr, * d_out = nullptr;
    DEV_CHECK(cudaMalloc(&d_qkv, n_qkv * es));
    DEV_CHECK(cudaMalloc(&d_out, n_out * es));
    DEV_CHECK(cudaMemcpy(d_qkv, qkv_t.data(), n_qkv * es, cudaMemcpyHostToDevice));

    // the node: q, k, v as views of the fused rows, the output contiguous [B][T][d]
    vt_tensor q = {}, k = {}, v = {}, out = {};
    vt_tensor * views[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++) {
        vt_tensor * x = views[i];
        x->type = type;
        x->ne[0] = d; x->ne[1] = T_ctx; x->ne[2] = B; x->ne[3] = 1;
        x->nb[0] = es; x->nb[1] = 3 * d * es; x->nb[2] = (size_t)T_ctx * 3 * d * es; x->nb[3] = x->nb[2] * B;
        x->data = (char *)d_qkv + i * d * es;
        snprintf(x->name, sizeof(x->name), "%c", "qkv"[i]);
    }
    out.type = type;
    out.op = VT_OP_ATTENTION;
    out.ne[0] = d; out.ne[1] = T_ctx; out.ne[2] = B; out.ne[3] = 1;
    out.nb[0] = es; out.nb[1] = d * es; out.nb[2] = (size_t)T_ctx * d * es; out.nb[3] = out.nb[2] * B;
    out.src[0] = &q; out.src[1] = &k; out.src[2] = &v;
    out.iparams[0] = n_head;
    out.fparams[0] = 1.0f / 8.0f;   // head_dim^-0.5
    out.data = d_out;
    snprintf(out.name, sizeof(out.name), "attention");
    if (!attention_supported(&out)) { fprintf(stderr, "attention_supported: %s\n", vt_last_error()); exit(1); }

    // the CPU reference on a sample: windows 0 and B - 1, every 97th query row and the last, 3 heads
    struct sample { int b, i, h; };
    std::vector<sample> rows;
    for (int b : {0, B - 1}) {
        for (int i = 0; i < T_ctx; i += 97) for (int h : {0, 7, n_head - 1}) rows.push_back({b, i, h});
        for (int h : {0, 7, n_head - 1}) rows.push_back({b, T_ctx - 1, h});
        if (B == 1) break;
    }
    std::vector<double> ref(rows.size() * 64);
    for (size_t r = 0; r < rows.size(); r++)
        attention_row_cpu(&ref[r * 64], qkv, T_ctx, n_head, rows[r].b, rows[r].i, rows[r].h, 1.0 / 8.0);

    const double tol_cpu = type == VT_TYPE_F16 ? 2e-3 : 1e-2;   // the probabilities are rounded to T before P V
    const double tol_lib = 2 * tol_cpu;                          // two kernels, each within tol_cpu
    const char * library = wgmma_ok ? "wgmma" : "fa2";
    std::vector<version> vs = versions<T>();
    std::vector<std::vector<double>> outs(vs.size());   // each version's whole output, f64
    std::vector<uint16_t> host(n_out);
    std::vector<float> f32(n_out);
    bool all_ok = true;
    std::vector<double> ms(vs.size(), -1.0);
    for (size_t vi = 0; vi < vs.size(); vi++) {
        if (vs[vi].wgmma && !wgmma_ok) continue;
        DEV_CHECK(cudaMemset(d_out, 0xff, n_out * es));   // NaN: an unwritten element fails the check
        if (!vs[vi].run(lc, &out)) { printf("check %s %s B=%d: FAILED to run: %s\n", tname, vs[vi].name, B, vt_last_error()); all_ok = false; continue; }
        DEV_CHECK(cudaStreamSynchronize(lc.stream));
        DEV_CHECK(cudaMemcpy(host.data(), d_out, n_out * es, cudaMemcpyDeviceToHost));
        vt_convert(f32.data(), VT_TYPE_F32, host.data(), type, n_out);
        outs[vi].assign(f32.begin(), f32.end());
        std::vector<double> got(rows.size() * 64);
        for (size_t r = 0; r < rows.size(); r++)
            for (int e = 0; e < 64; e++)
                got[r * 64 + e] = outs[vi][((size_t)rows[r].b * T_ctx + rows[r].i) * d + rows[r].h * 64 + e];
        const double err = rel_l2(got, ref);
        bool ok = std::isfinite(err) && err <= tol_cpu;
        std::string line = std::string("check ") + tname + " " + vs[vi].name + " B=" + std::to_string(B) + ": CPU rel L2 " +
                           std::to_string(err);
        all_ok = all_ok && ok;
        printf("%s (tolerance %g)%s\n", line.c_str(), tol_cpu, ok ? "" : "  FAILED");

        // timing: warm-up (5 runs and at least 50 ms), then the median of 20 with CUDA events
        cudaEvent_t e0, e1;
        DEV_CHECK(cudaEventCreate(&e0));
        DEV_CHECK(cudaEventCreate(&e1));
        std::vector<float> times;
        float warm = 0.0f;
        for (int n = 0; n < 5 || warm < 50.0f; n++) {
            DEV_CHECK(cudaEventRecord(e0, lc.stream));
            vs[vi].run(lc, &out);
            DEV_CHECK(cudaEventRecord(e1, lc.stream));
            DEV_CHECK(cudaEventSynchronize(e1));
            float t = 0.0f;
            DEV_CHECK(cudaEventElapsedTime(&t, e0, e1));
            warm += t;
        }
        for (int n = 0; n < 20; n++) {
            DEV_CHECK(cudaEventRecord(e0, lc.stream));
            vs[vi].run(lc, &out);
            DEV_CHECK(cudaEventRecord(e1, lc.stream));
            DEV_CHECK(cudaEventSynchronize(e1));
            float t = 0.0f;
            DEV_CHECK(cudaEventElapsedTime(&t, e0, e1));
            times.push_back(t);
        }
        std::sort(times.begin(), times.end());
        ms[vi] = times[times.size() / 2];
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    // every version against the library's kernel, whole outputs
    size_t lib = 0;
    while (lib < vs.size() && strcmp(vs[lib].name, library) != 0) lib++;
    for (size_t vi = 0; vi < vs.size(); vi++) {
        if (vi == lib || outs[vi].empty() || lib == vs.size() || outs[lib].empty()) continue;
        const double err = rel_l2(outs[vi], outs[lib]);
        const bool ok = std::isfinite(err) && err <= tol_lib;
        all_ok = all_ok && ok;
        printf("check %s %s B=%d: against the library's %s, rel L2 %.3g (tolerance %g)%s\n", tname, vs[vi].name, B, library,
               err, tol_lib, ok ? "" : "  FAILED");
    }
    const double flop = 4.0 * B * n_head * (double)T_ctx * T_ctx * 64;
    printf("bench %-4s attention B=%-3d T=%d H=%d:", tname, B, T_ctx, n_head);
    for (size_t vi = 0; vi < vs.size(); vi++) {
        if (ms[vi] < 0) printf("  %s      n/a", vs[vi].name);
        else printf("  %s %8.3f ms %6.1f TFLOP/s", vs[vi].name, ms[vi], flop / ms[vi] * 1e-9);
    }
    printf("\n");
    fflush(stdout);
    cudaFree(d_qkv);
    cudaFree(d_out);
    return all_ok;
}

// ------------------------------------------------------------------------------------
// main
// ------------------------------------------------------------------------------------

int main(int argc, char ** argv) {
    std::vector<int> batches;
    for (int i = 1; i < argc; i++) {
        const int b = atoi(argv[i]);
        if (b < 1 || b > 256) { fprintf(stderr, "usage: %s [B ...]   (batches 1 to 256; default 1 32)\n", argv[0]); return 2; }
        batches.push_back(b);
    }
    if (batches.empty()) batches = {1, 32};

    int dev = 0;
    cudaDeviceProp prop;
    DEV_CHECK(cudaSetDevice(dev));
    DEV_CHECK(cudaGetDeviceProperties(&prop, dev));
    launch_ctx lc;
    DEV_CHECK(cudaStreamCreateWithFlags(&lc.stream, cudaStreamNonBlocking));
    lc.n_sm = prop.multiProcessorCount;
    // the wgmma versions as the library decides it (cuda_backend::init): cc 9.0, sm_90a code, TMA
    int built = 0;
    const bool hopper = prop.major == 9 && prop.minor == 0;
    if (hopper) DEV_CHECK(cudaMemcpyFromSymbol(&built, g_wgmma_built, sizeof(built)));
    const bool wgmma_ok = hopper && built && tensor_map_encode();
    printf("dev/cuda/attention: %s (cc %d.%d, %d SMs); wgmma versions %s\n", prop.name, prop.major, prop.minor, lc.n_sm,
           wgmma_ok ? "run" : "n/a (they need cc 9.0, sm_90a code and TMA)");
    if (!allow_smem<__half>(wgmma_ok) || !allow_smem<__nv_bfloat16>(wgmma_ok)) {
        fprintf(stderr, "%s\n", vt_last_error());
        return 1;
    }
    bool ok = true;
    for (int B : batches) {
        ok = run_case<__half>(VT_TYPE_F16, B, lc, wgmma_ok) && ok;
        ok = run_case<__nv_bfloat16>(VT_TYPE_BF16, B, lc, wgmma_ok) && ok;
    }
    printf("dev/cuda/attention: %s\n", ok ? "every version within its tolerance" : "FAILED (see the check lines)");
    return ok ? 0 : 1;
}
