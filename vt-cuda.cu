// vt-cuda.cu - the CUDA backend of vt: f16/bf16 compute with f32 accumulation (and FP8 GEMMs).
//
// What runs where (one stream per backend; the whole forward captured once per graph as a
// CUDA graph and replayed by later vt_backend_compute calls):
//
//   linear      cuBLASLt GEMM (f32 compute; vt-cuda-gemm.cuh), bias in its BIAS epilogue,
//               residual as beta = 1 with C = residual, fc1's bias and GELU (tanh form) in its
//               epilogue; the algorithm timed among the heuristic's best 8 at alloc_graph
//               (tune_gemm; VT_GEMM_TUNE=0 keeps the heuristic's first). FP8 mode
//               (vt_backend_params.fp8, weights flagged vt_set_fp8): e4m3 operands, the
//               input quantized per row by quantize_rows_kernel, or by the LayerNorm or fc1's
//               GELU (tanh form) before it (plan_fp8), per-channel x per-token scales in cuBLASLt
//   conv1d_k3   im2col_k3_kernel (on device, any input strides and type; vt-cuda-conv.cuh) +
//   conv2d_k3s2 cuBLASLt GEMM, then epilogue_kernel (vt-cuda-elementwise.cuh): bias + exact
//               GELU + the positional add, in f32
//   layer_norm  layer_norm_vec_kernel (vt-cuda-norm.cuh): a warp per row (per 4 rows for many
//               rows), 16-byte loads, the rows in registers, two-pass f32 statistics
//               (layer_norm_kernel for the odd shapes)
//   attention   on compute capability 9.0 (H100/H200): attention_wgmma_kernel
//               (vt-cuda-attention-wgmma.cuh), FlashAttention-3 style: a TMA producer warpgroup
//               fills a 3-stage K/V ring (mbarriers), two or three consumer warpgroups of 64
//               query rows (by the last wave's fill) run S = Q K^T and O += P V on wgmma (P from
//               registers), the softmax of one key tile beside the P V of the last, the
//               consumers taking turns (ping-pong).
//               Elsewhere (and with VT_ATTENTION=fa2): attention_kernel (vt-cuda-attention.cuh),
//               FlashAttention-2 style, mma.sync m16n8k16, K/V tiles double-buffered with
//               cp.async. Both: head_dim 64, online softmax in f32, exact key count (the tail
//               of the last tile masked)
//   log_mel     vt-cuda-mel.cuh: a 20 x 20 split DFT per frame in double, mel sums, clamp
//   projector   avg_pool2, rms_norm, swiglu, relu, silu, silu_mul, stack, rope_qk, rope_time:
//   ops         vt-cuda-projector.cuh (rms_norm's kernel in vt-cuda-norm.cuh)
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
// Environment: VT_ATTENTION picks the attention kernel when a backend starts: fa2 runs
// attention_kernel on every device (to test it on Hopper too, or as a fallback); wgmma insists on
// attention_wgmma_kernel (the backend does not start off cc 9.0, or where the build has no sm_90a
// code or the driver no TMA); unset: wgmma on cc 9.0 when the build has sm_90a code (the Makefile's
// and CMake's do), fa2 elsewhere. The wgmma kernel's measurement variants (no ping-pong, a block a
// work tile, tile heights held fixed) are not in this build: dev/cuda/attention.cu runs them.
// WHISPER_AUDIO_CUBLASLT and WHISPER_AUDIO_NVIDIA_LIB_DIRS: where cuBLASLt is looked for ("the
// CUDA libraries, found at run time", vt-cuda-gemm.cuh).
//
// Sections: the kernel families, a header each that compiles on its own (make
// check-cuda-headers): vt-cuda-common.cuh (checks, grid maths, device helpers), the portable
// kernels (vt-cuda-conv.cuh, vt-cuda-elementwise.cuh, vt-cuda-norm.cuh, vt-cuda-projector.cuh,
// vt-cuda-mel.cuh) and the NVIDIA-only parts (vt-cuda-ptx.cuh: inline PTX; vt-cuda-gemm.cuh:
// cuBLASLt, opened at run time, and the FP8 quantization; vt-cuda-attention.cuh and
// vt-cuda-attention-wgmma.cuh: the two attention kernels), each with its kernels and launchers;
// then in this file the device allocator, the attention dispatch, the backend (its state, then
// its methods by section) and the entry points of vt.h.

// vt.h's backend section first: the headers below include vt.h again, without it
#define VT_BACKEND_IMPL
#include "vt.h"

#include "vt-cuda-common.cuh"
#include "vt-cuda-ptx.cuh"
#include "vt-cuda-gemm.cuh"
#include "vt-cuda-attention.cuh"
#include "vt-cuda-attention-wgmma.cuh"
#include "vt-cuda-conv.cuh"
#include "vt-cuda-elementwise.cuh"
#include "vt-cuda-norm.cuh"
#include "vt-cuda-projector.cuh"
#include "vt-cuda-mel.cuh"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

// =====================================================================================
// utilities of the backend
// =====================================================================================

// Every device allocation of the backend goes through here: cudaMalloc, its error returned as
// is (callers name what they allocated in their message).
template <typename T> static cudaError_t device_malloc(T ** p, size_t bytes) {
    return cudaMalloc((void **)p, bytes);
}

// =====================================================================================
// dispatch: the attention kernel this backend runs
// =====================================================================================

// attention: attention_wgmma_kernel on Hopper (wgmma: the backend's choice at init), else
// attention_kernel (also where a view's strides do not fit TMA).
static bool launch_attention(const launch_ctx & lc, vt_tensor * t, bool wgmma) {
    if (t->iparams[3]) {                   // vt_attention_window: its own kernel
        return t->type == VT_TYPE_F16 ? launch_attention_window<__half>(lc, t) : launch_attention_window<__nv_bfloat16>(lc, t);
    }
    if (wgmma) {
        bool launched = false;
        const bool ok = t->type == VT_TYPE_F16 ? launch_attention_wgmma<__half>(lc, t, &launched)
                                               : launch_attention_wgmma<__nv_bfloat16>(lc, t, &launched);
        if (!ok || launched) return ok;
    }
    if (t->type == VT_TYPE_F16) return launch_attention_mt<__half, ATT_MT>(lc, t);
    return launch_attention_mt<__nv_bfloat16, ATT_MT>(lc, t);
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
    int64_t chunk_windows = 0;   // conv1d_k3, conv2d_k3s2: windows per im2col chunk (conv2d: 0 runs it direct)
    size_t stage_offset = 0;     // conv2d_k3s2_pair: its first stage's slice in the im2col buffer, from there
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
    bool att_wgmma = false;                     // attention_wgmma_kernel on cc 9.0, else attention_kernel
    cudaStream_t stream = nullptr;
    launch_ctx lc;                              // stream and SM count, for the launchers
    cublasLtHandle_t lt = nullptr;
    void * lt_ws = nullptr;                     // cuBLASLt workspace, allocated with the first graph
    mel_tables * mel_tab = nullptr;             // log_mel's window and twiddles, on the device

    std::vector<void *> weight_buffers;         // one per alloc_weights call
    size_t weight_bytes = 0;
    uint64_t weights_gen = 1;                   // bumped by alloc_weights: captured graphs re-capture
    std::unordered_map<const vt_tensor *, void *> shadow;   // f32 weight -> its compute-type copy

    // FP8 mode (vt_backend_params.fp8): each 2-D weight that an FP8 GEMM can take gets an
    // e4m3 copy with a scale per row (output channel), made on the device at set_tensor.
    struct fp8_weight { void * q; float * scale; };
    bool fp8 = false;
    std::unordered_map<const vt_tensor *, fp8_weight> fp8_weights;
    std::unordered_map<std::string, cublasLtMatmulAlgo_t> tuned;   // tune_gemm's choices

    std::unordered_map<const vt_tensor *, float *> f32_copies;   // graph outputs -> their f32 copies
    void * staging = nullptr;                   // pinned host memory for downloads
    size_t staging_bytes = 0;
    // set_tensor's pieces in flight: two pinned host buffers, two device ones for a piece to be
    // converted, each reused once its event says the piece before last is through
    // piece: the bytes a buffer holds, UPLOAD_PIECE or the largest weight's (alloc_weights)
    struct uploader { void * host[2] = {}; void * raw[2] = {}; cudaEvent_t done[2] = {}; int next = 0; size_t piece = 0; } up_bufs;

    std::set<vt_graph *> graphs;                // allocated here, released by the destructor
    size_t graph_bytes = 0;

    cudaStream_t up = nullptr, down = nullptr;  // submit's copies in and out
    submit_slot slots[2];

    // The methods, defined below a section each:
    // starting and stopping
    bool init(int dev, vt_type type, bool fp8_gemms);
    ~cuda_backend() override;
    const char * name() const override { return label; }
    vt_type compute_type() const override { return ctype; }

    // memory: weights (with their shadows and FP8 copies), uploads and downloads
    bool alloc_weights(vt_context * ctx) override;
    bool fp8_eligible(const vt_tensor * t) const;
    bool ensure_staging(size_t bytes);
    bool upload(void * dst, vt_type dst_type, const void * src, vt_type src_type, size_t n);
    bool ensure_uploader();
    bool finish_uploads();
    bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) override;
    bool copy_rows(vt_tensor * dst, const vt_tensor * src, int64_t row0) override;
    bool get_tensor_f32(const vt_tensor * t, float * dst) override;
    size_t allocated_bytes() const override;

    // graphs: alloc_graph places the arena and plans every node (GEMM descriptors, timed
    // algorithms, FP8 fusions, scratch), so that running only launches
    bool alloc_graph(vt_graph * g) override;
    bool plan_linear(vt_tensor * t, node_plan & p, const graph_state * s, bool tune);
    void tune_gemm(lt_gemm & gm, const std::string & key, const void * w, const void * x, const void * c, void * d,
                   const void * bias);
    bool plan_fp8(vt_graph * g, graph_state * s);
    bool plan_conv(vt_tensor * t, node_plan & p, size_t & im2col_need);
    bool plan_conv2d(vt_tensor * t, node_plan & p, size_t & im2col_need);
    void free_state(graph_state * s);
    void release_graph(vt_graph * g) override;

    // running: a node's launches, the whole forward captured once as a CUDA graph
    bool run_node(graph_state * s, size_t i, vt_tensor * t);
    bool run_all(vt_graph * g, graph_state * s);
    bool convert_outputs(graph_state * s);
    bool capture(graph_state * s, vt_graph * g);
    bool launch(graph_state * s, vt_graph * g);
    bool prepare(vt_graph * g) override;
    bool compute(vt_graph * g) override;
    bool profile(vt_graph * g, double * ms) override;

    // asynchronous runs: upload | forward | download on three streams
    void * host_alloc(size_t bytes) override;
    void host_free(void * p) override { cudaFreeHost(p); }
    bool ensure_slot_buffer(void *& buf, size_t & have, size_t bytes);
    bool submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                void * out_host, vt_type out_type, int slot) override;
    bool wait(int slot) override;
    bool ready(int slot) override;
};

// ---- the backend: starting and stopping ----

cuda_backend::~cuda_backend() {
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
    if (mel_tab) cudaFree(mel_tab);
    if (staging) cudaFreeHost(staging);
    finish_uploads();
    if (lt) g_lt.cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
}

bool cuda_backend::init(int dev, vt_type type, bool fp8_gemms) {
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
    snprintf(label, sizeof(label), "cuda (%s)%s", prop.name, fp8 ? " fp8" : "");
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    lc.stream = stream;
    lc.n_sm = prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    for (submit_slot & sl : slots)
        for (cudaEvent_t * e : {&sl.uploaded, &sl.consumed, &sl.computed, &sl.done})
            CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    CUBLAS_CHECK(g_lt.cublasLtCreate(&lt));
    mel_tables tables;
    mel_tables_fill(tables);
    CUDA_CHECK(device_malloc(&mel_tab, sizeof(tables)));
    CUDA_CHECK(cudaMemcpy(mel_tab, &tables, sizeof(tables), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaFuncSetAttribute(log_mel_frames_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)log_mel_smem_bytes()));
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__half, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_smem_bytes(ATT_MT)));
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, ATT_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)attention_smem_bytes(ATT_MT)));
    // the attention kernel: wgmma on cc 9.0 (its sm_90a code runs there only); VT_ATTENTION
    // = fa2 forces attention_kernel, = wgmma insists on the new one
    const char * env = getenv("VT_ATTENTION");
    const std::string want = env ? env : "";
    const bool hopper = prop.major == 9 && prop.minor == 0;
    const bool insist = want == "wgmma";
    if (!want.empty() && want != "fa2" && !insist) {
        vt_set_error("cuda: VT_ATTENTION=%s; fa2 or wgmma (unset: wgmma on compute capability 9.0, else fa2; the "
                     "wgmma kernel's measurement variants are dev/cuda/attention.cu's)", env);
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
    if (hopper && built && want != "fa2" && tensor_map_encode()) {
        att_wgmma = true;
    } else if (insist) {
        vt_set_error("cuda: VT_ATTENTION=%s: the driver has no cuTensorMapEncodeTiled (TMA)", env);
        return false;
    }
    if (att_wgmma && !(allow_attention_wgmma_smem<__half>() && allow_attention_wgmma_smem<__nv_bfloat16>())) return false;
    return true;
}

// ---- the backend: memory ----

// Weights go up in pieces of at most UPLOAD_PIECE bytes, the host data as it is (converted on the
// device: one host core converting a large model's f16 to bf16 is slower than the copy). Each
// piece is copied into pinned memory by a few threads (the model file's pages are touched there),
// then goes up and is converted while the host copies the next: the device is waited for only
// when a buffer comes round again, and once at the end (finish_uploads).
static const size_t UPLOAD_PIECE = (size_t)32 << 20;

bool cuda_backend::alloc_weights(vt_context * ctx) {
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
    // the upload's pinned buffers no larger than the largest weight as f32 (pinning costs time
    // per MiB at init, which a small model's buffers should not pay for 32 MiB)
    if (!up_bufs.host[0]) {
        size_t largest = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            const vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (t->flags & VT_FLAG_WEIGHT) largest = std::max(largest, (size_t)vt_nelements(t) * sizeof(float));
        }
        up_bufs.piece = std::min<size_t>(UPLOAD_PIECE, align_up(std::max<size_t>(largest, 1), (size_t)1 << 20));
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
bool cuda_backend::fp8_eligible(const vt_tensor * t) const {
    return fp8 && (t->flags & VT_FLAG_FP8) && (t->type == VT_TYPE_F16 || t->type == VT_TYPE_BF16) &&
           t->ne[2] == 1 && t->ne[3] == 1 &&
           t->ne[0] % 16 == 0 && t->ne[1] % 16 == 0 && t->ne[0] <= QUANT_MAX_K;
}

bool cuda_backend::ensure_staging(size_t bytes) {
    if (bytes <= staging_bytes) return true;
    if (staging) CUDA_CHECK(cudaFreeHost(staging));
    staging = nullptr;
    staging_bytes = 0;
    CUDA_CHECK(cudaMallocHost(&staging, bytes));
    staging_bytes = bytes;
    return true;
}

bool cuda_backend::ensure_uploader() {
    if (up_bufs.piece == 0) up_bufs.piece = UPLOAD_PIECE;
    for (int b = 0; b < 2; b++) {
        if (up_bufs.host[b]) continue;
        CUDA_CHECK(cudaMallocHost(&up_bufs.host[b], up_bufs.piece));
        CUDA_CHECK(device_malloc(&up_bufs.raw[b], up_bufs.piece));
        CUDA_CHECK(cudaEventCreateWithFlags(&up_bufs.done[b], cudaEventDisableTiming));
    }
    return true;
}

// The uploads' end: their errors reported, their buffers released (a later set_tensor makes them again).
bool cuda_backend::finish_uploads() {
    if (!up_bufs.host[0]) return true;
    const cudaError_t e = cudaStreamSynchronize(stream);
    for (int b = 0; b < 2; b++) {
        if (up_bufs.host[b]) cudaFreeHost(up_bufs.host[b]);
        if (up_bufs.raw[b]) cudaFree(up_bufs.raw[b]);
        if (up_bufs.done[b]) cudaEventDestroy(up_bufs.done[b]);
    }
    up_bufs = uploader();
    if (e != cudaSuccess) { vt_set_error("cuda: uploading the weights failed: %s", cudaGetErrorString(e)); return false; }
    return true;
}

// memcpy over up to 4 threads for a large piece (pages of a mapped file fault in parallel).
static void parallel_copy(void * dst, const void * src, size_t bytes) {
    const size_t n_threads = std::min<size_t>({4, std::max(1u, std::thread::hardware_concurrency()), bytes >> 22});
    if (n_threads <= 1) { memcpy(dst, src, bytes); return; }
    const size_t part = (bytes / n_threads + 63) & ~(size_t)63;
    std::vector<std::thread> th;
    for (size_t i = 1; i < n_threads; i++) {
        const size_t off = i * part;
        if (off < bytes) th.emplace_back([=] { memcpy((char *)dst + off, (const char *)src + off, std::min(part, bytes - off)); });
    }
    memcpy(dst, src, std::min(part, bytes));
    for (std::thread & t : th) t.join();
}

bool cuda_backend::upload(void * dst, vt_type dst_type, const void * src, vt_type src_type, size_t n) {
    if (!ensure_uploader()) return false;
    const size_t es = vt_type_size(src_type), ds = vt_type_size(dst_type), chunk = up_bufs.piece / es;
    for (size_t i = 0; i < n; i += chunk) {
        const size_t k = std::min(chunk, n - i);
        const int b = up_bufs.next;
        up_bufs.next ^= 1;
        CUDA_CHECK(cudaEventSynchronize(up_bufs.done[b]));          // its last piece is through
        parallel_copy(up_bufs.host[b], (const char *)src + i * es, k * es);
        char * out = (char *)dst + i * ds;
        if (src_type == dst_type) {
            CUDA_CHECK(cudaMemcpyAsync(out, up_bufs.host[b], k * es, cudaMemcpyHostToDevice, stream));
        } else {
            CUDA_CHECK(cudaMemcpyAsync(up_bufs.raw[b], up_bufs.host[b], k * es, cudaMemcpyHostToDevice, stream));
            if (!launch_convert(lc, out, dst_type, up_bufs.raw[b], src_type, k)) return false;
        }
        CUDA_CHECK(cudaEventRecord(up_bufs.done[b], stream));
    }
    return true;
}

// dst's windows from src's rows [row0, row0 + R), one strided copy on the compute stream (ordered
// before the next forward's launch)
bool cuda_backend::copy_rows(vt_tensor * dst, const vt_tensor * src, int64_t row0) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMemcpy2DAsync(dst->data, dst->nb[2], (const char *)src->data + row0 * src->nb[1], src->nb[2], dst->nb[2],
                                 (size_t)dst->ne[2], cudaMemcpyDeviceToDevice, stream));
    return true;
}

bool cuda_backend::set_tensor(vt_tensor * t, const void * src, vt_type src_type) {
    CUDA_CHECK(cudaSetDevice(device));
    const size_t n = (size_t)vt_nelements(t);
    auto it = shadow.find(t);
    if (src_type == t->type && it == shadow.end() && n * vt_type_size(src_type) < ((size_t)1 << 20)) {
        // small and as is (a bias, a graph's input): one copy, no pieces
        CUDA_CHECK(cudaMemcpyAsync(t->data, src, n * vt_type_size(src_type), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return true;
    }
    if (!upload(t->data, t->type, src, src_type, n)) return false;
    if (it != shadow.end() && !upload(it->second, ctype, src, src_type, n)) return false;
    auto f = fp8_weights.find(t);   // the e4m3 copy, from the 16-bit one just written
    if (f != fp8_weights.end()) {
        if (!launch_quantize(lc, t->type, f->second.q, f->second.scale, t->data, false, nullptr, t->ne[1], t->ne[0])) return false;
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return true;
}

bool cuda_backend::get_tensor_f32(const vt_tensor * t, float * dst) {
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

size_t cuda_backend::allocated_bytes() const {
    return weight_bytes + graph_bytes + (lt_ws ? LT_WORKSPACE_BYTES : 0);
}

// ---- the backend: graphs ----

bool cuda_backend::plan_linear(vt_tensor * t, node_plan & p, const graph_state * s, bool tune) {
    const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
    const int act = t->iparams[1];
    if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
        vt_set_error("cuda: linear '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
        return false;
    }
    const int64_t K = x->ne[0], N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
    // Act NONE: bias (its shadow) in the GEMM's epilogue, residual as beta = 1: one kernel.
    // GELU (fc1) in f16/bf16: bias and GELU in the GEMM's epilogue too, cuBLASLt's tanh form of
    // GELU. It saves the pass over fc1's output and measured closer to float64's exact-GELU model
    // than the pass (tests/gpu/parity.py; docs/BENCHMARKS.md), likely because the epilogue
    // applies GELU to the f32 accumulator where the pass read back the product rounded to
    // f16/bf16, a rounding larger than tanh's departure from erf (at most 4.7e-4, at x = -2.7).
    // FP8's fc1 is a plain GEMM whose bias and GELU (the same tanh form) fc2's quantization
    // applies (quantize_rows_kernel); the rest (a GELU linear with a residual, an FP8 fc1 whose
    // output is also read elsewhere) a plain GEMM, then epilogue_kernel (f32 bias, exact GELU, residual).
    const bool lt_gelu = act == VT_ACT_GELU && !res && !p.fp8 && !p.quantize_out && (!b || shadow.count(b));
    const void * lt_bias = nullptr;
    if ((act == VT_ACT_NONE || lt_gelu) && b) {
        auto it = shadow.find(b);
        if (it != shadow.end()) lt_bias = it->second;
    }
    const bool lt_res = act == VT_ACT_NONE && res;
    p.epi_bias = b && !lt_bias;
    p.epi_res = res && !lt_res;
    p.epilogue = p.epi_bias || p.epi_res || (act != VT_ACT_NONE && !lt_gelu);
    uint32_t align_cd = alignment_of((uintptr_t)t->data);
    if (lt_res) align_cd = std::min(align_cd, alignment_of((uintptr_t)res->data));
    const void * wq = p.fp8 ? fp8_weights.at(w).q : w->data, * xq = p.fp8 ? s->fp8_x : x->data;
    const uint32_t align_a = alignment_of((uintptr_t)wq), align_b = alignment_of((uintptr_t)xq);
    if (!lt_gemm_plan(lt, p.gemm, t->type, rows, N, K, lt_bias, lt_res, align_a, align_b, align_cd, t->name,
                      p.fp8 ? fp8_weights.at(w).scale : nullptr, p.fp8 ? s->fp8_scale : nullptr, lt_gelu)) {
        return false;
    }
    char key[160];
    snprintf(key, sizeof(key), "%d %d %lld %lld %lld %d %d %u %u %u %d", (int)t->type, (int)p.fp8, (long long)rows,
             (long long)N, (long long)K, (int)(lt_bias != nullptr), (int)lt_res, align_a, align_b, align_cd, (int)lt_gelu);
    if (tune) {
        tune_gemm(p.gemm, key, wq, xq, lt_res ? res->data : nullptr, t->data, lt_bias);
    } else {                                          // a shape timed before keeps its choice
        auto it = tuned.find(key);
        if (it != tuned.end()) p.gemm.algo = it->second;
    }
    return true;
}

// The graph nodes one cuBLASLt call of this algorithm adds (captured, not run): some
// algorithms put a small memset before their kernel. 0 when it cannot be told.
static size_t lt_gemm_nodes(cublasLtHandle_t lt, cudaStream_t stream, const lt_gemm & gm, const void * w, const void * x,
                            const void * c, void * d, const void * bias, void * ws) {
    cudaGraph_t g = nullptr;
    size_t n = 0;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) { cudaGetLastError(); return 0; }
    const bool ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, ws);
    if (cudaStreamEndCapture(stream, &g) == cudaSuccess && ok) cudaGraphGetNodes(g, nullptr, &n);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    return ok ? n : 0;
}

// In a replayed graph each node after the first costs a dependency's latency that timing
// the calls back to back does not see: the H200's timeline of large-v3 at batch 1 had 5.6 us
// more gap per qkv GEMM with cuBLASLt's memset before it (0.206 ms against 0.028 over 32).
static const float LT_EXTRA_NODE_MS = 0.0056f;

// Picks the fastest of the heuristic's candidate algorithms for a GEMM by timing each on
// the graph's own buffers (3 runs after a warm one; a call's extra graph nodes charged
// LT_EXTRA_NODE_MS each), once per shape and setting; the heuristic's first choice is kept
// when VT_GEMM_TUNE=0; VT_GEMM_TUNE=log prints each candidate's time and nodes to stderr.
// Writes only the node's output.
void cuda_backend::tune_gemm(lt_gemm & gm, const std::string & key, const void * w, const void * x, const void * c, void * d,
                             const void * bias) {
    auto it = tuned.find(key);
    if (it != tuned.end()) { gm.algo = it->second; return; }
    const char * env = getenv("VT_GEMM_TUNE");
    if (gm.candidates.size() > 1 && !(env && strcmp(env, "0") == 0)) {
        cudaEvent_t e0 = nullptr, e1 = nullptr;
        float best = INFINITY;
        cublasLtMatmulAlgo_t best_algo = gm.algo;
        const bool log = env && strcmp(env, "log") == 0;
        int best_i = -1;
        if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
            for (size_t i = 0; i < gm.candidates.size(); i++) {
                const cublasLtMatmulAlgo_t & a = gm.candidates[i];
                gm.algo = a;
                const size_t nodes = lt_gemm_nodes(lt, stream, gm, w, x, c, d, bias, lt_ws);
                bool ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws) && cudaEventRecord(e0, stream) == cudaSuccess;
                for (int r = 0; ok && r < 3; r++) ok = lt_gemm_run(lt, stream, gm, w, x, c, d, bias, lt_ws);
                float ms = INFINITY;
                ok = ok && cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                     cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
                const float per_call = ms / 3 + (nodes > 1 ? (float)(nodes - 1) * LT_EXTRA_NODE_MS : 0.0f);
                if (ok && per_call < best) { best = per_call; best_algo = a; best_i = (int)i; }
                if (log) fprintf(stderr, "vt: gemm tune [%s] candidate %zu: %.4f ms a call, %zu graph nodes%s\n", key.c_str(), i,
                                 ok ? ms / 3 : -1.0f, nodes, ok ? "" : " (failed)");
            }
        }
        if (log) fprintf(stderr, "vt: gemm tune [%s] chose candidate %d\n", key.c_str(), best_i);
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
bool cuda_backend::plan_fp8(vt_graph * g, graph_state * s) {
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

bool cuda_backend::plan_conv(vt_tensor * t, node_plan & p, size_t & im2col_need) {
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

// conv2d_k3s2: im2col + GEMM as conv1d_k3 (K = 9 C_in), or the direct kernel where K is no multiple
// of 8 (the stem's first stage: C_in 1). A vt_conv2d_k3s2_pair runs its first stage (direct) a slice
// of windows at a time into the im2col buffer's tail, then the second from there.
bool cuda_backend::plan_conv2d(vt_tensor * t, node_plan & p, size_t & im2col_need) {
    const vt_tensor * x = t->src[0], * w = t->src[1], * w1 = t->src[3];
    if (w->type != VT_TYPE_F16 && w->type != VT_TYPE_BF16) {
        vt_set_error("cuda: conv2d_k3s2 '%s': weight type %s; f16 or bf16 only", t->name, vt_type_name(w->type));
        return false;
    }
    for (int d = 0; d < 4; d++) {
        if (x->nb[d] % vt_type_size(x->type) != 0) {
            vt_set_error("cuda: conv2d_k3s2 '%s': input strides must be whole elements", t->name);
            return false;
        }
    }
    const int64_t K = 9 * w->ne[2], N = w->ne[3], rows_w = t->ne[1] * t->ne[2], B = t->ne[3];
    const vt_tensor * direct = w1 ? w1 : K % 8 != 0 ? w : nullptr;   // the stage the direct kernel runs
    if (direct && (9 * direct->ne[2] % 8 == 0 || conv2d_direct_smem(9 * direct->ne[2], direct->ne[3]) > 48 * 1024)) {
        vt_set_error("cuda: conv2d_k3s2 '%s': %lld input channels x %lld outputs: the direct kernel takes fewer than 8 input "
                     "channels (not a multiple of 8) and its weight in 48 KiB", t->name, (long long)direct->ne[2], (long long)direct->ne[3]);
        return false;
    }
    p.chunk_windows = 0;
    if (!w1 && direct) return true;                    // direct: bias and GELU in the kernel
    if (K % 8 != 0) {
        vt_set_error("cuda: conv2d_k3s2 '%s': a pair's second stage of %lld input channels: a multiple of 8 only",
                     t->name, (long long)w->ne[2]);
        return false;
    }
    const size_t es = vt_type_size(t->type);
    const size_t per_window = (size_t)rows_w * K * es;
    const conv2d_geom g1 = conv2d_geom_of(t);
    const size_t per_window1 = w1 ? (size_t)(g1.T_out * g1.F_out * w1->ne[3]) * es : 0;   // the first stage's output
    int64_t cw = 1;                                    // the largest divisor of B that fits the cap
    for (int64_t d = B; d >= 1; d--) {
        if (B % d == 0 && (d == 1 || (size_t)d * (per_window + per_window1) <= IM2COL_CAP_BYTES)) { cw = d; break; }
    }
    p.chunk_windows = cw;
    p.stage_offset = align_up((size_t)cw * per_window, VT_ARENA_ALIGN);
    im2col_need = std::max(im2col_need, p.stage_offset + align_up((size_t)cw * per_window1, VT_ARENA_ALIGN));
    p.epilogue = p.epi_bias = true;
    const uint32_t align_d = std::min(alignment_of((uintptr_t)t->data), alignment_of((uintptr_t)(cw * rows_w * N * es)));
    return lt_gemm_plan(lt, p.gemm, t->type, cw * rows_w, N, K, nullptr, false, alignment_of((uintptr_t)w->data),
                        256, align_d, t->name);
}

void cuda_backend::free_state(graph_state * s) {
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

bool cuda_backend::alloc_graph(vt_graph * g) {
    CUDA_CHECK(cudaSetDevice(device));
    if (!finish_uploads()) return false;
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
    size_t im2col_need = 0, mel_blocks = 0, mel_rows = 0;
    bool ok = !fp8 || plan_fp8(g, s);
    for (size_t i = 0; ok && i < g->nodes.size(); i++) {
        vt_tensor * t = g->nodes[i];
        switch (t->op) {
            case VT_OP_LINEAR:     ok = plan_linear(t, s->plans[i], s, g->tune); break;
            case VT_OP_CONV1D_K3:  ok = plan_conv(t, s->plans[i], im2col_need); break;
            case VT_OP_CONV2D_K3S2: ok = plan_conv2d(t, s->plans[i], im2col_need); break;
            case VT_OP_ADD_ROWS:   break;
            case VT_OP_CONCAT_ROWS: break;
            case VT_OP_ATTENTION:  ok = attention_supported(t); break;
            case VT_OP_LAYER_NORM: break;
            case VT_OP_LOG_MEL:
                if (t->iparams[1] != MEL_N_FFT) {
                    vt_set_error("cuda: log_mel '%s': n_fft %d; the CUDA kernel's DFT has %d points (20 x 20)",
                                 t->name, t->iparams[1], MEL_N_FFT);
                    ok = false;
                    break;
                }
                mel_blocks = std::max(mel_blocks, (size_t)t->src[0]->ne[1] * log_mel_blocks(t->iparams[3]));
                mel_rows = std::max(mel_rows, (size_t)t->src[1]->ne[1]);
                break;
            case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK: case VT_OP_ROPE_TIME: case VT_OP_RELU: case VT_OP_SILU: case VT_OP_SILU_MUL: break;
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
    if (ok && mel_blocks > 0) {                 // log_mel's scratch, shared by its nodes (one after another)
        err = device_malloc(&s->mel_max, mel_blocks * sizeof(float));
        if (err == cudaSuccess) err = device_malloc(&s->mel_ranges, mel_rows * sizeof(int2));
        if (err != cudaSuccess) {
            vt_set_error("cuda: cudaMalloc of the log-mel scratch failed: %s", cudaGetErrorString(err));
            ok = false;
        } else {
            s->mel_bytes = mel_blocks * sizeof(float) + mel_rows * sizeof(int2);
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

void cuda_backend::release_graph(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    graphs.erase(g);
    if (!s) return;
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    free_state(s);
    g->backend_state = nullptr;
}

// ---- the backend: running ----

bool cuda_backend::run_node(graph_state * s, size_t i, vt_tensor * t) {
    node_plan & p = s->plans[i];
    switch (t->op) {
        case VT_OP_LINEAR: {
            const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
            const int64_t N = w->ne[1], rows = x->ne[1] * x->ne[2] * x->ne[3];
            const void * lt_bias = p.gemm.bias ? shadow[b] : nullptr;
            if (p.fp8) {
                const int64_t K = x->ne[0];
                if (!p.x_quantized && !launch_quantize(lc, x->type, s->fp8_x, s->fp8_scale, x->data, false, nullptr, rows, K))
                    return false;
                if (!lt_gemm_run(lt, stream, p.gemm, fp8_weights.at(w).q, s->fp8_x, res ? res->data : nullptr, t->data, lt_bias, lt_ws))
                    return false;
            } else if (!lt_gemm_run(lt, stream, p.gemm, w->data, x->data, res ? res->data : nullptr, t->data, lt_bias, lt_ws)) {
                return false;
            }
            if (p.quantize_out) {   // gelu(y + b), quantized for the next node (plan_fp8)
                return launch_quantize(lc, t->type, s->fp8_x, s->fp8_scale, t->data, true,
                                       b ? (const float *)b->data : nullptr, rows, N);
            }
            if (p.epilogue) {
                return launch_epilogue(lc, t->type, t->data, p.epi_bias ? (const float *)b->data : nullptr,
                                       p.epi_res ? res->data : nullptr, nullptr, 1, rows, N, t->iparams[1]);
            }
            return true;
        }
        case VT_OP_CONV1D_K3: {
            const vt_tensor * w = t->src[1], * b = t->src[2], * add = t->src[3];
            const int64_t N = w->ne[2], T_out = t->ne[1], B = t->ne[2];
            const int64_t cw = p.chunk_windows, chunk_rows = cw * T_out;
            const size_t es = vt_type_size(t->type);
            for (int64_t b0 = 0; b0 < B; b0 += cw) {
                if (!launch_im2col(lc, t->type, s->im2col, t, b0, chunk_rows)) return false;
                void * d = (char *)t->data + (size_t)(b0 * T_out * N) * es;
                if (!lt_gemm_run(lt, stream, p.gemm, w->data, s->im2col, nullptr, d, nullptr, lt_ws)) return false;
            }
            const int64_t add_rows = t->iparams[2] ? t->iparams[2] / t->iparams[0] : T_out;   // vt_conv1d_k3_chunks: per chunk
            return launch_epilogue(lc, t->type, t->data, (const float *)b->data, nullptr,
                                   add ? (const float *)add->data : nullptr, add_rows, B * T_out, N, t->iparams[1]);
        }
        case VT_OP_CONV2D_K3S2: {
            const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * w1 = t->src[3];
            const float * x_len = t->src[4] ? (const float *)t->src[4]->data : nullptr;
            const int act = t->iparams[1];
            const conv2d_geom g = conv2d_geom_of(t);
            if (p.chunk_windows == 0)
                return launch_conv2d(lc, x->type, g, x->data, x_len, w, (const float *)b->data, act, t->data, nullptr, 0, vt_nelements(t) / w->ne[3]);
            const int64_t N = w->ne[3], rows_w = t->ne[1] * t->ne[2], B = t->ne[3];
            const int64_t cw = p.chunk_windows, chunk_rows = cw * rows_w;
            const size_t es = vt_type_size(t->type), xs = vt_type_size(x->type);
            void * stage = (char *)s->im2col + p.stage_offset;
            const conv2d_geom g2 = w1 ? conv2d_second_geom_of(t) : g;
            for (int64_t b0 = 0; b0 < B; b0 += cw) {
                if (w1) {   // the pair's first stage for windows [b0, b0 + cw), then the second's im2col from it
                    if (!launch_conv2d(lc, x->type, g, (const char *)x->data + (size_t)(b0 * g.sb) * xs, x_len ? x_len + b0 : nullptr,
                                       w1, (const float *)t->src[5]->data, act, stage, nullptr, 0, cw * g.T_out * g.F_out))
                        return false;
                    if (!launch_conv2d(lc, t->type, g2, stage, nullptr, w, nullptr, act, nullptr, s->im2col, 0, chunk_rows)) return false;
                } else if (!launch_conv2d(lc, x->type, g, x->data, x_len, w, nullptr, act, nullptr, s->im2col, b0, chunk_rows)) {
                    return false;
                }
                void * d = (char *)t->data + (size_t)(b0 * rows_w * N) * es;
                if (!lt_gemm_run(lt, stream, p.gemm, w->data, s->im2col, nullptr, d, nullptr, lt_ws)) return false;
            }
            return launch_epilogue(lc, t->type, t->data, (const float *)b->data, nullptr, nullptr, 1, B * rows_w, N, act);
        }
        case VT_OP_ADD_ROWS:   return launch_add_rows(lc, t);
        case VT_OP_CONCAT_ROWS: return launch_concat_rows(lc, t);
        case VT_OP_LAYER_NORM:
            return p.quantize_out ? launch_layer_norm(lc, t, s->fp8_x, s->fp8_scale) : launch_layer_norm(lc, t);
        case VT_OP_ATTENTION:  return launch_attention(lc, t, att_wgmma);
        case VT_OP_LOG_MEL:    return launch_log_mel(lc, t, mel_tab, s->mel_max, s->mel_ranges);
        case VT_OP_AVG_POOL2: case VT_OP_RMS_NORM: case VT_OP_SWIGLU: case VT_OP_STACK: case VT_OP_ROPE_QK: case VT_OP_ROPE_TIME: case VT_OP_RELU: case VT_OP_SILU: case VT_OP_SILU_MUL:
            return launch_projector_op(lc, t);
        default:
            vt_set_error("cuda: op %s ('%s') has no CUDA kernel", vt_op_name(t->op), t->name);
            return false;
    }
}

bool cuda_backend::run_all(vt_graph * g, graph_state * s) {
    for (size_t i = 0; i < g->nodes.size(); i++) {
        if (!run_node(s, i, g->nodes[i])) return false;
    }
    return convert_outputs(s);
}

bool cuda_backend::convert_outputs(graph_state * s) {
    for (auto & o : s->f32_outputs)
        if (!launch_convert(lc, o.second, VT_TYPE_F32, o.first->data, o.first->type, (size_t)vt_nelements(o.first))) return false;
    return true;
}

// Captures the whole forward as a CUDA graph, once (again after alloc_weights moved the
// weights); launch replays it.
bool cuda_backend::capture(graph_state * s, vt_graph * g) {
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

bool cuda_backend::launch(graph_state * s, vt_graph * g) {
    if (!capture(s, g)) return false;
    CUDA_CHECK(cudaGraphLaunch(s->exec, stream));
    return true;
}

bool cuda_backend::prepare(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    return capture(s, g);
}

bool cuda_backend::compute(vt_graph * g) {
    graph_state * s = (graph_state *)g->backend_state;
    if (!s) { vt_set_error("cuda: graph not allocated"); return false; }
    CUDA_CHECK(cudaSetDevice(device));
    if (!launch(s, g)) return false;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return true;
}

// Node by node, outside any CUDA graph, with an event pair around each node.
bool cuda_backend::profile(vt_graph * g, double * ms) {
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

// ---- the backend: asynchronous runs (upload | forward | download on three streams) ----

void * cuda_backend::host_alloc(size_t bytes) {
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

// A slot's device buffer of at least `bytes`; growing it waits for the work in flight.
bool cuda_backend::ensure_slot_buffer(void *& buf, size_t & have, size_t bytes) {
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
bool cuda_backend::submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                          void * out_host, vt_type out_type, int slot) {
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
    else if (!launch_convert(lc, sl.out, out_type, out->data, out->type, n_out)) return false;
    CUDA_CHECK(cudaEventRecord(sl.computed, stream));

    CUDA_CHECK(cudaStreamWaitEvent(down, sl.computed, 0));
    CUDA_CHECK(cudaMemcpyAsync(out_host, sl.out, out_bytes, cudaMemcpyDeviceToHost, down));
    CUDA_CHECK(cudaEventRecord(sl.done, down));
    return true;
}

bool cuda_backend::wait(int slot) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaEventSynchronize(slots[slot].done));
    return true;
}

// cudaErrorNotReady alone means "still running"; a failure is left for wait to report.
bool cuda_backend::ready(int slot) {
    if (cudaSetDevice(device) != cudaSuccess) return true;
    return cudaEventQuery(slots[slot].done) != cudaErrorNotReady;
}


} // namespace

// =====================================================================================
// the entry points of vt.h (vt.cpp's table of backends lists them under "cuda")
// =====================================================================================

vt_backend * vt_cuda_init(int device, const vt_backend_params * params) {
    const vt_type compute_type = params->compute_type;
    const bool fp8 = params->fp8;
    if (compute_type != VT_TYPE_F16 && compute_type != VT_TYPE_BF16) {
        vt_set_error("cuda: compute type must be f16 or bf16, not %s", vt_type_name(compute_type));
        return nullptr;
    }
    if (fp8 && compute_type != VT_TYPE_BF16) {
        vt_set_error("cuda: fp8 GEMMs run beside bf16 compute, not %s", vt_type_name(compute_type));
        return nullptr;
    }
    // what is missing, all of it in one message: a driver for our CUDA major, cuBLASLt. cuBLASLt
    // is opened on a thread of its own while the driver starts and makes the device's context
    // (a large library: its dlopen and the context are both tens to hundreds of ms)
    std::string lt_error;
    bool lt_ok = false;
    std::thread lt_open([&] { lt_ok = cublaslt_load(lt_error); });
    const int cuda_major = CUDART_VERSION / 1000;
    std::string missing;
    int driver = 0;   // CUDA version the driver supports, major * 1000 + minor * 10; 0: no driver
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    int n = 0;
    const cudaError_t count_err = driver == 0 ? cudaErrorNoDevice : cudaGetDeviceCount(&n);
    if (count_err == cudaSuccess && device >= 0 && device < n && cudaSetDevice(device) == cudaSuccess) cudaFree(nullptr);
    cudaGetLastError();   // what failed here is reported below
    lt_open.join();
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
    if (!lt_ok) missing += (missing.empty() ? "" : "; ") + lt_error;
    if (!missing.empty()) {
        vt_set_error("cuda: %s", missing.c_str());
        cudaGetLastError();
        return nullptr;
    }
    if (count_err != cudaSuccess || n == 0) {
        vt_set_error("no CUDA device (%s)", count_err != cudaSuccess ? cudaGetErrorString(count_err) : "device count is 0");
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

int vt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool vt_cuda_device_memory(int device, size_t * free_bytes, size_t * total_bytes) {
    const int n = vt_cuda_device_count();
    if (device < 0 || device >= n) {
        vt_set_error("cuda: device %d does not exist (%d present)", device, n);
        return false;
    }
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(device));
    const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    cudaSetDevice(prev);
    if (err != cudaSuccess) {
        vt_set_error("cuda: cudaMemGetInfo failed: %s", cudaGetErrorString(err));
        return false;
    }
    return true;
}
