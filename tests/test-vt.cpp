// vt ops on the CPU backend against naive float64 references, on random inputs of odd
// sizes; the arena planner; type conversion.
#include <doctest/doctest.h>

#include "test-util.h"
#include "vt.h"
#include "whisper-audio.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float & x : v) x = dist(rng);
    return v;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// A tensor with host data, registered as weight or input.
struct host_tensor {
    vt_tensor * t;
    std::vector<float> data;
};

// Runs graph with output y on a CPU backend of n_threads, inputs/weights set from host data.
std::vector<float> run_cpu(vt_context * ctx, vt_tensor * y, std::vector<host_tensor> tensors, int n_threads = 2,
                           vt_type gemm = VT_TYPE_F32) {
    vt_backend * be = test_cpu_backend(n_threads, gemm);
    REQUIRE(vt_backend_alloc_weights(be, ctx));
    vt_graph * g = vt_graph_build(ctx, &y, 1);
    REQUIRE(vt_backend_alloc_graph(be, g));
    // poison the output so that an unwritten element shows
    std::vector<float> out(vt_nelements(y), NAN);
    REQUIRE(vt_backend_set_tensor(be, y, out.data(), VT_TYPE_F32));
    for (host_tensor & h : tensors) {
        if (h.t->data) REQUIRE(vt_backend_set_tensor(be, h.t, h.data.data(), VT_TYPE_F32));   // unused ones have none
    }
    REQUIRE(vt_backend_compute(be, g));
    REQUIRE(vt_backend_get_tensor_f32(be, y, out.data()));
    vt_graph_free(g);
    vt_backend_free(be);
    return out;
}

host_tensor weight(vt_context * ctx, std::vector<int64_t> ne, uint32_t seed, float scale = 1.0f) {
    vt_tensor * t = vt_new_tensor(ctx, VT_TYPE_F32, (int)ne.size(), ne.data());
    vt_set_weight(t);
    return {t, randn(vt_nelements(t), seed, scale)};
}

host_tensor input(vt_context * ctx, std::vector<int64_t> ne, uint32_t seed) {
    vt_tensor * t = vt_new_tensor(ctx, VT_TYPE_F32, (int)ne.size(), ne.data());
    vt_set_input(t);
    return {t, randn(vt_nelements(t), seed)};
}

} // namespace

TEST_CASE("f16 and bf16 conversion round to nearest even") {
    CHECK(vt_f32_to_f16(1.0f) == 0x3c00);
    CHECK(vt_f32_to_f16(-2.0f) == 0xc000);
    CHECK(vt_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(vt_f32_to_f16(1e6f) == 0x7c00);                     // overflow to inf
    CHECK(vt_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);       // tie -> even
    CHECK(vt_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);       // tie -> even (up)
    CHECK(vt_f16_to_f32(0x0001) == doctest::Approx(5.960464477539063e-8).epsilon(1e-12));  // subnormal
    CHECK(vt_f32_to_f16(5.960464477539063e-8f) == 0x0001);
    CHECK(std::isnan(vt_f16_to_f32(vt_f32_to_f16(NAN))));
    CHECK(vt_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(vt_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);       // tie -> even
    CHECK(vt_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    for (float x : {0.1f, -3.75f, 1234.5f, 6.1e-5f, 1e-30f}) {
        CHECK(vt_f16_to_f32(vt_f32_to_f16(x)) == doctest::Approx(x).epsilon(x < 6e-5f && x > -6e-5f ? 1 : 1e-3));
        CHECK(vt_bf16_to_f32(vt_f32_to_bf16(x)) == doctest::Approx(x).epsilon(4e-3));
    }
}

TEST_CASE("linear: bias, GELU, residual, odd sizes across tile edges") {
    struct shape { int K, M, N, B; bool bias, gelu, res; };
    for (shape s : {shape{70, 37, 45, 2, true, false, false}, shape{600, 130, 300, 1, true, true, false},
                    shape{33, 65, 129, 3, false, false, true}, shape{257, 5, 17, 1, true, false, true}}) {
        CAPTURE(s.K); CAPTURE(s.M); CAPTURE(s.N);
        vt_context * ctx = vt_init(16);
        host_tensor x = input(ctx, {s.K, s.M, s.B}, 1);
        host_tensor w = weight(ctx, {s.K, s.N}, 2, 0.1f);
        host_tensor b = weight(ctx, {s.N}, 3);
        host_tensor r = input(ctx, {s.N, s.M, s.B}, 4);
        vt_tensor * y = vt_linear(ctx, x.t, w.t, s.bias ? b.t : nullptr, s.gelu ? VT_ACT_GELU : VT_ACT_NONE,
                                  s.res ? r.t : nullptr);
        std::vector<float> got = run_cpu(ctx, y, {x, w, b, r});
        std::vector<double> ref((size_t)s.B * s.M * s.N);
        for (int row = 0; row < s.B * s.M; row++)
            for (int n = 0; n < s.N; n++) {
                double acc = s.bias ? b.data[n] : 0.0;
                for (int k = 0; k < s.K; k++) acc += (double)x.data[(size_t)row * s.K + k] * w.data[(size_t)n * s.K + k];
                if (s.gelu) acc = gelu(acc);
                if (s.res) acc += r.data[(size_t)row * s.N + n];
                ref[(size_t)row * s.N + n] = acc;
            }
        CHECK(rel_l2(got, ref) < 1e-6);
        vt_free(ctx);
    }
}

TEST_CASE("conv1d_k3: stride 1 and 2, transposed input, positional add") {
    for (int stride : {1, 2}) {
        for (int t_in : {29, 30, 1}) {
            CAPTURE(stride); CAPTURE(t_in);
            const int c_in = 13, c_out = 19, B = 2, t_out = (t_in - 1) / stride + 1;
            vt_context * ctx = vt_init(16);
            host_tensor x = input(ctx, {t_in, c_in, B}, 5);             // [B, C_in, T] as a mel is
            host_tensor w = weight(ctx, {3, c_in, c_out}, 6, 0.2f);
            host_tensor b = weight(ctx, {c_out}, 7);
            host_tensor add = weight(ctx, {c_out, t_out}, 8);
            vt_tensor * y = vt_conv1d_k3(ctx, vt_transpose(ctx, x.t), w.t, b.t, stride, VT_ACT_GELU, add.t);
            REQUIRE(y->ne[0] == c_out);
            REQUIRE(y->ne[1] == t_out);
            std::vector<float> got = run_cpu(ctx, y, {x, w, b, add}, 3);
            std::vector<double> ref((size_t)B * t_out * c_out);
            for (int bi = 0; bi < B; bi++)
                for (int t = 0; t < t_out; t++)
                    for (int o = 0; o < c_out; o++) {
                        double acc = b.data[o];
                        for (int i = 0; i < c_in; i++)
                            for (int k = 0; k < 3; k++) {
                                const int ti = t * stride + k - 1;
                                if (ti < 0 || ti >= t_in) continue;
                                acc += (double)w.data[((size_t)o * c_in + i) * 3 + k] * x.data[((size_t)bi * c_in + i) * t_in + ti];
                            }
                        ref[((size_t)bi * t_out + t) * c_out + o] = gelu(acc) + add.data[(size_t)t * c_out + o];
                    }
            CHECK(rel_l2(got, ref) < 1e-6);
            vt_free(ctx);
        }
    }
}

TEST_CASE("layer_norm") {
    const int C = 77, M = 23;
    vt_context * ctx = vt_init(8);
    host_tensor x = input(ctx, {C, M}, 9);
    for (float & v : x.data) v = v * 3.0f + 5.0f;                     // a mean far from 0
    host_tensor w = weight(ctx, {C}, 10);
    host_tensor b = weight(ctx, {C}, 11);
    vt_tensor * y = vt_layer_norm(ctx, x.t, w.t, b.t, 1e-5f);
    std::vector<float> got = run_cpu(ctx, y, {x, w, b});
    std::vector<double> ref((size_t)C * M);
    for (int r = 0; r < M; r++) {
        double mean = 0, var = 0;
        for (int i = 0; i < C; i++) mean += x.data[r * C + i];
        mean /= C;
        for (int i = 0; i < C; i++) var += (x.data[r * C + i] - mean) * (x.data[r * C + i] - mean);
        var /= C;
        for (int i = 0; i < C; i++) ref[r * C + i] = (x.data[r * C + i] - mean) / std::sqrt(var + 1e-5) * w.data[i] + b.data[i];
    }
    CHECK(rel_l2(got, ref) < 1e-6);
    vt_free(ctx);
}

TEST_CASE("attention over views of a fused QKV tensor") {
    struct shape { int T, n_head, hd, B; };
    for (shape s : {shape{37, 2, 64, 2}, shape{1, 3, 16, 1}, shape{101, 1, 24, 1}}) {
        CAPTURE(s.T); CAPTURE(s.n_head); CAPTURE(s.hd);
        const int D = s.n_head * s.hd;
        const float scale = 1.0f / std::sqrt((float)s.hd);
        vt_context * ctx = vt_init(16);
        host_tensor qkv = input(ctx, {3 * D, s.T, s.B}, 12);
        const size_t row = 3 * D * sizeof(float), win = row * s.T;
        vt_tensor * q = vt_view_3d(ctx, qkv.t, D, s.T, s.B, row, win, 0);
        vt_tensor * k = vt_view_3d(ctx, qkv.t, D, s.T, s.B, row, win, D * sizeof(float));
        vt_tensor * v = vt_view_3d(ctx, qkv.t, D, s.T, s.B, row, win, 2 * D * sizeof(float));
        vt_tensor * y = vt_attention(ctx, q, k, v, s.n_head, scale);
        std::vector<float> got = run_cpu(ctx, y, {qkv});
        std::vector<double> ref((size_t)s.B * s.T * D), p(s.T);
        auto at = [&](int b, int t, int part, int c) { return (double)qkv.data[((size_t)b * s.T + t) * 3 * D + part * D + c]; };
        for (int b = 0; b < s.B; b++)
            for (int h = 0; h < s.n_head; h++)
                for (int i = 0; i < s.T; i++) {
                    double mx = -INFINITY, sum = 0;
                    for (int j = 0; j < s.T; j++) {
                        double dot = 0;
                        for (int c = 0; c < s.hd; c++) dot += at(b, i, 0, h * s.hd + c) * at(b, j, 1, h * s.hd + c);
                        p[j] = dot * scale;
                        mx = std::max(mx, p[j]);
                    }
                    for (int j = 0; j < s.T; j++) sum += (p[j] = std::exp(p[j] - mx));
                    for (int c = 0; c < s.hd; c++) {
                        double acc = 0;
                        for (int j = 0; j < s.T; j++) acc += p[j] * at(b, j, 2, h * s.hd + c);
                        ref[((size_t)b * s.T + i) * D + h * s.hd + c] = acc / sum;
                    }
                }
        CHECK(rel_l2(got, ref) < 1e-6);
        vt_free(ctx);
    }
}

TEST_CASE("masked attention: window b attends to its first kv_len[b] keys") {
    const int T = 70, D = 64, B = 3;
    const std::vector<float> lens = {70, 1, 33};
    vt_context * ctx = vt_init(16);
    host_tensor qkv = input(ctx, {3 * D, T, B}, 21);
    host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
    vt_set_input(len.t);
    const size_t row = 3 * D * sizeof(float), win = row * T;
    vt_tensor * q = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 0);
    vt_tensor * k = vt_view_3d(ctx, qkv.t, D, T, B, row, win, D * sizeof(float));
    vt_tensor * v = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 2 * D * sizeof(float));
    std::vector<float> got = run_cpu(ctx, vt_attention_masked(ctx, q, k, v, 1, 0.125f, len.t), {qkv, len});
    auto at = [&](int b, int t, int part, int c) { return (double)qkv.data[((size_t)b * T + t) * 3 * D + part * D + c]; };
    std::vector<double> ref((size_t)B * T * D), p(T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {   // every query row, over the first lens[b] keys only
            const int L = (int)lens[b];
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < L; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += at(b, i, 0, c) * at(b, j, 1, c);
                mx = std::max(mx, p[j] = dot * 0.125);
            }
            for (int j = 0; j < L; j++) sum += (p[j] = std::exp(p[j] - mx));
            for (int c = 0; c < D; c++) {
                double acc = 0;
                for (int j = 0; j < L; j++) acc += p[j] * at(b, j, 2, c);
                ref[((size_t)b * T + i) * D + c] = acc / sum;
            }
        }
    CHECK(rel_l2(got, ref) < 1e-6);
    vt_free(ctx);
}

TEST_CASE("block-diagonal attention: query i sees the keys of its own block below kv_len[b]; a block past it gives 0") {
    const int T = 70, D = 64, B = 3, BLK = 16;     // blocks [0,16) ... [64,70); lens cut inside a block, at its edge, past all
    const std::vector<float> lens = {70, 32, 37};
    vt_context * ctx = vt_init(16);
    host_tensor qkv = input(ctx, {3 * D, T, B}, 22);
    host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
    vt_set_input(len.t);
    const size_t row = 3 * D * sizeof(float), win = row * T;
    vt_tensor * q = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 0);
    vt_tensor * k = vt_view_3d(ctx, qkv.t, D, T, B, row, win, D * sizeof(float));
    vt_tensor * v = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 2 * D * sizeof(float));
    std::vector<float> got = run_cpu(ctx, vt_attention_blocks(ctx, q, k, v, 1, 0.125f, len.t, BLK), {qkv, len});
    auto at = [&](int b, int t, int part, int c) { return (double)qkv.data[((size_t)b * T + t) * 3 * D + part * D + c]; };
    std::vector<double> ref((size_t)B * T * D, 0.0), p(T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            const int lo = i / BLK * BLK, hi = std::min(lo + BLK, (int)lens[b]);
            if (hi <= lo) continue;                 // no key: the row stays 0
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j < hi; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += at(b, i, 0, c) * at(b, j, 1, c);
                mx = std::max(mx, p[j] = dot * 0.125);
            }
            for (int j = lo; j < hi; j++) sum += (p[j] = std::exp(p[j] - mx));
            for (int c = 0; c < D; c++) {
                double acc = 0;
                for (int j = lo; j < hi; j++) acc += p[j] * at(b, j, 2, c);
                ref[((size_t)b * T + i) * D + c] = acc / sum;
            }
        }
    CHECK(rel_l2(got, ref) < 1e-6);
    for (int c = 0; c < D; c++) CHECK(got[((size_t)1 * T + 40) * D + c] == 0.0f);   // window 1, block [32, 48) past 32
    vt_free(ctx);
}

TEST_CASE("block-causal attention: query i sees the keys of its own block and every earlier one, below kv_len[b]") {
    const int T = 70, D = 64, B = 3, BLK = 16;     // blocks [0,16) ... [64,70); lens inside a block, at its edge, all
    const std::vector<float> lens = {70, 32, 37};
    vt_context * ctx = vt_init(16);
    host_tensor qkv = input(ctx, {3 * D, T, B}, 28);
    host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
    vt_set_input(len.t);
    const size_t row = 3 * D * sizeof(float), win = row * T;
    vt_tensor * q = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 0);
    vt_tensor * k = vt_view_3d(ctx, qkv.t, D, T, B, row, win, D * sizeof(float));
    vt_tensor * v = vt_view_3d(ctx, qkv.t, D, T, B, row, win, 2 * D * sizeof(float));
    std::vector<float> got = run_cpu(ctx, vt_attention_block_causal(ctx, q, k, v, 1, 0.125f, len.t, BLK), {qkv, len});
    auto at = [&](int b, int t, int part, int c) { return (double)qkv.data[((size_t)b * T + t) * 3 * D + part * D + c]; };
    std::vector<double> ref((size_t)B * T * D, 0.0), p(T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {                // MiniCPM-o's subsequent_chunk_mask(T, BLK, -1) and its padding mask
            const int hi = std::min((i / BLK + 1) * BLK, (int)lens[b]);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < hi; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += at(b, i, 0, c) * at(b, j, 1, c);
                mx = std::max(mx, p[j] = dot * 0.125);
            }
            for (int j = 0; j < hi; j++) sum += (p[j] = std::exp(p[j] - mx));
            for (int c = 0; c < D; c++) {
                double acc = 0;
                for (int j = 0; j < hi; j++) acc += p[j] * at(b, j, 2, c);
                ref[((size_t)b * T + i) * D + c] = acc / sum;
            }
        }
    CHECK(rel_l2(got, ref) < 1e-6);
    // the first block's rows see that block alone: block-diagonal attention's rows there
    vt_context * ctx2 = vt_init(16);
    host_tensor qkv2{vt_new_tensor_3d(ctx2, VT_TYPE_F32, 3 * D, T, B), qkv.data};
    vt_set_input(qkv2.t);
    host_tensor len2{vt_new_tensor_1d(ctx2, VT_TYPE_F32, B), lens};
    vt_set_input(len2.t);
    vt_tensor * q2 = vt_view_3d(ctx2, qkv2.t, D, T, B, row, win, 0);
    vt_tensor * k2 = vt_view_3d(ctx2, qkv2.t, D, T, B, row, win, D * sizeof(float));
    vt_tensor * v2 = vt_view_3d(ctx2, qkv2.t, D, T, B, row, win, 2 * D * sizeof(float));
    std::vector<float> diag = run_cpu(ctx2, vt_attention_blocks(ctx2, q2, k2, v2, 1, 0.125f, len2.t, BLK), {qkv2, len2});
    for (int c = 0; c < BLK * D; c++) CHECK(got[c] == diag[c]);
    CHECK(got[(size_t)40 * D] != diag[(size_t)40 * D]);
    vt_free(ctx2);
    vt_free(ctx);
}

TEST_CASE("conv1d_k3 over chunks: each chunk padded on its own, rows past x_len zero, the add per chunk") {
    const int C = 5, N = 4, T = 24, B = 2, CH = 8;
    const std::vector<float> lens = {24, 13};        // window 1: its chunk [8, 16) cut at 13 (odd)
    for (int stride : {1, 2}) {
        vt_context * ctx = vt_init(16);
        host_tensor x = input(ctx, {C, T, B}, 23);
        host_tensor w = input(ctx, {3, C, N}, 24);
        host_tensor bias = input(ctx, {N}, 25);
        host_tensor add = input(ctx, {N, CH / stride}, 26);
        host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
        vt_set_input(len.t);
        std::vector<float> got = run_cpu(ctx, vt_conv1d_k3_chunks(ctx, x.t, w.t, bias.t, stride, VT_ACT_NONE, add.t, CH, len.t),
                                         {x, w, bias, add, len});
        const int t_out = T / stride;
        std::vector<double> ref((size_t)B * t_out * N);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < t_out; t++)
                for (int o = 0; o < N; o++) {
                    const int c0 = t * stride / CH * CH, end = std::min(c0 + CH, (int)lens[b]);
                    double acc = bias.data[o];
                    for (int i = 0; i < C; i++)
                        for (int kk = 0; kk < 3; kk++) {
                            const int ti = t * stride + kk - 1;
                            if (ti >= c0 && ti < end) acc += (double)w.data[(o * C + i) * 3 + kk] * x.data[((size_t)b * T + ti) * C + i];
                        }
                    ref[((size_t)b * t_out + t) * N + o] = acc + add.data[(t % (CH / stride)) * N + o];
                }
        CAPTURE(stride);
        CHECK(rel_l2(got, ref) < 1e-6);
        vt_free(ctx);
    }
}

namespace {

// conv2d_k3s2 in float64, from x[b][t][f][i] (the mel's [b][f][t] when mel): out [B, T_out, F_out, N]
std::vector<double> conv2d_ref(const std::vector<float> & x, bool mel, const std::vector<float> & w, const std::vector<float> & bias,
                               int B, int T, int F, int C, int N, int chunk, const std::vector<float> & lens, bool gelu_act) {
    if (chunk > T) chunk = T;
    const int chunk_out = (chunk - 1) / 2 + 1, t_out = T / chunk * chunk_out, f_out = (F - 1) / 2 + 1;
    std::vector<double> ref((size_t)B * t_out * f_out * N);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < t_out; t++)
            for (int f = 0; f < f_out; f++)
                for (int o = 0; o < N; o++) {
                    const int c0 = t / chunk_out * chunk, end = std::min(c0 + chunk, lens.empty() ? T : (int)lens[b]);
                    double acc = bias[o];
                    for (int i = 0; i < C; i++)
                        for (int kf = 0; kf < 3; kf++)
                            for (int kt = 0; kt < 3; kt++) {
                                const int ti = c0 + 2 * (t % chunk_out) + kt - 1, fi = 2 * f + kf - 1;
                                if (ti < c0 || ti >= end || fi < 0 || fi >= F) continue;
                                const float xv = mel ? x[((size_t)b * F + fi) * T + ti] : x[(((size_t)b * T + ti) * F + fi) * C + i];
                                acc += (double)w[((o * C + i) * 3 + kf) * 3 + kt] * xv;
                            }
                    ref[(((size_t)b * t_out + t) * f_out + f) * N + o] = gelu_act ? gelu(acc) : acc;
                }
    return ref;
}

} // namespace

TEST_CASE("conv2d_k3s2: stride 2 over frequency and time, chunks padded on their own, time past x_len zero, from the mel") {
    const int B = 2, T = 24, F = 11, N = 6;
    const std::vector<float> lens = {24, 13};        // window 1: its chunk [8, 16) cut at 13 (odd)
    for (int C : {1, 5}) {
        for (int chunk : {8, 6, 24, 100}) {          // 100: one chunk of T
            for (bool with_len : {false, true}) {
                vt_context * ctx = vt_init(16);
                host_tensor x = C == 1 ? input(ctx, {T, F, B}, 31) : input(ctx, {C, F, T, B}, 31);
                host_tensor w = input(ctx, {3, 3, C, N}, 32);
                host_tensor bias = input(ctx, {N}, 33);
                host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
                vt_set_input(len.t);
                vt_tensor * y = vt_conv2d_k3s2(ctx, x.t, w.t, bias.t, VT_ACT_GELU, chunk, with_len ? len.t : nullptr);
                const int ch = std::min(chunk, T);
                CHECK(y->ne[0] == N);
                CHECK(y->ne[1] == (F - 1) / 2 + 1);
                CHECK(y->ne[2] == T / ch * ((ch - 1) / 2 + 1));
                CHECK(y->ne[3] == B);
                std::vector<float> got = run_cpu(ctx, y, {x, w, bias, len});
                std::vector<double> ref = conv2d_ref(x.data, C == 1, w.data, bias.data, B, T, F, C, N, chunk,
                                                     with_len ? lens : std::vector<float>{}, true);
                CAPTURE(C);
                CAPTURE(chunk);
                CAPTURE(with_len);
                CHECK(rel_l2(got, ref) < 1e-6);
                vt_free(ctx);
            }
        }
    }
    // the mel as a transposed view ([B, T, F] memory read as [B, F, T]): any strides
    vt_context * ctx = vt_init(16);
    host_tensor xt = input(ctx, {F, T, B}, 34);
    host_tensor w = input(ctx, {3, 3, 1, N}, 35);
    host_tensor bias = input(ctx, {N}, 36);
    std::vector<float> got = run_cpu(ctx, vt_conv2d_k3s2(ctx, vt_transpose(ctx, xt.t), w.t, bias.t, VT_ACT_NONE, 8, nullptr), {xt, w, bias});
    std::vector<float> mel((size_t)B * F * T);
    for (int b = 0; b < B; b++)
        for (int f = 0; f < F; f++)
            for (int t = 0; t < T; t++) mel[((size_t)b * F + f) * T + t] = xt.data[((size_t)b * T + t) * F + f];
    CHECK(rel_l2(got, conv2d_ref(mel, true, w.data, bias.data, B, T, F, 1, N, 8, {}, false)) < 1e-6);
    vt_free(ctx);
}

TEST_CASE("conv2d_k3s2_pair: two stages in one node equal the two nodes bit for bit, a slice of windows at a time") {
    // the first stage's output a window: 150 x 64 x 10 floats at 300 frames (the 3 windows in one
    // slice of the CPU backend's stage of 1 Mi floats), 1000 x 64 x 10 at 2000 (a slice a window)
    for (int T : {300, 2000}) {
        const int B = 3, F = 128, C1 = 10, C2 = 7, chunk1 = 100, chunk2 = 25;
        const std::vector<float> lens = {(float)T, 253, 61};
        for (bool with_len : {false, true}) {
            vt_context * ctx = vt_init(24);
            host_tensor x = input(ctx, {T, F, B}, 41);
            host_tensor w1 = input(ctx, {3, 3, 1, C1}, 42), b1 = input(ctx, {C1}, 43);
            host_tensor w2 = input(ctx, {3, 3, C1, C2}, 44), b2 = input(ctx, {C2}, 45);
            host_tensor len{vt_new_tensor_1d(ctx, VT_TYPE_F32, B), lens};
            vt_set_input(len.t);
            vt_tensor * xl = with_len ? len.t : nullptr;
            vt_tensor * two = vt_conv2d_k3s2(ctx, vt_conv2d_k3s2(ctx, x.t, w1.t, b1.t, VT_ACT_GELU, chunk1, xl), w2.t, b2.t,
                                             VT_ACT_GELU, chunk2, nullptr);
            vt_tensor * one = vt_conv2d_k3s2_pair(ctx, x.t, w1.t, b1.t, chunk1, xl, w2.t, b2.t, chunk2, VT_ACT_GELU);
            for (int d = 0; d < 4; d++) CHECK(one->ne[d] == two->ne[d]);
            const std::vector<float> a = run_cpu(ctx, one, {x, w1, b1, w2, b2, len}), b = run_cpu(ctx, two, {x, w1, b1, w2, b2, len});
            CAPTURE(T);
            CAPTURE(with_len);
            REQUIRE(a.size() == b.size());
            CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
            vt_free(ctx);
        }
    }
}

TEST_CASE("add_rows: the same rows added to each period of a window's rows") {
    const int C = 7, T = 10, B = 3, P = 4;
    vt_context * ctx = vt_init(8);
    host_tensor x = input(ctx, {C, T, B}, 41);
    host_tensor add = weight(ctx, {C, P + 2}, 42);           // only its first P rows are read
    std::vector<float> got = run_cpu(ctx, vt_add_rows(ctx, x.t, add.t, P), {x, add});
    std::vector<double> ref(x.data.size());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                ref[((size_t)b * T + t) * C + c] = (double)x.data[((size_t)b * T + t) * C + c] + add.data[(t % P) * C + c];
    CHECK(rel_l2(got, ref) < 1e-7);
    vt_free(ctx);
}

TEST_CASE("rope_qk: q and k of each head turn by position (the first n_rot dims, rotate_half pairs), v copied") {
    const int H = 2, hd = 8, D = H * hd, n_rot = 4, T = 1500, B = 2;    // T 1500: the angles reach ~1500 rad
    vt_context * ctx = vt_init(8);
    host_tensor x = input(ctx, {3 * D, T, B}, 36);
    std::vector<float> got = run_cpu(ctx, vt_rope_qk(ctx, x.t, H, n_rot, 10000.0f), {x});
    REQUIRE(got.size() == x.data.size());
    std::vector<double> ref(x.data.begin(), x.data.end());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < 2 * H; h++)           // q's heads, then k's
                for (int i = 0; i < n_rot / 2; i++) {
                    // transformers: inv_freq and the angle in float32, then cos/sin
                    const float inv = (float)(1.0 / (double)(float)std::pow(10000.0, (double)(2 * i) / n_rot));
                    const double a = (double)((float)t * inv), c = std::cos(a), s = std::sin(a);
                    const size_t o = ((size_t)b * T + t) * 3 * D + h * hd + i;
                    const double x1 = x.data[o], x2 = x.data[o + n_rot / 2];
                    ref[o] = x1 * c - x2 * s;
                    ref[o + n_rot / 2] = x2 * c + x1 * s;
                }
    CHECK(rel_l2(got, ref) < 1e-6);
    for (size_t r = 0; r < (size_t)T * B; r++)        // v, and q's and k's dims past n_rot: copied exactly
        for (int j = 0; j < 3 * D; j++)
            if (j >= 2 * D || j % hd >= n_rot) REQUIRE(got[r * 3 * D + j] == x.data[r * 3 * D + j]);
    vt_free(ctx);
}

TEST_CASE("rope_time: the first 2 n_rot channels turn by the rows' times in their inputs (window and time axes), the rest copied") {
    const int C = 10, n_rot = 4, T = 750, B = 2;
    const float theta = 1200.0f, step = 0.04f;
    vt_context * ctx = vt_init(8);
    host_tensor x = input(ctx, {C, T, B}, 37);
    vt_tensor * win = vt_new_tensor_1d(ctx, VT_TYPE_F32, B);
    vt_set_input(win);
    const std::vector<float> windows = {0.0f, 2.0f};           // the first window of one input, the third of another
    std::vector<float> got = run_cpu(ctx, vt_rope_time(ctx, x.t, win, n_rot, theta, step), {x, {win, windows}});
    REQUIRE(got.size() == x.data.size());
    // MusicFlamingoRotaryEmbedding in plain double: row t of window k at ts = (k T + t) step seconds; pair p of
    // the window axis by k / theta inv_freq[p], of the time axis by t / theta 2 pi inv_freq[p - n_rot / 2]
    const double pi = 3.14159265358979323846;
    std::vector<double> ref(x.data.begin(), x.data.end());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const double k = windows[b], ts = (k * T + t) * step;
            for (int p = 0; p < n_rot; p++) {
                const int i = p % (n_rot / 2);
                const double inv = 1.0 / std::pow((double)theta, 2.0 * i / n_rot);
                const double f = p < n_rot / 2 ? k / theta * inv : t / (double)theta * 2 * pi * inv;
                const double a = -2 * pi * ts * f, c = std::cos(a), s = std::sin(a);
                const size_t o = ((size_t)b * T + t) * C + 2 * p;
                ref[o] = x.data[o] * c - x.data[o + 1] * s;
                ref[o + 1] = x.data[o + 1] * c + x.data[o] * s;
            }
        }
    // the model's float32 timestamps and factors against exact ones: angles up to ~900 rad here, each off by
    // up to ~1e-4 rad (a wrong axis, sign or pairing is off by order 1)
    CHECK(rel_l2(got, ref) < 1e-4);
    for (size_t r = 0; r < (size_t)T * B; r++)
        for (int j = 2 * n_rot; j < C; j++) REQUIRE(got[r * C + j] == x.data[r * C + j]);
    // the window's index moves the rows: window 2's first row is not window 0's
    CHECK(got[(size_t)T * C] != x.data[(size_t)T * C]);
    vt_free(ctx);
}

TEST_CASE("projector ops: avg_pool2, rms_norm, swiglu, relu, silu, silu_mul, stack_frames (a copy, and a view when it divides)") {
    const int C = 6, T = 11, B = 2;
    {   // avg_pool2: pairs of rows, the odd last row dropped
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {C, T, B}, 31);
        std::vector<float> got = run_cpu(ctx, vt_avg_pool2(ctx, x.t), {x});
        REQUIRE(got.size() == (size_t)B * (T / 2) * C);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T / 2; t++)
                for (int c = 0; c < C; c++)
                    CHECK(got[((size_t)b * (T / 2) + t) * C + c] ==
                          doctest::Approx(0.5 * (x.data[((size_t)b * T + 2 * t) * C + c] + x.data[((size_t)b * T + 2 * t + 1) * C + c])));
        vt_free(ctx);
    }
    {   // rms_norm
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {C, T, B}, 32), w = weight(ctx, {C}, 33);
        std::vector<float> got = run_cpu(ctx, vt_rms_norm(ctx, x.t, w.t, 1e-6f), {x, w});
        for (int r = 0; r < T * B; r++) {
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)x.data[r * C + c] * x.data[r * C + c];
            for (int c = 0; c < C; c++)
                CHECK(got[r * C + c] == doctest::Approx(x.data[r * C + c] / std::sqrt(ss / C + 1e-6) * w.data[c]).epsilon(1e-6));
        }
        vt_free(ctx);
    }
    {   // swiglu: the first half times silu of the second
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {2 * C, T, B}, 34);
        std::vector<float> got = run_cpu(ctx, vt_swiglu(ctx, x.t), {x});
        for (int r = 0; r < T * B; r++)
            for (int c = 0; c < C; c++) {
                const double g = x.data[r * 2 * C + C + c];
                CHECK(got[r * C + c] == doctest::Approx(x.data[r * 2 * C + c] * g / (1.0 + std::exp(-g))).epsilon(1e-6));
            }
        vt_free(ctx);
    }
    {   // relu
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {C, T, B}, 36);
        std::vector<float> got = run_cpu(ctx, vt_relu(ctx, x.t), {x});
        REQUIRE(got.size() == x.data.size());
        int neg = 0;
        for (size_t i = 0; i < got.size(); i++) {
            CHECK(got[i] == std::max(x.data[i], 0.0f));
            neg += x.data[i] < 0.0f;
        }
        CHECK(neg > 0);
        vt_free(ctx);
    }
    {   // silu
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {C, T, B}, 37);
        std::vector<float> got = run_cpu(ctx, vt_silu(ctx, x.t), {x});
        REQUIRE(got.size() == x.data.size());
        for (size_t i = 0; i < got.size(); i++)
            CHECK(got[i] == doctest::Approx(x.data[i] / (1.0 + std::exp(-(double)x.data[i]))).epsilon(1e-6));
        vt_free(ctx);
    }
    {   // silu_mul: the second tensor times silu of the first (the gate)
        vt_context * ctx = vt_init(8);
        host_tensor g = input(ctx, {C, T, B}, 38), x = input(ctx, {C, T, B}, 39);
        std::vector<float> got = run_cpu(ctx, vt_silu_mul(ctx, g.t, x.t), {g, x});
        REQUIRE(got.size() == x.data.size());
        for (size_t i = 0; i < got.size(); i++) {
            const double v = g.data[i];
            CHECK(got[i] == doctest::Approx(x.data[i] * v / (1.0 + std::exp(-v))).epsilon(1e-6));
        }
        vt_free(ctx);
    }
    for (int f : {4, 11}) {   // stack: 4 does not divide 11 (a copy, the tail zero), 11 does (a view)
        vt_context * ctx = vt_init(8);
        host_tensor x = input(ctx, {C, T, B}, 35);
        vt_tensor * s = vt_stack_frames(ctx, x.t, f);
        CHECK((s->op == VT_OP_VIEW) == (T % f == 0));
        const int T_out = (T + f - 1) / f;
        REQUIRE(s->ne[0] == f * C);
        REQUIRE(s->ne[1] == T_out);
        // a layer after it, so that a view is computed through (rms_norm with unit weights)
        host_tensor one{vt_new_tensor_1d(ctx, VT_TYPE_F32, f * C), std::vector<float>(f * C, 1.0f)};
        vt_set_weight(one.t);
        std::vector<float> got = run_cpu(ctx, vt_rms_norm(ctx, s, one.t, 1e-6f), {x, one});
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T_out; t++) {
                double ss = 0;
                std::vector<double> row(f * C, 0.0);
                for (int i = 0; i < f * C && t * f * C + i < T * C; i++) row[i] = x.data[(size_t)b * T * C + t * f * C + i];
                for (double v : row) ss += v * v;
                for (int i = 0; i < f * C; i++)
                    CHECK(got[((size_t)b * T_out + t) * f * C + i] == doctest::Approx(row[i] / std::sqrt(ss / (f * C) + 1e-6)).epsilon(1e-6));
            }
        vt_free(ctx);
    }
}

TEST_CASE("planner: a chain shares the arena, results unchanged, outputs kept") {
    const int C = 64, M = 50, n_layers = 12;
    vt_context * ctx = vt_init(64);
    host_tensor x = input(ctx, {C, M}, 20);
    std::vector<host_tensor> all = {x};
    vt_tensor * cur = x.t;
    std::vector<std::vector<float>> ws;
    for (int i = 0; i < n_layers; i++) {
        host_tensor w = weight(ctx, {C, C}, 100 + i, 0.15f);
        ws.push_back(w.data);
        all.push_back(w);
        cur = vt_linear(ctx, cur, w.t, nullptr, VT_ACT_GELU, cur);     // residual on its own input
    }
    vt_graph * g = vt_graph_build(ctx, &cur, 1);
    const size_t one = ((size_t)C * M * 4 + VT_ARENA_ALIGN - 1) / VT_ARENA_ALIGN * VT_ARENA_ALIGN;
    CHECK(vt_graph_naive_size(g) == one * (n_layers + 1));
    CHECK(vt_graph_arena_size(g) <= 3 * one);                           // input, current, next
    // inputs and outputs are never shared with anything
    for (int i = 0; i < vt_graph_n_nodes(g); i++) {
        vt_tensor * t = vt_graph_node(g, i);
        if (t != cur) CHECK((t->arena_offset >= x.t->arena_offset + one || t->arena_offset + one <= x.t->arena_offset));
    }
    // no node shares bytes with a tensor it reads
    for (int i = 0; i < vt_graph_n_nodes(g); i++) {
        vt_tensor * t = vt_graph_node(g, i);
        for (vt_tensor * s : t->src) {
            if (s && !(s->flags & VT_FLAG_WEIGHT)) CHECK(s->arena_offset != t->arena_offset);
        }
    }
    vt_graph_free(g);
    std::vector<float> got = run_cpu(ctx, cur, all);
    std::vector<double> ref(x.data.begin(), x.data.end()), next(ref.size());
    for (int l = 0; l < n_layers; l++) {
        for (int r = 0; r < M; r++)
            for (int n = 0; n < C; n++) {
                double acc = 0;
                for (int k = 0; k < C; k++) acc += ref[r * C + k] * ws[l][(size_t)n * C + k];
                next[r * C + n] = gelu(acc) + ref[r * C + n];
            }
        ref = next;
    }
    CHECK(rel_l2(got, ref) < 1e-6);
    vt_free(ctx);
}

TEST_CASE("CPU results do not depend on the thread count") {
    vt_context * ctx = vt_init(8);
    host_tensor x = input(ctx, {96, 200}, 30);
    host_tensor w = weight(ctx, {96, 300}, 31, 0.1f);
    vt_tensor * y = vt_linear(ctx, x.t, w.t, nullptr, VT_ACT_NONE, nullptr);
    std::vector<float> a = run_cpu(ctx, y, {x, w}, 1);
    std::vector<float> b = run_cpu(ctx, y, {x, w}, 4);
    CHECK(memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    vt_free(ctx);
}

TEST_CASE("backends by name: the CPU is device 0 of one, in f32 (or bf16 GEMMs); unknown names and devices are errors") {
    CHECK(vt_backend_built("cpu"));
    CHECK(vt_backend_device_count("cpu") == 1);
    CHECK(!vt_backend_built("metal"));
    CHECK(vt_backend_device_count("metal") == 0);
    const vt_backend_params cpu = {VT_TYPE_F32, 1, false};
    vt_backend * be = vt_backend_init("cpu", 0, &cpu);
    REQUIRE_MESSAGE(be, vt_last_error());
    CHECK(std::string(vt_backend_name(be)) == "cpu");
    CHECK(vt_backend_compute_type(be) == VT_TYPE_F32);
    vt_backend_free(be);
    CHECK(vt_backend_init("cpu", 1, &cpu) == nullptr);
    CHECK(std::string(vt_last_error()).find("device 1 does not exist") != std::string::npos);
    const vt_backend_params f16 = {VT_TYPE_F16, 1, false};
    CHECK(vt_backend_init("cpu", 0, &f16) == nullptr);
    CHECK(std::string(vt_last_error()).find("f32 or with bf16 GEMMs, not f16") != std::string::npos);
    CHECK(vt_backend_init("cpu", 0, nullptr) == nullptr);
    CHECK(vt_backend_init("metal", 0, &cpu) == nullptr);
    CHECK(std::string(vt_last_error()).find("no backend named 'metal'") != std::string::npos);
    CHECK(vt_backend_init(nullptr, 0, &cpu) == nullptr);
    size_t free_b = 0, total_b = 0;
    CHECK(!vt_backend_device_memory("cpu", 0, &free_b, &total_b));
    CHECK(std::string(vt_last_error()).find("no device memory figure") != std::string::npos);
    CHECK(!vt_backend_device_memory("metal", 0, &free_b, &total_b));
    if (vt_backend_built("cuda")) {
        const int n = vt_backend_device_count("cuda");
        CHECK(!vt_backend_device_memory("cuda", n, &free_b, &total_b));
        CHECK(!vt_backend_device_memory("cuda", -1, &free_b, &total_b));
        const vt_backend_params fp8_f16 = {VT_TYPE_F16, 0, true};
        CHECK(vt_backend_init("cuda", 0, &fp8_f16) == nullptr);
        if (n > 0) {
            CHECK(std::string(vt_last_error()).find("fp8 GEMMs run beside bf16") != std::string::npos);
            CHECK(vt_backend_device_memory("cuda", 0, &free_b, &total_b));
            CHECK(free_b <= total_b);
            CHECK(total_b > 0);
        }
    }
}

TEST_CASE("the CUDA entry point fails cleanly when it cannot run") {
    if (vt_backend_built("cuda")) {
        MESSAGE("CUDA is built in; tests/test-cuda.cpp covers it");
        return;
    }
    CHECK(test_cuda_backend(VT_TYPE_F16) == nullptr);
    CHECK(std::strstr(vt_last_error(), "CUDA") != nullptr);
}

TEST_CASE("vt_convert agrees with the scalar conversions, every f16 value and random f32") {
    std::vector<uint16_t> all(65536);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    std::vector<float> f(65536);
    vt_convert(f.data(), VT_TYPE_F32, all.data(), VT_TYPE_F16, all.size());
    for (int i = 0; i < 65536; i++) {
        const float want = vt_f16_to_f32((uint16_t)i);
        if (std::isnan(want)) CHECK(std::isnan(f[i]));
        else REQUIRE(memcmp(&f[i], &want, 4) == 0);
    }
    std::vector<float> x = randn(100003, 40, 100.0f);
    x[0] = 65520.0f; x[1] = 1e-8f; x[2] = -0.0f; x[3] = 6.1e-5f; x[4] = 1.0f + 1.0f / 2048;
    std::vector<uint16_t> h(x.size()), b(x.size());
    vt_convert(h.data(), VT_TYPE_F16, x.data(), VT_TYPE_F32, x.size());
    vt_convert(b.data(), VT_TYPE_BF16, x.data(), VT_TYPE_F32, x.size());
    for (size_t i = 0; i < x.size(); i++) {
        REQUIRE(h[i] == vt_f32_to_f16(x[i]));
        REQUIRE(b[i] == vt_f32_to_bf16(x[i]));
    }
}

// What main and bench ask of vt, through whisper-audio.h alone (the shared library hides vt):
// the same answers as vt's own calls, and errors as values.
TEST_CASE("public API: f16 rows, device counts, device memory and the CPU ISA are vt's") {
    std::vector<uint16_t> all(65536), back(65536);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    std::vector<float> f(65536), want(65536);
    REQUIRE(whisper_audio_f16_to_f32(all.data(), f.data(), all.size()));
    vt_convert(want.data(), VT_TYPE_F32, all.data(), VT_TYPE_F16, all.size());
    CHECK(memcmp(f.data(), want.data(), f.size() * sizeof(float)) == 0);
    std::vector<float> x = randn(10007, 44, 100.0f);
    std::vector<uint16_t> h(x.size()), hv(x.size());
    REQUIRE(whisper_audio_f32_to_f16(x.data(), h.data(), x.size()));
    vt_convert(hv.data(), VT_TYPE_F16, x.data(), VT_TYPE_F32, x.size());
    CHECK(h == hv);
    CHECK(whisper_audio_f16_to_f32(nullptr, nullptr, 0));           // nothing to convert
    CHECK(!whisper_audio_f16_to_f32(nullptr, f.data(), 1));
    CHECK(std::string(whisper_audio_last_error()) == "whisper_audio_f16_to_f32: NULL src");
    CHECK(!whisper_audio_f32_to_f16(x.data(), nullptr, 1));
    CHECK(std::string(whisper_audio_last_error()) == "whisper_audio_f32_to_f16: NULL dst");

    const int n_gpu = vt_backend_device_count("cuda");
    CHECK(whisper_audio_device_count(WHISPER_AUDIO_DEVICE_GPU) == n_gpu);
    CHECK(whisper_audio_device_count(WHISPER_AUDIO_DEVICE_CUDA) == n_gpu);      // the old name
    CHECK(whisper_audio_cuda_device_count() == n_gpu);
    CHECK(whisper_audio_device_count(WHISPER_AUDIO_DEVICE_CPU) == 1);
    CHECK(whisper_audio_device_count(WHISPER_AUDIO_DEVICE_AUTO) == std::max(n_gpu, 1));
    const int bad = 7;
    enum whisper_audio_device bad_device;
    memcpy(&bad_device, &bad, sizeof(int));                          // any int, as C allows
    CHECK(whisper_audio_device_count(bad_device) == -1);
    CHECK(std::string(whisper_audio_last_error()) ==
          "whisper_audio_device_count: device 7 is not WHISPER_AUDIO_DEVICE_AUTO, _CPU or _GPU");

    size_t used = 0, vt_free = 0, vt_total = 0;
    CHECK(!whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_CPU, 0, &used));
    CHECK(std::string(whisper_audio_last_error()).find("the CPU has no device memory figure") != std::string::npos);
    CHECK(!whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, n_gpu, &used));
    CHECK(std::string(whisper_audio_last_error()).find("no GPU " + std::to_string(n_gpu)) != std::string::npos);
    CHECK(!whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, -1, &used));
    CHECK(!whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, 0, nullptr));
    if (n_gpu > 0) {
        CHECK(whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_GPU, 0, &used));
        CHECK(vt_backend_device_memory("cuda", 0, &vt_free, &vt_total));
        CHECK(used <= vt_total);
        CHECK(used > 0);
    } else {
        CHECK(!whisper_audio_device_memory_used(WHISPER_AUDIO_DEVICE_AUTO, 0, &used));   // AUTO: the CPU here
    }

    REQUIRE(vt_cpu_isa() != nullptr);
    CHECK(std::string(whisper_audio_cpu_isa()) == vt_cpu_isa());
    setenv("VT_CPU_ISA", "sse9", 1);
    CHECK(whisper_audio_cpu_isa() == nullptr);
    CHECK(std::string(whisper_audio_last_error()).find("VT_CPU_ISA=sse9: unknown") != std::string::npos);
    unsetenv("VT_CPU_ISA");
}

// Every kernel set this CPU runs (VT_CPU_ISA picks one), on odd sizes against float64: a
// GELU sweep (the vectorised erf, tails included), a linear across tile edges, attention
// with a head size that is not a multiple of the 32-wide strips, a LayerNorm of rows whose
// mean is far from 0. The sets are the build's: x86-64 picks among AVX-512, AVX2 and plain at
// run time, aarch64 has NEON (always there) and plain. Unknown sets fail clearly.
TEST_CASE("every CPU kernel set: GELU, linear, attention and LayerNorm against float64") {
    int ran = 0;
#if defined(__x86_64__) || defined(__i386__)
    const char * sets[] = {"avx512", "avx2", "plain"};
#elif defined(__aarch64__)
    const char * sets[] = {"neon", "plain"};
    setenv("VT_CPU_ISA", "avx2", 1);   // another architecture's set is not in this build
    CHECK(vt_cpu_isa() == nullptr);
    CHECK(std::string(vt_last_error()) == "VT_CPU_ISA=avx2: unknown; this build has neon, plain");
    unsetenv("VT_CPU_ISA");
    CHECK(std::string(vt_cpu_isa()) == "neon");   // the default: NEON is part of every aarch64 CPU
#else
    const char * sets[] = {"plain"};
#endif
    for (const char * isa : sets) {
        CAPTURE(isa);
        setenv("VT_CPU_ISA", isa, 1);
        if (!vt_cpu_isa()) {   // this CPU lacks it
            CHECK(std::string(vt_last_error()).find("cannot run") != std::string::npos);
            continue;
        }
        CHECK(std::string(vt_cpu_isa()) == isa);
        ran++;
        {   // GELU of x in [-10, 10] through a 1-wide linear (x * 1 + 0)
            const int M = 2001;
            vt_context * ctx = vt_init(8);
            host_tensor x = input(ctx, {1, M}, 0);
            for (int i = 0; i < M; i++) x.data[i] = -10.0f + 20.0f * i / (M - 1);
            host_tensor w = weight(ctx, {1, 1}, 0);
            w.data[0] = 1.0f;
            vt_tensor * y = vt_linear(ctx, x.t, w.t, nullptr, VT_ACT_GELU, nullptr);
            std::vector<float> got = run_cpu(ctx, y, {x, w});
            double worst = 0.0;
            for (int i = 0; i < M; i++) {
                const double ref = 0.5 * x.data[i] * std::erfc(-x.data[i] / std::sqrt(2.0));
                worst = std::max(worst, std::fabs(got[i] - ref) / (std::fabs(ref) + 1e-30));
            }
            CHECK(worst < 1e-5);   // relative, every x: the negative tail too
            vt_free(ctx);
        }
        {   // linear with bias + GELU + residual, sizes across the 12 x 32 tiles and 256-wide blocks
            const int K = 300, M = 43, N = 301;
            vt_context * ctx = vt_init(16);
            host_tensor x = input(ctx, {K, M}, 40);
            host_tensor w = weight(ctx, {K, N}, 41, 0.1f);
            host_tensor b = weight(ctx, {N}, 42);
            host_tensor r = input(ctx, {N, M}, 43);
            vt_tensor * y = vt_linear(ctx, x.t, w.t, b.t, VT_ACT_GELU, r.t);
            std::vector<float> got = run_cpu(ctx, y, {x, w, b, r}, 3);
            std::vector<double> ref((size_t)M * N);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double acc = b.data[n];
                    for (int k = 0; k < K; k++) acc += (double)x.data[(size_t)m * K + k] * w.data[(size_t)n * K + k];
                    ref[(size_t)m * N + n] = gelu(acc) + r.data[(size_t)m * N + n];
                }
            CHECK(rel_l2(got, ref) < 1e-6);
            vt_free(ctx);
        }
        {   // attention: T 45 (a partial 12-row panel and 32-key strip), 3 heads of 40 columns
            const int T = 45, H = 3, hd = 40, D = H * hd;
            const float scale = 0.15f;
            vt_context * ctx = vt_init(16);
            host_tensor q = input(ctx, {D, T}, 50), k = input(ctx, {D, T}, 51), v = input(ctx, {D, T}, 52);
            vt_tensor * y = vt_attention(ctx, q.t, k.t, v.t, H, scale);
            std::vector<float> got = run_cpu(ctx, y, {q, k, v});
            std::vector<double> ref((size_t)T * D), p(T);
            for (int h = 0; h < H; h++)
                for (int i = 0; i < T; i++) {
                    double mx = -INFINITY, sum = 0.0;
                    for (int j = 0; j < T; j++) {
                        double dot = 0.0;
                        for (int c = 0; c < hd; c++) dot += (double)q.data[i * D + h * hd + c] * k.data[j * D + h * hd + c];
                        mx = std::max(mx, p[j] = dot * scale);
                    }
                    for (int j = 0; j < T; j++) sum += (p[j] = std::exp(p[j] - mx));
                    for (int c = 0; c < hd; c++) {
                        double acc = 0.0;
                        for (int j = 0; j < T; j++) acc += p[j] * v.data[j * D + h * hd + c];
                        ref[i * D + h * hd + c] = acc / sum;
                    }
                }
            CHECK(rel_l2(got, ref) < 1e-6);
            vt_free(ctx);
        }
        {   // LayerNorm: C 389 (24 blocks of 16 and a tail of 5), a mean far from 0
            const int C = 389, M = 7;
            vt_context * ctx = vt_init(8);
            host_tensor x = input(ctx, {C, M}, 60);
            for (float & v : x.data) v = v * 3.0f + 50.0f;
            host_tensor w = weight(ctx, {C}, 61);
            host_tensor b = weight(ctx, {C}, 62);
            vt_tensor * y = vt_layer_norm(ctx, x.t, w.t, b.t, 1e-5f);
            std::vector<float> got = run_cpu(ctx, y, {x, w, b});
            std::vector<double> ref((size_t)C * M);
            for (int r = 0; r < M; r++) {
                double mean = 0, var = 0;
                for (int i = 0; i < C; i++) mean += x.data[r * C + i];
                mean /= C;
                for (int i = 0; i < C; i++) var += (x.data[r * C + i] - mean) * (x.data[r * C + i] - mean);
                var /= C;
                for (int i = 0; i < C; i++) ref[r * C + i] = (x.data[r * C + i] - mean) / std::sqrt(var + 1e-5) * w.data[i] + b.data[i];
            }
            CHECK(rel_l2(got, ref) < 1e-6);
            vt_free(ctx);
        }
        MESSAGE("the " << std::string(isa) << " kernels: GELU, linear, attention and LayerNorm against float64");
    }
    CHECK(ran >= 1);   // the plain set runs everywhere
    setenv("VT_CPU_ISA", "sse9", 1);
    CHECK(vt_cpu_isa() == nullptr);
    CHECK(std::string(vt_last_error()).find("VT_CPU_ISA=sse9: unknown") != std::string::npos);
    CHECK(test_cpu_backend(1) == nullptr);
    unsetenv("VT_CPU_ISA");
    CHECK(vt_cpu_isa() != nullptr);
}

// The CPU's bf16 mode (test_cpu_backend(n, VT_TYPE_BF16)): on a CPU with AMX its GEMMs
// round their inputs to bf16 and accumulate in f32, so a linear matches float64 on the
// bf16-rounded operands to f32 accuracy, and plain float64 to bf16's; conv and attention
// (its P rounded too) within bf16 rounding of the f32 mode. Without AMX (or with VT_CPU_ISA
// below avx512) it computes in f32, bit for bit the f32 mode.
static float bf16_round(float x) { return vt_bf16_to_f32(vt_f32_to_bf16(x)); }

static void check_bf16_mode() {
    const int K = 300, M = 70, N = 301;   // partial 32-row panels, 32-column strips, K past 256 and not a multiple of 32
    vt_context * ctx = vt_init(16);
    host_tensor x = input(ctx, {K, M}, 60);
    host_tensor w = weight(ctx, {K, N}, 61, 0.1f);
    host_tensor b = weight(ctx, {N}, 62);
    host_tensor r = input(ctx, {N, M}, 63);
    vt_tensor * y = vt_linear(ctx, x.t, w.t, b.t, VT_ACT_GELU, r.t);
    const std::vector<float> f32 = run_cpu(ctx, y, {x, w, b, r}, 3);
    const std::vector<float> got = run_cpu(ctx, y, {x, w, b, r}, 3, VT_TYPE_BF16);
    vt_backend * be = test_cpu_backend(1, VT_TYPE_BF16);
    REQUIRE(be);
    const bool amx = vt_cpu_bf16_isa() != nullptr;
    CHECK(vt_backend_gemm_type(be) == (amx ? VT_TYPE_BF16 : VT_TYPE_F32));
    CHECK(vt_backend_compute_type(be) == VT_TYPE_F32);
    vt_backend_free(be);
    CHECK(test_cpu_backend(1, VT_TYPE_F16) == nullptr);
    if (!amx) {
        MESSAGE("no bf16 GEMMs here (" << std::string(vt_last_error()) << "): the bf16 mode is the f32 one");
        CHECK(std::memcmp(got.data(), f32.data(), got.size() * sizeof(float)) == 0);
        vt_free(ctx);
        return;
    }
    MESSAGE("bf16 GEMMs on " << std::string(vt_cpu_bf16_isa()));
    std::vector<double> ref((size_t)M * N), ref_rounded((size_t)M * N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = b.data[n], acc_r = b.data[n];
            for (int k = 0; k < K; k++) {
                acc += (double)x.data[(size_t)m * K + k] * w.data[(size_t)n * K + k];
                acc_r += (double)bf16_round(x.data[(size_t)m * K + k]) * bf16_round(w.data[(size_t)n * K + k]);
            }
            ref[(size_t)m * N + n] = gelu(acc) + r.data[(size_t)m * N + n];
            ref_rounded[(size_t)m * N + n] = gelu(acc_r) + r.data[(size_t)m * N + n];
        }
    const double err = rel_l2(got, ref), err_rounded = rel_l2(got, ref_rounded);
    MESSAGE("linear in bf16: relative L2 error " << err << " vs float64, " << err_rounded << " vs float64 on the bf16-rounded operands");
    CHECK(err_rounded < 5e-7);   // measured 6.7e-8: f32 accumulation of the rounded products
    CHECK(err < 3.5e-3);         // measured 1.7e-3 (bf16's 8 bits)
    CHECK(err > 5e-4);           // it really was rounded
    vt_free(ctx);

    {   // conv1d_k3 (stride 2, GELU, positional add) and attention (T 45, 3 heads of 40): bf16 against f32
        vt_context * c2 = vt_init(32);
        const int c_in = 40, c_out = 70, t_in = 99, t_out = 50;
        host_tensor cx = input(c2, {t_in, c_in}, 64);
        host_tensor cw = weight(c2, {3, c_in, c_out}, 65, 0.2f);
        host_tensor cb = weight(c2, {c_out}, 66);
        host_tensor ca = weight(c2, {c_out, t_out}, 67);
        vt_tensor * cy = vt_conv1d_k3(c2, vt_transpose(c2, cx.t), cw.t, cb.t, 2, VT_ACT_GELU, ca.t);
        const double conv_err = rel_l2(run_cpu(c2, cy, {cx, cw, cb, ca}, 2, VT_TYPE_BF16), run_cpu(c2, cy, {cx, cw, cb, ca}, 2));
        const int T = 45, H = 3, hd = 40, D = H * hd;
        host_tensor q = input(c2, {D, T}, 68), k = input(c2, {D, T}, 69), v = input(c2, {D, T}, 70);
        vt_tensor * ay = vt_attention(c2, q.t, k.t, v.t, H, 0.15f);
        const double att_err = rel_l2(run_cpu(c2, ay, {q, k, v}, 2, VT_TYPE_BF16), run_cpu(c2, ay, {q, k, v}, 2));
        MESSAGE("bf16 against f32: conv1d_k3 " << conv_err << ", attention " << att_err);
        CHECK(conv_err < 4e-3);   // measured 2.0e-3 (Sapphire Rapids class Xeon, AMX)
        CHECK(conv_err > 5e-4);
        CHECK(att_err < 6e-3);    // measured 3.1e-3
        CHECK(att_err > 5e-4);
        // block-causal (MiniCPM-o's): the bf16 softmax over keys [0, its block's end)
        vt_tensor * cy2 = vt_attention_block_causal(c2, q.t, k.t, v.t, H, 0.15f, nullptr, 8);
        const double causal_err = rel_l2(run_cpu(c2, cy2, {q, k, v}, 2, VT_TYPE_BF16), run_cpu(c2, cy2, {q, k, v}, 2));
        MESSAGE("bf16 against f32: block-causal attention " << causal_err);
        CHECK(causal_err < 6e-3);
        CHECK(causal_err > 5e-4);
        vt_free(c2);
    }
    {   // conv2d_k3s2 (its [C_out, C_in, 3, 3] weight packed as [C_out, 9 C_in]): bf16 against f32
        vt_context * c3 = vt_init(16);
        host_tensor x2 = input(c3, {24, 17, 40, 2}, 71);
        host_tensor w2 = weight(c3, {3, 3, 24, 40}, 72, 0.07f);
        host_tensor b2 = weight(c3, {40}, 73);
        vt_tensor * y2 = vt_conv2d_k3s2(c3, x2.t, w2.t, b2.t, VT_ACT_GELU, 20, nullptr);
        const double err2 = rel_l2(run_cpu(c3, y2, {x2, w2, b2}, 2, VT_TYPE_BF16), run_cpu(c3, y2, {x2, w2, b2}, 2));
        MESSAGE("bf16 against f32: conv2d_k3s2 " << err2);
        CHECK(err2 < 4e-3);
        CHECK(err2 > 5e-4);       // it really ran in bf16
        vt_free(c3);
    }

}

TEST_CASE("the CPU's bf16 mode: GEMMs in bf16 on AMX, f32 accumulation; f32 where the CPU has no AMX") {
    unsetenv("VT_CPU_BF16");
    check_bf16_mode();
    setenv("VT_CPU_BF16", "avx512bf16", 1);   // the VDPBF16PS kernels, where the CPU has AVX512-BF16
    if (vt_cpu_bf16_isa()) {
        CHECK(std::string(vt_cpu_bf16_isa()) == "avx512bf16");
        check_bf16_mode();
    }
    setenv("VT_CPU_BF16", "sse9", 1);
    CHECK(vt_cpu_bf16_isa() == nullptr);
#if defined(__x86_64__) || defined(__i386__)
    CHECK(std::string(vt_last_error()).find("VT_CPU_BF16=sse9: unknown") != std::string::npos);
#else
    CHECK(std::string(vt_last_error()) == "bf16 GEMMs need AVX512-BF16 or AMX (x86-64)");   // (aarch64: f32 alone)
#endif
    unsetenv("VT_CPU_BF16");
    setenv("VT_CPU_ISA", "avx2", 1);   // a lesser kernel set turns the bf16 GEMMs off
    if (vt_cpu_isa()) {
        CHECK(vt_cpu_bf16_isa() == nullptr);
        CHECK(std::string(vt_last_error()).find("the kernels are avx2") != std::string::npos);
        vt_backend * be = test_cpu_backend(1, VT_TYPE_BF16);
        REQUIRE(be);
        CHECK(vt_backend_gemm_type(be) == VT_TYPE_F32);
        vt_backend_free(be);
    }
    unsetenv("VT_CPU_ISA");
}
