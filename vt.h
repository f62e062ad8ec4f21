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
//   vt_backend_params bp = {VT_TYPE_F32, 4, false};
//   vt_backend * be  = vt_backend_init("cpu", 0, &bp);
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
#define VT_MAX_SRC  6
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
    VT_OP_ROPE_QK,
    VT_OP_RELU,
    VT_OP_SILU,
    VT_OP_CONV2D_K3S2,
    VT_OP_ADD_ROWS,
    VT_OP_SILU_MUL,
    VT_OP_ROPE_TIME,
    VT_OP_CONCAT_ROWS,
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
void        vt_set_fp8(vt_tensor * t);   // a weight that an fp8 backend may quantize (vt_backend_params)

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
// The same over chunks (Qwen2.5-Omni's conv stem, each chunk of n_window * 2 mel frames its own
// convolution): x's rows cut into chunks of `chunk` rows (a multiple of stride; T_in a multiple
// of it), each convolved alone with zero padding 1 at its own edges, and x's rows t >= x_len[b]
// of window b read as zero (or none when x_len is NULL), as transformers zeroes the padding of
// the last chunk. add [chunk / stride, C_out] (or NULL) is added to each chunk's output rows.
//   x_len [B] f32 holding whole numbers (a graph input), or NULL
vt_tensor * vt_conv1d_k3_chunks(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                                int stride, enum vt_act act, vt_tensor * add, int chunk, vt_tensor * x_len);

// The same, causal (Voxtral Realtime's conv stem, its left padding of 3 - stride): the input rows are
// `tail`'s 3 - stride rows (what came before x: the previous step's last rows; NULL: zeros) followed by
// x's, and each output reads the three that end at its own last tap, with no padding on the right.
//   tail [B, 3 - stride, C_in] ne {C_in, 3 - stride, B} contiguous, or NULL
//   out [B, T_in / stride, C_out], T_in a multiple of stride
//   out[b,t,o] = act(b[o] + sum_{i,k} w[o,i,k] xx[b, t*stride + k, i]), xx = tail's rows, then x's
vt_tensor * vt_conv1d_k3_causal(vt_context * ctx, vt_tensor * x, vt_tensor * tail, vt_tensor * w, vt_tensor * b,
                                int stride, enum vt_act act);
// conv2d_k3s2: a 3x3 convolution of stride 2 over frequency and time, zero padding 1 (Qwen3-Omni's
// conv stem, PyTorch's Conv2d(C_in, C_out, 3, 2, padding=1) on [N, C_in, freq, time]), over chunks
// of time: x's time rows cut into chunks of `chunk` rows (T_in a multiple of it, or chunk >= T_in:
// one chunk), each convolved alone with its own zero padding, and time rows t >= x_len[b] of
// window b read as zero (x_len NULL: none), as transformers pads the last chunk with zeros.
//   x   [B, T_in, F_in, C_in] ne {C_in, F_in, T_in, B} contiguous; or, for C_in 1, the log-mel
//       [B, F_in, T_in] ne {T_in, F_in, B}, any strides
//   w   [C_out, C_in, 3, 3] ne {3, 3, C_in, C_out} contiguous (PyTorch's [out, in, freq, time])
//   b   [C_out] required
//   out [B, T_out, F_out, C_out] ne {C_out, F_out, T_out, B}: F_out = (F_in - 1) / 2 + 1, T_out
//       = (T_in / chunk) * ((chunk - 1) / 2 + 1), chunk-major (chunk c's rows follow chunk c - 1's)
//   out[b,t,f,o] = act(b[o] + sum_{i,kf,kt} w[o,i,kf,kt] x[b, c0 + 2 t' + kt - 1, 2 f + kf - 1, i]),
//       t = c * chunk_out + t', c0 = c * chunk; taps outside [c0, min(c0 + chunk, x_len[b])) or
//       outside [0, F_in) read 0
//   x_len [B] f32 holding whole numbers (a graph input), or NULL
vt_tensor * vt_conv2d_k3s2(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b, enum vt_act act,
                           int chunk, vt_tensor * x_len);
// conv2d_k3s2_pair: two stages in one node, the second's input never stored whole:
//   out = conv2d_k3s2(conv2d_k3s2(x, w1, b1, act, chunk1, x_len), w2, b2, act, chunk2, NULL)
// A backend runs the first stage a few windows at a time into its own scratch. A conv stem's
// first output is the largest tensor of its graph (Qwen3-Omni's [B, T/2, 64, 480]: 2.4 GB at 32
// windows of 2400 frames in bf16) and the second stage is its only reader.
vt_tensor * vt_conv2d_k3s2_pair(vt_context * ctx, vt_tensor * x, vt_tensor * w1, vt_tensor * b1, int chunk1,
                                vt_tensor * x_len, vt_tensor * w2, vt_tensor * b2, int chunk2, enum vt_act act);

// add_rows: out[b, t, :] = x[b, t, :] + add[t % period, :] (Qwen3-Omni's positions, the same
// `period` rows added to each chunk of a window)
//   x [B, T, C] contiguous; add [period, C] f32 contiguous -> out [B, T, C]
vt_tensor * vt_add_rows(vt_context * ctx, vt_tensor * x, vt_tensor * add, int period);

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
// Block-diagonal attention (Qwen2.5-Omni's per-chunk attention, its cu_seqlens): the T rows
// cut into blocks of `block` rows, and query i attends only to the keys j of its own block
// (j / block == i / block) below kv_len[b] (kv_len NULL: all of them). A query whose block lies
// wholly at or past kv_len[b] has no key: its output row is 0. block 0 is vt_attention_masked
// (vt_attention with kv_len NULL).
vt_tensor * vt_attention_blocks(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_len, int block);
// Block-causal attention (MiniCPM-o's chunk mask, its subsequent_chunk_mask with no left limit):
// the T rows cut into blocks of `block` rows, and query i attends to the keys j of its own block
// and of every earlier one (j < (i / block + 1) * block) below kv_len[b] (kv_len NULL: all of them).
// block >= 1; every query has a key (key 0).
vt_tensor * vt_attention_block_causal(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                      int n_head, float scale, vt_tensor * kv_len, int block);

// Causal sliding-window attention over a cache and the new rows (Voxtral Realtime's encoder, one step of
// its input): the T keys and values are the cache's T - P rows followed by the P new ones, and query i
// (row i of q: position T - P + i) attends to the keys j in [max(kv_start[b], T - P + i - window + 1),
// T - P + i] (window keys, itself the last; kv_start: the first cache row that holds one). Each query's
// softmax and sums run over its own keys in their order, so a row's output does not depend on where
// its keys sit in the buffer (a step of any size gives the same bits).
//   q [B, P, D] ne {D, P, B}, rows may be strided; k, v [B, T, D], T >= P; kv_start [B] f32 holding
//   whole numbers (a graph input) or NULL (0); window >= 1 -> out [B, P, D] contiguous
vt_tensor * vt_attention_window(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_start, int window);
// concat_rows: a's rows, then b's, in one contiguous tensor (a step's keys after the cache's)
//   a [B, Ta, C], b [B, Tb, C], rows may be strided (nb[0] the element) -> out [B, Ta + Tb, C]
vt_tensor * vt_concat_rows(vt_context * ctx, vt_tensor * a, vt_tensor * b);
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

// relu: y = max(x, 0) elementwise (MiniCPM-o's projector, between its two linears)
//   x contiguous -> out of its shape
vt_tensor * vt_relu(vt_context * ctx, vt_tensor * x);
// silu: y = x / (1 + exp(-x)) elementwise (Kimi-Audio's VQ adaptor, between its two linears)
//   x contiguous -> out of its shape
vt_tensor * vt_silu(vt_context * ctx, vt_tensor * x);
// silu_mul: y = silu(g) * x elementwise (MERaLiON-2's speech adapter: act_fn(gate_proj(h)) * pool_proj(h),
// two linears' outputs, where Ultravox's SwiGLU halves one)
//   g, x contiguous, of one shape and type -> out of that shape
vt_tensor * vt_silu_mul(vt_context * ctx, vt_tensor * g, vt_tensor * x);

// stack_frames: f consecutive rows side by side, the last group zero-padded
//   x [B, T, C] contiguous -> out [B, ceil(T/f), f*C]; a view when f divides T, else a copy
vt_tensor * vt_stack_frames(vt_context * ctx, vt_tensor * x, int f);

// rope_qk: rotary position embedding of the q and k parts of a fused q|k|v row, as
// transformers' apply_rotary_pos_emb with rotate_half (GLM-ASR): in each head, the first n_rot
// dimensions, pairs (i, i + n_rot/2), turn by the angle t * inv_freq[i], t the row's position
// in its window; the rest of q and k, and v, are copied. inv_freq[i] = 1 / theta^(2i / n_rot)
// and the angle are float32 values, as transformers computes them whatever the model's dtype.
//   qkv [B, T, 3d] contiguous, d = n_head * head_dim, n_rot even and <= head_dim -> out [B, T, 3d]
vt_tensor * vt_rope_qk(vt_context * ctx, vt_tensor * qkv, int n_head, int n_rot, float theta);
// The same, row t of window b at position pos0[b] + t (a step of an input that began pos0[b] rows before:
// Voxtral Realtime's), the position's float32 value as transformers' position_ids.float() has it.
//   pos0 [B] f32 holding whole numbers (a graph input)
vt_tensor * vt_rope_qk_at(vt_context * ctx, vt_tensor * qkv, int n_head, int n_rot, float theta, vt_tensor * pos0);

// rope_time: Music Flamingo's rotary time embedding (MusicFlamingoRotaryEmbedding and
// apply_rotary_time_emb), weightless. Row t of window b (the window's index k = window[b] in its
// input) is at ts = k T step + t step seconds; its first 2 n_rot channels turn in pairs (2i, 2i + 1)
// by the angle -2 pi ts f: for pair p < n_rot / 2 (the window axis) f = k / theta * inv_freq[p],
// for the next n_rot / 2 pairs (the time axis) f = (t / theta * 2 pi) * inv_freq[p - n_rot / 2],
// inv_freq[i] = 1 / theta^(2i / n_rot); the other channels are copied. ts, -2 pi ts, inv_freq and
// the time axis's factor are the float32 values the model's code makes; the rest is in double.
//   x [B, T, C] contiguous, n_rot even, 2 n_rot <= C, T <= theta; window [B] f32 holding whole
//   numbers (a graph input) -> out [B, T, C]
vt_tensor * vt_rope_time(vt_context * ctx, vt_tensor * x, vt_tensor * window, int n_rot, float theta, float step);

// log_mel: a log-mel spectrogram of B windows, the algorithm of whisper-audio.cpp's host
// log-mel (transformers' WhisperFeatureExtractor), the DFT in double. The sizes are the
// caller's (the model library owns Whisper's: n_fft 400, hop 160, 3000 frames):
typedef struct vt_mel_shape {
    int n_fft;      // samples a frame: a periodic Hann window, a DFT of n_fft, n_fft / 2 + 1 bins
    int hop;        // samples from one frame's start to the next
    int n_frames;   // frames a window
} vt_mel_shape;
//   pcm     [B, R] ne {R, B} f32, contiguous, R >= hop (n_frames - 1) + n_fft: frame t reads
//           row[hop t, hop t + n_fft), so the op itself never pads: the caller puts each
//           window's samples in its row with the context they need on each side (its
//           neighbours, its reflection at the signal's ends, zeros)
//   filters [n_mels, n_fft/2 + 1] ne {n_fft/2 + 1, n_mels} f32 (the model's mel bank)
//   params  [B, 2] ne {2, B} f32, or NULL ({n_frames, NaN} for every window): per window the
//           frames that hold the signal (those past it are 0 in out and left out of the max)
//           and the max of the dynamic-range clamp, or NaN for the window's own max
//   out     [B, n_mels, n_frames] f32: (max(log10 mel, max - 8) + 4) / 4
// The CPU backend's is the reference; the CUDA kernel's DFT is for n_fft 400 (20 x 20).
vt_tensor * vt_log_mel(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params,
                       const vt_mel_shape * shape);
// The same op's first half: out [B] f32, each window's largest log10 mel over the frames
// that hold the signal, before any clamp (the max of an input cut into several windows).
vt_tensor * vt_log_mel_max(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params,
                           const vt_mel_shape * shape);

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

// Backends by name, devices by index: "cpu" (the reference: f32, one device, the host) and
// "cuda" (NVIDIA GPUs, in vt-cuda.cu; f16/bf16 compute with f32 accumulation). Another
// backend is a row of vt.cpp's table of backends and a file of its own.
typedef struct vt_backend_params {
    enum vt_type compute_type;   // cpu: VT_TYPE_F32, or VT_TYPE_BF16 (below); cuda: VT_TYPE_F16 or VT_TYPE_BF16
    int  n_threads;              // cpu: threads; <= 0 or more than the hardware runs: as many as it runs
    bool fp8;                    // cuda, with bf16: the linear layers' GEMMs on FP8 tensor cores (below)
} vt_backend_params;
// NULL with vt_last_error() set when the name is unknown, this build lacks that backend, the
// device does not exist or cannot run it, or the parameters do not fit it.
//   cpu: device 0; threads that cannot be started fail it, as a VT_CPU_ISA this CPU cannot run.
//     compute_type VT_TYPE_BF16: the GEMMs (linear, conv, attention's two) round their inputs to
//     bf16 and accumulate in f32 on AMX tiles, each weight matrix packed to bf16 once when it is
//     set (a copy beside its f32 data: 1.5x the weight memory), where vt_cpu_bf16_isa() says the
//     CPU runs them; elsewhere it computes in f32 (vt_backend_gemm_type says which). Tensors
//     stay f32 either way.
//   cuda fp8: compute capability 8.9+; each weight flagged with vt_set_fp8, [N, K] with N and K
//     multiples of 16 (K <= 8192), is quantized at set_tensor with a scale per output channel,
//     each GEMM's input per row (token) just before it, both scales applied by the GEMM; the
//     rest (conv stem, attention, norms, the other linears) in bf16. Weights keep their bf16
//     copy too (about 1.5x the memory of bf16 alone).
vt_backend * vt_backend_init(const char * name, int device, const vt_backend_params * params);
bool         vt_backend_built(const char * name);          // is that backend compiled in
int          vt_backend_device_count(const char * name);   // devices present: cpu 1, cuda 0 without CUDA or a GPU
// Device memory of the backend's device `device`, in bytes, as its driver counts it (used by
// anyone: cudaMemGetInfo for cuda). False with vt_last_error() set for the CPU (no such figure),
// an unknown name or device, or a failed query.
bool         vt_backend_device_memory(const char * name, int device, size_t * free_bytes, size_t * total_bytes);
// The instruction set of the CPU backend's kernels on this machine: "avx512", "avx2" or
// "plain", picked at run time on x86-64; "neon" or "plain" on aarch64 (NEON is always there);
// the environment variable VT_CPU_ISA asks for a lesser one
// (to measure or test it). NULL with vt_last_error() set when VT_CPU_ISA names one that is
// unknown or that this CPU cannot run (vt_backend_init("cpu", ...) then fails the same way).
const char * vt_cpu_isa(void);
// "amx" when this CPU and kernel run the CPU backend's bf16 GEMMs (AMX-BF16 and AVX512-BF16,
// the tile state granted by arch_prctl; VT_CPU_ISA other than avx512 turns them off), else NULL
// with vt_last_error() saying why. The environment variable VT_CPU_BF16=avx512bf16 asks for
// VDPBF16PS kernels instead (AVX512-BF16 without AMX; "avx512bf16"), VT_CPU_BF16=amx for AMX
// or nothing.
const char * vt_cpu_bf16_isa(void);
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
#define VT_MAX_SUBMIT_INPUTS 5
bool   vt_backend_submit(vt_backend * be, vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host,
                         const vt_tensor * out, void * out_host, enum vt_type out_type, int slot);
bool   vt_backend_wait(vt_backend * be, int slot);
// Whether the run in that slot has finished, without waiting (true on a failure, which wait
// then reports); the CPU backend's runs are finished once submit returns.
bool   vt_backend_ready(vt_backend * be, int slot);
// Everything but the run: on CUDA the forward is captured as a CUDA graph now rather than at
// the first compute or submit (model init pays for it, not the first batch).
bool   vt_backend_prepare(vt_backend * be, vt_graph * g);
// Copies rows [row0, row0 + dst rows) of each window of src into dst, on the device (a causal model's
// caches from one step's output to the next step's input, without a trip through the host).
//   dst [B, R, C] and src [B, T, C], contiguous, of one type, row0 + R <= T
bool   vt_backend_copy_rows(vt_backend * be, vt_tensor * dst, const vt_tensor * src, int64_t row0);
// Host memory for submit: page-locked where the backend has a device, else plain. NULL
// with vt_last_error() set when it cannot be had.
void * vt_backend_host_alloc(vt_backend * be, size_t bytes);
void   vt_backend_host_free(vt_backend * be, void * p);

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

// A backend: it has a kernel for every op. alloc_* set tensor->data; compute runs g->nodes in order.
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
    // at once, by default: in, compute, out (converted on the host)
    virtual bool submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host,
                        const vt_tensor * out, void * out_host, vt_type out_type, int slot);
    virtual bool wait(int slot) { (void)slot; return true; }
    virtual bool ready(int slot) { (void)slot; return true; }
    virtual bool prepare(vt_graph * g) { (void)g; return true; }
    virtual bool copy_rows(vt_tensor * dst, const vt_tensor * src, int64_t row0) = 0;
    virtual void * host_alloc(size_t bytes);
    virtual void host_free(void * p);
};

// Sets data of every view in g from its source (after the arena or weights are placed).
void vt_graph_resolve_views(vt_graph * g);

// x rounded up to a multiple of a.
static inline size_t vt_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Maps every page of p now, a store a page (memset after malloc may become calloc's no-op):
// buffers allocated at init are touched at init, so the first batches take no page faults
// (thousands of them for a window's arena, paid by the first window otherwise).
static inline void vt_map_pages(void * p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 4096) ((volatile char *)p)[i] = 0;
}

// The CUDA backend's entry points (vt-cuda.cu), a row of vt.cpp's table of backends.
vt_backend * vt_cuda_init(int device, const vt_backend_params * params);
int          vt_cuda_device_count(void);
bool         vt_cuda_device_memory(int device, size_t * free_bytes, size_t * total_bytes);

#endif
