// test-cuda.cpp - every vt op on the CUDA backend against the CPU backend (the f32
// reference), on random inputs of odd sizes, in f16 and bf16; CUDA-graph replay; profile;
// the shapes the CUDA backend refuses. Without a device doctest reports each test "skipped" (WA_REQUIRE_GPU=1: they run, and fail).
//
// The CPU graph gets the same numbers: every tensor the CUDA side stores in the compute type
// (matrices, activations) is drawn already rounded to that type, so only the arithmetic
// differs (f32 vs f16/bf16 storage of intermediates and of the output, f32 accumulation on
// both). The CUDA output is poisoned with NaN before each compute, so an unwritten element
// fails the test. Tolerances (relative L2): f16 1e-3, bf16 1e-2 (attention: 2e-3 / 1e-2;
// its probabilities are rounded to the compute type before P V).
//
// The attention tests run each kernel of the backend (VT_ATTENTION: wgmma on a cc 9.0 device,
// fa2 on any) against the CPU; the other tests run the default. The wgmma kernel's measurement
// variants are checked and timed by dev/cuda/attention.cu (make dev-cuda), not here.
//
// VT_CUDA_BENCH=1 build/test-all -tc="cuda bench*" times attention (both kernels side by
// side), layer_norm, the GEMMs and one large-v3-sized layer (see tests/gpu/run-tests.sh);
// VT_CUDA_BENCH=attention, the attention only (tests/gpu/attention.py: beside torch);
// VT_CUDA_BENCH_BATCHES=1,6,30 sets the attention's batches (1, 8, 16, 32 unset).
#include <doctest/doctest.h>

#include "test-util.h"
#include "vt.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

// ---- helpers -----------------------------------------------------------------------

struct backend_deleter { void operator()(vt_backend * be) const { vt_backend_free(be); } };
using backend_ptr = std::unique_ptr<vt_backend, backend_deleter>;

const char * type_label(vt_type t) { return vt_type_name(t); }

// vt_last_error() as a string (doctest would print a const char * as a pointer)
std::string last_error() { return vt_last_error(); }

// printf into a std::string, for doctest's messages
std::string msg(const char * fmt, ...) __attribute__((format(printf, 1, 2)));
std::string msg(const char * fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

// Normal(0, scale) numbers, rounded through `type` (F32: unrounded).
std::vector<float> randn(size_t n, uint32_t seed, vt_type type, float scale = 1.0f, float mean = 0.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(mean, scale);
    std::vector<float> v(n);
    for (float & x : v) x = dist(rng);
    if (type != VT_TYPE_F32) {
        std::vector<uint16_t> h(n);
        vt_convert(h.data(), type, v.data(), VT_TYPE_F32, n);
        vt_convert(v.data(), VT_TYPE_F32, h.data(), type, n);
    }
    return v;
}

// Uniform [-scale, scale), fast, for the large benchmark inputs.
std::vector<float> rand_fast(size_t n, uint64_t seed, float scale = 1.0f) {
    std::vector<float> v(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float & x : v) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x = ((float)(s >> 40) / (float)(1ull << 24) * 2.0f - 1.0f) * scale;
    }
    return v;
}

size_t count_nonfinite(const std::vector<float> & v) {
    size_t n = 0;
    for (float x : v) n += !std::isfinite(x);
    return n;
}

// The tests below are skipped without a device (no_gpu()); with one, a backend that does
// not start is a failure.
backend_ptr cuda_backend(vt_type type) {
    backend_ptr be(test_cuda_backend(type));
    REQUIRE_MESSAGE(be, "no CUDA backend: " << last_error());
    return be;
}

// The attention kernels of the CUDA backend (vt-cuda.cu): wgmma on compute capability 9.0
// (its tile height by the wave rule), fa2 everywhere. VT_ATTENTION is read when a backend starts.
const char * const ATT_KERNELS[] = {"wgmma", "fa2"};
const int N_ATT_KERNELS = 2;

// A backend whose attention runs `kernel`; null (the test says so) when this device has no
// such kernel (wgmma off cc 9.0). Any other failure to start fails the test.
backend_ptr cuda_backend_att(vt_type type, const char * kernel) {
    const char * old = getenv("VT_ATTENTION");
    const std::string keep = old ? old : "";
    setenv("VT_ATTENTION", kernel, 1);
    backend_ptr be(test_cuda_backend(type));
    const std::string err = be ? "" : last_error();
    if (old) setenv("VT_ATTENTION", keep.c_str(), 1);
    else unsetenv("VT_ATTENTION");
    if (!be && err.find("needs 9.0") != std::string::npos) {
        MESSAGE("attention " << kernel << " not on this device: " << err);
        return nullptr;
    }
    REQUIRE_MESSAGE(be, "no CUDA backend (VT_ATTENTION=" << kernel << "): " << err);
    return be;
}

// A leaf and the host numbers (f32) it is loaded with.
struct leaf {
    vt_tensor * t;
    const std::vector<float> * data;
};

// Builds one graph's tensors in ctx: matrices in `mat`, activations in `act` (F32 and F32
// for the CPU; the compute type for CUDA). Pushes the leaves to load, returns the output.
using builder = std::function<vt_tensor *(vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & leaves)>;

// One graph on one backend: built, allocated, leaves loaded.
struct instance {
    vt_context * ctx = nullptr;
    vt_graph * g = nullptr;
    vt_tensor * y = nullptr;
    std::vector<leaf> leaves;

    ~instance() {
        vt_graph_free(g);
        vt_free(ctx);
    }

    bool setup(vt_backend * be, const builder & build, vt_type mat, vt_type act) {
        ctx = vt_init(256);
        y = build(ctx, mat, act, leaves);
        g = vt_graph_build(ctx, &y, 1);
        if (!vt_backend_alloc_weights(be, ctx)) return false;
        if (!vt_backend_alloc_graph(be, g)) return false;
        for (const leaf & l : leaves) {
            if (!vt_backend_set_tensor(be, l.t, l.data->data(), VT_TYPE_F32)) return false;
        }
        return true;
    }

    // Replaces the numbers an input leaf is loaded with at the next run.
    void set_input(vt_tensor * t, const std::vector<float> * data) {
        for (leaf & l : leaves) if (l.t == t) l.data = data;
    }

    bool load_inputs(vt_backend * be) {
        for (const leaf & l : leaves) {
            if ((l.t->flags & VT_FLAG_INPUT) && !vt_backend_set_tensor(be, l.t, l.data->data(), VT_TYPE_F32)) return false;
        }
        return true;
    }

    // Poison (optional), load the inputs, compute, read y. The inputs are loaded after the
    // poison: the planner may give y bytes of an input that is dead by then.
    bool run(vt_backend * be, std::vector<float> & out, bool poison) {
        out.assign((size_t)vt_nelements(y), 0.0f);
        if (poison) {
            std::vector<float> nan(out.size(), NAN);
            if (!vt_backend_set_tensor(be, y, nan.data(), VT_TYPE_F32)) return false;
        }
        if (!load_inputs(be)) return false;
        if (!vt_backend_compute(be, g)) return false;
        return vt_backend_get_tensor_f32(be, y, out.data());
    }
};

// CPU reference and CUDA result of one builder; returns the relative L2 error (or +inf on failure).
double cuda_vs_cpu(vt_backend * cuda, vt_type ct, const builder & build, const char * what) {
    static backend_ptr cpu(test_cpu_backend(0));
    std::vector<float> ref, got;
    {
        instance ci;
        REQUIRE_MESSAGE(ci.setup(cpu.get(), build, VT_TYPE_F32, VT_TYPE_F32), last_error());
        REQUIRE_MESSAGE(ci.run(cpu.get(), ref, false), last_error());
    }
    {
        instance gi;
        const bool ok = gi.setup(cuda, build, ct, ct) && gi.run(cuda, got, true);
        CHECK_MESSAGE(ok, msg("%s: %s", what, vt_last_error()));
        if (!ok) return INFINITY;
    }
    const size_t bad = count_nonfinite(got);
    CHECK_MESSAGE(bad == 0, msg("%s: %zu non-finite outputs", what, bad));
    const double err = rel_l2(got, ref);
    MESSAGE(msg("%s %s: rel L2 %.3g", what, type_label(ct), err));
    return err;
}

double tol_for(vt_type ct, double f16_tol = 1e-3) { return ct == VT_TYPE_F16 ? f16_tol : 1e-2; }

const vt_type CTYPES[] = {VT_TYPE_F16, VT_TYPE_BF16};

// One linear layer y = act(x w^T + b) + r [B, M, N] on the given numbers; fp8: its weight
// flagged vt_set_fp8. what() names it for the messages.
struct linear_case {
    int B, M, K, N;
    bool bias;
    vt_act act;
    bool res;

    builder build(const std::vector<float> & x, const std::vector<float> & w, const std::vector<float> & b,
                  const std::vector<float> & r, bool fp8 = false) const {
        const linear_case s = *this;
        return [s, &x, &w, &b, &r, fp8](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
            vt_tensor * tx = vt_new_tensor_3d(ctx, act, s.K, s.M, s.B);
            vt_tensor * tw = vt_new_tensor_2d(ctx, mat, s.K, s.N);
            vt_tensor * tb = s.bias ? vt_new_tensor_1d(ctx, VT_TYPE_F32, s.N) : nullptr;
            vt_tensor * tr = s.res ? vt_new_tensor_3d(ctx, act, s.N, s.M, s.B) : nullptr;
            vt_set_input(tx); vt_set_weight(tw);
            if (fp8) vt_set_fp8(tw);
            L.push_back({tx, &x}); L.push_back({tw, &w});
            if (tb) { vt_set_weight(tb); L.push_back({tb, &b}); }
            if (tr) { vt_set_input(tr); L.push_back({tr, &r}); }
            return vt_linear(ctx, tx, tw, tb, s.act, tr);
        };
    }

    std::string what(const char * prefix) const {
        return msg("%s B%d M%d K%d N%d%s%s%s", prefix, B, M, K, N, bias ? " +bias" : "", act == VT_ACT_GELU ? " gelu" : "",
                   res ? " +res" : "");
    }
};

} // namespace

// ---- ops -----------------------------------------------------------------------------

TEST_CASE("cuda linear: bias, GELU, residual, odd sizes" * doctest::skip(no_gpu())) {
    const linear_case shapes[] = {
        {1, 1, 64, 64, true, VT_ACT_NONE, false},
        {2, 37, 64, 96, true, VT_ACT_NONE, true},      // out_proj / fc2: bias + residual
        {2, 37, 128, 512, true, VT_ACT_GELU, false},   // fc1
        {1, 1500, 384, 1152, true, VT_ACT_NONE, false},// fused QKV, tiny's size
        {1, 37, 33, 17, true, VT_ACT_GELU, true},      // odd everything, GELU then residual
        {3, 5, 7, 3, false, VT_ACT_NONE, true},
        {1, 11, 24, 40, false, VT_ACT_GELU, false},
    };
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const linear_case & s : shapes) {
            const size_t nx = (size_t)s.B * s.M * s.K, nw = (size_t)s.N * s.K, ny = (size_t)s.B * s.M * s.N;
            const std::vector<float> x = randn(nx, 1, ct), w = randn(nw, 2, ct, 1.0f / std::sqrt((float)s.K)),
                                     b = randn(s.N, 3, VT_TYPE_F32, 0.5f), r = randn(ny, 4, ct);
            CHECK(cuda_vs_cpu(cuda.get(), ct, s.build(x, w, b, r), s.what("linear").c_str()) < tol_for(ct));
        }
    }
}

// Numbers an FP8 GEMM takes without loss: each row is e4m3 values (3-bit mantissa, subnormals
// from 2^-9) times 2^pow2, with one element at +-448 * 2^pow2, so the quantizer's per-row
// scale is exactly 2^pow2 and quantizing changes nothing. The FP8 GEMM must then match the
// CPU's f32 GEMM as closely as a bf16 one does. zero_row: row 0 all zeros (scale 1).
static std::vector<float> e4m3_rows(int rows, int K, uint32_t seed, int pow2, bool zero_row = false) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v((size_t)rows * K);
    for (int r = 0; r < rows; r++) {
        float * row = v.data() + (size_t)r * K;
        float amax = 0.0f;
        for (int c = 0; c < K; c++) { row[c] = dist(rng); amax = std::max(amax, std::fabs(row[c])); }
        for (int c = 0; c < K; c++) {
            const float x = row[c] / amax * 448.0f;
            const int e = std::max(-6, (int)std::floor(std::log2(std::max(std::fabs(x), 1e-30f))));
            const float step = std::ldexp(1.0f, e - 3);
            row[c] = std::ldexp(std::nearbyint(x / step) * step, pow2);
        }
        row[rng() % K] = std::ldexp(rng() % 2 ? 448.0f : -448.0f, pow2);
        if (zero_row && r == 0) std::fill(row, row + K, 0.0f);
    }
    return v;
}

TEST_CASE("cuda fp8 linear: exact e4m3 inputs match the f32 GEMM; other sizes fall back to bf16" * doctest::skip(no_gpu())) {
    backend_ptr fp8(test_cuda_backend(VT_TYPE_BF16, 0, true));
    REQUIRE_MESSAGE(fp8, "no FP8 CUDA backend: " << last_error());
    CHECK(vt_backend_compute_type(fp8.get()) == VT_TYPE_BF16);
    const linear_case shapes[] = {
        {1, 1, 64, 64, true, VT_ACT_NONE, false},
        {2, 37, 64, 96, true, VT_ACT_NONE, true},       // out_proj / fc2: bias + residual
        {2, 37, 128, 512, true, VT_ACT_GELU, false},    // fc1 as the graph's output
        {1, 1500, 384, 1152, true, VT_ACT_NONE, false}, // fused QKV, tiny's size
        {1, 20, 5120, 1280, false, VT_ACT_NONE, true},  // large-v3's fc2 width
        {1, 37, 40, 24, true, VT_ACT_GELU, true},       // K % 16 != 0: the bf16 GEMM (random numbers)
    };
    for (const linear_case & s : shapes) {
        const int rows = s.B * s.M;
        const bool exact = s.K % 16 == 0;
        const std::vector<float> x = exact ? e4m3_rows(rows, s.K, 1, -6, true) : randn((size_t)rows * s.K, 1, VT_TYPE_BF16),
                                 w = exact ? e4m3_rows(s.N, s.K, 2, -12) : randn((size_t)s.N * s.K, 2, VT_TYPE_BF16, 0.2f),
                                 b = randn(s.N, 3, VT_TYPE_F32, 0.5f), r = randn((size_t)rows * s.N, 4, VT_TYPE_BF16);
        CHECK(cuda_vs_cpu(fp8.get(), VT_TYPE_BF16, s.build(x, w, b, r, true), s.what("fp8 linear").c_str()) < 1e-2);
    }
}

// The encoder's MLP with its numbers: LayerNorm -> fc1 (GELU) -> fc2 + the residual. flag: the
// weights flagged vt_set_fp8 (FP8 GEMMs on an FP8 backend); expose: the norm's and fc1's outputs
// made outputs too, so that neither may fuse into the next node.
struct mlp_case {
    int B, M, D, F;
    std::vector<float> x, w1, b1, w2, b2, g, be;
    mlp_case(int B_, int M_, int D_, int F_)
        : B(B_), M(M_), D(D_), F(F_), x(e4m3_rows(B * M, D, 5, -4)), w1(randn((size_t)F * D, 6, VT_TYPE_BF16, 1.0f / 16)),
          b1(randn(F, 7, VT_TYPE_F32, 0.5f)), w2(randn((size_t)D * F, 8, VT_TYPE_BF16, 1.0f / 32)),
          b2(randn(D, 9, VT_TYPE_F32, 0.5f)), g(randn(D, 10, VT_TYPE_F32, 0.3f, 1.0f)), be(randn(D, 11, VT_TYPE_F32, 0.2f)) {}

    builder build(bool flag, bool expose) const {
        return [=](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
            vt_tensor * tx = vt_new_tensor_3d(ctx, act, D, M, B);
            vt_tensor * t1 = vt_new_tensor_2d(ctx, mat, D, F), * t2 = vt_new_tensor_2d(ctx, mat, F, D);
            vt_tensor * tb1 = vt_new_tensor_1d(ctx, VT_TYPE_F32, F), * tb2 = vt_new_tensor_1d(ctx, VT_TYPE_F32, D);
            vt_tensor * tg = vt_new_tensor_1d(ctx, VT_TYPE_F32, D), * tbe = vt_new_tensor_1d(ctx, VT_TYPE_F32, D);
            vt_set_input(tx);
            for (vt_tensor * t : {t1, t2, tb1, tb2, tg, tbe}) vt_set_weight(t);
            if (flag) { vt_set_fp8(t1); vt_set_fp8(t2); }
            L.push_back({tx, &x}); L.push_back({t1, &w1}); L.push_back({t2, &w2}); L.push_back({tb1, &b1}); L.push_back({tb2, &b2});
            L.push_back({tg, &g}); L.push_back({tbe, &be});
            vt_tensor * n = vt_layer_norm(ctx, tx, tg, tbe, 1e-5f);
            vt_tensor * h = vt_linear(ctx, n, t1, tb1, VT_ACT_GELU, nullptr);
            if (expose) { vt_set_output(n); vt_set_output(h); }
            return vt_linear(ctx, h, t2, tb2, VT_ACT_NONE, tx);
        };
    }
};

TEST_CASE("cuda fp8 MLP: the norm quantizes for fc1, fc1's GELU epilogue for fc2, within e4m3's rounding" * doctest::skip(no_gpu())) {
    backend_ptr fp8(test_cuda_backend(VT_TYPE_BF16, 0, true));
    REQUIRE_MESSAGE(fp8, "no FP8 CUDA backend: " << last_error());
    // 8193: 16386 rows (the exposed norm 4 rows a warp, the last warp's half empty); large-v3's MLP
    // at batch 1: fc1's rows are 5 vectors a thread in the fused GELU pass (with_vpl's 5)
    for (const mlp_case & mlp : {mlp_case(2, 150, 256, 1024), mlp_case(2, 8193, 256, 1024), mlp_case(1, 1500, 1280, 5120)}) {
        // !flag: the weights not flagged vt_set_fp8, so the GEMMs stay bf16 (and the error is bf16's, well below e4m3's)
        struct variant { bool expose, flag; const char * what; };
        for (const variant & var : {variant{false, true, "fp8 MLP, fused"}, variant{true, true, "fp8 MLP, norm and fc1 exposed"},
                                    variant{false, false, "fp8 backend, MLP weights not flagged: bf16 GEMMs"}}) {
            if (mlp.D > 256 && (var.expose || !var.flag)) continue;   // at large-v3's width, the fused MLP alone
            const double err = cuda_vs_cpu(fp8.get(), VT_TYPE_BF16, mlp.build(var.flag, var.expose), var.what);
            MESSAGE(std::string(var.what) << ", " << mlp.B << " x " << mlp.M << " rows, " << mlp.D << " -> " << mlp.F << ": relative L2 " << err);
            // e4m3's rounding, not bf16's (1.7e-3): 4.4e-3 at 256 -> 1024, 2.23e-2 at 1280 -> 5120
            // (H100), as a float64 emulation of the same quantization gives (4.2e-3, 2.22e-2): the
            // MLP's share of the output beside the residual grows with the width (std 0.9 -> 3.8 by 9)
            if (var.flag) CHECK((err > 3e-3 && err < (mlp.D > 256 ? 3e-2 : 1e-2)));
            else CHECK(err < 2.5e-3);
        }
    }
}

TEST_CASE("cuda conv1d_k3: the mel stem (f32, transposed) and stride 2 with the positional add" * doctest::skip(no_gpu())) {
    struct shape { int B, C_in, T_in, C_out, stride; bool mel; bool add; };
    const shape shapes[] = {
        {2, 80, 3000, 64, 1, true, false},     // conv1 on a transposed [B, n_mels, 3000] f32 mel
        {1, 13, 37, 24, 1, true, false},
        {3, 8, 1, 16, 1, true, false},
        {2, 64, 3000, 64, 2, false, true},     // conv2 + embed_positions
        {1, 24, 37, 40, 2, false, true},
        {2, 16, 1, 16, 2, false, true},
        {1, 17, 38, 9, 2, false, false},       // odd C_out: the scalar epilogue
        {2, 40, 20, 32, 1, false, true},
    };
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const shape & s : shapes) {
            const int T_out = (s.T_in - 1) / s.stride + 1;
            const std::vector<float> x = randn((size_t)s.B * s.C_in * s.T_in, 5, s.mel ? VT_TYPE_F32 : ct),
                                     w = randn((size_t)s.C_out * s.C_in * 3, 6, ct, 1.0f / std::sqrt(3.0f * s.C_in)),
                                     b = randn(s.C_out, 7, VT_TYPE_F32, 0.5f),
                                     a = randn((size_t)T_out * s.C_out, 8, VT_TYPE_F32);
            builder build = [&](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx;
                if (s.mel) {   // [B, n_mels, T] f32, seen as {n_mels, T, B} through a transpose
                    vt_tensor * mel = vt_new_tensor_3d(ctx, VT_TYPE_F32, s.T_in, s.C_in, s.B);
                    vt_set_input(mel);
                    L.push_back({mel, &x});
                    tx = vt_transpose(ctx, mel);
                } else {
                    tx = vt_new_tensor_3d(ctx, act, s.C_in, s.T_in, s.B);
                    vt_set_input(tx);
                    L.push_back({tx, &x});
                }
                vt_tensor * tw = vt_new_tensor_3d(ctx, mat, 3, s.C_in, s.C_out);
                vt_tensor * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C_out);
                vt_set_weight(tw); vt_set_weight(tb);
                L.push_back({tw, &w}); L.push_back({tb, &b});
                vt_tensor * ta = nullptr;
                if (s.add) {
                    ta = vt_new_tensor_2d(ctx, VT_TYPE_F32, s.C_out, T_out);
                    vt_set_weight(ta);
                    L.push_back({ta, &a});
                }
                return vt_conv1d_k3(ctx, tx, tw, tb, s.stride, VT_ACT_GELU, ta);
            };
            char what[128];
            snprintf(what, sizeof(what), "conv1d_k3 B%d C_in%d T_in%d C_out%d s%d%s%s", s.B, s.C_in, s.T_in, s.C_out,
                     s.stride, s.mel ? " mel" : "", s.add ? " +add" : "");
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct));
        }
    }
}

TEST_CASE("cuda conv2d_k3s2 (Qwen3-Omni's stem): the mel stage (direct), the GEMM stages, chunks, x_len; add_rows" *
          doctest::skip(no_gpu())) {
    struct shape { int B, C_in, F_in, T_in, C_out, chunk; bool len; };
    const shape shapes[] = {
        {2, 1, 128, 400, 32, 100, true},      // conv2d1 on the f32 mel: chunks of 100, the last window's audio ends at 253
        {1, 1, 13, 37, 8, 100, false},        // one chunk shorter than 100 (its own length), odd sizes
        {2, 16, 64, 200, 16, 50, false},      // conv2d2 (K = 144: im2col + GEMM)
        {3, 16, 32, 75, 24, 25, false},       // conv2d3: chunks of 25 -> 13
        {1, 8, 7, 1, 8, 100, false},          // one time row
        {2, 8, 9, 30, 9, 6, true},            // odd C_out: the scalar epilogue
    };
    const std::vector<float> lens_of = {253, 61, 400};
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const shape & s : shapes) {
            const bool mel = s.C_in == 1;
            const std::vector<float> x = randn((size_t)s.B * s.C_in * s.F_in * s.T_in, 15, mel ? VT_TYPE_F32 : ct),
                                     w = randn((size_t)s.C_out * s.C_in * 9, 16, ct, 1.0f / std::sqrt(9.0f * s.C_in)),
                                     b = randn(s.C_out, 17, VT_TYPE_F32, 0.5f);
            std::vector<float> lens(lens_of.begin(), lens_of.begin() + s.B);
            for (float & l : lens) l = std::min<float>(l, (float)s.T_in);
            builder build = [&](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx = mel ? vt_new_tensor_3d(ctx, VT_TYPE_F32, s.T_in, s.F_in, s.B)   // [B, F, T] f32
                                     : vt_new_tensor(ctx, act, 4, std::vector<int64_t>{s.C_in, s.F_in, s.T_in, s.B}.data());
                vt_set_input(tx);
                L.push_back({tx, &x});
                vt_tensor * tw = vt_new_tensor(ctx, mat, 4, std::vector<int64_t>{3, 3, s.C_in, s.C_out}.data());
                vt_tensor * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C_out);
                vt_set_weight(tw); vt_set_weight(tb);
                L.push_back({tw, &w}); L.push_back({tb, &b});
                vt_tensor * tl = nullptr;
                if (s.len) {
                    tl = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.B);
                    vt_set_input(tl);
                    L.push_back({tl, &lens});
                }
                return vt_conv2d_k3s2(ctx, tx, tw, tb, VT_ACT_GELU, s.chunk, tl);
            };
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, msg("conv2d_k3s2 B%d C_in%d F%d T%d C_out%d chunk%d%s", s.B, s.C_in, s.F_in,
                                                         s.T_in, s.C_out, s.chunk, s.len ? " x_len" : "").c_str()) < tol_for(ct));
        }
        // conv2d_k3s2_pair: the stem's first two stages in one node (the first, direct, a slice of
        // windows at a time in the im2col buffer's tail): small, and Qwen3-Omni's own shape at 2
        // windows of 2400 frames, whose im2col (166 MB a window) runs a window a slice
        struct pair_shape { int B, T_in, C1, C2; };
        for (const pair_shape & s : {pair_shape{2, 400, 16, 24}, pair_shape{2, 2400, 480, 480}}) {
            const int F_in = 128;
            const std::vector<float> x = randn((size_t)s.B * F_in * s.T_in, 20, VT_TYPE_F32),
                                     w1 = randn((size_t)s.C1 * 9, 21, ct, 1.0f / 3.0f), b1 = randn(s.C1, 22, VT_TYPE_F32, 0.5f),
                                     w2 = randn((size_t)s.C2 * s.C1 * 9, 23, ct, 1.0f / std::sqrt(9.0f * s.C1)),
                                     b2 = randn(s.C2, 24, VT_TYPE_F32, 0.5f), lens = {(float)s.T_in, 253};
            builder build = [&](vt_context * ctx, vt_type mat, vt_type, std::vector<leaf> & L) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, VT_TYPE_F32, s.T_in, F_in, s.B);
                vt_tensor * tw1 = vt_new_tensor(ctx, mat, 4, std::vector<int64_t>{3, 3, 1, s.C1}.data());
                vt_tensor * tw2 = vt_new_tensor(ctx, mat, 4, std::vector<int64_t>{3, 3, s.C1, s.C2}.data());
                vt_tensor * tb1 = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C1), * tb2 = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C2);
                vt_tensor * tl = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.B);
                vt_set_input(tx); vt_set_input(tl);
                vt_set_weight(tw1); vt_set_weight(tb1); vt_set_weight(tw2); vt_set_weight(tb2);
                L.push_back({tx, &x}); L.push_back({tl, &lens});
                L.push_back({tw1, &w1}); L.push_back({tb1, &b1}); L.push_back({tw2, &w2}); L.push_back({tb2, &b2});
                return vt_conv2d_k3s2_pair(ctx, tx, tw1, tb1, 100, tl, tw2, tb2, 50, VT_ACT_GELU);
            };
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, msg("conv2d_k3s2_pair B%d T%d C%d C%d x_len", s.B, s.T_in, s.C1, s.C2).c_str())
                  < tol_for(ct));
        }
        // add_rows: 13 rows a period (a chunk's positions), 3 windows of 39
        const std::vector<float> x = randn((size_t)3 * 39 * 40, 18, ct), a = randn((size_t)20 * 40, 19, VT_TYPE_F32);
        builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
            vt_tensor * tx = vt_new_tensor_3d(ctx, act, 40, 39, 3);
            vt_tensor * ta = vt_new_tensor_2d(ctx, VT_TYPE_F32, 40, 20);
            vt_set_input(tx); vt_set_weight(ta);
            L.push_back({tx, &x}); L.push_back({ta, &a});
            return vt_add_rows(ctx, tx, ta, 13);
        };
        CHECK(cuda_vs_cpu(cuda.get(), ct, build, "add_rows") < tol_for(ct));
    }
}

TEST_CASE("cuda layer_norm: vectorised and generic rows" * doctest::skip(no_gpu())) {
    struct shape { int B, M, C; };
    const shape shapes[] = {
        {2, 37, 384}, {1, 1500, 1280}, {3, 1, 64}, {1, 3, 100} /* C % 8 != 0 */, {1, 5, 2560} /* > 2048 */, {1, 7, 8},
        {2, 8193, 1280}, {1, 16387, 384},   // 16384 rows or more: 4 rows a warp, the last warp's partly empty
    };
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const shape & s : shapes) {
            // an offset mean, as residual streams have, to test the statistics
            const std::vector<float> x = randn((size_t)s.B * s.M * s.C, 9, ct, 2.0f, 3.0f),
                                     w = randn(s.C, 10, VT_TYPE_F32, 0.5f, 1.0f), b = randn(s.C, 11, VT_TYPE_F32, 0.5f);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, act, s.C, s.M, s.B);
                vt_tensor * tw = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C);
                vt_tensor * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C);
                vt_set_input(tx); vt_set_weight(tw); vt_set_weight(tb);
                L.push_back({tx, &x}); L.push_back({tw, &w}); L.push_back({tb, &b});
                return vt_layer_norm(ctx, tx, tw, tb, 1e-5f);
            };
            char what[96];
            snprintf(what, sizeof(what), "layer_norm B%d M%d C%d", s.B, s.M, s.C);
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct));
        }
    }
}

// Each attention kernel (wgmma where the device has it, fa2) against the CPU. Tiles: fa2's
// 64 keys and 128 queries, wgmma's 128 keys and queries in a ring of 3 K/V stages (T 1500:
// 12 key tiles, the ring wrapped 4 times).
TEST_CASE("cuda attention: fused QKV views, any T, masked tails" * doctest::skip(no_gpu())) {
    struct shape { int B, T, H; bool fused; float q_scale; };
    const shape shapes[] = {
        {1, 1, 1, true, 1.0f},
        {3, 7, 2, true, 1.0f},
        {2, 37, 2, true, 1.0f},
        {1, 64, 3, true, 1.0f},
        {1, 65, 1, true, 2.0f},
        {2, 127, 2, true, 1.0f},
        {3, 128, 1, true, 1.0f},     // one whole wgmma tile
        {1, 129, 2, true, 3.0f},     // sharp softmax; one key past a tile
        {1, 193, 2, true, 1.0f},     // one query past a 192-row tile
        {2, 100, 2, false, 1.0f},    // separate contiguous q, k, v
        {3, 515, 2, true, 1.0f},     // 5 wgmma key tiles: the 3-stage ring wraps
        {2, 1500, 4, true, 1.0f},    // a padded window
        {1, 1500, 20, true, 2.0f},   // large-v3's heads
    };
    for (const char * kernel : ATT_KERNELS)
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend_att(ct, kernel);
        if (!cuda) continue;
        for (const shape & s : shapes) {
            const int D = 64 * s.H;
            const size_t n = (size_t)s.B * s.T * D;
            const std::vector<float> qkv = randn(3 * n, 12, ct, s.q_scale), q = randn(n, 13, ct, s.q_scale),
                                     k = randn(n, 14, ct), v = randn(n, 15, ct);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tq, * tk, * tv;
                if (s.fused) {   // one [B, T, 3D] tensor, three row-strided views
                    vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.T, s.B);
                    vt_set_input(t);
                    L.push_back({t, &qkv});
                    const size_t es = vt_type_size(act);
                    tq = vt_view_3d(ctx, t, D, s.T, s.B, t->nb[1], t->nb[2], 0);
                    tk = vt_view_3d(ctx, t, D, s.T, s.B, t->nb[1], t->nb[2], D * es);
                    tv = vt_view_3d(ctx, t, D, s.T, s.B, t->nb[1], t->nb[2], 2 * D * es);
                } else {
                    tq = vt_new_tensor_3d(ctx, act, D, s.T, s.B);
                    tk = vt_new_tensor_3d(ctx, act, D, s.T, s.B);
                    tv = vt_new_tensor_3d(ctx, act, D, s.T, s.B);
                    vt_set_input(tq); vt_set_input(tk); vt_set_input(tv);
                    L.push_back({tq, &q}); L.push_back({tk, &k}); L.push_back({tv, &v});
                }
                return vt_attention(ctx, tq, tk, tv, s.H, 0.125f);
            };
            char what[96];
            snprintf(what, sizeof(what), "attention %s B%d T%d H%d%s", kernel, s.B, s.T, s.H, s.fused ? " fused" : "");
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct, 2e-3));
        }
    }
}

TEST_CASE("cuda attention with a key-length mask: each window its own length" * doctest::skip(no_gpu())) {
    struct shape { int T, H; std::vector<float> lens; };
    const shape shapes[] = {
        {37, 2, {37, 1, 20}},
        {130, 1, {64, 65, 129, 130}},          // tile edges: a whole tile, one key past it
        {300, 1, {128, 256, 257}},             // wgmma's 128-key tiles: one, two, one key past two
        {1500, 2, {351, 1500, 1, 751}},        // Qwen2-Audio windows: speech, full, one position, odd
    };
    for (const char * kernel : ATT_KERNELS)
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend_att(ct, kernel);
        if (!cuda) continue;
        for (const shape & s : shapes) {
            const int B = (int)s.lens.size(), D = 64 * s.H;
            const std::vector<float> qkv = randn((size_t)3 * B * s.T * D, 17, ct, 2.0f);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.T, B);
                vt_tensor * len = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
                vt_set_input(t); vt_set_input(len);
                L.push_back({t, &qkv}); L.push_back({len, &s.lens});
                const size_t es = vt_type_size(act);
                vt_tensor * tq = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 0);
                vt_tensor * tk = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], D * es);
                vt_tensor * tv = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 2 * D * es);
                return vt_attention_masked(ctx, tq, tk, tv, s.H, 0.125f, len);
            };
            char what[96];
            snprintf(what, sizeof(what), "masked attention %s T%d H%d B%d", kernel, s.T, s.H, B);
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct, 2e-3));
        }
    }
}

TEST_CASE("cuda block-diagonal attention (Qwen2.5-Omni's chunks): the CPU's at the block and tile edges" * doctest::skip(no_gpu())) {
    struct shape { int T, H, block; std::vector<float> lens; };
    const shape shapes[] = {
        {1500, 1, 100, {1500, 351, 100, 101, 1}},   // Omni's 100-position chunks: speech, one chunk, one key past it
        {300, 2, 64, {300, 128, 129, 64}},          // blocks on the fa2 tiles' edges, the wgmma tiles' 128
        {260, 1, 48, {260, 130, 47, 200}},          // blocks across both kernels' tiles
        {37, 2, 5, {37, 11, 1}},                    // small blocks, rows past the keys give 0
    };
    for (const char * kernel : ATT_KERNELS)
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend_att(ct, kernel);
        if (!cuda) continue;
        for (const shape & s : shapes) {
            const int B = (int)s.lens.size(), D = 64 * s.H;
            const std::vector<float> qkv = randn((size_t)3 * B * s.T * D, 27, ct, 2.0f);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.T, B);
                vt_tensor * len = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
                vt_set_input(t); vt_set_input(len);
                L.push_back({t, &qkv}); L.push_back({len, &s.lens});
                const size_t es = vt_type_size(act);
                vt_tensor * tq = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 0);
                vt_tensor * tk = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], D * es);
                vt_tensor * tv = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 2 * D * es);
                return vt_attention_blocks(ctx, tq, tk, tv, s.H, 0.125f, len, s.block);
            };
            char what[96];
            snprintf(what, sizeof(what), "block attention %s T%d H%d block %d B%d", kernel, s.T, s.H, s.block, B);
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct, 2e-3));
        }
    }
}

TEST_CASE("cuda block-causal attention (MiniCPM-o's chunk mask): the CPU's at the block and tile edges" * doctest::skip(no_gpu())) {
    struct shape { int T, H, block; std::vector<float> lens; };
    const shape shapes[] = {
        {1500, 1, 50, {1500, 351, 50, 1000, 1}},    // MiniCPM-o's 50-position chunks; a later window masked at its frames
        {300, 2, 64, {300, 128, 129, 64}},          // blocks on the fa2 tiles' edges, the wgmma tiles' 128
        {260, 1, 48, {260, 130, 47, 200}},          // blocks across both kernels' tiles
        {37, 2, 5, {37, 11, 1}},                    // small blocks
    };
    for (const char * kernel : ATT_KERNELS)
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend_att(ct, kernel);
        if (!cuda) continue;
        for (const shape & s : shapes) {
            const int B = (int)s.lens.size(), D = 64 * s.H;
            const std::vector<float> qkv = randn((size_t)3 * B * s.T * D, 29, ct, 2.0f);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.T, B);
                vt_tensor * len = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
                vt_set_input(t); vt_set_input(len);
                L.push_back({t, &qkv}); L.push_back({len, &s.lens});
                const size_t es = vt_type_size(act);
                vt_tensor * tq = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 0);
                vt_tensor * tk = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], D * es);
                vt_tensor * tv = vt_view_3d(ctx, t, D, s.T, B, t->nb[1], t->nb[2], 2 * D * es);
                return vt_attention_block_causal(ctx, tq, tk, tv, s.H, 0.125f, len, s.block);
            };
            char what[96];
            snprintf(what, sizeof(what), "block-causal attention %s T%d H%d block %d B%d", kernel, s.T, s.H, s.block, B);
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, what) < tol_for(ct, 2e-3));
        }
    }
}

TEST_CASE("cuda Voxtral Realtime's ops: causal conv1d_k3 with a tail, sliding-window attention over a cache, concat_rows, "
          "rope_qk_at" * doctest::skip(no_gpu())) {
    // the causal conv stem: conv1 on frame-major f32 mel with a 2-frame tail, conv2 (stride 2) with a 1-row tail; no tail: zeros
    struct conv_shape { int B, C_in, T_in, C_out, stride; bool tail; };
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const conv_shape & s : {conv_shape{2, 128, 3000, 64, 1, true}, conv_shape{1, 128, 8, 64, 1, false},
                                     conv_shape{2, 64, 3000, 64, 2, true}, conv_shape{3, 24, 8, 40, 2, false}}) {
            const std::vector<float> x = randn((size_t)s.B * s.C_in * s.T_in, 41, s.stride == 1 ? VT_TYPE_F32 : ct),
                                     tail = randn((size_t)s.B * (3 - s.stride) * s.C_in, 42, VT_TYPE_F32),
                                     w = randn((size_t)s.C_out * s.C_in * 3, 43, ct, 1.0f / std::sqrt(3.0f * s.C_in)),
                                     b = randn(s.C_out, 44, VT_TYPE_F32, 0.5f);
            builder build = [&](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, s.stride == 1 ? VT_TYPE_F32 : act, s.C_in, s.T_in, s.B);
                vt_tensor * tt = s.tail ? vt_new_tensor_3d(ctx, VT_TYPE_F32, s.C_in, 3 - s.stride, s.B) : nullptr;
                vt_tensor * tw = vt_new_tensor_3d(ctx, mat, 3, s.C_in, s.C_out);
                vt_tensor * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.C_out);
                vt_set_input(tx); vt_set_weight(tw); vt_set_weight(tb);
                L.push_back({tx, &x}); L.push_back({tw, &w}); L.push_back({tb, &b});
                if (tt) { vt_set_input(tt); L.push_back({tt, &tail}); }
                return vt_conv1d_k3_causal(ctx, tx, tt, tw, tb, s.stride, VT_ACT_GELU);
            };
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, msg("conv1d_k3_causal B%d C_in%d T_in%d s%d%s", s.B, s.C_in, s.T_in, s.stride,
                                                          s.tail ? " +tail" : "").c_str()) < tol_for(ct));
        }
    }
    // a step of P rows after a cache of W: the keys concatenated, q|k|v turned at the step's positions, windows of
    // `window` keys from the cache's first valid row kv_start (a stream's start: the cache empty; later: full)
    struct att_shape { int W, P, H, window; std::vector<float> pos0, kv_start; };
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (const att_shape & s : {att_shape{750, 1500, 2, 750, {0, 2000}, {750, 0}}, att_shape{750, 4, 1, 750, {4, 9000}, {746, 0}},
                                    att_shape{40, 37, 2, 25, {0, 3}, {40, 37}}, att_shape{16, 9, 1, 1, {100, 0}, {0, 16}}}) {
            const int B = (int)s.pos0.size(), D = 64 * s.H;
            const std::vector<float> qkv = randn((size_t)3 * B * s.P * D, 45, ct, 2.0f), kc = randn((size_t)B * s.W * D, 46, ct, 2.0f),
                                     vc = randn((size_t)B * s.W * D, 47, ct, 2.0f);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.P, B);
                vt_tensor * tkc = vt_new_tensor_3d(ctx, act, D, s.W, B), * tvc = vt_new_tensor_3d(ctx, act, D, s.W, B);
                vt_tensor * p0 = vt_new_tensor_1d(ctx, VT_TYPE_F32, B), * ks = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
                for (vt_tensor * x : {t, tkc, tvc, p0, ks}) vt_set_input(x);
                L.push_back({t, &qkv}); L.push_back({tkc, &kc}); L.push_back({tvc, &vc});
                L.push_back({p0, &s.pos0}); L.push_back({ks, &s.kv_start});
                vt_tensor * r = vt_rope_qk_at(ctx, t, s.H, 64, 1e6f, p0);
                const size_t es = vt_type_size(act);
                vt_tensor * tq = vt_view_3d(ctx, r, D, s.P, B, r->nb[1], r->nb[2], 0);
                vt_tensor * tk = vt_view_3d(ctx, r, D, s.P, B, r->nb[1], r->nb[2], D * es);
                vt_tensor * tv = vt_view_3d(ctx, r, D, s.P, B, r->nb[1], r->nb[2], 2 * D * es);
                return vt_attention_window(ctx, tq, vt_concat_rows(ctx, tkc, tk), vt_concat_rows(ctx, tvc, tv), s.H, 0.125f, ks, s.window);
            };
            CHECK(cuda_vs_cpu(cuda.get(), ct, build, msg("window attention W%d P%d H%d window %d B%d", s.W, s.P, s.H, s.window, B).c_str())
                  < tol_for(ct, 2e-3));
            builder cat = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, s.P, B), * tkc = vt_new_tensor_3d(ctx, act, D, s.W, B);
                vt_set_input(t); vt_set_input(tkc);
                L.push_back({t, &qkv}); L.push_back({tkc, &kc});
                return vt_concat_rows(ctx, tkc, vt_view_3d(ctx, t, D, s.P, B, t->nb[1], t->nb[2], 2 * D * vt_type_size(act)));
            };
            CHECK(cuda_vs_cpu(cuda.get(), ct, cat, msg("concat_rows W%d P%d B%d", s.W, s.P, B).c_str()) == 0.0);
        }
    }
}

TEST_CASE("cuda projector ops: avg_pool2, rms_norm, swiglu, relu, silu, silu_mul, stack_frames, rope_qk, rope_time" * doctest::skip(no_gpu())) {
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        for (int T : {1500, 351, 7}) {
            const int C = 96, B = 2;
            const std::vector<float> x = randn((size_t)B * T * C, 18, ct, 1.5f, 0.5f), w = randn(8 * C, 19, VT_TYPE_F32, 0.3f, 1.0f);
            const std::vector<float> x2 = randn((size_t)B * T * C, 20, ct, 1.5f, -0.5f);
            const std::vector<float> windows = {0.0f, 27.0f};
            auto input = [&](vt_context * ctx, vt_type act, std::vector<leaf> & L, const std::vector<float> * data = nullptr) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, act, C, T, B);
                vt_set_input(tx);
                L.push_back({tx, data ? data : &x});
                return tx;
            };
            auto weight = [&](vt_context * ctx, int n, std::vector<leaf> & L) {
                vt_tensor * tw = vt_new_tensor_1d(ctx, VT_TYPE_F32, n);
                vt_set_weight(tw);
                L.push_back({tw, &w});
                return tw;
            };
            const std::pair<const char *, builder> ops[] = {
                {"avg_pool2", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_avg_pool2(ctx, input(ctx, act, L)); }},
                {"rms_norm", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_rms_norm(ctx, input(ctx, act, L), weight(ctx, C, L), 1e-6f); }},
                {"swiglu", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_swiglu(ctx, input(ctx, act, L)); }},
                {"relu", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_relu(ctx, input(ctx, act, L)); }},
                {"silu", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_silu(ctx, input(ctx, act, L)); }},
                {"silu_mul", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     vt_tensor * g = input(ctx, act, L);
                     return vt_silu_mul(ctx, g, input(ctx, act, L, &x2)); }},
                // stacked by 8 (a copy, the tail zero-padded, unless 8 divides T), then normalised
                {"stack 8 + rms_norm", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_rms_norm(ctx, vt_stack_frames(ctx, input(ctx, act, L), 8), weight(ctx, 8 * C, L), 1e-6f); }},
                // GLM-ASR's: q|k|v rows of 96 (2 heads of 16), 8 of each head's dims turned by position
                {"rope_qk", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     return vt_rope_qk(ctx, input(ctx, act, L), 2, 8, 10000.0f); }},
                // Music Flamingo's: 2 x 12 of 96 channels turned by the rows' times, windows 0 and 27 of their inputs
                {"rope_time", [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                     vt_tensor * win = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
                     vt_set_input(win);
                     L.push_back({win, &windows});
                     return vt_rope_time(ctx, input(ctx, act, L), win, 12, 1500.0f, 0.04f); }},
            };
            for (const auto & op : ops) {
                char what[96];
                snprintf(what, sizeof(what), "%s T%d", op.first, T);
                CHECK(cuda_vs_cpu(cuda.get(), ct, op.second, what) < tol_for(ct));
            }
        }
    }
}

// The CUDA log-mel against the CPU op (vt-cpu.h, the reference): windows of their own (noise,
// clicks on the edge samples, loud then near silence for the clamp, silence, a short clip),
// with and without params, the max alone, a frame count that is no multiple of the kernel's
// 8 frames a block; an n_fft other than its 400 is refused. The mel bank is made here (this
// file needs vt alone: tests/gpu/run-tests.sh's fallback binary has no whisper-audio.cpp):
// overlapping triangles, as a real bank's, with zero bins at both ends.
TEST_CASE("cuda log_mel: the CPU op's values at the edges, with params, the max alone, other frame counts" * doctest::skip(no_gpu())) {
    const int n_mels = 80, n_bins = WHISPER_AUDIO_N_BINS, N = WHISPER_AUDIO_N_SAMPLES;
    std::vector<float> bank((size_t)n_mels * n_bins, 0.0f);
    for (int m = 0; m < n_mels; m++)
        for (int k = 2 * m + 1; k < 2 * m + 6; k++) bank[(size_t)m * n_bins + k] = 0.02f * (float)(3 - std::abs(k - 2 * m - 3));
    const float * filters = bank.data();
    std::vector<std::vector<float>> windows(5);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    windows[0].resize(N);
    for (float & v : windows[0]) v = nd(rng);
    windows[1].assign(N, 0.0f);
    windows[1][0] = 0.9f;
    windows[1][N - 1] = -0.7f;
    windows[2].resize(N);
    for (int i = 0; i < N; i++) windows[2][i] = (i < 16000 ? 0.8f : 1e-6f) * (float)std::sin(0.17 * i);
    windows[3].assign(N, 0.0f);
    windows[4].resize(1000);
    for (int i = 0; i < 1000; i++) windows[4][i] = 0.3f * (float)std::cos(0.05 * i);
    const int B = (int)windows.size();
    std::vector<float> rows;
    for (const std::vector<float> & x : windows) {
        const std::vector<float> r = test_mel_row(x.data(), x.size());
        rows.insert(rows.end(), r.begin(), r.end());
    }
    const std::vector<float> params = {3000, NAN, 1234, NAN, 2999, -1.0f, 3000, NAN, 7, 0.5f};
    backend_ptr cpu(test_cpu_backend(0));
    backend_ptr cuda = cuda_backend(VT_TYPE_F16);
    auto compare = [&](const std::vector<float> & in, int b, const std::vector<float> & prm, const vt_mel_shape & shape,
                       bool max_only, const char * what) {
        std::vector<float> ref, got;
        REQUIRE_MESSAGE(test_run_log_mel(cpu.get(), in, b, filters, n_mels, prm, shape, max_only, ref), last_error());
        REQUIRE_MESSAGE(test_run_log_mel(cuda.get(), in, b, filters, n_mels, prm, shape, max_only, got), last_error());
        double worst = 0;
        for (size_t i = 0; i < ref.size(); i++) worst = std::max(worst, (double)std::fabs(got[i] - ref[i]));
        MESSAGE(std::string(what) << ": max abs difference " << worst);
        CHECK(worst <= 1e-5);
    };
    compare(rows, B, {}, TEST_MEL_SHAPE, false, "log_mel");
    compare(rows, B, params, TEST_MEL_SHAPE, false, "log_mel, params");
    compare(rows, B, {}, TEST_MEL_SHAPE, true, "log_mel_max");
    compare(rows, B, params, TEST_MEL_SHAPE, true, "log_mel_max, params");
    const vt_mel_shape short_shape = {WHISPER_AUDIO_N_FFT, WHISPER_AUDIO_HOP, 1001};
    compare(rows, B, {}, short_shape, false, "log_mel, 1001 frames");
    std::vector<float> out;
    const vt_mel_shape other = {64, 16, 10};
    std::vector<float> small(2 * 300, 0.1f), small_filters(33 * n_mels, 0.01f);
    CHECK_FALSE(test_run_log_mel(cuda.get(), small, 2, small_filters.data(), n_mels, {}, other, false, out));
    CHECK(std::string(last_error()).find("n_fft 64") != std::string::npos);
}

TEST_CASE("cuda attention: head_dim other than 64 is refused with a message" * doctest::skip(no_gpu())) {
    backend_ptr cuda = cuda_backend(VT_TYPE_F16);
    const std::vector<float> x = randn(2 * 10 * 96, 16, VT_TYPE_F16);
    builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
        vt_tensor * t = vt_new_tensor_3d(ctx, act, 96, 10, 2);
        vt_set_input(t);
        L.push_back({t, &x});
        return vt_attention(ctx, t, t, t, 3, 0.125f);   // head_dim 32
    };
    instance gi;
    CHECK_FALSE(gi.setup(cuda.get(), build, VT_TYPE_F16, VT_TYPE_F16));
    CHECK(std::string(last_error()).find("head_dim") != std::string::npos);
}

// ---- graphs ----------------------------------------------------------------------------

namespace {

// One pre-norm encoder layer (tiny-ish: D 128, 2 heads, FFN 512), as whisper-audio builds it.
struct layer_data {
    int B, T, D, H, F;
    std::vector<float> x, ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;

    layer_data(int B_, int T_, int D_, int H_, int F_, vt_type ct, bool fast = false)
        : B(B_), T(T_), D(D_), H(H_), F(F_) {
        auto mat = [&](size_t n, uint32_t seed, float scale) {
            return fast ? rand_fast(n, seed, scale * 1.7f) : randn(n, seed, ct, scale);
        };
        auto vec = [&](size_t n, uint32_t seed, float scale, float mean = 0.0f) {
            return fast ? rand_fast(n, seed, scale) : randn(n, seed, VT_TYPE_F32, scale, mean);
        };
        x = mat((size_t)B * T * D, 20, 1.0f);
        ln1_w = vec(D, 21, 0.2f, 1.0f); ln1_b = vec(D, 22, 0.2f);
        qkv_w = mat((size_t)3 * D * D, 23, 1.0f / std::sqrt((float)D)); qkv_b = vec(3 * D, 24, 0.2f);
        std::fill(qkv_b.begin() + D, qkv_b.begin() + 2 * D, 0.0f);   // k has no bias
        out_w = mat((size_t)D * D, 25, 1.0f / std::sqrt((float)D)); out_b = vec(D, 26, 0.2f);
        ln2_w = vec(D, 27, 0.2f, 1.0f); ln2_b = vec(D, 28, 0.2f);
        fc1_w = mat((size_t)F * D, 29, 1.0f / std::sqrt((float)D)); fc1_b = vec(F, 30, 0.2f);
        fc2_w = mat((size_t)D * F, 31, 1.0f / std::sqrt((float)F)); fc2_b = vec(D, 32, 0.2f);
    }

    builder make() const {
        return [this](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
            auto weight = [&](vt_tensor * t, const std::vector<float> & d) { vt_set_weight(t); L.push_back({t, &d}); return t; };
            vt_tensor * inpL = vt_new_tensor_3d(ctx, act, D, T, B);
            vt_set_name(inpL, "x");
            vt_set_input(inpL);
            L.push_back({inpL, &x});
            vt_tensor * cur = vt_layer_norm(ctx, inpL, weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), ln1_w),
                                            weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), ln1_b), 1e-5f);
            cur = vt_linear(ctx, cur, weight(vt_new_tensor_2d(ctx, mat, D, 3 * D), qkv_w),
                            weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, 3 * D), qkv_b), VT_ACT_NONE, nullptr);
            const size_t es = vt_type_size(act);
            vt_tensor * q = vt_view_3d(ctx, cur, D, T, B, cur->nb[1], cur->nb[2], 0);
            vt_tensor * k = vt_view_3d(ctx, cur, D, T, B, cur->nb[1], cur->nb[2], D * es);
            vt_tensor * v = vt_view_3d(ctx, cur, D, T, B, cur->nb[1], cur->nb[2], 2 * D * es);
            cur = vt_attention(ctx, q, k, v, H, 1.0f / std::sqrt((float)(D / H)));
            vt_tensor * inpFF = vt_linear(ctx, cur, weight(vt_new_tensor_2d(ctx, mat, D, D), out_w),
                                          weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), out_b), VT_ACT_NONE, inpL);
            cur = vt_layer_norm(ctx, inpFF, weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), ln2_w),
                                weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), ln2_b), 1e-5f);
            cur = vt_linear(ctx, cur, weight(vt_new_tensor_2d(ctx, mat, D, F), fc1_w),
                            weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, F), fc1_b), VT_ACT_GELU, nullptr);
            cur = vt_linear(ctx, cur, weight(vt_new_tensor_2d(ctx, mat, F, D), fc2_w),
                            weight(vt_new_tensor_1d(ctx, VT_TYPE_F32, D), fc2_b), VT_ACT_NONE, inpFF);
            return cur;
        };
    }
};

} // namespace

TEST_CASE("cuda graph replay: one layer, new inputs each compute, profile" * doctest::skip(no_gpu())) {
    for (vt_type ct : CTYPES) {
        backend_ptr cuda = cuda_backend(ct);
        backend_ptr cpu(test_cpu_backend(0));
        layer_data L(2, 50, 128, 2, 512, ct);
        const std::vector<float> x1 = L.x, x2 = randn(L.x.size(), 40, ct);
        const builder build = L.make();

        // CPU references for both inputs
        std::vector<float> ref1, ref2;
        {
            instance ci;
            REQUIRE_MESSAGE(ci.setup(cpu.get(), build, VT_TYPE_F32, VT_TYPE_F32), last_error());
            REQUIRE(ci.run(cpu.get(), ref1, false));
            ci.set_input(vt_get_tensor(ci.ctx, "x"), &x2);
            REQUIRE(ci.run(cpu.get(), ref2, false));
        }

        instance gi;
        REQUIRE_MESSAGE(gi.setup(cuda.get(), build, ct, ct), last_error());
        vt_tensor * x = vt_get_tensor(gi.ctx, "x");
        std::vector<float> out1, out2, out1b;
        REQUIRE_MESSAGE(gi.run(cuda.get(), out1, true), last_error());     // captures
        gi.set_input(x, &x2);
        REQUIRE_MESSAGE(gi.run(cuda.get(), out2, true), last_error());     // replays
        gi.set_input(x, &x1);
        REQUIRE_MESSAGE(gi.run(cuda.get(), out1b, true), last_error());

        const double e1 = rel_l2(out1, ref1), e2 = rel_l2(out2, ref2);
        MESSAGE(msg("layer %s: rel L2 first %.3g, replay %.3g", type_label(ct), e1, e2));
        CHECK(count_nonfinite(out1) == 0);
        CHECK(count_nonfinite(out2) == 0);
        CHECK(e1 < tol_for(ct, 2e-3));
        CHECK(e2 < tol_for(ct, 2e-3));
        CHECK(rel_l2(out2, out1) > 0.1);                   // the replay saw the new input
        CHECK(out1b == out1);                              // and replays are deterministic

        const int n = vt_graph_n_nodes(gi.g);
        std::vector<double> ms(n, -1.0);
        REQUIRE(gi.load_inputs(cuda.get()));
        REQUIRE_MESSAGE(vt_backend_profile(cuda.get(), gi.g, ms.data()), last_error());
        double total = 0;
        for (int i = 0; i < n; i++) {
            CHECK(ms[i] >= 0.0);
            total += ms[i];
        }
        CHECK(total > 0.0);
        CHECK(vt_backend_allocated_bytes(cuda.get()) >= vt_graph_arena_size(gi.g));
        std::vector<float> out_p(out1.size());
        REQUIRE(vt_backend_get_tensor_f32(cuda.get(), gi.y, out_p.data()));
        CHECK(out_p == out1);                              // profile computes the same thing
    }
}

TEST_CASE("cuda backend: name, compute type, bad arguments" * doctest::skip(no_gpu())) {
    CHECK(test_cuda_backend(VT_TYPE_F32) == nullptr);
    CHECK(std::string(last_error()).size() > 0);
    backend_ptr cuda = cuda_backend(VT_TYPE_BF16);
    CHECK(std::string(vt_backend_name(cuda.get())).rfind("cuda (", 0) == 0);
    CHECK(vt_backend_compute_type(cuda.get()) == VT_TYPE_BF16);
    CHECK(test_cuda_backend(VT_TYPE_F16, 1 << 20) == nullptr);
}

// ---- benchmarks (VT_CUDA_BENCH=1) -----------------------------------------------------

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median node times (ms) over `reps` profiles after one warm compute and 50 ms of profiles
// thrown away: a kernel of tens of microseconds timed right after the set-up's idle host work
// may find the GPU's clock dropped (batch 1's attention spread 38-49 us for one kernel on
// 2026-12-07); fast random inputs.
std::vector<double> bench_graph(vt_backend * be, const builder & build, vt_type ct, int reps = 9) {
    instance gi;
    REQUIRE_MESSAGE(gi.setup(be, build, ct, ct), last_error());
    std::vector<float> out;
    REQUIRE_MESSAGE(gi.run(be, out, false), last_error());
    const int n = vt_graph_n_nodes(gi.g);
    std::vector<std::vector<double>> all(n);
    std::vector<double> ms(n);
    for (const auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50);)
        REQUIRE_MESSAGE(vt_backend_profile(be, gi.g, ms.data()), last_error());
    for (int r = 0; r < reps; r++) {
        REQUIRE_MESSAGE(vt_backend_profile(be, gi.g, ms.data()), last_error());
        for (int i = 0; i < n; i++) all[i].push_back(ms[i]);
    }
    std::vector<double> med(n);
    for (int i = 0; i < n; i++) med[i] = median(all[i]);
    return med;
}

bool bench_enabled() { return getenv("VT_CUDA_BENCH") != nullptr; }
// VT_CUDA_BENCH=attention: the attention timings only
bool bench_all() { const char * e = getenv("VT_CUDA_BENCH"); return e && std::string(e) != "attention"; }

// VT_CUDA_BENCH_BATCHES=1,6,30: the attention benchmark's batches (1, 8, 16, 32 unset); empty
// when the list is not batches from 1 to 256 separated by commas
std::vector<int> bench_batches() {
    const char * e = getenv("VT_CUDA_BENCH_BATCHES");
    if (!e) return {1, 8, 16, 32};
    std::vector<int> v;
    for (const char * p = e;;) {
        char * end = nullptr;
        const long b = strtol(p, &end, 10);
        if (end == p || b < 1 || b > 256 || (*end != ',' && *end != '\0')) return {};
        v.push_back((int)b);
        if (*end == '\0') return v;
        p = end + 1;
    }
}

} // namespace

TEST_CASE("cuda bench: attention, layer_norm, GEMMs, one large layer" * doctest::skip(no_gpu())) {
    if (!bench_enabled()) return;
    for (vt_type ct : CTYPES) {
        const char * tn = type_label(ct);

        // attention, large-v3's shape: T 1500, 20 heads, fused QKV views; each kernel (wgmma
        // "n/a" off cc 9.0) on one line, which tests/gpu/attention.py reads
        {
            backend_ptr att[N_ATT_KERNELS];
            for (int i = 0; i < N_ATT_KERNELS; i++) att[i] = cuda_backend_att(ct, ATT_KERNELS[i]);
            const std::vector<int> batches = bench_batches();
            REQUIRE_MESSAGE(!batches.empty(), "VT_CUDA_BENCH_BATCHES=" << getenv("VT_CUDA_BENCH_BATCHES")
                                                  << ": batches from 1 to 256 separated by commas (1,6,30)");
            for (int B : batches) {
                const int T = 1500, H = 20, D = 64 * H;
                const std::vector<float> qkv = rand_fast((size_t)B * T * 3 * D, 50 + B, 1.5f);
                builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                    vt_tensor * t = vt_new_tensor_3d(ctx, act, 3 * D, T, B);
                    vt_set_input(t);
                    L.push_back({t, &qkv});
                    const size_t es = vt_type_size(act);
                    return vt_attention(ctx, vt_view_3d(ctx, t, D, T, B, t->nb[1], t->nb[2], 0),
                                        vt_view_3d(ctx, t, D, T, B, t->nb[1], t->nb[2], D * es),
                                        vt_view_3d(ctx, t, D, T, B, t->nb[1], t->nb[2], 2 * D * es), H, 0.125f);
                };
                const double flop = 4.0 * B * H * (double)T * T * 64;
                std::string line = msg("bench %-5s attention B=%-2d T=%d H=%d:", tn, B, T, H);
                for (int i = 0; i < N_ATT_KERNELS; i++) {
                    if (!att[i]) { line += msg("  %s      n/a", ATT_KERNELS[i]); continue; }
                    const double ms = bench_graph(att[i].get(), build, ct, 21)[0];
                    line += msg("  %s %8.3f ms %6.1f TFLOP/s", ATT_KERNELS[i], ms, flop / ms * 1e-9);
                }
                printf("%s\n", line.c_str());
            }
        }

        if (!bench_all()) continue;
        backend_ptr cuda = cuda_backend(ct);

        // layer_norm [32 x 1500, 1280]
        {
            const int B = 32, T = 1500, C = 1280;
            const std::vector<float> x = rand_fast((size_t)B * T * C, 60, 2.0f), w = rand_fast(C, 61), b = rand_fast(C, 62);
            builder build = [&](vt_context * ctx, vt_type, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, act, C, T, B);
                vt_tensor * tw = vt_new_tensor_1d(ctx, VT_TYPE_F32, C), * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, C);
                vt_set_input(tx); vt_set_weight(tw); vt_set_weight(tb);
                L.push_back({tx, &x}); L.push_back({tw, &w}); L.push_back({tb, &b});
                return vt_layer_norm(ctx, tx, tw, tb, 1e-5f);
            };
            const double ms = bench_graph(cuda.get(), build, ct)[0];
            const double bytes = 2.0 * B * T * C * 2;
            printf("bench %-5s layer_norm rows=%d C=%d: %8.3f ms  %6.0f GB/s\n", tn, B * T, C, ms, bytes / ms * 1e-6);
        }

        // the GEMMs of a large-v3 layer at B = 16 (rows 24000): qkv, out+res, fc1+gelu, fc2+res
        {
            const int rows = 16 * 1500, D = 1280;
            struct g { const char * name; int K, N; vt_act act; bool res; };
            const g gs[] = {{"qkv", D, 3 * D, VT_ACT_NONE, false}, {"out+res", D, D, VT_ACT_NONE, true},
                            {"fc1+gelu", D, 4 * D, VT_ACT_GELU, false}, {"fc2+res", 4 * D, D, VT_ACT_NONE, true}};
            for (const g & s : gs) {
                const std::vector<float> x = rand_fast((size_t)rows * s.K, 70), w = rand_fast((size_t)s.N * s.K, 71, 0.03f),
                                         b = rand_fast(s.N, 72), r = rand_fast((size_t)rows * s.N, 73);
                builder build = [&](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
                    vt_tensor * tx = vt_new_tensor_2d(ctx, act, s.K, rows);
                    vt_tensor * tw = vt_new_tensor_2d(ctx, mat, s.K, s.N), * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, s.N);
                    vt_tensor * tr = s.res ? vt_new_tensor_2d(ctx, act, s.N, rows) : nullptr;
                    vt_set_input(tx); vt_set_weight(tw); vt_set_weight(tb);
                    L.push_back({tx, &x}); L.push_back({tw, &w}); L.push_back({tb, &b});
                    if (tr) { vt_set_input(tr); L.push_back({tr, &r}); }
                    return vt_linear(ctx, tx, tw, tb, s.act, tr);
                };
                const double ms = bench_graph(cuda.get(), build, ct)[0];
                const double flop = 2.0 * rows * s.K * (double)s.N;
                printf("bench %-5s linear %-8s M=%d N=%d K=%d: %8.3f ms  %6.1f TFLOP/s\n", tn, s.name, rows, s.N, s.K, ms,
                       flop / ms * 1e-9);
            }
        }

        // conv2 of large-v3 at B = 8: [8, 3000, 1280] -> [8, 1500, 1280], + GELU + positions
        {
            const int B = 8, T_in = 3000, C = 1280, T_out = 1500;
            const std::vector<float> x = rand_fast((size_t)B * T_in * C, 80), w = rand_fast((size_t)C * C * 3, 81, 0.02f),
                                     b = rand_fast(C, 82), a = rand_fast((size_t)T_out * C, 83);
            builder build = [&](vt_context * ctx, vt_type mat, vt_type act, std::vector<leaf> & L) {
                vt_tensor * tx = vt_new_tensor_3d(ctx, act, C, T_in, B);
                vt_tensor * tw = vt_new_tensor_3d(ctx, mat, 3, C, C), * tb = vt_new_tensor_1d(ctx, VT_TYPE_F32, C);
                vt_tensor * ta = vt_new_tensor_2d(ctx, VT_TYPE_F32, C, T_out);
                vt_set_input(tx); vt_set_weight(tw); vt_set_weight(tb); vt_set_weight(ta);
                L.push_back({tx, &x}); L.push_back({tw, &w}); L.push_back({tb, &b}); L.push_back({ta, &a});
                return vt_conv1d_k3(ctx, tx, tw, tb, 2, VT_ACT_GELU, ta);
            };
            const double ms = bench_graph(cuda.get(), build, ct)[0];
            const double flop = 2.0 * B * T_out * (double)C * 3 * C;
            printf("bench %-5s conv2 B=%d C=%d: %8.3f ms  %6.1f TFLOP/s\n", tn, B, C, ms, flop / ms * 1e-9);
        }

        // one large-v3 layer at B = 8 and 16: node profile, and the replayed CUDA graph's time
        for (int B : {8, 16}) {
            layer_data L(B, 1500, 1280, 20, 5120, ct, true);
            const builder build = L.make();
            instance gi;
            REQUIRE_MESSAGE(gi.setup(cuda.get(), build, ct, ct), last_error());
            std::vector<float> out;
            REQUIRE_MESSAGE(gi.run(cuda.get(), out, false), last_error());
            const int reps = 20;
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; r++) REQUIRE(vt_backend_compute(cuda.get(), gi.g));
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
            const int n = vt_graph_n_nodes(gi.g);
            std::vector<double> nm(n);
            REQUIRE(vt_backend_profile(cuda.get(), gi.g, nm.data()));
            const double D = 1280, F = 5120, T = 1500;
            const double flop = B * T * 2.0 * (D * 3 * D + D * D + 2 * D * F) + 4.0 * B * 20 * T * T * 64;
            printf("bench %-5s large-v3 layer B=%d: %8.3f ms per replay (%.1f TFLOP/s; x32 layers = %.1f ms)\n", tn, B, ms,
                   flop / ms * 1e-9, 32 * ms);
            for (int i = 0; i < n; i++) {
                vt_tensor * t = vt_graph_node(gi.g, i);
                printf("    %-11s %8.3f ms\n", vt_op_name(t->op), nm[i]);
            }
        }
    }
}
