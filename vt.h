// vt.h - a small tensor library for one job: running the Whisper encoder.
//
// A graph is built once, ahead of time, from a few coarse ops whose fusions are part of
// the op (bias, GELU, residual, positional add). A liveness planner places every
// intermediate in one arena; a backend (CPU here, CUDA in vt-cuda.cu) computes it.
//
//   vt_context * ctx = vt_init(64);
//   vt_tensor  * x   = vt_new_tensor_2d(ctx, VT_TYPE_F32, 384, 1500);  // [1500, 384]
//   vt_tensor  * w   = vt_new_tensor_2d(ctx, VT_TYPE_F32, 384, 1536);  // [1536, 384]
//   vt_set_input(x); vt_set_weight(w);
//   vt_tensor  * y   = vt_linear(ctx, x, w, NULL, VT_ACT_GELU, NULL);  // [1500, 1536]
//   vt_graph   * g   = vt_graph_build(ctx, &y, 1);
//   vt_backend * be  = vt_backend_cpu_init(4);
//   vt_backend_alloc_weights(be, ctx); vt_backend_set_tensor(be, w, w_data, VT_TYPE_F32);
//   vt_backend_alloc_graph(be, g);     vt_backend_set_tensor(be, x, x_data, VT_TYPE_F32);
//   vt_backend_compute(be, g);         vt_backend_get_tensor_f32(be, y, y_data);
//
// Shapes follow ggml: ne[0] is the innermost (contiguous) dimension, so a row-major
// [B, T, C] array has ne = {C, T, B}. Errors are return values; the message of the last
// one on this thread is vt_last_error().
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VT_MAX_DIMS 4
#define VT_MAX_SRC  5
#define VT_MAX_NAME 64
#define VT_ARENA_ALIGN 256   // bytes; every planned tensor starts on this boundary

// Values match the GGUF/ggml type ids, so a file's type can be used as is.
enum vt_type {
    VT_TYPE_F32  = 0,
    VT_TYPE_F16  = 1,
    VT_TYPE_BF16 = 30,
};

enum vt_op {
    VT_OP_NONE,        // a leaf: a weight or a graph input
    VT_OP_VIEW,        // another layout of src[0]'s memory; computes nothing
    VT_OP_CONV1D_K3,
    VT_OP_LINEAR,
    VT_OP_LAYER_NORM,
    VT_OP_ATTENTION,
    VT_OP_LOG_MEL,
    VT_OP_AVG_POOL2,
    VT_OP_RMS_NORM,
    VT_OP_SWIGLU,
    VT_OP_STACK,
    VT_OP_COUNT,
};

enum vt_act {
    VT_ACT_NONE,
    VT_ACT_GELU,       // exact: 0.5 x (1 + erf(x / sqrt 2)), as Whisper
};

enum vt_flag {
    VT_FLAG_WEIGHT = 1,  // lives in the backend's weight buffer, set once
    VT_FLAG_INPUT  = 2,  // lives in the arena for the whole graph, set before compute
    VT_FLAG_OUTPUT = 4,  // lives in the arena until the end, never overwritten
    VT_FLAG_FP8    = 8,  // a weight whose GEMMs an FP8 backend may run in e4m3 (vt_set_fp8)
};

typedef struct vt_tensor {
    enum vt_type type;
    int64_t ne[VT_MAX_DIMS];     // elements per dimension, ne[0] innermost
    size_t  nb[VT_MAX_DIMS];     // bytes between neighbours in each dimension
    enum vt_op op;
    struct vt_tensor * src[VT_MAX_SRC];
    int32_t iparams[4];          // op parameters (stride, activation, heads; see builders)
    float   fparams[2];          // op parameters (eps, scale)
    int     flags;               // enum vt_flag
    size_t  view_offset;         // VT_OP_VIEW: bytes from src[0]'s start
    size_t  arena_offset;        // set by the planner for tensors placed in the arena
    void *  data;                // backend address (a device pointer for CUDA), once allocated
    char    name[VT_MAX_NAME];
} vt_tensor;

typedef struct vt_context vt_context;
typedef struct vt_graph   vt_graph;
typedef struct vt_backend vt_backend;

// ---- errors ------------------------------------------------------------------------

const char * vt_last_error(void);                       // message of this thread's last failure
void         vt_set_error(const char * fmt, ...);       // for backends and callers

// ---- types and tensors -------------------------------------------------------------

size_t       vt_type_size(enum vt_type type);
const char * vt_type_name(enum vt_type type);
bool         vt_type_valid(int type);
int64_t      vt_nelements(const vt_tensor * t);
size_t       vt_nbytes(const vt_tensor * t);            // bytes of a contiguous tensor of t's shape
bool         vt_is_contiguous(const vt_tensor * t);

// Element conversion between any two types (n elements, dst and src may not overlap).
void  vt_convert(void * dst, enum vt_type dst_type, const void * src, enum vt_type src_type, size_t n);
float    vt_f16_to_f32(uint16_t h);
uint16_t vt_f32_to_f16(float f);                        // round to nearest even
float    vt_bf16_to_f32(uint16_t h);
uint16_t vt_f32_to_bf16(float f);                       // round to nearest even

vt_context * vt_init(int max_tensors);                  // tensor metadata only; no data
void         vt_free(vt_context * ctx);
int          vt_n_tensors(const vt_context * ctx);
vt_tensor *  vt_get_tensor_at(vt_context * ctx, int i);
vt_tensor *  vt_get_tensor(vt_context * ctx, const char * name);  // NULL if none

vt_tensor * vt_new_tensor(vt_context * ctx, enum vt_type type, int n_dims, const int64_t * ne);
vt_tensor * vt_new_tensor_1d(vt_context * ctx, enum vt_type type, int64_t ne0);
vt_tensor * vt_new_tensor_2d(vt_context * ctx, enum vt_type type, int64_t ne0, int64_t ne1);
vt_tensor * vt_new_tensor_3d(vt_context * ctx, enum vt_type type, int64_t ne0, int64_t ne1, int64_t ne2);
vt_tensor * vt_set_name(vt_tensor * t, const char * fmt, ...);
void        vt_set_weight(vt_tensor * t);
void        vt_set_input(vt_tensor * t);
void        vt_set_output(vt_tensor * t);
void        vt_set_fp8(vt_tensor * t);   // a weight that vt_backend_cuda_init_fp8 may quantize

// ---- ops (builders check shapes and record; backends compute) ----------------------

// Views share src's memory. ne/nb as in vt_tensor; offset in bytes from a's start.
vt_tensor * vt_view_3d(vt_context * ctx, vt_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
                       size_t nb1, size_t nb2, size_t offset);
vt_tensor * vt_transpose(vt_context * ctx, vt_tensor * a);  // swaps dimensions 0 and 1

// conv1d_k3: a kernel-3 convolution with zero padding 1, as Whisper's conv stem.
//   x   [B, T_in, C_in]   ne {C_in, T_in, B}, any strides (a transposed mel is fine)
//   w   [C_out, C_in, 3]  ne {3, C_in, C_out}, contiguous (PyTorch's Conv1d layout)
//   b   [C_out]           required
//   add [T_out, C_out]    ne {C_out, T_out}, broadcast over B, or NULL
//   out [B, T_out, C_out] T_out = (T_in - 1) / stride + 1
//   out[b,t,o] = act(b[o] + sum_{i,k} w[o,i,k] x[b, t*stride + k - 1, i]) + add[t,o]
vt_tensor * vt_conv1d_k3(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                         int stride, enum vt_act act, vt_tensor * add);

// linear: y = act(x w^T + b) + residual
//   x [B, M, K] ne {K, M, B} contiguous; w [N, K] ne {K, N} (PyTorch's Linear layout)
//   b [N] or NULL; residual [B, M, N] or NULL; out [B, M, N]
vt_tensor * vt_linear(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                      enum vt_act act, vt_tensor * residual);

// layer_norm over the innermost dimension: y = (x - mean) / sqrt(var + eps) * w + b
//   x [B, M, C] contiguous; w, b [C]
vt_tensor * vt_layer_norm(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b, float eps);

// attention: non-causal multi-head softmax(q k^T * scale) v over all T keys.
//   q, k, v [B, T, D] ne {D, T, B}, rows may be strided (views of one fused QKV output),
//   D = n_head * head_dim, head h uses columns [h*head_dim, (h+1)*head_dim)
//   out [B, T, D] contiguous
vt_tensor * vt_attention(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                         int n_head, float scale);
// The same with a key-length mask: window b attends to its first kv_len[b] keys only (the
// rest get -inf before the softmax), as transformers' padding mask does for Qwen2-Audio.
//   kv_len [B] f32 holding whole numbers in [1, T] (a graph input)
vt_tensor * vt_attention_masked(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_len);

// avg_pool2: the mean of each pair of rows, as AvgPool1d(2, stride=2) over time
//   x [B, T, C] contiguous -> out [B, T/2, C] (an odd last row is dropped, as PyTorch does)
vt_tensor * vt_avg_pool2(vt_context * ctx, vt_tensor * x);

// rms_norm over the innermost dimension: y = x / sqrt(mean(x^2) + eps) * w (LlamaRMSNorm)
//   x [B, M, C] contiguous; w [C]
vt_tensor * vt_rms_norm(vt_context * ctx, vt_tensor * x, vt_tensor * w, float eps);

// swiglu: y = x[:, :N] * silu(x[:, N:]) over the innermost dimension (Ultravox's SwiGLU:
// the first half is the value, the second the gate)
//   x [B, M, 2N] contiguous -> out [B, M, N]
vt_tensor * vt_swiglu(vt_context * ctx, vt_tensor * x);

// stack_frames: f consecutive rows side by side, the last group zero-padded
//   x [B, T, C] contiguous -> out [B, ceil(T/f), f*C]; a view when f divides T, else a copy
vt_tensor * vt_stack_frames(vt_context * ctx, vt_tensor * x, int f);

// log_mel: Whisper's log-mel spectrogram of B windows of 3000 frames, the algorithm of
// whisper_audio_log_mel (transformers' WhisperFeatureExtractor), the FFT in double.
//   pcm     [B, VT_MEL_ROW] ne {480400, B} f32, contiguous: each row is the window's 480000
//           samples with VT_MEL_CONTEXT more on each side, as the caller's signal has them
//           there (its neighbours, its reflection at the signal's ends, zeros): frame t reads
//           row[160 t, 160 t + 400), so the op itself never pads
//   filters [n_mels, 201] ne {201, n_mels} f32 (the model's mel bank)
//   params  [B, 2] ne {2, B} f32, or NULL ({3000, NaN} for every window): per window the frames
//           that hold the signal (those past it are 0 in out and left out of the max) and the
//           max of the dynamic-range clamp, or NaN for the window's own max
//   out     [B, n_mels, 3000] f32: (max(log10 mel, max - 8) + 4) / 4
// CUDA only: on the CPU the model library computes the log-mel before the graph.
#define VT_MEL_CONTEXT 200
#define VT_MEL_ROW (480000 + 2 * VT_MEL_CONTEXT)
vt_tensor * vt_log_mel(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params);
// The same op's first half: out [B] f32, each window's largest log10 mel over the frames
// that hold the signal, before any clamp (the max of an input cut into several windows).
vt_tensor * vt_log_mel_max(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params);

const char * vt_op_name(enum vt_op op);

// ---- graphs ------------------------------------------------------------------------

// Collects what the outputs depend on in execution order and plans the arena: each
// computed tensor gets an offset, and tensors whose lifetimes do not overlap share bytes.
vt_graph *  vt_graph_build(vt_context * ctx, vt_tensor ** outputs, int n_outputs);
void        vt_graph_free(vt_graph * g);                  // also releases backend memory
int         vt_graph_n_nodes(const vt_graph * g);         // computed nodes (no leaves, no views)
vt_tensor * vt_graph_node(const vt_graph * g, int i);
size_t      vt_graph_arena_size(const vt_graph * g);      // planned bytes
size_t      vt_graph_naive_size(const vt_graph * g);      // bytes if nothing were shared
// Whether a backend may time alternative kernels for g's nodes when it is allocated (default
// true): worth it for a graph replayed many times, not for one run once or twice. Set before
// vt_backend_alloc_graph; shapes timed before keep their choice.
void        vt_graph_set_tune(vt_graph * g, bool tune);

// ---- backends ----------------------------------------------------------------------

// Computes in f32 on n_threads threads: <= 0 or more than the hardware runs means as many
// as it runs. NULL with vt_last_error() set when the threads cannot be started.
vt_backend * vt_backend_cpu_init(int n_threads);
// The instruction set of the CPU backend's kernels on this machine: "avx512", "avx2" or
// "plain", picked at run time; the environment variable VT_CPU_ISA asks for a lesser one
// (to measure or test it). NULL with vt_last_error() set when VT_CPU_ISA names one that is
// unknown or that this CPU cannot run (vt_backend_cpu_init then fails the same way).
const char * vt_cpu_isa(void);
// The CPU backend with its GEMMs (linear, conv, not attention) in gemm_type: VT_TYPE_F32 is
// vt_backend_cpu_init; VT_TYPE_BF16 rounds each GEMM's inputs to bf16 and accumulates in f32
// on AMX tiles, each weight matrix packed to bf16 once when it is set (a copy beside its f32
// data: 1.5x the weight memory), where vt_cpu_bf16_isa() says the CPU runs it; elsewhere it
// computes in f32 (vt_backend_gemm_type says which). Tensors stay f32 either way.
vt_backend * vt_backend_cpu_init_type(int n_threads, enum vt_type gemm_type);
// "amx" when this CPU and kernel run the bf16 GEMMs (AMX-BF16 and AVX512-BF16, the tile
// state granted by arch_prctl; VT_CPU_ISA other than avx512 turns them off), else NULL with
// vt_last_error() saying why. The environment variable VT_CPU_BF16=avx512bf16 asks for
// VDPBF16PS kernels instead (AVX512-BF16 without AMX; "avx512bf16"), VT_CPU_BF16=amx for AMX
// or nothing.
const char * vt_cpu_bf16_isa(void);
// compute_type VT_TYPE_F16 or VT_TYPE_BF16. NULL with vt_last_error() set when there is
// no device, or when this build has no CUDA.
vt_backend * vt_backend_cuda_init(int device, enum vt_type compute_type);
// bf16 compute with the linear layers' GEMMs on the FP8 (e4m3) tensor cores (compute
// capability 8.9+): each weight flagged with vt_set_fp8, [N, K] with N and K multiples of 16
// (K <= 8192), is quantized
// at set_tensor with a scale per output channel, each GEMM's input per row (token) just
// before it, both scales applied by the GEMM; the rest (conv stem, attention, norms, the
// other linears) as vt_backend_cuda_init(device, VT_TYPE_BF16). Weights keep their bf16
// copy too (about 1.5x the memory of bf16 alone).
vt_backend * vt_backend_cuda_init_fp8(int device);
bool         vt_cuda_built(void);                         // was vt-cuda.cu compiled in
void         vt_backend_free(vt_backend * be);
const char * vt_backend_name(const vt_backend * be);      // "cpu" or "cuda (NVIDIA H200)"
enum vt_type vt_backend_compute_type(const vt_backend * be);
// The type the backend's GEMMs read their inputs in: the compute type, but for the CPU's bf16
// mode (bf16 GEMMs, f32 tensors).
enum vt_type vt_backend_gemm_type(const vt_backend * be);

// Storage for every tensor of ctx flagged VT_FLAG_WEIGHT, in one buffer.
bool   vt_backend_alloc_weights(vt_backend * be, vt_context * ctx);
// Storage for g's arena (and the backend's per-graph state).
bool   vt_backend_alloc_graph(vt_backend * be, vt_graph * g);
// Copy a whole tensor in from host memory holding src_type elements (converted).
bool   vt_backend_set_tensor(vt_backend * be, vt_tensor * t, const void * src, enum vt_type src_type);
// Copy a whole tensor out to host memory as f32.
bool   vt_backend_get_tensor_f32(vt_backend * be, const vt_tensor * t, float * dst);
bool   vt_backend_compute(vt_backend * be, vt_graph * g);
// Computes g node by node and stores each node's milliseconds in ms[i] (vt_graph_node order).
bool   vt_backend_profile(vt_backend * be, vt_graph * g, double * ms);
size_t vt_backend_allocated_bytes(const vt_backend * be); // weights + arenas + workspaces

// Runs without waiting: each in[i] (an f32 graph input) is copied in from in_host[i], g
// computed, `out` copied to out_host as out_type (F32 or F16). The CUDA backend puts the copies
// in and out on streams of their own, so that with two slots (0 and 1) one run's upload and
// another's download overlap a forward; its host buffers should come from vt_backend_host_alloc
// (pinned). vt_backend_wait(be, slot) waits for the run in that slot; the host buffers must
// stay untouched until then. The CPU backend runs it at once.
#define VT_MAX_SUBMIT_INPUTS 4
bool   vt_backend_submit(vt_backend * be, vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host,
                         const vt_tensor * out, void * out_host, enum vt_type out_type, int slot);
bool   vt_backend_wait(vt_backend * be, int slot);
// Everything but the run: on CUDA the forward is captured as a CUDA graph now rather than at
// the first compute or submit (model init pays for it, not the first batch).
bool   vt_backend_prepare(vt_backend * be, vt_graph * g);
// Host memory for submit: page-locked where the backend has a device, else plain. NULL
// with vt_last_error() set when it cannot be had.
void * vt_backend_host_alloc(vt_backend * be, size_t bytes);
void   vt_backend_host_free(vt_backend * be, void * p);
// Whether the backend has a kernel for op (every op but log_mel on the CPU).
bool   vt_backend_supports(const vt_backend * be, enum vt_op op);
// CUDA devices present (0 without CUDA or a device).
int    vt_cuda_device_count(void);
// Bytes in use on a CUDA device, by anyone (cudaMemGetInfo); false without CUDA.
bool   vt_cuda_memory_used(int device, size_t * used);
// Bytes the CUDA backend has allocated on devices since the process started (0 without CUDA):
// what the test-only limit VT_CUDA_MEMORY_LIMIT counts.
size_t vt_cuda_bytes_allocated(void);

// A broken internal invariant (a bug in our code, not the caller's): prints file:line, aborts.
#define VT_ASSERT(x) do { if (!(x)) { vt_abort(__FILE__, __LINE__, #x); } } while (0)
void vt_abort(const char * file, int line, const char * what) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

// ---- for backend implementers --------------------------------------------------------
#ifdef VT_BACKEND_IMPL
#include <vector>

struct vt_graph {
    vt_context * ctx;
    std::vector<vt_tensor *> nodes;    // computed tensors in execution order
    std::vector<vt_tensor *> leaves;   // inputs and weights reached
    std::vector<vt_tensor *> views;    // views reached, in order (their data follows src)
    size_t arena_size = 0;
    size_t naive_size = 0;
    bool tune = true;                  // vt_graph_set_tune
    vt_backend * backend = nullptr;    // who holds the arena, once allocated
    void * backend_state = nullptr;    // the backend's per-graph memory (arena, captured graph)
};

// A backend. alloc_* set tensor->data; compute runs g->nodes in order.
struct vt_backend {
    virtual ~vt_backend() {}
    virtual const char * name() const = 0;
    virtual vt_type compute_type() const = 0;
    virtual vt_type gemm_type() const { return compute_type(); }
    virtual bool alloc_weights(vt_context * ctx) = 0;
    virtual bool alloc_graph(vt_graph * g) = 0;
    virtual void release_graph(vt_graph * g) = 0;
    virtual bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) = 0;
    virtual bool get_tensor_f32(const vt_tensor * t, float * dst) = 0;
    virtual bool compute(vt_graph * g) = 0;
    virtual bool profile(vt_graph * g, double * ms) = 0;
    virtual size_t allocated_bytes() const = 0;
    virtual bool supports(vt_op op) const { return op != VT_OP_LOG_MEL; }
    // at once, by default: in, compute, out (converted on the host)
    virtual bool submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host,
                        const vt_tensor * out, void * out_host, vt_type out_type, int slot);
    virtual bool wait(int slot) { (void)slot; return true; }
    virtual bool prepare(vt_graph * g) { (void)g; return true; }
    virtual void * host_alloc(size_t bytes);
    virtual void host_free(void * p);
};

// Sets data of every view in g from its source (after the arena or weights are placed).
void vt_graph_resolve_views(vt_graph * g);

#endif
