// vt.cpp - the tensor library: errors, types, graph building, the arena planner and the
// CPU backend, which is the f32 reference every other backend is tested against.
#define VT_BACKEND_IMPL
#include "vt.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// =====================================================================================
// errors
// =====================================================================================

static thread_local char g_vt_error[512];

const char * vt_last_error(void) { return g_vt_error; }

void vt_set_error(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_vt_error, sizeof(g_vt_error), fmt, ap);
    va_end(ap);
}

void vt_abort(const char * file, int line, const char * what) {
    fprintf(stderr, "vt: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

// =====================================================================================
// types
// =====================================================================================

size_t vt_type_size(enum vt_type type) {
    switch (type) {
        case VT_TYPE_F32:  return 4;
        case VT_TYPE_F16:  return 2;
        case VT_TYPE_BF16: return 2;
    }
    VT_ASSERT(!"unknown type");
}

const char * vt_type_name(enum vt_type type) {
    switch (type) {
        case VT_TYPE_F32:  return "f32";
        case VT_TYPE_F16:  return "f16";
        case VT_TYPE_BF16: return "bf16";
    }
    return "?";
}

bool vt_type_valid(int type) {
    return type == VT_TYPE_F32 || type == VT_TYPE_F16 || type == VT_TYPE_BF16;
}

float vt_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp  = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {                      // inf / nan
        bits = sign | 0x7f800000 | (mant << 13);
    } else if (exp != 0) {                  // normal
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {                 // zero
        bits = sign;
    } else {                                // subnormal: normalise
        exp = 113;
        while ((mant & 0x400) == 0) { mant <<= 1; exp--; }
        bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t vt_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0);  // inf / nan
    if (ax >= 0x477ff000) return sign | 0x7c00;                                  // overflow -> inf
    if (ax < 0x38800000) {                                                       // f16 subnormal or zero
        if (ax < 0x33000000) return sign;                                        // below half the smallest
        const uint32_t exp = ax >> 23, mant = (ax & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - exp;                                        // 14..24
        uint32_t r = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = ((ax >> 13) - (112 << 10));                                      // rebias exponent
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;                          // nearest even
    return sign | (uint16_t)r;
}

float vt_bf16_to_f32(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t vt_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);      // quiet nan
    x += 0x7fff + ((x >> 16) & 1);                                               // nearest even
    return (uint16_t)(x >> 16);
}

// One loop per pair of types, so that the compiler vectorises each (F16C / AVX-512 on x86,
// where _Float16 conversions are single instructions).
void vt_convert(void * dst, enum vt_type dst_type, const void * src, enum vt_type src_type, size_t n) {
    if (dst_type == src_type) {
        memcpy(dst, src, n * vt_type_size(src_type));
        return;
    }
    const uint16_t * s16 = (const uint16_t *)src;
    const float * s32 = (const float *)src;
    uint16_t * d16 = (uint16_t *)dst;
    float * d32 = (float *)dst;
#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
    const _Float16 * sh = (const _Float16 *)src;
    _Float16 * dh = (_Float16 *)dst;
    if (src_type == VT_TYPE_F16 && dst_type == VT_TYPE_F32) { for (size_t i = 0; i < n; i++) d32[i] = (float)sh[i]; return; }
    if (src_type == VT_TYPE_F32 && dst_type == VT_TYPE_F16) { for (size_t i = 0; i < n; i++) dh[i] = (_Float16)s32[i]; return; }
#endif
    if (src_type == VT_TYPE_BF16 && dst_type == VT_TYPE_F32) { for (size_t i = 0; i < n; i++) d32[i] = vt_bf16_to_f32(s16[i]); return; }
    if (src_type == VT_TYPE_F32 && dst_type == VT_TYPE_BF16) { for (size_t i = 0; i < n; i++) d16[i] = vt_f32_to_bf16(s32[i]); return; }
    for (size_t i = 0; i < n; i++) {            // the rest: through f32, element by element
        float v = 0.0f;
        switch (src_type) {
            case VT_TYPE_F32:  v = s32[i]; break;
            case VT_TYPE_F16:  v = vt_f16_to_f32(s16[i]); break;
            case VT_TYPE_BF16: v = vt_bf16_to_f32(s16[i]); break;
        }
        switch (dst_type) {
            case VT_TYPE_F32:  d32[i] = v; break;
            case VT_TYPE_F16:  d16[i] = vt_f32_to_f16(v); break;
            case VT_TYPE_BF16: d16[i] = vt_f32_to_bf16(v); break;
        }
    }
}

// =====================================================================================
// context and tensors
// =====================================================================================

struct vt_context {
    std::vector<vt_tensor> tensors;   // reserved up front: pointers stay valid
};

vt_context * vt_init(int max_tensors) {
    vt_context * ctx = new vt_context;
    ctx->tensors.reserve(max_tensors > 0 ? max_tensors : 1);
    return ctx;
}

void vt_free(vt_context * ctx) { delete ctx; }

int vt_n_tensors(const vt_context * ctx) { return (int)ctx->tensors.size(); }

vt_tensor * vt_get_tensor_at(vt_context * ctx, int i) { return &ctx->tensors[i]; }

vt_tensor * vt_get_tensor(vt_context * ctx, const char * name) {
    for (vt_tensor & t : ctx->tensors) {
        if (strcmp(t.name, name) == 0) return &t;
    }
    return nullptr;
}

int64_t vt_nelements(const vt_tensor * t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

size_t vt_nbytes(const vt_tensor * t) { return (size_t)vt_nelements(t) * vt_type_size(t->type); }

bool vt_is_contiguous(const vt_tensor * t) {
    size_t expect = vt_type_size(t->type);
    for (int i = 0; i < VT_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expect) return false;
        expect *= (size_t)t->ne[i];
    }
    return true;
}

static vt_tensor * new_tensor(vt_context * ctx, enum vt_type type, const int64_t ne[4]) {
    VT_ASSERT(ctx->tensors.size() < ctx->tensors.capacity());   // vt_init's max_tensors too small
    ctx->tensors.emplace_back();
    vt_tensor * t = &ctx->tensors.back();
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->op = VT_OP_NONE;
    for (int i = 0; i < VT_MAX_DIMS; i++) {
        VT_ASSERT(ne[i] >= 1);
        t->ne[i] = ne[i];
    }
    t->nb[0] = vt_type_size(type);
    for (int i = 1; i < VT_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
    return t;
}

vt_tensor * vt_new_tensor(vt_context * ctx, enum vt_type type, int n_dims, const int64_t * ne) {
    VT_ASSERT(n_dims >= 1 && n_dims <= VT_MAX_DIMS);
    int64_t full[4] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims; i++) full[i] = ne[i];
    return new_tensor(ctx, type, full);
}

vt_tensor * vt_new_tensor_1d(vt_context * ctx, enum vt_type type, int64_t ne0) {
    const int64_t ne[4] = {ne0, 1, 1, 1};
    return new_tensor(ctx, type, ne);
}

vt_tensor * vt_new_tensor_2d(vt_context * ctx, enum vt_type type, int64_t ne0, int64_t ne1) {
    const int64_t ne[4] = {ne0, ne1, 1, 1};
    return new_tensor(ctx, type, ne);
}

vt_tensor * vt_new_tensor_3d(vt_context * ctx, enum vt_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[4] = {ne0, ne1, ne2, 1};
    return new_tensor(ctx, type, ne);
}

vt_tensor * vt_set_name(vt_tensor * t, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    return t;
}

void vt_set_weight(vt_tensor * t) { VT_ASSERT(t->op == VT_OP_NONE); t->flags |= VT_FLAG_WEIGHT; }
void vt_set_input(vt_tensor * t)  { VT_ASSERT(t->op == VT_OP_NONE); t->flags |= VT_FLAG_INPUT; }
void vt_set_output(vt_tensor * t) { t->flags |= VT_FLAG_OUTPUT; }

// =====================================================================================
// ops: builders check shapes and record; they compute nothing
// =====================================================================================

static const char * VT_OP_NAMES[] = {
    "none",
    "view",
    "conv1d_k3",
    "linear",
    "layer_norm",
    "attention",
    "log_mel",
    "avg_pool2",
    "rms_norm",
    "swiglu",
    "stack",
};
static_assert(sizeof(VT_OP_NAMES) / sizeof(VT_OP_NAMES[0]) == VT_OP_COUNT, "VT_OP_NAMES out of sync with enum vt_op");

const char * vt_op_name(enum vt_op op) { return op < VT_OP_COUNT ? VT_OP_NAMES[op] : "?"; }

static bool same_shape(const vt_tensor * a, const vt_tensor * b) {
    return a->ne[0] == b->ne[0] && a->ne[1] == b->ne[1] && a->ne[2] == b->ne[2] && a->ne[3] == b->ne[3];
}

// vt_view_3d

vt_tensor * vt_view_3d(vt_context * ctx, vt_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
                       size_t nb1, size_t nb2, size_t offset) {
    const int64_t ne[4] = {ne0, ne1, ne2, 1};
    vt_tensor * t = new_tensor(ctx, a->type, ne);
    t->nb[1] = nb1;
    t->nb[2] = nb2;
    t->nb[3] = nb2 * (size_t)ne2;
    // the last element must lie inside a's bytes (a contiguous a's extent)
    const size_t last = offset + (size_t)(ne0 - 1) * t->nb[0] + (size_t)(ne1 - 1) * nb1 + (size_t)(ne2 - 1) * nb2;
    VT_ASSERT(vt_is_contiguous(a) && last + t->nb[0] <= vt_nbytes(a));
    t->op = VT_OP_VIEW;
    t->src[0] = a;
    t->view_offset = offset;
    return t;
}

// vt_transpose

vt_tensor * vt_transpose(vt_context * ctx, vt_tensor * a) {
    const int64_t ne[4] = {a->ne[1], a->ne[0], a->ne[2], a->ne[3]};
    vt_tensor * t = new_tensor(ctx, a->type, ne);
    t->nb[0] = a->nb[1];
    t->nb[1] = a->nb[0];
    t->nb[2] = a->nb[2];
    t->nb[3] = a->nb[3];
    t->op = VT_OP_VIEW;
    t->src[0] = a;
    return t;
}

// vt_conv1d_k3

vt_tensor * vt_conv1d_k3(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                         int stride, enum vt_act act, vt_tensor * add) {
    VT_ASSERT(stride == 1 || stride == 2);
    VT_ASSERT(w->ne[0] == 3 && w->ne[1] == x->ne[0] && w->ne[3] == 1 && vt_is_contiguous(w));
    VT_ASSERT(b && b->type == VT_TYPE_F32 && b->ne[0] == w->ne[2] && vt_nelements(b) == b->ne[0]);
    VT_ASSERT(x->ne[3] == 1);
    const int64_t c_out = w->ne[2];
    const int64_t t_out = (x->ne[1] - 1) / stride + 1;
    if (add) {
        VT_ASSERT(add->type == VT_TYPE_F32 && add->ne[0] == c_out && add->ne[1] == t_out && add->ne[2] == 1);
        VT_ASSERT(add->nb[0] == sizeof(float) && add->nb[1] == (size_t)c_out * sizeof(float));
    }
    const int64_t ne[4] = {c_out, t_out, x->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, w->type, ne);
    t->op = VT_OP_CONV1D_K3;
    t->src[0] = x;
    t->src[1] = w;
    t->src[2] = b;
    t->src[3] = add;
    t->iparams[0] = stride;
    t->iparams[1] = act;
    return t;
}

// vt_linear

vt_tensor * vt_linear(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                      enum vt_act act, vt_tensor * residual) {
    VT_ASSERT(vt_is_contiguous(x) && vt_is_contiguous(w));
    VT_ASSERT(w->ne[0] == x->ne[0] && w->ne[2] == 1 && w->ne[3] == 1);
    VT_ASSERT(x->type == w->type);
    if (b) VT_ASSERT(b->type == VT_TYPE_F32 && b->ne[0] == w->ne[1] && vt_nelements(b) == b->ne[0]);
    const int64_t ne[4] = {w->ne[1], x->ne[1], x->ne[2], x->ne[3]};
    vt_tensor * t = new_tensor(ctx, w->type, ne);
    if (residual) VT_ASSERT(same_shape(t, residual) && residual->type == t->type && vt_is_contiguous(residual));
    t->op = VT_OP_LINEAR;
    t->src[0] = x;
    t->src[1] = w;
    t->src[2] = b;
    t->src[3] = residual;
    t->iparams[1] = act;
    return t;
}

// vt_layer_norm

vt_tensor * vt_layer_norm(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b, float eps) {
    VT_ASSERT(vt_is_contiguous(x));
    VT_ASSERT(w->type == VT_TYPE_F32 && b->type == VT_TYPE_F32);
    VT_ASSERT(vt_nelements(w) == x->ne[0] && vt_nelements(b) == x->ne[0]);
    vt_tensor * t = new_tensor(ctx, x->type, x->ne);
    t->op = VT_OP_LAYER_NORM;
    t->src[0] = x;
    t->src[1] = w;
    t->src[2] = b;
    t->fparams[0] = eps;
    return t;
}

// vt_attention

vt_tensor * vt_attention(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                         int n_head, float scale) {
    VT_ASSERT(same_shape(q, k) && same_shape(q, v) && q->ne[3] == 1);
    VT_ASSERT(q->type == k->type && q->type == v->type);
    VT_ASSERT(n_head >= 1 && q->ne[0] % n_head == 0);
    for (const vt_tensor * s : {q, k, v}) VT_ASSERT(s->nb[0] == vt_type_size(s->type));
    const int64_t ne[4] = {q->ne[0], q->ne[1], q->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, q->type, ne);
    t->op = VT_OP_ATTENTION;
    t->src[0] = q;
    t->src[1] = k;
    t->src[2] = v;
    t->iparams[0] = n_head;
    t->fparams[0] = scale;
    return t;
}

// vt_log_mel

vt_tensor * vt_log_mel(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters) {
    VT_ASSERT(pcm->type == VT_TYPE_F32 && vt_is_contiguous(pcm) && pcm->ne[0] == 480000 && pcm->ne[2] == 1 && pcm->ne[3] == 1);
    VT_ASSERT(filters->type == VT_TYPE_F32 && vt_is_contiguous(filters) && filters->ne[0] == 201 && filters->ne[2] == 1);
    const int64_t ne[4] = {3000, filters->ne[1], pcm->ne[1], 1};
    vt_tensor * t = new_tensor(ctx, VT_TYPE_F32, ne);
    t->op = VT_OP_LOG_MEL;
    t->src[0] = pcm;
    t->src[1] = filters;
    return t;
}

vt_tensor * vt_attention_masked(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_len) {
    VT_ASSERT(kv_len && kv_len->type == VT_TYPE_F32 && vt_nelements(kv_len) == q->ne[2] && vt_is_contiguous(kv_len));
    vt_tensor * t = vt_attention(ctx, q, k, v, n_head, scale);
    t->src[3] = kv_len;
    return t;
}

// vt_avg_pool2

vt_tensor * vt_avg_pool2(vt_context * ctx, vt_tensor * x) {
    VT_ASSERT(vt_is_contiguous(x) && x->ne[1] >= 2 && x->ne[3] == 1);
    const int64_t ne[4] = {x->ne[0], x->ne[1] / 2, x->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, x->type, ne);
    t->op = VT_OP_AVG_POOL2;
    t->src[0] = x;
    return t;
}

// vt_rms_norm

vt_tensor * vt_rms_norm(vt_context * ctx, vt_tensor * x, vt_tensor * w, float eps) {
    VT_ASSERT(vt_is_contiguous(x));
    VT_ASSERT(w->type == VT_TYPE_F32 && vt_nelements(w) == x->ne[0]);
    vt_tensor * t = new_tensor(ctx, x->type, x->ne);
    t->op = VT_OP_RMS_NORM;
    t->src[0] = x;
    t->src[1] = w;
    t->fparams[0] = eps;
    return t;
}

// vt_swiglu

vt_tensor * vt_swiglu(vt_context * ctx, vt_tensor * x) {
    VT_ASSERT(vt_is_contiguous(x) && x->ne[0] % 2 == 0);
    const int64_t ne[4] = {x->ne[0] / 2, x->ne[1], x->ne[2], x->ne[3]};
    vt_tensor * t = new_tensor(ctx, x->type, ne);
    t->op = VT_OP_SWIGLU;
    t->src[0] = x;
    return t;
}

// vt_stack_frames

vt_tensor * vt_stack_frames(vt_context * ctx, vt_tensor * x, int f) {
    VT_ASSERT(vt_is_contiguous(x) && f >= 1 && x->ne[3] == 1);
    const int64_t C = x->ne[0], T = x->ne[1], B = x->ne[2], T_out = (T + f - 1) / f;
    const size_t es = vt_type_size(x->type);
    if (T % f == 0) return vt_view_3d(ctx, x, f * C, T_out, B, f * C * es, T * C * es, 0);
    const int64_t ne[4] = {f * C, T_out, B, 1};
    vt_tensor * t = new_tensor(ctx, x->type, ne);
    t->op = VT_OP_STACK;
    t->src[0] = x;
    t->iparams[0] = f;
    return t;
}

// =====================================================================================
// graphs and the arena planner
// =====================================================================================

static vt_tensor * storage_owner(vt_tensor * t) {
    while (t->op == VT_OP_VIEW) t = t->src[0];
    return t;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void visit(vt_graph * g, vt_tensor * t, std::vector<vt_tensor *> & seen) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) return;
    seen.push_back(t);
    for (vt_tensor * s : t->src) {
        if (s) visit(g, s, seen);
    }
    if (t->op == VT_OP_NONE) g->leaves.push_back(t);
    else if (t->op == VT_OP_VIEW) g->views.push_back(t);
    else g->nodes.push_back(t);
}

// First-fit placement of [first, last] lifetimes, in node order. A node's output never
// shares bytes with its own inputs: it is placed before they are released.
vt_graph * vt_graph_build(vt_context * ctx, vt_tensor ** outputs, int n_outputs) {
    vt_graph * g = new vt_graph;
    g->ctx = ctx;
    std::vector<vt_tensor *> seen;
    for (int i = 0; i < n_outputs; i++) {
        vt_set_output(storage_owner(outputs[i]));
        visit(g, outputs[i], seen);
    }

    // arena tensors: inputs (live from the start) and computed nodes
    std::vector<vt_tensor *> placed;
    for (vt_tensor * t : g->leaves) {
        VT_ASSERT((t->flags & (VT_FLAG_WEIGHT | VT_FLAG_INPUT)) != 0);   // a leaf must be one or the other
        if (t->flags & VT_FLAG_INPUT) placed.push_back(t);
    }
    for (vt_tensor * t : g->nodes) placed.push_back(t);

    const int n_steps = (int)g->nodes.size();
    auto step_of = [&](vt_tensor * t) {   // -1 for inputs
        for (int i = 0; i < n_steps; i++) if (g->nodes[i] == t) return i;
        return -1;
    };
    std::vector<int> last_use(placed.size(), -1);
    for (size_t p = 0; p < placed.size(); p++) {
        vt_tensor * t = placed[p];
        if (t->flags & (VT_FLAG_OUTPUT | VT_FLAG_INPUT)) { last_use[p] = n_steps; continue; }   // kept to the end
        last_use[p] = step_of(t);
        for (int i = 0; i < n_steps; i++) {
            for (vt_tensor * s : g->nodes[i]->src) {
                if (s && storage_owner(s) == t) last_use[p] = std::max(last_use[p], i);
            }
        }
    }

    struct block { size_t offset, size; vt_tensor * t; };
    std::vector<block> live;   // sorted by offset
    auto place = [&](vt_tensor * t) {
        const size_t size = align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        size_t offset = 0;
        size_t pos = 0;
        for (; pos < live.size(); pos++) {
            if (live[pos].offset - offset >= size) break;
            offset = live[pos].offset + live[pos].size;
        }
        live.insert(live.begin() + pos, block{offset, size, t});
        t->arena_offset = offset;
        g->arena_size = std::max(g->arena_size, offset + size);
        g->naive_size += size;
    };
    auto release_after = [&](int step) {
        for (size_t p = 0; p < placed.size(); p++) {
            if (last_use[p] != step) continue;
            live.erase(std::remove_if(live.begin(), live.end(), [&](const block & b) { return b.t == placed[p]; }),
                       live.end());
        }
    };

    for (vt_tensor * t : placed) if (t->op == VT_OP_NONE) place(t);
    for (int i = 0; i < n_steps; i++) {
        place(g->nodes[i]);
        release_after(i);
    }
    return g;
}

void vt_graph_free(vt_graph * g) {
    if (!g) return;
    if (g->backend) g->backend->release_graph(g);
    delete g;
}

int vt_graph_n_nodes(const vt_graph * g) { return (int)g->nodes.size(); }
vt_tensor * vt_graph_node(const vt_graph * g, int i) { return g->nodes[i]; }
size_t vt_graph_arena_size(const vt_graph * g) { return g->arena_size; }
size_t vt_graph_naive_size(const vt_graph * g) { return g->naive_size; }

void vt_graph_resolve_views(vt_graph * g) {
    for (vt_tensor * v : g->views) {   // in dependency order, so a view of a view works
        v->data = (char *)v->src[0]->data + v->view_offset;
    }
}

// =====================================================================================
// backend entry points
// =====================================================================================

void vt_backend_free(vt_backend * be) { delete be; }
const char * vt_backend_name(const vt_backend * be) { return be->name(); }
enum vt_type vt_backend_compute_type(const vt_backend * be) { return be->compute_type(); }
bool vt_backend_alloc_weights(vt_backend * be, vt_context * ctx) { return be->alloc_weights(ctx); }
size_t vt_backend_allocated_bytes(const vt_backend * be) { return be->allocated_bytes(); }

bool vt_backend_alloc_graph(vt_backend * be, vt_graph * g) {
    if (g->backend) g->backend->release_graph(g);
    g->backend = nullptr;
    for (const vt_tensor * t : g->nodes) {
        if (!be->supports(t->op)) {
            vt_set_error("%s: op %s ('%s') has no kernel on this backend", be->name(), vt_op_name(t->op), t->name);
            return false;
        }
    }
    if (!be->alloc_graph(g)) return false;
    g->backend = be;
    return true;
}

bool vt_backend_set_tensor(vt_backend * be, vt_tensor * t, const void * src, enum vt_type src_type) {
    if (!t->data) { vt_set_error("tensor '%s' has no storage yet", t->name); return false; }
    if (!vt_is_contiguous(t)) { vt_set_error("tensor '%s' is not contiguous", t->name); return false; }
    return be->set_tensor(t, src, src_type);
}

bool vt_backend_get_tensor_f32(vt_backend * be, const vt_tensor * t, float * dst) {
    if (!t->data) { vt_set_error("tensor '%s' has no storage yet", t->name); return false; }
    if (!vt_is_contiguous(t)) { vt_set_error("tensor '%s' is not contiguous", t->name); return false; }
    return be->get_tensor_f32(t, dst);
}

bool vt_backend_compute(vt_backend * be, vt_graph * g) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    return be->compute(g);
}

bool vt_backend_profile(vt_backend * be, vt_graph * g, double * ms) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    return be->profile(g, ms);
}

bool vt_backend::submit(vt_graph * g, vt_tensor * in, const void * in_host, const vt_tensor * out, void * out_host,
                        vt_type out_type, int) {
    if (!set_tensor(in, in_host, VT_TYPE_F32) || !compute(g)) return false;
    if (out_type == VT_TYPE_F32) return get_tensor_f32(out, (float *)out_host);
    std::vector<float> f32((size_t)vt_nelements(out));
    if (!get_tensor_f32(out, f32.data())) return false;
    vt_convert(out_host, out_type, f32.data(), VT_TYPE_F32, f32.size());
    return true;
}

void * vt_backend::host_alloc(size_t bytes) {
    void * p = malloc(std::max<size_t>(bytes, 1));
    if (!p) vt_set_error("out of memory: %zu bytes of host buffer", bytes);
    return p;
}

void vt_backend::host_free(void * p) { free(p); }

bool vt_backend_submit(vt_backend * be, vt_graph * g, vt_tensor * in, const void * in_host, const vt_tensor * out,
                       void * out_host, enum vt_type out_type, int slot) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    if (slot < 0 || slot > 1) { vt_set_error("submit: slot %d (0 or 1)", slot); return false; }
    if (out_type != VT_TYPE_F32 && out_type != VT_TYPE_F16) { vt_set_error("submit: output as %s (f32 or f16)", vt_type_name(out_type)); return false; }
    if (in->type != VT_TYPE_F32 || !(in->flags & VT_FLAG_INPUT) || !in->data) { vt_set_error("submit: '%s' is not an allocated f32 input", in->name); return false; }
    if (!vt_is_contiguous(out) || !out->data) { vt_set_error("submit: '%s' is not a contiguous allocated tensor", out->name); return false; }
    return be->submit(g, in, in_host, out, out_host, out_type, slot);
}

bool vt_backend_prepare(vt_backend * be, vt_graph * g) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    return be->prepare(g);
}

bool vt_backend_wait(vt_backend * be, int slot) {
    if (slot < 0 || slot > 1) { vt_set_error("wait: slot %d (0 or 1)", slot); return false; }
    return be->wait(slot);
}

void * vt_backend_host_alloc(vt_backend * be, size_t bytes) { return be->host_alloc(bytes); }
void   vt_backend_host_free(vt_backend * be, void * p) { if (p) be->host_free(p); }
bool   vt_backend_supports(const vt_backend * be, enum vt_op op) { return be->supports(op); }

#ifndef VT_USE_CUDA
int vt_cuda_device_count(void) { return 0; }
vt_backend * vt_backend_cuda_init(int, enum vt_type) {
    vt_set_error("this build has no CUDA backend (nvcc was not found when it was built)");
    return nullptr;
}
bool vt_cuda_built(void) { return false; }
bool vt_cuda_memory_used(int, size_t *) {
    vt_set_error("this build has no CUDA backend");
    return false;
}
#endif

// =====================================================================================
// CPU backend: f32, a persistent thread pool, a cache-blocked GEMM
// =====================================================================================

namespace {

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

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// exp(x) for the softmax's x <= 0, in a form the compiler vectorises (expf does not):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation under
// 6e-9 relative), 2^n built in the exponent bits. Total for any float, as non-finite
// activations reach it: below -87 (e^-87 = 1.6e-38, -inf too) it returns 0, a NaN
// stays NaN, and x > 0 (only a NaN row's difference could be) is taken as 0.
inline float exp_nonpositive(float x) {
    const bool underflow = x < -87.0f;
    x = std::min(std::max(x, -87.0f), 0.0f);                   // NaN passes both
    const float t = x * 1.44269504089f + 12582912.0f;        // 1.5 * 2^23: round(x / ln2) in t's low bits
    const float n = t - 12582912.0f;
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;   // ln2 = 0.693359375 - 2.12194440e-4
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits;                                             // unsigned: a NaN's bits wrap, no UB
    memcpy(&bits, &t, 4);
    const uint32_t e = (bits - 0x4B400000u + 127u) << 23;      // n + 127 in the exponent field
    float scale;
    memcpy(&scale, &e, 4);
    return underflow ? 0.0f : p * scale;
}

// ---- GEMM: C[M, N] = A[M, K] W[N, K]^T, f32 ----------------------------------------
// Work is split in tiles of GEMM_MB rows x GEMM_NB columns; within a tile, K goes in
// chunks of GEMM_KC: W's chunk is packed into 16-column strips (bp[k][16]) so that the
// 6x16 micro-kernel streams it linearly while six rows of A are broadcast. The 16 columns
// are one GCC/Clang vector: one AVX-512 register, or two AVX2 ones.
constexpr int GEMM_MB = 96, GEMM_NB = 128, GEMM_KC = 256, GEMM_NR = 16, GEMM_MR = 6;
typedef float vec16 __attribute__((vector_size(GEMM_NR * sizeof(float))));

size_t gemm_scratch_floats() { return (size_t)GEMM_KC * GEMM_NB; }

template <int R>
inline void gemm_micro(const float * a, size_t lda, const float * bp, int kc, float * c, size_t ldc,
                       int n_cols, bool first) {
    vec16 acc[R];
    for (int r = 0; r < R; r++) {
        float tmp[GEMM_NR] = {};
        if (!first) memcpy(tmp, c + r * ldc, n_cols * sizeof(float));
        memcpy(&acc[r], tmp, sizeof(tmp));
    }
    for (int k = 0; k < kc; k++) {
        vec16 b;
        memcpy(&b, bp + (size_t)k * GEMM_NR, sizeof(b));
        for (int r = 0; r < R; r++) acc[r] += a[r * lda + k] * b;
    }
    for (int r = 0; r < R; r++) {
        float tmp[GEMM_NR];
        memcpy(tmp, &acc[r], sizeof(tmp));
        memcpy(c + r * ldc, tmp, n_cols * sizeof(float));
    }
}

// One tile: rows [0, m) of A (lda), columns [n0, n0 + nb) of W (rows of K, ldw apart), into C (ldc).
void gemm_tile(const float * A, size_t lda, int m, const float * W, size_t ldw, int K, int n0, int nb,
               float * C, size_t ldc, float * bp) {
    const int n_strips = (nb + GEMM_NR - 1) / GEMM_NR;
    for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
        const int kc = std::min(GEMM_KC, K - k0);
        for (int s = 0; s < n_strips; s++) {           // pack: bp[s][k][j] = W[n0 + 16s + j][k0 + k]
            float * dst = bp + (size_t)s * kc * GEMM_NR;
            for (int j = 0; j < GEMM_NR; j++) {
                const int n = s * GEMM_NR + j;
                if (n < nb) {
                    const float * w = W + (size_t)(n0 + n) * ldw + k0;
                    for (int k = 0; k < kc; k++) dst[(size_t)k * GEMM_NR + j] = w[k];
                } else {
                    for (int k = 0; k < kc; k++) dst[(size_t)k * GEMM_NR + j] = 0.0f;
                }
            }
        }
        for (int r = 0; r < m; r += GEMM_MR) {
            const int rows = std::min(GEMM_MR, m - r);
            for (int s = 0; s < n_strips; s++) {
                const int cols = std::min(GEMM_NR, nb - s * GEMM_NR);
                const float * a = A + (size_t)r * lda + k0;
                const float * b = bp + (size_t)s * kc * GEMM_NR;
                float * c = C + (size_t)r * ldc + n0 + s * GEMM_NR;
                switch (rows) {
                    case 6: gemm_micro<6>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                    case 5: gemm_micro<5>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                    case 4: gemm_micro<4>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                    case 3: gemm_micro<3>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                    case 2: gemm_micro<2>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                    default: gemm_micro<1>(a, lda, b, kc, c, ldc, cols, k0 == 0); break;
                }
            }
        }
    }
}

// Epilogue on rows [0, m) x columns [n0, n0 + nb): bias, activation, then one added
// tensor: residual (same row) or add (row modulo its T, the positional embedding).
struct epilogue {
    const float * bias;
    int act;
    const float * residual; size_t ld_residual;
    const float * add; int64_t add_rows;
};

void apply_epilogue(const epilogue & ep, float * C, size_t ldc, int64_t row0, int m, int n0, int nb) {
    for (int r = 0; r < m; r++) {
        float * c = C + (size_t)r * ldc;
        const int64_t row = row0 + r;
        const float * res = ep.residual ? ep.residual + (size_t)row * ep.ld_residual : nullptr;
        const float * add = ep.add ? ep.add + (size_t)(row % ep.add_rows) * ldc : nullptr;
        for (int n = n0; n < n0 + nb; n++) {
            float v = c[n];
            if (ep.bias) v += ep.bias[n];
            if (ep.act == VT_ACT_GELU) v = gelu_erf(v);
            if (res) v += res[n];
            if (add) v += add[n];
            c[n] = v;
        }
    }
}

struct cpu_backend : vt_backend {
    thread_pool pool;
    std::vector<void *> weight_buffers;
    size_t weight_bytes = 0;
    size_t graph_bytes = 0;
    std::vector<std::vector<float>> scratch;   // per thread, sized at alloc_graph

    explicit cpu_backend(int n_threads) : pool(n_threads), scratch(pool.n_threads) {}
    ~cpu_backend() override {
        for (void * p : weight_buffers) free(p);
    }

    const char * name() const override { return "cpu"; }
    vt_type compute_type() const override { return VT_TYPE_F32; }

    static void * alloc_aligned(size_t bytes) {
        return aligned_alloc(VT_ARENA_ALIGN, align_up(std::max<size_t>(bytes, 1), VT_ARENA_ALIGN));
    }

    bool alloc_weights(vt_context * ctx) override {
        size_t total = 0;
        for (int i = 0; i < vt_n_tensors(ctx); i++) {
            vt_tensor * t = vt_get_tensor_at(ctx, i);
            if (t->flags & VT_FLAG_WEIGHT) total += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
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
            off += align_up(vt_nbytes(t), VT_ARENA_ALIGN);
        }
        return true;
    }

    // Per-thread scratch: a packed W panel plus, for conv, the im2col rows of one tile,
    // and for attention one row of scores.
    static size_t scratch_floats(const vt_tensor * t) {
        size_t n = gemm_scratch_floats();
        if (t->op == VT_OP_CONV1D_K3) n += (size_t)GEMM_MB * 3 * t->src[0]->ne[0];
        if (t->op == VT_OP_ATTENTION) n += (size_t)(GEMM_MB + t->ne[0] / t->iparams[0]) * t->ne[1];
        return n;
    }

    struct graph_state { void * arena; size_t bytes; };

    bool alloc_graph(vt_graph * g) override {
        for (vt_tensor * t : g->nodes) {
            if (t->type != VT_TYPE_F32) { vt_set_error("cpu backend computes in f32; '%s' is %s", t->name, vt_type_name(t->type)); return false; }
        }
        void * arena = alloc_aligned(g->arena_size);
        if (!arena) { vt_set_error("out of memory: arena of %zu bytes", g->arena_size); return false; }
        size_t need = 0;
        for (vt_tensor * t : g->nodes) need = std::max(need, scratch_floats(t));
        try {
            for (std::vector<float> & s : scratch) if (s.size() < need) s.resize(need);
        } catch (const std::bad_alloc &) {
            free(arena);
            vt_set_error("out of memory: %d x %zu bytes of thread scratch", pool.n_threads, need * sizeof(float));
            return false;
        }
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

    bool set_tensor(vt_tensor * t, const void * src, vt_type src_type) override {
        vt_convert(t->data, t->type, src, src_type, (size_t)vt_nelements(t));
        return true;
    }

    bool get_tensor_f32(const vt_tensor * t, float * dst) override {
        vt_convert(dst, VT_TYPE_F32, t->data, t->type, (size_t)vt_nelements(t));
        return true;
    }

    size_t allocated_bytes() const override {
        size_t s = 0;
        for (const std::vector<float> & v : scratch) s += v.capacity() * sizeof(float);
        return weight_bytes + graph_bytes + s;
    }

    // ---- ops ----

    // linear: tiles of rows x columns over the pool; the epilogue runs on each finished tile.
    void linear(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * res = t->src[3];
        const int K = (int)x->ne[0], N = (int)w->ne[1];
        const int64_t M = x->ne[1] * x->ne[2] * x->ne[3];
        const epilogue ep{b ? (const float *)b->data : nullptr, t->iparams[1],
                          res ? (const float *)res->data : nullptr, (size_t)N, nullptr, 1};
        const int m_tiles = (int)((M + GEMM_MB - 1) / GEMM_MB), n_tiles = (N + GEMM_NB - 1) / GEMM_NB;
        pool.run(m_tiles * n_tiles, [&](int task, int thread) {
            const int64_t m0 = (int64_t)(task / n_tiles) * GEMM_MB;
            const int n0 = (task % n_tiles) * GEMM_NB;
            const int m = (int)std::min<int64_t>(GEMM_MB, M - m0), nb = std::min(GEMM_NB, N - n0);
            float * C = (float *)t->data + (size_t)m0 * N;
            gemm_tile((const float *)x->data + (size_t)m0 * K, K, m, (const float *)w->data, K, K, n0, nb,
                      C, N, scratch[thread].data());
            apply_epilogue(ep, C, N, m0, m, n0, nb);
        });
    }

    // conv1d_k3: each tile gathers its im2col rows, col[i*3 + k] = x[t*stride + k - 1, i]
    // (the order of PyTorch's [C_out, C_in, 3] weight), then runs the GEMM above.
    void conv1d_k3(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2], * add = t->src[3];
        const int stride = t->iparams[0];
        const int c_in = (int)x->ne[0], t_in = (int)x->ne[1], K = 3 * c_in, N = (int)w->ne[2];
        const int64_t t_out = t->ne[1], M = t_out * t->ne[2];
        const epilogue ep{(const float *)b->data, t->iparams[1], nullptr, 0,
                          add ? (const float *)add->data : nullptr, t_out};
        const int m_tiles = (int)((M + GEMM_MB - 1) / GEMM_MB), n_tiles = (N + GEMM_NB - 1) / GEMM_NB;
        pool.run(m_tiles * n_tiles, [&](int task, int thread) {
            const int64_t m0 = (int64_t)(task / n_tiles) * GEMM_MB;
            const int n0 = (task % n_tiles) * GEMM_NB;
            const int m = (int)std::min<int64_t>(GEMM_MB, M - m0), nb = std::min(GEMM_NB, N - n0);
            float * col = scratch[thread].data() + gemm_scratch_floats();
            for (int r = 0; r < m; r++) {
                const int64_t row = m0 + r, bi = row / t_out, to = row % t_out;
                float * dst = col + (size_t)r * K;
                for (int k = 0; k < 3; k++) {
                    const int64_t ti = to * stride + k - 1;
                    const bool inside = ti >= 0 && ti < t_in;
                    const char * src = (const char *)x->data + (inside ? ti : 0) * x->nb[1] + bi * x->nb[2];
                    for (int i = 0; i < c_in; i++) dst[i * 3 + k] = inside ? *(const float *)(src + i * x->nb[0]) : 0.0f;
                }
            }
            float * C = (float *)t->data + (size_t)m0 * N;
            gemm_tile(col, K, m, (const float *)w->data, K, K, n0, nb, C, N, scratch[thread].data());
            apply_epilogue(ep, C, N, m0, m, n0, nb);
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
            for (int64_t r = (int64_t)task * chunk; r < std::min<int64_t>(rows, (int64_t)(task + 1) * chunk); r++) {
                const float * in = (const float *)x->data + (size_t)r * C;
                float * out = (float *)t->data + (size_t)r * C;
                double sum = 0.0;
                for (int i = 0; i < C; i++) sum += in[i];
                const double mean = sum / C;
                double var = 0.0;
                for (int i = 0; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
                const float rstd = (float)(1.0 / sqrt(var / C + eps));
                for (int i = 0; i < C; i++) out[i] = (float)(in[i] - mean) * rstd * w[i] + b[i];
            }
        });
    }

    // attention: one task per (window, head, block of GEMM_MB queries): the block's scores
    // S = Q K^T, a softmax per row, then O = P V, both products by the GEMM above (V
    // transposed into scratch first, the layout it takes).
    void attention(vt_tensor * t) {
        const vt_tensor * q = t->src[0], * k = t->src[1], * v = t->src[2];
        const int n_head = t->iparams[0];
        const int D = (int)q->ne[0], hd = D / n_head, T = (int)q->ne[1], B = (int)q->ne[2];
        const float scale = t->fparams[0];
        const int n_qb = (T + GEMM_MB - 1) / GEMM_MB;
        const float * kv_len = t->src[3] ? (const float *)t->src[3]->data : nullptr;   // vt_attention_masked
        pool.run(B * n_head * n_qb, [&](int task, int thread) {
            const int qb = task % n_qb, h = (task / n_qb) % n_head, bi = task / (n_qb * n_head);
            const int L = kv_len ? std::max(1, std::min(T, (int)kv_len[bi])) : T;   // keys >= L are masked
            const int i0 = qb * GEMM_MB, m = std::min(GEMM_MB, T - i0);
            auto rows = [&](const vt_tensor * s, int i) {   // row i of head h in window bi
                return (const float *)((const char *)s->data + (size_t)i * s->nb[1] + (size_t)bi * s->nb[2]) + h * hd;
            };
            float * panel = scratch[thread].data();
            float * scores = panel + gemm_scratch_floats();   // [m, T]
            float * vt = scores + (size_t)GEMM_MB * T;        // [hd, T]
            for (int n0 = 0; n0 < T; n0 += GEMM_NB) {
                gemm_tile(rows(q, i0), q->nb[1] / sizeof(float), m, rows(k, 0), k->nb[1] / sizeof(float), hd, n0,
                          std::min(GEMM_NB, T - n0), scores, T, panel);
            }
            float inv_sum[GEMM_MB];                            // no allocation inside a task
            for (int r = 0; r < m; r++) {
                float * s = scores + (size_t)r * T;
                float mx = -INFINITY;
                for (int j = 0; j < L; j++) mx = std::max(mx, s[j] *= scale);
                for (int j = 0; j < L; j++) s[j] = exp_nonpositive(s[j] - mx);
                for (int j = L; j < T; j++) s[j] = 0.0f;           // exp(-inf)
                double sum = 0.0;
                for (int j = 0; j < T; j++) sum += s[j];
                inv_sum[r] = (float)(1.0 / sum);
            }
            for (int j = 0; j < T; j++) {
                const float * vj = rows(v, j);
                for (int d = 0; d < hd; d++) vt[(size_t)d * T + j] = vj[d];
            }
            float * out = (float *)t->data + ((size_t)bi * T + i0) * D + h * hd;
            gemm_tile(scores, T, m, vt, T, T, 0, hd, out, D, panel);
            for (int r = 0; r < m; r++)
                for (int d = 0; d < hd; d++) out[(size_t)r * D + d] *= inv_sum[r];
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

vt_backend * vt_backend_cpu_init(int n_threads) {
    // threads past the hardware's only cost memory: each has its own scratch
    const int hw = (int)std::max(1u, std::thread::hardware_concurrency());
    if (n_threads <= 0 || n_threads > hw) n_threads = hw;
    try {
        return new cpu_backend(n_threads);
    } catch (const std::bad_alloc &) {
        vt_set_error("cpu backend: out of memory");
        return nullptr;
    } catch (const std::exception & e) {
        vt_set_error("cpu backend: cannot start %d threads: %s", n_threads, e.what());
        return nullptr;
    }
}
