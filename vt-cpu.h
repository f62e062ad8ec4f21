// vt-cpu.h - the CPU backend: f32 on a persistent thread pool, the reference every other
// backend is tested against, with optional bf16 GEMMs on AMX. cpu_backend implements vt.h's
// backend interface (VT_BACKEND_IMPL) op by op with vt-cpu-kernels.h's kernels; vt_cpu_init,
// vt_cpu_device_count and vt_cpu_device_memory are the row "cpu" of vt.cpp's table of backends.
// An internal header, not a source file: an embedder compiles two files, vt.cpp and
// whisper-audio.cpp, with the headers beside them (README, "Embedding"). vt.cpp includes it.
#pragma once

#ifndef VT_BACKEND_IMPL
#define VT_BACKEND_IMPL
#endif
#include "vt.h"
#include "vt-cpu-kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

// ---- the thread pool ------------------------------------------------------------------

// A pool of n-1 workers plus the calling thread. run(n_tasks, fn) hands out task indices
// from an atomic counter and returns when all are done. fn is called as fn(task, thread).
struct thread_pool {
    int n_threads;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake, done;
    void (*fn)(void *, int, int) = nullptr;
    void * fn_ctx = nullptr;
    int n_tasks = 0;
    std::atomic<int> next{0};
    int busy = 0;
    uint64_t generation = 0;
    bool stop = false;

    explicit thread_pool(int n) : n_threads(std::max(1, n)) {
        try {
            for (int i = 1; i < n_threads; i++) workers.emplace_back([this, i] { worker(i); });
        } catch (...) {          // no thread: join those started (a joinable one would terminate)
            shutdown();
            throw;
        }
    }
    ~thread_pool() { shutdown(); }
    void shutdown() {
        { std::lock_guard<std::mutex> lock(mutex); stop = true; }
        wake.notify_all();
        for (std::thread & t : workers) t.join();
        workers.clear();
    }
    void drain(int thread) {
        for (int task; (task = next.fetch_add(1)) < n_tasks;) fn(fn_ctx, task, thread);
    }
    void worker(int thread) {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex);
                wake.wait(lock, [&] { return stop || generation != seen; });
                if (stop) return;
                seen = generation;
            }
            drain(thread);
            std::lock_guard<std::mutex> lock(mutex);
            if (--busy == 0) done.notify_one();
        }
    }
    template <typename F> void run(int tasks, F && f) {
        if (tasks <= 0) return;
        auto tramp = [](void * c, int task, int thread) { (*(F *)c)(task, thread); };
        if (n_threads == 1 || tasks == 1) {
            for (int t = 0; t < tasks; t++) f(t, 0);
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex);
            fn = tramp;
            fn_ctx = (void *)&f;
            n_tasks = tasks;
            next = 0;
            busy = n_threads - 1;
            generation++;
        }
        wake.notify_all();
        drain(0);
        std::unique_lock<std::mutex> lock(mutex);
        done.wait(lock, [&] { return busy == 0; });
    }
};

// ---- the backend ----------------------------------------------------------------------

// vt.h's vt_backend on the CPU: the weights in aligned host buffers, an arena per graph, scratch
// per thread; compute runs the nodes in order, each op spread over the pool's threads.
struct cpu_backend : vt_backend {
    thread_pool pool;
    std::vector<void *> weight_buffers;
    size_t weight_bytes = 0;
    size_t graph_bytes = 0;
    std::vector<std::vector<float>> scratch;   // per thread, sized at alloc_graph
    std::vector<float> packed_w;               // the running GEMM's W in strips, sized at alloc_graph

    const cpu_kernels * kern;                 // this CPU's instruction set (pick_cpu_kernels)
    bool amx;                                 // the bf16 mode: bf16 GEMMs (vt_cpu_bf16_isa)
    bool tiles;                               // on AMX tiles, else with AVX512-BF16's VDPBF16PS
    struct packed_bf16 { int N, K; std::vector<uint16_t> w; };   // amx_pack_w's layout
    std::unordered_map<const vt_tensor *, packed_bf16> packed;   // the bf16 mode's weight matrices, packed at set_tensor
    size_t packed_bytes = 0;

    cpu_backend(int n_threads, const cpu_kernels * kernels, bool use_bf16, bool use_tiles)
        : pool(n_threads), scratch(pool.n_threads), kern(kernels), amx(use_bf16), tiles(use_tiles) {}

#ifdef VT_X86
    // 32 x 32 of C from bf16 A and a packed strip, on the tiles or with VDPBF16PS
    void gemm_bf16_32x32(const uint16_t * a, size_t lda, const uint16_t * bp, int k_pad, float * c, size_t ldc) const {
        if (tiles) amx_32x32(a, lda, bp, k_pad, c, ldc);
        else dpbf16_32x32(a, lda, bp, k_pad, c, ldc);
    }
    void bf16_begin() const { if (tiles) amx_configure(); }
    void bf16_end() const { if (tiles) amx_release(); }
#endif
    ~cpu_backend() override {
        for (void * p : weight_buffers) free(p);
    }

    const char * name() const override { return "cpu"; }
    vt_type compute_type() const override { return VT_TYPE_F32; }
    vt_type gemm_type() const override { return amx ? VT_TYPE_BF16 : VT_TYPE_F32; }

    static void * alloc_aligned(size_t bytes) {
        return aligned_alloc(VT_ARENA_ALIGN, vt_align_up(std::max<size_t>(bytes, 1), VT_ARENA_ALIGN));
    }

    bool alloc_weights(vt_context * ctx) override {
        size_t total = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (t->flags & VT_FLAG_WEIGHT) total += vt_align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        }
        char * buf = (char *)alloc_aligned(total);
        if (!buf) { vt_set_error("out of memory: %zu bytes of weights", total); return false; }
        weight_buffers.push_back(buf);
        weight_bytes += total;
        size_t off = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (!(t->flags & VT_FLAG_WEIGHT)) continue;
            t->data = buf + off;
            off += vt_align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        }
        return true;
    }

    // Per-thread scratch: a GEMM task's zero-padded edge panel (12 x K) plus, for conv, its
    // im2col rows; for attention a head's packed K and V and one panel's scores.
    size_t scratch_floats(const vt_tensor * t) const {
        if (t->op == VT_OP_LINEAR)
            return std::max((size_t)GEMM_MR * t->src[0]->ne[0], amx ? bf16_scratch_floats(AMX_ROWS, (int)t->src[0]->ne[0], false) : 0);
        if (t->op == VT_OP_CONV1D_K3)
            return std::max((size_t)(GEMM_MR + CONV_ROWS) * 3 * t->src[0]->ne[0],
                            amx ? bf16_scratch_floats(CONV_ROWS_BF16, 3 * (int)t->src[0]->ne[0], true) : 0);
        if (t->op == VT_OP_CONV2D_K3S2)      // (a pair's first stage is the narrower: C_in 1 or its input's)
            return std::max((size_t)(GEMM_MR + CONV_ROWS) * 9 * t->src[1]->ne[2],
                            amx ? bf16_scratch_floats(CONV_ROWS_BF16, 9 * (int)t->src[1]->ne[2], true) : 0);
        if (t->op == VT_OP_ATTENTION && t->iparams[3])                  // vt_attention_window: a query's scores
            return (size_t)t->src[1]->ne[1];
        if (t->op == VT_OP_ATTENTION)
            return std::max(attention_scratch_floats((int)t->ne[1], (int)(t->ne[0] / t->iparams[0])),
                            amx ? attention_bf16_scratch_floats((int)t->ne[1], (int)(t->ne[0] / t->iparams[0])) : 0);
        return 0;
    }

    struct graph_state { void * arena; size_t bytes; };

    bool alloc_graph(vt_graph * g) override {
        for (vt_tensor * t : g->nodes) {
            if (t->type != VT_TYPE_F32) { vt_set_error("cpu backend computes in f32; '%s' is %s", t->name, vt_type_name(t->type)); return false; }
        }
        void * arena = alloc_aligned(g->arena_size);
        if (!arena) { vt_set_error("out of memory: arena of %zu bytes", g->arena_size); return false; }
        size_t need = 0, need_w = 0;
        for (vt_tensor * t : g->nodes) {
            need = std::max(need, scratch_floats(t));
            if (t->op == VT_OP_LINEAR || t->op == VT_OP_CONV1D_K3 || t->op == VT_OP_CONV2D_K3S2)   // W is [N, K] (conv: [C_out, 3 C_in], [C_out, 9 C_in])
                need_w = std::max(need_w, gemm_packed_floats((int)t->ne[0], (int)(vt_nelements(t->src[1]) / t->ne[0])));
            if (t->op == VT_OP_CONV2D_K3S2 && t->src[3])                 // a pair's first stage
                need_w = std::max(need_w, gemm_packed_floats((int)t->src[3]->ne[3], (int)(9 * t->src[3]->ne[2])));
        }
        try {
            for (std::vector<float> & s : scratch) if (s.size() < need) s.resize(need);
            if (packed_w.size() < need_w) packed_w.resize(need_w);
        } catch (const std::bad_alloc &) {
            free(arena);
            vt_set_error("out of memory: %d x %zu + %zu bytes of scratch", pool.n_threads, need * sizeof(float), need_w * sizeof(float));
            return false;
        }
        vt_map_pages(arena, g->arena_size);
        g->backend_state = new graph_state{arena, g->arena_size};
        graph_bytes += g->arena_size;
        for (vt_tensor * t : g->leaves) if (t->flags & VT_FLAG_INPUT) t->data = (char *)arena + t->arena_offset;
        for (vt_tensor * t : g->nodes) t->data = (char *)arena + t->arena_offset;
        vt_graph_resolve_views(g);
        return true;
    }

    void release_graph(vt_graph * g) override {
        graph_state * s = (graph_state *)g->backend_state;
        if (!s) return;
        graph_bytes -= s->bytes;
        free(s->arena);
        delete s;
        g->backend_state = nullptr;
    }

    // A weight's GEMM shape, as vt_linear ([K, N]) and vt_conv1d_k3 ([3, C_in, C_out]: K = 3
    // C_in) read it; false for vectors.
    static bool matrix_shape(const vt_tensor * t, int * N, int * K) {
        if (t->type == VT_TYPE_F32 && t->ne[3] > 1 && t->ne[0] == 3 && t->ne[1] == 3) {   // a conv2d kernel [N, C_in, 3, 3]
            *N = (int)t->ne[3];
            *K = (int)(9 * t->ne[2]);
            return true;
        }
        if (t->type != VT_TYPE_F32 || t->ne[3] != 1 || t->ne[1] * t->ne[2] < 2 || t->ne[0] * (t->ne[2] > 1 ? t->ne[1] : 1) < 2) return false;
        *N = (int)(t->ne[2] > 1 ? t->ne[2] : t->ne[1]);
        *K = (int)(t->ne[2] > 1 ? t->ne[0] * t->ne[1] : t->ne[0]);
        return true;
    }

    bool copy_rows(vt_tensor * dst, const vt_tensor * src, int64_t row0) override {
        const size_t win = dst->nb[2];
        for (int64_t b = 0; b < dst->ne[2]; b++)
            memcpy((char *)dst->data + b * dst->nb[2], (const char *)src->data + b * src->nb[2] + row0 * src->nb[1], win);
        return true;
    }

    bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) override {
        vt_convert(t->data, t->type, src, src_type, (size_t)vt_nelements(t));
#ifdef VT_X86
        int N, K;
        if (amx && (t->flags & VT_FLAG_WEIGHT) && matrix_shape(t, &N, &K)) {   // the bf16 copy, in tiles
            packed_bf16 & p = packed[t];
            packed_bytes -= p.w.size() * sizeof(uint16_t);
            p.N = N;
            p.K = K;
            p.w.resize(amx_packed_elems(N, K));
            amx_pack_w((const float *)t->data, N, K, p.w.data());
            packed_bytes += p.w.size() * sizeof(uint16_t);
        }
#endif
        return true;
    }

    // The packed bf16 copy of w for a GEMM of N x K, or NULL (f32 mode, or not a whole weight).
    const uint16_t * packed_w_bf16(const vt_tensor * w, int N, int K) const {
        if (!amx) return nullptr;
        auto it = packed.find(w);
        return it != packed.end() && it->second.N == N && it->second.K == K ? it->second.w.data() : nullptr;
    }

    bool get_tensor_f32(const vt_tensor * t, float * dst) override {
        vt_convert(dst, VT_TYPE_F32, t->data, t->type, (size_t)vt_nelements(t));
        return true;
    }

    size_t allocated_bytes() const override {
        size_t s = 0;
        for (const std::vector<float> & v : scratch) s += v.capacity() * sizeof(float);
        return weight_bytes + graph_bytes + s + packed_bytes;
    }

    // ---- ops ----

    // W [N, K] packed into packed_w (a task per strip), then tasks of up to GEMM_NC columns x
    // a range of rows (at most max_rows), about four per thread. a_rows(m0, m, buf) gives rows
    // [m0, m0 + m) of A, K apart (buf: max_rows x K floats of scratch for it); add_row(row)
    // the row added after the activation (residual or positional) or NULL.
    template <typename A_ROWS, typename ADD_ROW>
    void gemm_tasks(int64_t M, int N, int K, const float * W, const float * bias, bool gelu, float * C, int64_t max_rows,
                    A_ROWS && a_rows, ADD_ROW && add_row) {
        float * bp = packed_w.data();
        pool.run((N + GEMM_NR - 1) / GEMM_NR, [&](int s, int) {
            pack_b(W + (size_t)s * GEMM_NR * K, K, std::min(GEMM_NR, N - s * GEMM_NR), K, bp + (size_t)s * K * GEMM_NR);
        });
        const int n_blocks = (N + GEMM_NC - 1) / GEMM_NC;
        const int64_t m_splits = std::max((M + max_rows - 1) / max_rows, (int64_t)(4 * pool.n_threads + n_blocks - 1) / n_blocks);
        const int64_t rows_per_task = ((M + m_splits - 1) / m_splits + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
        const int m_blocks = (int)((M + rows_per_task - 1) / rows_per_task);
        pool.run(m_blocks * n_blocks, [&](int task, int thread) {
            const int64_t m0 = (int64_t)(task / n_blocks) * rows_per_task;
            const int n0 = (task % n_blocks) * GEMM_NC;
            const int m = (int)std::min<int64_t>(rows_per_task, M - m0), nb = std::min(GEMM_NC, N - n0);
            float * s = scratch[thread].data();
            const float * A = a_rows(m0, m, s + (size_t)GEMM_MR * K);
            float * c = C + (size_t)m0 * N + n0;
            gemm_block(*kern, A, K, m, bp + (size_t)n0 * K, nb, K, c, N, s, [&](int r0, int rows) {
                for (int r = r0; r < r0 + rows; r++) {
                    const float * add = add_row(m0 + r);
                    kern->epilogue_row(c + (size_t)r * N, nb, bias ? bias + n0 : nullptr, gelu, add ? add + n0 : nullptr);
                }
            });
        });
    }

    // The bf16 mode's gemm_tasks: pw is W packed by amx_pack_w. A task owns a range of rows (at
    // most max_rows, a multiple of 32) and every column: it rounds its A rows to bf16 once
    // (a_rows as gemm_tasks'; buf: max_rows x K floats), then per AMX_NC columns, per 32-row
    // panel, per 32-column strip runs the tiles over all of K, and the epilogue per panel.
    static constexpr int AMX_ROWS = 256;

    static size_t bf16_scratch_floats(int64_t max_rows, int K, bool a_buf) {
        const size_t k_pad = (size_t)(K + 31) / 32 * 32;
        return (a_buf ? (size_t)max_rows * K : 0) + (size_t)max_rows * k_pad / 2 + (size_t)AMX_MB * AMX_NB;
    }

    template <typename A_ROWS, typename ADD_ROW>
    void gemm_tasks_bf16(int64_t M, int N, int K, const uint16_t * pw, const float * bias, bool gelu, float * C, int max_rows,
                         bool a_buf, A_ROWS && a_rows, ADD_ROW && add_row) {
#ifdef VT_X86
        const int k_pad = (K + 31) / 32 * 32, kbs = k_pad / 32;
        const int64_t m_splits = std::max((M + max_rows - 1) / max_rows, (int64_t)std::min<int64_t>(4 * pool.n_threads, (M + 31) / 32));
        const int64_t rows_per_task = ((M + m_splits - 1) / m_splits + AMX_MB - 1) / AMX_MB * AMX_MB;
        const int m_blocks = (int)((M + rows_per_task - 1) / rows_per_task);
        pool.run(m_blocks, [&](int task, int thread) {
            const int64_t m0 = (int64_t)task * rows_per_task;
            const int m = (int)std::min<int64_t>(rows_per_task, M - m0), m_pad = (m + AMX_MB - 1) / AMX_MB * AMX_MB;
            float * s = scratch[thread].data();
            const float * A = a_rows(m0, m, s);
            uint16_t * ab = (uint16_t *)(s + (a_buf ? (size_t)max_rows * K : 0));
            float * tile = (float *)(ab + (size_t)max_rows * k_pad);
            for (int r = 0; r < m; r++) row_to_bf16(A + (size_t)r * K, K, k_pad, ab + (size_t)r * k_pad);
            memset(ab + (size_t)m * k_pad, 0, (size_t)(m_pad - m) * k_pad * sizeof(uint16_t));
            bf16_begin();
            for (int n0 = 0; n0 < N; n0 += AMX_NC) {
                const int nb = std::min(AMX_NC, N - n0);
                for (int p = 0; p < m_pad / AMX_MB; p++) {
                    const int rows = std::min(AMX_MB, m - p * AMX_MB);
                    float * c = C + (size_t)(m0 + p * AMX_MB) * N;
                    for (int j = n0; j < n0 + nb; j += AMX_NB) {
                        const int cols = std::min(AMX_NB, N - j);
                        const uint16_t * a = ab + (size_t)p * AMX_MB * k_pad, * b = pw + (size_t)(j / 32) * kbs * 1024;
                        if (rows == AMX_MB && cols == AMX_NB) { gemm_bf16_32x32(a, k_pad, b, k_pad, c + j, N); continue; }
                        gemm_bf16_32x32(a, k_pad, b, k_pad, tile, AMX_NB);
                        for (int r = 0; r < rows; r++) memcpy(c + (size_t)r * N + j, tile + r * AMX_NB, cols * sizeof(float));
                    }
                    for (int r = 0; r < rows; r++) {
                        const float * add = add_row(m0 + p * AMX_MB + r);
                        kern->epilogue_row(c + (size_t)r * N + n0, nb, bias ? bias + n0 : nullptr, gelu, add ? add + n0 : nullptr);
                    }
                }
            }
            bf16_end();
        });
#else
        (void)M; (void)N; (void)K; (void)pw; (void)bias; (void)gelu; (void)C; (void)max_rows; (void)a_buf; (void)a_rows; (void)add_row;
        VT_ASSERT(!"bf16 GEMMs without AMX");
#endif
    }

    // linear: y = act(x w^T + b) + residual, the rows of x as they are.
    void linear(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
        const int K = (int)x->ne[0], N = (int)w->ne[1];
        const int64_t M = x->ne[1] * x->ne[2] * x->ne[3];
        const float * X = (const float *)x->data, * R = res ? (const float *)res->data : nullptr;
        if (const uint16_t * pw = packed_w_bf16(w, N, K)) {
            gemm_tasks_bf16(M, N, K, pw, b ? (const float *)b->data : nullptr, t->iparams[1] == VT_ACT_GELU, (float *)t->data,
                            AMX_ROWS, false, [&](int64_t m0, int, float *) { return X + (size_t)m0 * K; },
                            [&](int64_t row) { return R ? R + (size_t)row * N : nullptr; });
            return;
        }
        gemm_tasks(M, N, K, (const float *)w->data, b ? (const float *)b->data : nullptr, t->iparams[1] == VT_ACT_GELU,
                   (float *)t->data, M, [&](int64_t m0, int, float *) { return X + (size_t)m0 * K; },
                   [&](int64_t row) { return R ? R + (size_t)row * N : nullptr; });
    }

    // conv1d_k3: each task gathers its im2col rows (at most CONV_ROWS), col[i*3 + k] =
    // x[t*stride + k - 1, i] (the order of PyTorch's [C_out, C_in, 3] weight), then runs the GEMM.
    static constexpr int CONV_ROWS = 144, CONV_ROWS_BF16 = 128;

    void conv1d_k3(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * add = t->src[3];
        const int stride = t->iparams[0];
        const int c_in = (int)x->ne[0], t_in = (int)x->ne[1], K = 3 * c_in, N = (int)w->ne[2];
        const int64_t t_out = t->ne[1], M = t_out * t->ne[2];
        const float * P = add ? (const float *)add->data : nullptr;
        // vt_conv1d_k3_chunks: each chunk of `chunk` input rows padded on its own, rows of window
        // bi from x_len[bi] on read as zero; the add repeats every chunk_out output rows
        const int chunk = t->iparams[2] ? t->iparams[2] : t_in;
        const int64_t add_rows = t->iparams[2] ? chunk / stride : t_out;
        const bool causal = t->iparams[3] != 0;
        const float * x_len = t->src[4] && !causal ? (const float *)t->src[4]->data : nullptr;
        // vt_conv1d_k3_causal: tap t*stride + k of [tail | x], the tail's rows (or zeros) before x's
        const vt_tensor * tail = causal ? t->src[4] : nullptr;
        const int n_tail = 3 - stride;
        auto im2col_causal = [&](int64_t m0, int m, float * col) {
            for (int r = 0; r < m; r++) {
                const int64_t row = m0 + r, bi = row / t_out, to = row % t_out;
                float * dst = col + (size_t)r * K;
                for (int k = 0; k < 3; k++) {
                    const int64_t ti = to * stride + k - n_tail;
                    if (ti >= 0) {
                        const char * src = (const char *)x->data + ti * x->nb[1] + bi * x->nb[2];
                        for (int i = 0; i < c_in; i++) dst[i * 3 + k] = *(const float *)(src + i * x->nb[0]);
                    } else {
                        const float * src = tail ? (const float *)tail->data + ((size_t)bi * n_tail + (n_tail + ti)) * c_in : nullptr;
                        for (int i = 0; i < c_in; i++) dst[i * 3 + k] = src ? src[i] : 0.0f;
                    }
                }
            }
            return (const float *)col;
        };
        auto im2col = [&](int64_t m0, int m, float * col) {
            if (causal) return im2col_causal(m0, m, col);
            for (int r = 0; r < m; r++) {
                const int64_t row = m0 + r, bi = row / t_out, to = row % t_out;
                const int64_t c0 = to * stride / chunk * chunk;                     // this row's chunk [c0, c0 + chunk)
                const int64_t end = std::min<int64_t>(c0 + chunk, x_len ? (int64_t)x_len[bi] : t_in);
                float * dst = col + (size_t)r * K;
                for (int k = 0; k < 3; k++) {
                    const int64_t ti = to * stride + k - 1;
                    const bool inside = ti >= c0 && ti < end;
                    const char * src = (const char *)x->data + (inside ? ti : 0) * x->nb[1] + bi * x->nb[2];
                    for (int i = 0; i < c_in; i++) dst[i * 3 + k] = inside ? *(const float *)(src + i * x->nb[0]) : 0.0f;
                }
            }
            return (const float *)col;
        };
        if (const uint16_t * pw = packed_w_bf16(w, N, K)) {
            gemm_tasks_bf16(M, N, K, pw, (const float *)b->data, t->iparams[1] == VT_ACT_GELU, (float *)t->data, CONV_ROWS_BF16,
                            true, im2col, [&](int64_t row) { return P ? P + (size_t)(row % add_rows) * N : nullptr; });
            return;
        }
        gemm_tasks(M, N, K, (const float *)w->data, (const float *)b->data, t->iparams[1] == VT_ACT_GELU, (float *)t->data,
                   CONV_ROWS, im2col, [&](int64_t row) { return P ? P + (size_t)(row % add_rows) * N : nullptr; });
    }

    // conv2d_k3s2: conv1d_k3's tasks, an im2col row per output (b, t, f): col[i*9 + kf*3 + kt] =
    // x[b, c0 + 2 t' + kt - 1, 2 f + kf - 1, i] (the order of PyTorch's [C_out, C_in, 3, 3] weight),
    // zero outside the row's chunk, the frequencies, or window b's x_len.
    struct conv2d_args {
        const char * x;                    // element (b, t, f, i) at b sb + t st + f sf + i si bytes
        size_t sb, st, sf, si;
        int64_t n_b, t_in, f_in, t_out, f_out, chunk;
        const float * x_len;               // [n_b] or NULL
        const vt_tensor * w;               // [C_out, C_in, 3, 3]
        const float * bias;
        bool gelu;
        float * y;                         // [n_b, t_out, f_out, C_out]
    };

    void conv2d_k3s2_run(const conv2d_args & a) {
        const int c_in = (int)a.w->ne[2], K = 9 * c_in, N = (int)a.w->ne[3];
        const int64_t M = a.f_out * a.t_out * a.n_b, chunk = a.chunk, chunk_out = (chunk - 1) / 2 + 1;
        auto im2col = [&](int64_t m0, int m, float * col) {
            for (int r = 0; r < m; r++) {
                const int64_t row = m0 + r, fo = row % a.f_out, to = row / a.f_out % a.t_out, bi = row / a.f_out / a.t_out;
                const int64_t c0 = to / chunk_out * chunk, lt = to % chunk_out;               // chunk [c0, c0 + chunk)
                const int64_t end = std::min<int64_t>(std::min<int64_t>(c0 + chunk, a.t_in), a.x_len ? (int64_t)a.x_len[bi] : a.t_in);
                float * dst = col + (size_t)r * K;
                for (int kf = 0; kf < 3; kf++) {
                    const int64_t fi = 2 * fo + kf - 1;
                    for (int kt = 0; kt < 3; kt++) {
                        const int64_t ti = c0 + 2 * lt + kt - 1;
                        const bool inside = fi >= 0 && fi < a.f_in && ti >= c0 && ti < end;
                        const char * src = a.x + bi * a.sb + (inside ? ti * a.st + fi * a.sf : 0);
                        for (int i = 0; i < c_in; i++) dst[i * 9 + kf * 3 + kt] = inside ? *(const float *)(src + i * a.si) : 0.0f;
                    }
                }
            }
            return (const float *)col;
        };
        if (const uint16_t * pw = packed_w_bf16(a.w, N, K)) {
            gemm_tasks_bf16(M, N, K, pw, a.bias, a.gelu, a.y, CONV_ROWS_BF16, true, im2col, [&](int64_t) { return (const float *)nullptr; });
            return;
        }
        gemm_tasks(M, N, K, (const float *)a.w->data, a.bias, a.gelu, a.y, CONV_ROWS, im2col, [&](int64_t) { return (const float *)nullptr; });
    }

    // A vt_conv2d_k3s2_pair's first stage is held for as many windows as fit this (at least one).
    static constexpr size_t CONV2D_STAGE_FLOATS = (size_t)1 << 20;

    void conv2d_k3s2(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w1 = t->src[3];
        const bool mel = (w1 ? w1->ne[2] : t->src[1]->ne[2]) == 1;
        conv2d_args in;                    // the node's input: the mel's strides, or the contiguous [B, T, F, C]
        in.x = (const char *)x->data;
        in.sb = mel ? x->nb[2] : x->nb[3];
        in.st = mel ? x->nb[0] : x->nb[2];
        in.sf = x->nb[1];
        in.si = x->nb[0];
        in.n_b = t->ne[3];
        in.t_in = mel ? x->ne[0] : x->ne[2];
        in.f_in = x->ne[1];
        in.x_len = t->src[4] ? (const float *)t->src[4]->data : nullptr;
        in.gelu = t->iparams[1] == VT_ACT_GELU;
        if (!w1) {
            conv2d_args a = in;
            a.t_out = t->ne[2];
            a.f_out = t->ne[1];
            a.chunk = t->iparams[2];
            a.w = t->src[1];
            a.bias = (const float *)t->src[2]->data;
            a.y = (float *)t->data;
            conv2d_k3s2_run(a);
            return;
        }
        // vt_conv2d_k3s2_pair: the first stage for a few windows into stage, then the second from it
        const int64_t chunk1 = t->iparams[3], c1 = w1->ne[3];
        const int64_t t1 = in.t_in / chunk1 * ((chunk1 - 1) / 2 + 1), f1 = (in.f_in - 1) / 2 + 1;
        const size_t per_window1 = (size_t)(t1 * f1 * c1), per_window2 = (size_t)vt_nelements(t) / in.n_b;
        const int64_t cw = std::max<int64_t>(1, std::min<int64_t>(in.n_b, (int64_t)(CONV2D_STAGE_FLOATS / per_window1)));
        std::vector<float> stage((size_t)cw * per_window1);
        for (int64_t b0 = 0; b0 < in.n_b; b0 += cw) {
            conv2d_args a = in;
            a.x += b0 * in.sb;
            a.n_b = std::min(cw, in.n_b - b0);
            a.x_len = in.x_len ? in.x_len + b0 : nullptr;
            a.t_out = t1;
            a.f_out = f1;
            a.chunk = chunk1;
            a.w = w1;
            a.bias = (const float *)t->src[5]->data;
            a.y = stage.data();
            conv2d_k3s2_run(a);
            conv2d_args b = a;
            b.x = (const char *)stage.data();
            b.si = sizeof(float);
            b.sf = (size_t)c1 * sizeof(float);
            b.st = (size_t)(f1 * c1) * sizeof(float);
            b.sb = per_window1 * sizeof(float);
            b.t_in = t1;
            b.f_in = f1;
            b.t_out = t->ne[2];
            b.f_out = t->ne[1];
            b.chunk = t->iparams[2];
            b.x_len = nullptr;
            b.w = t->src[1];
            b.bias = (const float *)t->src[2]->data;
            b.y = (float *)t->data + (size_t)b0 * per_window2;
            conv2d_k3s2_run(b);
        }
    }

    // add_rows: one row per task.
    void add_rows(vt_tensor * t) {
        const int64_t C = t->ne[0], T = t->ne[1], period = t->iparams[0];
        const float * A = (const float *)t->src[1]->data;
        pool.run((int)(T * t->ne[2]), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data + (size_t)task * C, * a = A + (size_t)(task % T % period) * C;
            float * out = (float *)t->data + (size_t)task * C;
            for (int64_t i = 0; i < C; i++) out[i] = in[i] + a[i];
        });
    }

    // layer_norm: one row per task chunk; statistics in double.
    void layer_norm(vt_tensor * t) {
        const vt_tensor * x = t->src[0];
        const float * w = (const float *)t->src[1]->data, * b = (const float *)t->src[2]->data;
        const int C = (int)x->ne[0];
        const int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
        const float eps = t->fparams[0];
        const int chunk = 16;
        pool.run((int)((rows + chunk - 1) / chunk), [&](int task, int) {
            for (int64_t r = (int64_t)task * chunk; r < std::min<int64_t>(rows, (int64_t)(task + 1) * chunk); r++)
                kern->layer_norm_row((const float *)x->data + (size_t)r * C, (float *)t->data + (size_t)r * C, C, w, b, eps);
        });
    }

    // attention: a task per (window, head, range of query panels). The task packs the
    // head's K (32-key strips, for S = Q K^T) and V (32-column strips, for O = P V) once;
    // then per 12-query panel: the scores S [12, T] by the micro-kernel (the scale folded
    // into a copy of Q), an exact softmax per row in place, O = P V by the micro-kernel
    // reading P from S, rows scaled by 1 / sum. P V goes over the keys in chunks of ATTN_KC,
    // each summed from zero and added to O: over a whole window (1,500 keys) one float32
    // chain of non-negative weights carried most of the layer's error (4x transformers' own
    // float32 attention), the chunked sum under it.
    static constexpr int ATTN_KC = 128;
    static size_t attention_scratch_floats(int T, int hd) {
        const size_t t_pad = (size_t)(T + GEMM_NR - 1) / GEMM_NR * GEMM_NR, hd_pad = (size_t)(hd + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
        return t_pad * hd + hd_pad * T + (size_t)GEMM_MR * hd + (size_t)GEMM_MR * t_pad;
    }

    // The bf16 mode's attention, the same tasks: the head's K packed as B tiles of S = Q K^T
    // (n = key, k = channel) and V as those of O = P V (n = channel, k = key), both in bf16;
    // per 32-query panel: bf16(scale * Q), S [32, t_pad] by the tiles, the softmax's
    // numerators in f32 rounded to bf16 as P (softmax_row_bf16), O by the tiles, rows scaled by
    // 1 / sum in f32.
    static size_t attention_bf16_scratch_floats(int T, int hd) {
        const size_t t_pad = (size_t)(T + 31) / 32 * 32, hd_pad = (size_t)(hd + 31) / 32 * 32;
        return t_pad * hd_pad / 2 * 2 + (size_t)AMX_MB * hd_pad / 2 + (size_t)AMX_MB * t_pad + (size_t)AMX_MB * t_pad / 2 +
               (size_t)AMX_MB * AMX_NB;
    }

    void attention_bf16(vt_tensor * t) {
#ifdef VT_X86
        const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
        const int n_head = t->iparams[0];
        const int D = (int)q->ne[0], hd = D / n_head, T = (int)q->ne[1], B = (int)q->ne[2];
        const float scale = t->fparams[0];
        const int t_pad = (T + 31) / 32 * 32, hd_pad = (hd + 31) / 32 * 32;
        const int n_panels = t_pad / AMX_MB;
        const int chunks = std::min(n_panels, std::max(1, (2 * pool.n_threads + B * n_head - 1) / (B * n_head)));
        const int panels_per_chunk = (n_panels + chunks - 1) / chunks;
        const float * kv_len = t->src[3] ? (const float *)t->src[3]->data : nullptr;   // vt_attention_masked
        const int block = t->iparams[1];                                                  // vt_attention_blocks
        const bool causal = t->iparams[2] != 0;                                           // vt_attention_block_causal
        pool.run(B * n_head * chunks, [&](int task, int thread) {
            const int chunk = task % chunks, h = (task / chunks) % n_head, bi = task / (chunks * n_head);
            const int L = kv_len ? std::max(1, std::min(T, (int)kv_len[bi])) : T;   // keys >= L are masked
            auto row = [&](const vt_tensor * s, int i) {   // row i of head h in window bi
                return (const float *)((const char *)s->data + (size_t)i * s->nb[1] + (size_t)bi * s->nb[2]) + h * hd;
            };
            float * f = scratch[thread].data();
            uint16_t * kp = (uint16_t *)f;                         // S's B: t_pad keys x hd_pad
            uint16_t * vp = kp + (size_t)t_pad * hd_pad;           // O's B: hd_pad channels x t_pad
            uint16_t * qb = vp + (size_t)t_pad * hd_pad;           // [32][hd_pad]: bf16(scale * Q)
            float * S = (float *)(qb + (size_t)AMX_MB * hd_pad);    // [32][t_pad]: scores, then numerators
            uint16_t * pb = (uint16_t *)(S + (size_t)AMX_MB * t_pad);   // [32][t_pad]: P in bf16
            float * o = (float *)(pb + (size_t)AMX_MB * t_pad);       // [32][32]: a strip of O
            // amx_pack_w's layout, a row at a time: a key's channels in (c, c + 1) pairs 32 apart;
            // a pair of keys' channels interleaved, 16 channels a tile row
            memset(kp, 0, (size_t)t_pad * hd_pad * sizeof(uint16_t));
            uint16_t kr[2][256];
            for (int j = 0; j < T; j++) {
                row_to_bf16(row(k, j), hd, hd_pad, kr[0]);
                uint16_t * dst = kp + (size_t)(j / 32) * (hd_pad / 32) * 1024 + (j % 32) / 16 * 512 + (j % 16) * 2;
                for (int c = 0; c < hd; c += 2)
                    memcpy(dst + (size_t)(c / 32) * 1024 + (c % 32) / 2 * 32, kr[0] + c, 2 * sizeof(uint16_t));
            }
            for (int j = 0; j < t_pad; j += 2) {
                for (int e = 0; e < 2; e++) {
                    if (j + e < T) row_to_bf16(row(v, j + e), hd, hd_pad, kr[e]);
                    else memset(kr[e], 0, hd_pad * sizeof(uint16_t));
                }
                uint16_t * dst = vp + (size_t)(j / 32) * 1024 + (j % 32) / 2 * 32;
                for (int c = 0; c < hd_pad; c++) {
                    uint16_t * d = dst + (size_t)(c / 32) * (t_pad / 32) * 1024 + (c % 32) / 16 * 512 + (c % 16) * 2;
                    d[0] = kr[0][c];
                    d[1] = kr[1][c];
                }
            }
            bf16_begin();
            float qs[256];
            const int p_end = std::min(n_panels, (chunk + 1) * panels_per_chunk);
            for (int p = chunk * panels_per_chunk; p < p_end; p++) {
                const int i0 = p * AMX_MB, rows = std::min(AMX_MB, T - i0);
                for (int r = 0; r < rows; r++) {
                    const float * qr = row(q, i0 + r);
                    for (int d = 0; d < hd; d++) qs[d] = scale * qr[d];
                    row_to_bf16(qs, hd, hd_pad, qb + (size_t)r * hd_pad);
                }
                memset(qb + (size_t)rows * hd_pad, 0, (size_t)(AMX_MB - rows) * hd_pad * sizeof(uint16_t));
                for (int s = 0; s < t_pad / AMX_NB; s++)
                    gemm_bf16_32x32(qb, hd_pad, kp + (size_t)s * (hd_pad / 32) * 1024, hd_pad, S + s * AMX_NB, t_pad);
                float inv_sum[AMX_MB];
                for (int r = 0; r < rows; r++) {               // softmax over keys [lo, hi); the rest get 0
                    // vt_attention_blocks: query i's keys are [lo, hi), its block below L (empty: row 0);
                    // block-causal: from key 0 to its block's end
                    const int start = block ? (i0 + r) / block * block : 0, lo = causal ? 0 : start;
                    const int hi = block ? std::min(start + block, L) : L;
                    uint16_t * pr = pb + (size_t)r * t_pad;
                    if (hi > lo) {   // its n_pad whole strips of 32 may write up to 31 zeros past the row: into
                                     // the next row's start (written after it) or o (written before read)
                        inv_sum[r] = softmax_row_bf16(S + (size_t)r * t_pad + lo, hi - lo, (t_pad - lo + 31) / 32 * 32, pr + lo);
                    } else {
                        inv_sum[r] = 0.0f;
                        memset(pr + lo, 0, (size_t)(t_pad - lo) * sizeof(uint16_t));
                    }
                    memset(pr, 0, (size_t)lo * sizeof(uint16_t));
                }
                memset(pb + (size_t)rows * t_pad, 0, (size_t)(AMX_MB - rows) * t_pad * sizeof(uint16_t));
                float * out = (float *)t->data + ((size_t)bi * T + i0) * D + h * hd;
                for (int s = 0; s < hd_pad / AMX_NB; s++) {
                    gemm_bf16_32x32(pb, t_pad, vp + (size_t)s * (t_pad / 32) * 1024, t_pad, o, AMX_NB);
                    const int cols = std::min(AMX_NB, hd - s * AMX_NB);
                    for (int r = 0; r < rows; r++)
                        for (int d = 0; d < cols; d++) out[(size_t)r * D + s * AMX_NB + d] = o[r * AMX_NB + d] * inv_sum[r];
                }
            }
            bf16_end();
        });
#else
        (void)t;
        VT_ASSERT(!"bf16 attention without AMX");
#endif
    }

    // vt_attention_window: one task per (window, head, query); the query's keys [lo, hi) in their
    // order, whatever their place in the buffer: scores (a dot of 16 lanes, then the lanes in order),
    // the softmax, P V summed in double, so a step of any size gives a position the same bits.
    void attention_window(vt_tensor * t) {
        const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
        const int n_head = t->iparams[0], window = t->iparams[3];
        const int D = (int)q->ne[0], hd = D / n_head, P = (int)q->ne[1], T = (int)k->ne[1], B = (int)q->ne[2];
        const float scale = t->fparams[0];
        const float * kv_start = t->src[4] ? (const float *)t->src[4]->data : nullptr;
        VT_ASSERT(hd <= 256);
        pool.run(B * n_head * P, [&](int task, int thread) {
            const int i = task % P, h = (task / P) % n_head, bi = task / (P * n_head);
            auto row = [&](const vt_tensor * s, int j) {
                return (const float *)((const char *)s->data + (size_t)j * s->nb[1] + (size_t)bi * s->nb[2]) + h * hd;
            };
            const int pos = T - P + i, first = kv_start ? std::max(0, std::min(T, (int)kv_start[bi])) : 0;
            const int lo = std::max(first, pos - window + 1), hi = pos + 1;
            float * out = (float *)t->data + ((size_t)bi * P + i) * D + h * hd;
            if (lo >= hi) { std::fill(out, out + hd, 0.0f); return; }
            float * S = scratch[thread].data();
            const float * qr = row(q, i);
            for (int j = lo; j < hi; j++) {
                const float * kr = row(k, j);
                float lane[16] = {};
                int d = 0;
                for (; d + 16 <= hd; d += 16)
                    for (int l = 0; l < 16; l++) lane[l] += (scale * qr[d + l]) * kr[d + l];
                for (; d < hd; d++) lane[d % 16] += (scale * qr[d]) * kr[d];
                float dot = 0.0f;
                for (int l = 0; l < 16; l++) dot += lane[l];
                S[j - lo] = dot;
            }
            const float inv_sum = kern->softmax_row(S, hi - lo);
            double acc[256] = {};
            for (int j = lo; j < hi; j++) {
                const float * vr = row(v, j);
                const double p = S[j - lo];
                for (int d = 0; d < hd; d++) acc[d] += p * vr[d];
            }
            for (int d = 0; d < hd; d++) out[d] = (float)acc[d] * inv_sum;
        });
    }

    void concat_rows(vt_tensor * t) {
        const vt_tensor * a = t->src[0], * b = t->src[1];
        const int64_t C = t->ne[0], Ta = a->ne[1], T = t->ne[1];
        pool.run((int)(T * t->ne[2]), [&](int task, int) {
            const int64_t bi = task / T, r = task % T;
            const vt_tensor * s = r < Ta ? a : b;
            const int64_t j = r < Ta ? r : r - Ta;
            memcpy((float *)t->data + (size_t)task * C, (const char *)s->data + j * s->nb[1] + bi * s->nb[2], C * sizeof(float));
        });
    }

    void attention(vt_tensor * t) {
        if (t->iparams[3]) { attention_window(t); return; }
        if (amx && t->ne[0] / t->iparams[0] <= 256) { attention_bf16(t); return; }
        const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
        const int n_head = t->iparams[0];
        const int D = (int)q->ne[0], hd = D / n_head, T = (int)q->ne[1], B = (int)q->ne[2];
        const float scale = t->fparams[0];
        const int t_strips = (T + GEMM_NR - 1) / GEMM_NR, t_pad = t_strips * GEMM_NR, hd_strips = (hd + GEMM_NR - 1) / GEMM_NR;
        const int n_panels = (T + GEMM_MR - 1) / GEMM_MR;
        // enough tasks to keep every thread busy, few enough that K and V are packed rarely
        const int chunks = std::min(n_panels, std::max(1, (2 * pool.n_threads + B * n_head - 1) / (B * n_head)));
        const int panels_per_chunk = (n_panels + chunks - 1) / chunks;
        const float * kv_len = t->src[3] ? (const float *)t->src[3]->data : nullptr;   // vt_attention_masked
        const int block = t->iparams[1];                                                  // vt_attention_blocks
        const bool causal = t->iparams[2] != 0;                                           // vt_attention_block_causal
        pool.run(B * n_head * chunks, [&](int task, int thread) {
            const int chunk = task % chunks, h = (task / chunks) % n_head, bi = task / (chunks * n_head);
            const int L = kv_len ? std::max(1, std::min(T, (int)kv_len[bi])) : T;   // keys >= L are masked
            auto row = [&](const vt_tensor * s, int i) {   // row i of head h in window bi
                return (const float *)((const char *)s->data + (size_t)i * s->nb[1] + (size_t)bi * s->nb[2]) + h * hd;
            };
            // vt_attention_blocks: query i's keys are [lo, hi), its block below L (empty: row 0);
            // block-causal: from key 0 to its block's end
            auto keys_of = [&](int i, int & lo, int & hi) {
                const int start = block ? i / block * block : 0;
                lo = causal ? 0 : start;
                hi = block ? std::min(start + block, L) : L;
            };
            float * kp = scratch[thread].data();               // [t_strips][hd][32]
            float * vp = kp + (size_t)t_pad * hd;              // [hd_strips][T][32]
            float * qs = vp + (size_t)hd_strips * GEMM_NR * T; // [12][hd]: scale * Q, rows past T zero
            float * S = qs + (size_t)GEMM_MR * hd;             // [12][t_pad]: scores, then P
            for (int s = 0; s < t_strips; s++)
                pack_b(row(k, s * GEMM_NR), k->nb[1] / sizeof(float), std::min(GEMM_NR, T - s * GEMM_NR), hd, kp + (size_t)s * hd * GEMM_NR);
            for (int s = 0; s < hd_strips; s++) {
                const int cols = std::min(GEMM_NR, hd - s * GEMM_NR);
                float * dst = vp + (size_t)s * T * GEMM_NR;
                for (int j = 0; j < T; j++) {
                    memcpy(dst + (size_t)j * GEMM_NR, row(v, j) + s * GEMM_NR, cols * sizeof(float));
                    for (int c = cols; c < GEMM_NR; c++) dst[(size_t)j * GEMM_NR + c] = 0.0f;
                }
            }
            const int p_end = std::min(n_panels, (chunk + 1) * panels_per_chunk);
            for (int p = chunk * panels_per_chunk; p < p_end; p++) {
                const int i0 = p * GEMM_MR, rows = std::min(GEMM_MR, T - i0);
                for (int r = 0; r < rows; r++) {
                    const float * qr = row(q, i0 + r);
                    for (int d = 0; d < hd; d++) qs[r * hd + d] = scale * qr[d];
                }
                memset(qs + rows * hd, 0, (size_t)(GEMM_MR - rows) * hd * sizeof(float));
                for (int s = 0; s < t_strips; s++)
                    kern->gemm(hd, qs, hd, kp + (size_t)s * hd * GEMM_NR, S + s * GEMM_NR, t_pad, false);
                float inv_sum[GEMM_MR];
                for (int r = 0; r < rows; r++) {               // softmax over keys [lo, hi); the rest get 0
                    int lo, hi;
                    keys_of(i0 + r, lo, hi);
                    float * Sr = S + (size_t)r * t_pad;
                    inv_sum[r] = hi > lo ? kern->softmax_row(Sr + lo, hi - lo) : 0.0f;
                    std::fill(Sr, Sr + std::min(lo, T), 0.0f);
                    std::fill(Sr + std::max(lo, hi), Sr + T, 0.0f);
                }
                float * out = (float *)t->data + ((size_t)bi * T + i0) * D + h * hd;
                for (int s = 0; s < hd_strips; s++)          // P V in chunks of keys (see ATTN_KC)
                    for (int k0 = 0; k0 < T; k0 += ATTN_KC)
                        gemm_tile(*kern, std::min(ATTN_KC, T - k0), S + k0, t_pad, vp + ((size_t)s * T + k0) * GEMM_NR,
                                  out + s * GEMM_NR, D, rows, std::min(GEMM_NR, hd - s * GEMM_NR), k0 > 0);
                for (int r = 0; r < rows; r++)
                    for (int d = 0; d < hd; d++) out[(size_t)r * D + d] *= inv_sum[r];
            }
        });
    }

    // The projector's ops (a few rows per window, small next to the encoder): one row per task.
    void avg_pool2(vt_tensor * t) {
        const vt_tensor * x = t->src[0];
        const int64_t C = t->ne[0], T = t->ne[1], T_in = x->ne[1];
        pool.run((int)(T * t->ne[2]), [&](int task, int) {
            const float * a = (const float *)x->data + ((task / T) * T_in + (task % T) * 2) * C;
            float * out = (float *)t->data + (size_t)task * C;
            for (int64_t i = 0; i < C; i++) out[i] = (a[i] + a[C + i]) * 0.5f;
        });
    }

    // rms_norm: the mean square in double, as layer_norm's statistics.
    void rms_norm(vt_tensor * t) {
        const float * w = (const float *)t->src[1]->data;
        const int64_t C = t->ne[0];
        pool.run((int)(t->ne[1] * t->ne[2] * t->ne[3]), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data + (size_t)task * C;
            float * out = (float *)t->data + (size_t)task * C;
            double sum2 = 0.0;
            for (int64_t i = 0; i < C; i++) sum2 += (double)in[i] * in[i];
            const float rstd = (float)(1.0 / sqrt(sum2 / C + t->fparams[0]));
            for (int64_t i = 0; i < C; i++) out[i] = in[i] * rstd * w[i];
        });
    }

    void swiglu(vt_tensor * t) {
        const int64_t N = t->ne[0];
        pool.run((int)(t->ne[1] * t->ne[2] * t->ne[3]), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data + (size_t)task * 2 * N;
            float * out = (float *)t->data + (size_t)task * N;
            for (int64_t i = 0; i < N; i++) {
                const float g = in[N + i];
                out[i] = in[i] * (g / (1.0f + expf(-g)));
            }
        });
    }

    void relu(vt_tensor * t) {
        const int64_t n = vt_nelements(t), per = 1 << 16;
        pool.run((int)((n + per - 1) / per), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data;
            float * out = (float *)t->data;
            for (int64_t i = task * per; i < std::min(n, (task + 1) * per); i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
        });
    }

    void silu(vt_tensor * t) {                       // as swiglu's gate
        const int64_t n = vt_nelements(t), per = 1 << 16;
        pool.run((int)((n + per - 1) / per), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data;
            float * out = (float *)t->data;
            for (int64_t i = task * per; i < std::min(n, (task + 1) * per); i++) out[i] = in[i] / (1.0f + expf(-in[i]));
        });
    }

    void silu_mul(vt_tensor * t) {                   // silu as swiglu's gate, the gate its own tensor
        const int64_t n = vt_nelements(t), per = 1 << 16;
        pool.run((int)((n + per - 1) / per), [&](int task, int) {
            const float * x = (const float *)t->src[0]->data, * g = (const float *)t->src[1]->data;
            float * out = (float *)t->data;
            for (int64_t i = task * per; i < std::min(n, (task + 1) * per); i++) out[i] = x[i] * (g[i] / (1.0f + expf(-g[i])));
        });
    }

    void stack(vt_tensor * t) {
        const vt_tensor * x = t->src[0];
        const size_t row = (size_t)t->ne[0], n_in = (size_t)x->ne[0] * x->ne[1];   // floats per out row, per window in
        pool.run((int)(t->ne[1] * t->ne[2]), [&](int task, int) {
            const size_t bi = task / t->ne[1], first = (task % t->ne[1]) * row;  // offset in window bi's rows
            const size_t n = first < n_in ? std::min(row, n_in - first) : 0;
            float * out = (float *)t->data + (size_t)task * row;
            memcpy(out, (const float *)x->data + bi * n_in + first, n * sizeof(float));
            std::fill(out + n, out + row, 0.0f);
        });
    }

    // log_mel (vt_log_mel), the reference of the CUDA kernel: per window b and frame t < valid,
    // the periodic Hann window times row[hop t, hop t + n_fft), the power of its DFT in double
    // (a plain DFT, bin by bin: whisper-audio.cpp's host log-mel has the fast FFT), the mel sums
    // in double over each filter's non-zero bins (the filters are triangles; a skipped product
    // is 0 * finite), log10 in float; frames from valid on are 0. Then over the window's frames
    // that hold the signal max(x, max - 8) and (x + 4) / 4, max the window's own or params' [b, 1];
    // max_only: out[b] = that max, before any clamp. A task per (window, FRAMES frames).
    void log_mel(vt_tensor * t) {
        const vt_tensor * pcm = t->src[0], * filters = t->src[1], * params = t->src[2];
        const bool max_only = t->iparams[0];
        const int n_fft = t->iparams[1], hop = t->iparams[2], n_frames = t->iparams[3];
        const int n_bins = n_fft / 2 + 1, n_mels = (int)filters->ne[1], B = (int)pcm->ne[1];
        const float * fb = (const float *)filters->data;
        const float * prm = params ? (const float *)params->data : nullptr;

        const double two_pi = 6.283185307179586476925286766559;
        std::vector<double> window(n_fft), cos_t(n_fft), sin_t(n_fft);   // exp(-2 pi i e / n_fft) = cos - i sin
        for (int i = 0; i < n_fft; i++) {
            window[i] = 0.5 - 0.5 * std::cos(two_pi * i / n_fft);
            cos_t[i] = std::cos(two_pi * i / n_fft);
            sin_t[i] = std::sin(two_pi * i / n_fft);
        }
        std::vector<int> k0(n_mels), k1(n_mels);                         // each filter's non-zero bins
        for (int m = 0; m < n_mels; m++) {
            const float * fr = fb + (size_t)m * n_bins;
            int a = 0, b = n_bins;
            while (a < b && fr[a] == 0.0f) a++;
            while (b > a && fr[b - 1] == 0.0f) b--;
            k0[m] = a;
            k1[m] = b;
        }
        auto valid_of = [&](int b) { return std::min(prm ? (int)prm[2 * b] : n_frames, n_frames); };

        const int FRAMES = 100, chunks = (n_frames + FRAMES - 1) / FRAMES;
        std::vector<float> chunk_max((size_t)B * chunks, -INFINITY);
        pool.run(B * chunks, [&](int task, int) {
            const int b = task / chunks, t0 = task % chunks * FRAMES, t1 = std::min(t0 + FRAMES, valid_of(b));
            const float * row = (const float *)pcm->data + (size_t)b * pcm->ne[0];
            float * out = max_only ? nullptr : (float *)t->data + (size_t)b * n_mels * n_frames;
            std::vector<double> frame(n_fft), power(n_bins);
            float mx = -INFINITY;
            for (int f = t0; f < t1; f++) {
                const float * x = row + (size_t)f * hop;
                for (int n = 0; n < n_fft; n++) frame[n] = window[n] * x[n];
                for (int k = 0; k < n_bins; k++) {                           // X[k] = sum_n frame[n] W^(n k)
                    double re = 0.0, im = 0.0;
                    for (int n = 0, e = 0; n < n_fft; n++) {
                        re += frame[n] * cos_t[e];
                        im -= frame[n] * sin_t[e];
                        e += k;
                        if (e >= n_fft) e -= n_fft;
                    }
                    power[k] = re * re + im * im;
                }
                for (int m = 0; m < n_mels; m++) {
                    const float * fr = fb + (size_t)m * n_bins;
                    double sum = 0.0;
                    for (int k = k0[m]; k < k1[m]; k++) sum += (double)fr[k] * power[k];
                    // (log2 * log10(2), as the host log-mel and the CUDA kernel)
                    const float v = std::log2(std::max((float)sum, 1e-10f)) * 0.30102999566398119521f;
                    if (out) out[(size_t)m * n_frames + f] = v;
                    mx = std::max(mx, v);
                }
            }
            for (int f = std::max(t0, t1); out && f < std::min(t0 + FRAMES, n_frames); f++)   // past the signal: 0
                for (int m = 0; m < n_mels; m++) out[(size_t)m * n_frames + f] = 0.0f;
            chunk_max[task] = mx;
        });
        pool.run(B, [&](int b, int) {
            float mx = -INFINITY;
            for (int c = 0; c < chunks; c++) mx = std::max(mx, chunk_max[(size_t)b * chunks + c]);
            if (max_only) {
                ((float *)t->data)[b] = mx;
                return;
            }
            const float given = prm ? prm[2 * b + 1] : NAN;
            const float floor_v = (std::isnan(given) ? mx : given) - 8.0f;
            const int valid = valid_of(b);
            float * out = (float *)t->data + (size_t)b * n_mels * n_frames;
            for (int m = 0; m < n_mels; m++)
                for (int f = 0; f < valid; f++) {
                    float & x = out[(size_t)m * n_frames + f];
                    x = (std::max(x, floor_v) + 4.0f) / 4.0f;
                }
        });
    }

    // rope_qk: one row (a position of a window) per task; the angle in float32, its cos and
    // sin rounded from double (transformers: float32 cos/sin of a float32 angle).
    void rope_qk(vt_tensor * t) {
        const int n_head = t->iparams[0], n_rot = t->iparams[1], half = n_rot / 2;
        const int64_t row = t->ne[0], d = row / 3, hd = d / n_head, T = t->ne[1];
        const float theta = t->fparams[0];
        pool.run((int)(T * t->ne[2]), [&](int task, int) {
            const float * in = (const float *)t->src[0]->data + (size_t)task * row;
            float * out = (float *)t->data + (size_t)task * row;
            memcpy(out, in, row * sizeof(float));
            const float pos = (float)((t->src[1] ? (int64_t)((const float *)t->src[1]->data)[task / T] : 0) + task % T);
            std::vector<float> c(half), s(half);
            for (int i = 0; i < half; i++) {
                // inv_freq as transformers' float32: 1 / theta^(float(2i) / n_rot), the power rounded
                const float inv_freq = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)n_rot));
                const float ang = pos * inv_freq;
                c[i] = (float)cos((double)ang);
                s[i] = (float)sin((double)ang);
            }
            for (int64_t h = 0; h < 2 * n_head; h++) {          // q's heads, then k's
                const float * x = in + h * hd;
                float * y = out + h * hd;
                for (int i = 0; i < half; i++) {
                    y[i] = x[i] * c[i] - x[i + half] * s[i];
                    y[i + half] = x[i + half] * c[i] + x[i] * s[i];
                }
            }
        });
    }

    // rope_time: one row (position t of window b) per task. The float32 factors as
    // MusicFlamingoRotaryEmbedding and _build_audio_timestamps make them: each product or sum of two
    // float32 values is exact in double, so rounding it to float gives the float32 operation's result.
    // The angle, its cos and sin and the turn in double (apply_rotary_time_emb's float64).
    void rope_time(vt_tensor * t) {
        const int n_rot = t->iparams[0], half = n_rot / 2;
        const int64_t C = t->ne[0], T = t->ne[1];
        const double theta = t->fparams[0], step = t->fparams[1], pi = 3.14159265358979323846;
        const float * window = (const float *)t->src[1]->data;
        std::vector<float> inv_freq(half);
        for (int i = 0; i < half; i++)
            inv_freq[i] = (float)(1.0 / (double)(float)pow(theta, (double)((float)(2 * i) / (float)n_rot)));
        pool.run((int)(T * t->ne[2]), [&](int task, int) {
            const float * x = (const float *)t->src[0]->data + (size_t)task * C;
            float * y = (float *)t->data + (size_t)task * C;
            memcpy(y + 2 * n_rot, x + 2 * n_rot, (C - 2 * n_rot) * sizeof(float));
            const double k = window[task / T], pos = (double)(task % T);
            const float start = (float)((double)(float)(k * T) * step), offset = (float)(pos * step);
            const float ts = (float)((double)start + (double)offset);                   // seconds
            const float angle = (float)(-2.0 * (double)ts * (double)(float)pi);         // (-ts * 2) * pi
            const float pos_angle = (float)((double)(float)(pos / theta) * (double)(float)(2.0 * pi));
            for (int p = 0; p < n_rot; p++) {
                const int i = p % half;
                const double f = p < half ? k / theta * (double)inv_freq[i] : (double)(float)((double)pos_angle * (double)inv_freq[i]);
                const double a = f * (double)angle, c = cos(a), s = sin(a);
                const double x0 = x[2 * p], x1 = x[2 * p + 1];
                y[2 * p] = (float)(x0 * c - x1 * s);
                y[2 * p + 1] = (float)(x1 * c + x0 * s);
            }
        });
    }

    void compute_node(vt_tensor * t) {
        switch (t->op) {
            case VT_OP_CONV1D_K3:  conv1d_k3(t); break;
            case VT_OP_LINEAR:     linear(t); break;
            case VT_OP_LAYER_NORM: layer_norm(t); break;
            case VT_OP_ATTENTION:  attention(t); break;
            case VT_OP_AVG_POOL2:  avg_pool2(t); break;
            case VT_OP_RMS_NORM:   rms_norm(t); break;
            case VT_OP_SWIGLU:     swiglu(t); break;
            case VT_OP_STACK:      stack(t); break;
            case VT_OP_ROPE_QK:    rope_qk(t); break;
            case VT_OP_ROPE_TIME:  rope_time(t); break;
            case VT_OP_RELU:       relu(t); break;
            case VT_OP_SILU:       silu(t); break;
            case VT_OP_SILU_MUL:   silu_mul(t); break;
            case VT_OP_LOG_MEL:    log_mel(t); break;
            case VT_OP_CONV2D_K3S2: conv2d_k3s2(t); break;
            case VT_OP_ADD_ROWS:   add_rows(t); break;
            case VT_OP_CONCAT_ROWS: concat_rows(t); break;
            default: VT_ASSERT(!"cpu backend: op without a kernel");
        }
    }

    bool compute(vt_graph * g) override {
        for (vt_tensor * t : g->nodes) compute_node(t);
        return true;
    }

    bool profile(vt_graph * g, double * ms) override {
        for (size_t i = 0; i < g->nodes.size(); i++) {
            const auto t0 = std::chrono::steady_clock::now();
            compute_node(g->nodes[i]);
            ms[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
        return true;
    }
};

} // namespace

// ---- entry points: the row "cpu" of the table of backends ------------------------------

const char * vt_cpu_isa(void) {
    const cpu_kernels * k = pick_cpu_kernels();
    return k ? k->isa : nullptr;
}

const char * vt_cpu_bf16_isa(void) {
    const cpu_kernels * k = pick_cpu_kernels();
    if (!k) return nullptr;
#ifdef VT_X86
    const char * want = getenv("VT_CPU_BF16");
    if (want && *want && strcmp(want, "amx") != 0 && strcmp(want, "avx512bf16") != 0) {
        vt_set_error("VT_CPU_BF16=%s: unknown; amx or avx512bf16", want);
        return nullptr;
    }
    if (strcmp(k->isa, "avx512") != 0) {
        vt_set_error("bf16 GEMMs need AVX512-BF16 (or AMX) and AVX-512; the kernels are %s (VT_CPU_ISA)", k->isa);
        return nullptr;
    }
    if (!avx512bf16_usable()) {
        vt_set_error("bf16 GEMMs need AVX512-BF16 (or AMX): the CPU has neither");
        return nullptr;
    }
    // VDPBF16PS only when asked for: on Sapphire Rapids it has half the throughput of an FMA,
    // and the mode runs slower than f32
    if (want && strcmp(want, "avx512bf16") == 0) return "avx512bf16";
    std::string why;
    if (amx_usable(&why)) return "amx";
    vt_set_error("bf16 GEMMs need AMX: %s%s", why.c_str(), want ? "" : " (VT_CPU_BF16=avx512bf16: with VDPBF16PS instead)");
    return nullptr;
#else
    vt_set_error("bf16 GEMMs need AVX512-BF16 or AMX (x86-64)");
    return nullptr;
#endif
}

// compute_type VT_TYPE_F32, or VT_TYPE_BF16: the GEMMs in bf16 where vt_cpu_bf16_isa() says the
// CPU runs them (else f32: vt_backend_gemm_type says which).
static vt_backend * vt_cpu_init(int device, const vt_backend_params * params) {
    if (device != 0) {
        vt_set_error("cpu: device %d does not exist (the CPU is device 0)", device);
        return nullptr;
    }
    if ((params->compute_type != VT_TYPE_F32 && params->compute_type != VT_TYPE_BF16) || params->fp8) {
        vt_set_error("cpu: computes in f32 or with bf16 GEMMs, not %s%s", vt_type_name(params->compute_type),
                     params->fp8 ? " with fp8" : "");
        return nullptr;
    }
    const vt_type gemm_type = params->compute_type;
    int n_threads = params->n_threads;
    // threads past the hardware's only cost memory: each has its own scratch
    const int hw = (int)std::max(1u, std::thread::hardware_concurrency());
    if (n_threads <= 0 || n_threads > hw) n_threads = hw;
    const cpu_kernels * kernels = pick_cpu_kernels();
    if (!kernels) return nullptr;
    const char * bf16 = gemm_type == VT_TYPE_BF16 ? vt_cpu_bf16_isa() : nullptr;
    try {
        return new cpu_backend(n_threads, kernels, bf16 != nullptr, bf16 && strcmp(bf16, "amx") == 0);
    } catch (const std::bad_alloc &) {
        vt_set_error("cpu backend: out of memory");
        return nullptr;
    } catch (const std::exception & e) {
        vt_set_error("cpu backend: cannot start %d threads: %s", n_threads, e.what());
        return nullptr;
    }
}

static int vt_cpu_device_count(void) { return 1; }

static bool vt_cpu_device_memory(int, size_t *, size_t *) {
    vt_set_error("cpu: the CPU has no device memory figure");
    return false;
}
