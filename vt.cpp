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
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#if defined(__linux__)
#include <cerrno>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <unordered_map>

// =====================================================================================
// errors
// =====================================================================================

static thread_local char g_vt_error[1024];

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

#if defined(__x86_64__) && defined(__FLT16_MAX__)
// The f16 loops again for CPUs with F16C, where a _Float16 conversion is one instruction (a
// baseline x86-64 build converts in software, a libgcc call per element).
__attribute__((target("f16c,avx2"))) static void f16_to_f32_f16c(const _Float16 * s, float * d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (float)s[i];
}
__attribute__((target("f16c,avx2"))) static void f32_to_f16_f16c(const float * s, _Float16 * d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (_Float16)s[i];
}
static bool cpu_has_f16c() {
    static const bool has = [] {
        unsigned a, b, c, d;
        return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    }();
    return has;
}
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
// The f16 loops on aarch64 (GCC 12's C++ has no _Float16 there): NEON's FCVTL / FCVTN, four at
// a time, rounding to nearest even as vt_f32_to_f16 does; the tail through the scalar functions.
static void f16_to_f32_neon(const uint16_t * s, float * d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(d + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s + i))));
    for (; i < n; i++) d[i] = vt_f16_to_f32(s[i]);
}
static void f32_to_f16_neon(const float * s, uint16_t * d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(s + i))));
    for (; i < n; i++) d[i] = vt_f32_to_f16(s[i]);
}
#endif

// One loop per pair of types, so that the compiler vectorises each (F16C / AVX-512 on x86,
// where _Float16 conversions are single instructions; NEON on aarch64).
void vt_convert(void * dst, enum vt_type dst_type, const void * src, enum vt_type src_type, size_t n) {
    if (dst_type == src_type) {
        memcpy(dst, src, n * vt_type_size(src_type));
        return;
    }
    const uint16_t * s16 = (const uint16_t *)src;
    const float * s32 = (const float *)src;
    uint16_t * d16 = (uint16_t *)dst;
    float * d32 = (float *)dst;
#if defined(__FLT16_MAX__) && defined(__x86_64__)
    const _Float16 * sh = (const _Float16 *)src;
    _Float16 * dh = (_Float16 *)dst;
    if (cpu_has_f16c() && src_type == VT_TYPE_F16 && dst_type == VT_TYPE_F32) { f16_to_f32_f16c(sh, d32, n); return; }
    if (cpu_has_f16c() && src_type == VT_TYPE_F32 && dst_type == VT_TYPE_F16) { f32_to_f16_f16c(s32, dh, n); return; }
    if (src_type == VT_TYPE_F16 && dst_type == VT_TYPE_F32) { for (size_t i = 0; i < n; i++) d32[i] = (float)sh[i]; return; }
    if (src_type == VT_TYPE_F32 && dst_type == VT_TYPE_F16) { for (size_t i = 0; i < n; i++) dh[i] = (_Float16)s32[i]; return; }
#elif defined(__aarch64__) && defined(__ARM_NEON)
    if (src_type == VT_TYPE_F16 && dst_type == VT_TYPE_F32) { f16_to_f32_neon(s16, d32, n); return; }
    if (src_type == VT_TYPE_F32 && dst_type == VT_TYPE_F16) { f32_to_f16_neon(s32, d16, n); return; }
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
void vt_set_fp8(vt_tensor * t) { VT_ASSERT(t->flags & VT_FLAG_WEIGHT); t->flags |= VT_FLAG_FP8; }

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
    "rope_qk",
    "relu",
    "silu",
    "conv2d_k3s2",
    "add_rows",
    "silu_mul",
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

vt_tensor * vt_conv1d_k3_chunks(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b,
                                int stride, enum vt_act act, vt_tensor * add, int chunk, vt_tensor * x_len) {
    VT_ASSERT(chunk >= stride && chunk % stride == 0 && x->ne[1] % chunk == 0);
    VT_ASSERT(!x_len || (x_len->type == VT_TYPE_F32 && vt_nelements(x_len) == x->ne[2] && vt_is_contiguous(x_len)));
    const int64_t chunk_out = chunk / stride;
    if (add) {
        VT_ASSERT(add->type == VT_TYPE_F32 && add->ne[0] == w->ne[2] && add->ne[1] == chunk_out && add->ne[2] == 1);
        VT_ASSERT(add->nb[0] == sizeof(float) && add->nb[1] == (size_t)w->ne[2] * sizeof(float));
    }
    vt_tensor * t = vt_conv1d_k3(ctx, x, w, b, stride, act, nullptr);
    t->src[3] = add;
    t->src[4] = x_len;
    t->iparams[2] = chunk;
    return t;
}

// vt_conv2d_k3s2

vt_tensor * vt_conv2d_k3s2(vt_context * ctx, vt_tensor * x, vt_tensor * w, vt_tensor * b, enum vt_act act,
                           int chunk, vt_tensor * x_len) {
    VT_ASSERT(w->ne[0] == 3 && w->ne[1] == 3 && vt_is_contiguous(w));
    VT_ASSERT(b && b->type == VT_TYPE_F32 && b->ne[0] == w->ne[3] && vt_nelements(b) == b->ne[0]);
    const int64_t c_in = w->ne[2], c_out = w->ne[3];
    const bool mel = c_in == 1;                       // the log-mel [B, F, T], time innermost
    if (mel) VT_ASSERT(x->ne[3] == 1);
    else VT_ASSERT(x->ne[0] == c_in && vt_is_contiguous(x));
    const int64_t f_in = x->ne[1], t_in = mel ? x->ne[0] : x->ne[2], n_b = mel ? x->ne[2] : x->ne[3];
    VT_ASSERT(chunk >= 1);
    if (chunk > t_in) chunk = (int)t_in;
    VT_ASSERT(t_in % chunk == 0);
    VT_ASSERT(!x_len || (x_len->type == VT_TYPE_F32 && vt_nelements(x_len) == n_b && vt_is_contiguous(x_len)));
    const int64_t t_out = t_in / chunk * ((chunk - 1) / 2 + 1), f_out = (f_in - 1) / 2 + 1;
    const int64_t ne[4] = {c_out, f_out, t_out, n_b};
    vt_tensor * t = new_tensor(ctx, w->type, ne);
    t->op = VT_OP_CONV2D_K3S2;
    t->src[0] = x;
    t->src[1] = w;
    t->src[2] = b;
    t->src[4] = x_len;
    t->iparams[1] = act;
    t->iparams[2] = chunk;
    return t;
}

// vt_add_rows

vt_tensor * vt_add_rows(vt_context * ctx, vt_tensor * x, vt_tensor * add, int period) {
    VT_ASSERT(vt_is_contiguous(x) && x->ne[3] == 1 && period >= 1);
    VT_ASSERT(add->type == VT_TYPE_F32 && vt_is_contiguous(add) && add->ne[0] == x->ne[0] && add->ne[1] >= period);
    const int64_t ne[4] = {x->ne[0], x->ne[1], x->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, x->type, ne);
    t->op = VT_OP_ADD_ROWS;
    t->src[0] = x;
    t->src[1] = add;
    t->iparams[0] = period;
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

// iparams: {max_only, n_fft, hop, n_frames}
static vt_tensor * log_mel_op(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params,
                              const vt_mel_shape * shape, bool max_only) {
    VT_ASSERT(shape && shape->n_fft >= 2 && shape->hop >= 1 && shape->n_frames >= 1);
    const int64_t n_bins = shape->n_fft / 2 + 1, row_min = (int64_t)shape->hop * (shape->n_frames - 1) + shape->n_fft;
    VT_ASSERT(pcm->type == VT_TYPE_F32 && vt_is_contiguous(pcm) && pcm->ne[0] >= row_min && pcm->ne[2] == 1 && pcm->ne[3] == 1);
    VT_ASSERT(filters->type == VT_TYPE_F32 && vt_is_contiguous(filters) && filters->ne[0] == n_bins && filters->ne[2] == 1);
    VT_ASSERT(!params || (params->type == VT_TYPE_F32 && vt_is_contiguous(params) && params->ne[0] == 2 &&
                          params->ne[1] == pcm->ne[1] && params->ne[2] == 1));
    const int64_t ne[4] = {shape->n_frames, filters->ne[1], pcm->ne[1], 1}, ne_max[4] = {pcm->ne[1], 1, 1, 1};
    vt_tensor * t = new_tensor(ctx, VT_TYPE_F32, max_only ? ne_max : ne);
    t->op = VT_OP_LOG_MEL;
    t->src[0] = pcm;
    t->src[1] = filters;
    t->src[2] = params;
    t->iparams[0] = max_only;
    t->iparams[1] = shape->n_fft;
    t->iparams[2] = shape->hop;
    t->iparams[3] = shape->n_frames;
    return t;
}

vt_tensor * vt_log_mel(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params,
                       const vt_mel_shape * shape) {
    return log_mel_op(ctx, pcm, filters, params, shape, false);
}

vt_tensor * vt_log_mel_max(vt_context * ctx, vt_tensor * pcm, vt_tensor * filters, vt_tensor * params,
                           const vt_mel_shape * shape) {
    return log_mel_op(ctx, pcm, filters, params, shape, true);
}

vt_tensor * vt_attention_masked(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_len) {
    VT_ASSERT(kv_len && kv_len->type == VT_TYPE_F32 && vt_nelements(kv_len) == q->ne[2] && vt_is_contiguous(kv_len));
    vt_tensor * t = vt_attention(ctx, q, k, v, n_head, scale);
    t->src[3] = kv_len;
    return t;
}

vt_tensor * vt_attention_blocks(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_len, int block) {
    VT_ASSERT(block >= 0);
    vt_tensor * t = kv_len ? vt_attention_masked(ctx, q, k, v, n_head, scale, kv_len) : vt_attention(ctx, q, k, v, n_head, scale);
    t->iparams[1] = block;
    return t;
}

vt_tensor * vt_attention_block_causal(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                      int n_head, float scale, vt_tensor * kv_len, int block) {
    VT_ASSERT(block >= 1);
    vt_tensor * t = vt_attention_blocks(ctx, q, k, v, n_head, scale, kv_len, block);
    t->iparams[2] = 1;                   // causal: the keys from 0, not from the block's start
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

// vt_relu, vt_silu: elementwise, x's shape and type

static vt_tensor * unary(vt_context * ctx, vt_tensor * x, enum vt_op op) {
    VT_ASSERT(vt_is_contiguous(x));
    vt_tensor * t = new_tensor(ctx, x->type, x->ne);
    t->op = op;
    t->src[0] = x;
    return t;
}

vt_tensor * vt_relu(vt_context * ctx, vt_tensor * x) { return unary(ctx, x, VT_OP_RELU); }
vt_tensor * vt_silu(vt_context * ctx, vt_tensor * x) { return unary(ctx, x, VT_OP_SILU); }

// vt_silu_mul

vt_tensor * vt_silu_mul(vt_context * ctx, vt_tensor * g, vt_tensor * x) {
    VT_ASSERT(vt_is_contiguous(g) && vt_is_contiguous(x) && same_shape(g, x) && g->type == x->type);
    vt_tensor * t = unary(ctx, x, VT_OP_SILU_MUL);
    t->src[1] = g;
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

// vt_rope_qk

vt_tensor * vt_rope_qk(vt_context * ctx, vt_tensor * qkv, int n_head, int n_rot, float theta) {
    VT_ASSERT(vt_is_contiguous(qkv) && qkv->ne[3] == 1 && n_head >= 1 && qkv->ne[0] % (3 * n_head) == 0);
    const int64_t head_dim = qkv->ne[0] / 3 / n_head;
    VT_ASSERT(n_rot >= 2 && n_rot % 2 == 0 && n_rot <= head_dim && theta > 0.0f);
    vt_tensor * t = new_tensor(ctx, qkv->type, qkv->ne);
    t->op = VT_OP_ROPE_QK;
    t->src[0] = qkv;
    t->iparams[0] = n_head;
    t->iparams[1] = n_rot;
    t->fparams[0] = theta;
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
enum vt_type vt_backend_gemm_type(const vt_backend * be) { return be->gemm_type(); }
bool vt_backend_alloc_weights(vt_backend * be, vt_context * ctx) { return be->alloc_weights(ctx); }
size_t vt_backend_allocated_bytes(const vt_backend * be) { return be->allocated_bytes(); }

bool vt_backend_alloc_graph(vt_backend * be, vt_graph * g) {
    if (g->backend) g->backend->release_graph(g);
    g->backend = nullptr;
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

bool vt_backend::submit(vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host, const vt_tensor * out,
                        void * out_host, vt_type out_type, int) {
    for (int i = 0; i < n_in; i++)
        if (!set_tensor(in[i], in_host[i], VT_TYPE_F32)) return false;
    if (!compute(g)) return false;
    if (out_type == VT_TYPE_F32) return get_tensor_f32(out, (float *)out_host);
    std::vector<float> f32((size_t)vt_nelements(out));
    if (!get_tensor_f32(out, f32.data())) return false;
    vt_convert(out_host, out_type, f32.data(), VT_TYPE_F32, f32.size());
    return true;
}

// Maps every page of p now, a store a page (memset after malloc may become calloc's no-op):
// buffers allocated at init are touched at init, so the first batches take no page faults
// (base on the CPU: ~10k of them, 15-40 ms of its first window on 2 cores).
static void map_pages(void * p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 4096) ((volatile char *)p)[i] = 0;
}

void * vt_backend::host_alloc(size_t bytes) {
    void * p = malloc(std::max<size_t>(bytes, 1));
    if (!p) vt_set_error("out of memory: %zu bytes of host buffer", bytes);
    else map_pages(p, bytes);
    return p;
}

void vt_backend::host_free(void * p) { free(p); }

void vt_graph_set_tune(vt_graph * g, bool tune) { g->tune = tune; }

bool vt_backend_submit(vt_backend * be, vt_graph * g, int n_in, vt_tensor * const * in, const void * const * in_host,
                       const vt_tensor * out, void * out_host, enum vt_type out_type, int slot) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    if (slot < 0 || slot > 1) { vt_set_error("submit: slot %d (0 or 1)", slot); return false; }
    if (out_type != VT_TYPE_F32 && out_type != VT_TYPE_F16) { vt_set_error("submit: output as %s (f32 or f16)", vt_type_name(out_type)); return false; }
    if (n_in < 1 || n_in > VT_MAX_SUBMIT_INPUTS) { vt_set_error("submit: %d inputs (1 to %d)", n_in, VT_MAX_SUBMIT_INPUTS); return false; }
    for (int i = 0; i < n_in; i++)
        if (in[i]->type != VT_TYPE_F32 || !(in[i]->flags & VT_FLAG_INPUT) || !in[i]->data) {
            vt_set_error("submit: '%s' is not an allocated f32 input", in[i]->name);
            return false;
        }
    if (!vt_is_contiguous(out) || !out->data) { vt_set_error("submit: '%s' is not a contiguous allocated tensor", out->name); return false; }
    return be->submit(g, n_in, in, in_host, out, out_host, out_type, slot);
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

#ifndef VT_USE_CUDA
size_t vt_cuda_bytes_allocated(void) { return 0; }
#endif

// =====================================================================================
// CPU backend: f32, a persistent thread pool, packed GEMM micro-kernels per instruction set
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

// ---- per-instruction-set kernels --------------------------------------------------
// The hot loops exist once per instruction set (AVX-512, AVX2 + FMA, plain C++) in one
// binary built for the baseline CPU: the GEMM micro-kernels are intrinsics under a target
// attribute, the row operations are one always-inlined source compiled inside each
// target's function (VT_CPU_ROW_OPS), which the compiler vectorises for that target.
// On aarch64, where NEON is part of the baseline, the set is chosen at compile time: NEON
// intrinsics for the GEMM micro-kernel and the row operations (no target attribute, no
// run-time check), beside the plain C++ one.
// pick_cpu_kernels() chooses the set once, when a backend starts.

#if defined(__x86_64__) || defined(__i386__)
#define VT_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define VT_NEON 1
#endif
#define VT_INLINE inline __attribute__((always_inline))
#define VT_TARGET_AVX2   __attribute__((target("avx2,fma")))
#define VT_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))

// The reductions below keep LANES partial results, added up in the same order on every
// instruction set. Written so that the compiler vectorises them (a plain reduction loop
// is not, in strict IEEE mode): sums as LANES-wide array updates, maxima in four vectors
// of four floats (a 16-wide vector type would live in memory where registers are narrower).
constexpr int LANES = 16;
typedef float f32x4 __attribute__((vector_size(4 * sizeof(float))));

// The row operations may compute both sides of a select (GCC otherwise keeps a loop with
// one scalar where the target has no mask registers: AVX2, SSE). FP exception flags are
// never read here; values are unchanged.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3", "no-trapping-math")
#endif

// (local min/max: functions from outside this region, compiled with other options, would
// not be inlined here; these keep std::max's NaN rule: max_f(a, NaN) = a)
VT_INLINE float max_f(float a, float b) { return a < b ? b : a; }
VT_INLINE float min_f(float a, float b) { return b < a ? b : a; }

// exp(x) for the softmax's x <= 0, in a form the compiler vectorises (expf does not):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation under
// 6e-9 relative), 2^n built in the exponent bits. Total for any float, as non-finite
// activations reach it: below -87 (e^-87 = 1.6e-38, -inf too) it returns 0, a NaN
// stays NaN, and x > 0 (only a NaN row's difference could be) is taken as 0.
VT_INLINE float exp_nonpositive(float x) {
    const bool underflow = x < -87.0f;
    x = min_f(max_f(x, -87.0f), 0.0f);                   // NaN passes both
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

// GELU, the exact form 0.5 x (1 + erf(z)), z = x / sqrt 2, vectorisable (erff is a call):
// 1 + erf(z) is erfc(-z), and erfc(|z|) = exp(-z^2) R(t), t = 1 / (1 + |z| / 2), with R a
// degree-10 polynomial fitted here (least squares on the relative error, float64) to
// erfc(z) exp(z^2) over [0, 9.5]: 2.2e-8 relative. For z < 0 that is the result itself, so
// the negative tail keeps its relative accuracy; for z >= 0 it is 2 - erfc(z). Measured in
// float32 against a float64 GELU over |x| < 6: RMS relative error 2.9e-8 (erff's: 3.2e-8).
VT_INLINE float gelu_erf(float x) {
    const float z = x * 0.70710678118654752f;
    const float az = __builtin_fabsf(z);
    const float t = 1.0f / (1.0f + 0.5f * az);
    float r = 2.686091512e-02f;
    r = r * t - 2.057177722e-01f;
    r = r * t + 6.324386597e-01f;
    r = r * t - 9.578238726e-01f;
    r = r * t + 6.788800955e-01f;
    r = r * t - 2.504123747e-01f;
    r = r * t + 2.853813171e-01f;
    r = r * t + 2.231871933e-01f;
    r = r * t + 2.853619456e-01f;
    r = r * t + 2.818347514e-01f;
    r = r * t + 9.055000191e-06f;
    const float erfc_az = exp_nonpositive(-az * az) * r;
    return 0.5f * x * (z < 0.0f ? erfc_az : 2.0f - erfc_az);
}

// A linear's or conv's epilogue on one row: c = act(c + bias) + add, where add is a
// residual row or a positional-embedding row (bias and add optional).
VT_INLINE void epilogue_row_impl(float * c, int n, const float * bias, bool gelu, const float * add) {
    if (bias) for (int i = 0; i < n; i++) c[i] += bias[i];
    if (gelu) for (int i = 0; i < n; i++) c[i] = gelu_erf(c[i]);
    if (add) for (int i = 0; i < n; i++) c[i] += add[i];
}

// The softmax's numerators in place, s = exp(s - max s) over [0, n); returns 1 / their
// sum (summed in double: it scales the whole row). A NaN is not the max (as std::max).
VT_INLINE float softmax_row_impl(float * s, int n) {
    f32x4 lane_max[4];
    for (int v = 0; v < 4; v++) lane_max[v] = f32x4{} - INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 4; v++) {
            f32x4 x;
            memcpy(&x, s + i + 4 * v, sizeof(x));
            lane_max[v] = x > lane_max[v] ? x : lane_max[v];
        }
    }
    float mx = -INFINITY, maxima[LANES];
    for (; i < n; i++) mx = max_f(mx, s[i]);
    memcpy(maxima, lane_max, sizeof(maxima));
    for (int l = 0; l < LANES; l++) mx = max_f(mx, maxima[l]);
    for (i = 0; i < n; i++) s[i] = exp_nonpositive(s[i] - mx);
    double lane_sum[LANES] = {};
    for (i = 0; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lane_sum[l] += s[i + l];
    double sum = 0.0;
    for (; i < n; i++) sum += s[i];
    for (int l = 0; l < LANES; l++) sum += lane_sum[l];
    return (float)(1.0 / sum);
}

// LayerNorm of one row of C values, statistics in double.
VT_INLINE void layer_norm_row_impl(const float * in, float * out, int C, const float * w, const float * b, float eps) {
    double lane[LANES] = {};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += in[i + l];
    double sum = 0.0;
    for (; i < C; i++) sum += in[i];
    for (int l = 0; l < LANES; l++) { sum += lane[l]; lane[l] = 0.0; }
    const double mean = sum / C;
    for (i = 0; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += (in[i + l] - mean) * (in[i + l] - mean);
    double var = 0.0;
    for (; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
    for (int l = 0; l < LANES; l++) var += lane[l];
    const float rstd = (float)(1.0 / __builtin_sqrt(var / C + eps));
    for (i = 0; i < C; i++) out[i] = (float)(in[i] - mean) * rstd * w[i] + b[i];
}

#define VT_CPU_ROW_OPS(ISA, TARGET)                                                                        \
    TARGET void epilogue_row_##ISA(float * c, int n, const float * bias, bool gelu, const float * add) {   \
        epilogue_row_impl(c, n, bias, gelu, add);                                                          \
    }                                                                                                      \
    TARGET float softmax_row_##ISA(float * s, int n) { return softmax_row_impl(s, n); }                    \
    TARGET void layer_norm_row_##ISA(const float * in, float * out, int C, const float * w, const float * b, float eps) { \
        layer_norm_row_impl(in, out, C, w, b, eps);                                                        \
    }
VT_CPU_ROW_OPS(plain, )
#ifdef VT_X86
VT_CPU_ROW_OPS(avx2, VT_TARGET_AVX2)
VT_CPU_ROW_OPS(avx512, VT_TARGET_AVX512)
#endif

#ifdef VT_NEON
// ---- NEON row operations (aarch64) ----
// exp_nonpositive, gelu_erf and the row operations above, four floats at a time: the same
// constants, steps and reductions (16 partial sums or maxima, added up in the same order), the
// multiply-adds fused (FMA is baseline on aarch64, and GCC fuses the plain C++ there too). Tails
// shorter than a vector go through the scalar functions.

VT_INLINE float32x4_t exp_nonpositive_neon(float32x4_t x) {
    const uint32x4_t underflow = vcltq_f32(x, vdupq_n_f32(-87.0f));          // false for NaN
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(0.0f));    // FMAX, FMIN: a NaN stays NaN
    const float32x4_t t = vfmaq_f32(vdupq_n_f32(12582912.0f), x, vdupq_n_f32(1.44269504089f));
    const float32x4_t n = vsubq_f32(t, vdupq_n_f32(12582912.0f));
    const float32x4_t r = vfmaq_f32(vfmsq_f32(x, n, vdupq_n_f32(0.693359375f)), n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const uint32x4_t e = vshlq_n_u32(vaddq_u32(vsubq_u32(vreinterpretq_u32_f32(t), vdupq_n_u32(0x4B400000u)), vdupq_n_u32(127u)), 23);
    return vbslq_f32(underflow, vdupq_n_f32(0.0f), vmulq_f32(p, vreinterpretq_f32_u32(e)));
}

VT_INLINE float32x4_t gelu_erf_neon(float32x4_t x) {
    const float32x4_t z = vmulq_f32(x, vdupq_n_f32(0.70710678118654752f));
    const float32x4_t az = vabsq_f32(z);
    const float32x4_t t = vdivq_f32(vdupq_n_f32(1.0f), vfmaq_f32(vdupq_n_f32(1.0f), az, vdupq_n_f32(0.5f)));
    float32x4_t r = vdupq_n_f32(2.686091512e-02f);
    r = vfmaq_f32(vdupq_n_f32(-2.057177722e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(6.324386597e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-9.578238726e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(6.788800955e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-2.504123747e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.853813171e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.231871933e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.853619456e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(2.818347514e-01f), r, t);
    r = vfmaq_f32(vdupq_n_f32(9.055000191e-06f), r, t);
    const float32x4_t erfc_az = vmulq_f32(exp_nonpositive_neon(vnegq_f32(vmulq_f32(az, az))), r);
    const float32x4_t one_plus_erf = vbslq_f32(vcltq_f32(z, vdupq_n_f32(0.0f)), erfc_az, vsubq_f32(vdupq_n_f32(2.0f), erfc_az));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x), one_plus_erf);
}

void epilogue_row_neon(float * c, int n, const float * bias, bool gelu, const float * add) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(c + i);
        if (bias) v = vaddq_f32(v, vld1q_f32(bias + i));
        if (gelu) v = gelu_erf_neon(v);
        if (add) v = vaddq_f32(v, vld1q_f32(add + i));
        vst1q_f32(c + i, v);
    }
    for (; i < n; i++) {
        float v = c[i];
        if (bias) v += bias[i];
        if (gelu) v = gelu_erf(v);
        if (add) v += add[i];
        c[i] = v;
    }
}

// 16 floats' partial sums in double: lane l of a 16-float block goes to acc[l / 2], half l % 2.
VT_INLINE void add_16_f64(float64x2_t acc[8], const float32x4_t v[4]) {
    for (int q = 0; q < 4; q++) {
        acc[2 * q] = vaddq_f64(acc[2 * q], vcvt_f64_f32(vget_low_f32(v[q])));
        acc[2 * q + 1] = vaddq_f64(acc[2 * q + 1], vcvt_high_f64_f32(v[q]));
    }
}

// sum + the 16 lanes, in lane order (as the plain loops add them)
VT_INLINE double add_lanes_f64(double sum, const float64x2_t acc[8]) {
    double lanes[LANES];
    for (int q = 0; q < 8; q++) vst1q_f64(lanes + 2 * q, acc[q]);
    for (int l = 0; l < LANES; l++) sum += lanes[l];
    return sum;
}

float softmax_row_neon(float * s, int n) {
    // the max: FMAXNM takes the number over a NaN (a NaN is not the max, as in max_f)
    float32x4_t lane_max[4];
    for (int q = 0; q < 4; q++) lane_max[q] = vdupq_n_f32(-INFINITY);
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int q = 0; q < 4; q++) lane_max[q] = vmaxnmq_f32(lane_max[q], vld1q_f32(s + i + 4 * q));
    float mx = -INFINITY;
    for (; i < n; i++) mx = max_f(mx, s[i]);
    mx = max_f(mx, vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(lane_max[0], lane_max[1]), vmaxnmq_f32(lane_max[2], lane_max[3]))));
    // the numerators, and their sum in double
    const float32x4_t vmx = vdupq_n_f32(mx);
    float64x2_t acc[8];
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    for (i = 0; i + LANES <= n; i += LANES) {
        float32x4_t e[4];
        for (int q = 0; q < 4; q++) {
            e[q] = exp_nonpositive_neon(vsubq_f32(vld1q_f32(s + i + 4 * q), vmx));
            vst1q_f32(s + i + 4 * q, e[q]);
        }
        add_16_f64(acc, e);
    }
    double sum = 0.0;
    for (; i < n; i++) sum += (s[i] = exp_nonpositive(s[i] - mx));
    return (float)(1.0 / add_lanes_f64(sum, acc));
}

void layer_norm_row_neon(const float * in, float * out, int C, const float * w, const float * b, float eps) {
    float64x2_t acc[8];
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    int i = 0;
    for (; i + LANES <= C; i += LANES) {
        const float32x4_t v[4] = {vld1q_f32(in + i), vld1q_f32(in + i + 4), vld1q_f32(in + i + 8), vld1q_f32(in + i + 12)};
        add_16_f64(acc, v);
    }
    double sum = 0.0;
    for (; i < C; i++) sum += in[i];
    const double mean = add_lanes_f64(sum, acc) / C;
    const float64x2_t vmean = vdupq_n_f64(mean);
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f64(0.0);
    for (i = 0; i + LANES <= C; i += LANES)
        for (int q = 0; q < 4; q++) {
            const float32x4_t v = vld1q_f32(in + i + 4 * q);
            const float64x2_t d0 = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vmean), d1 = vsubq_f64(vcvt_high_f64_f32(v), vmean);
            acc[2 * q] = vfmaq_f64(acc[2 * q], d0, d0);
            acc[2 * q + 1] = vfmaq_f64(acc[2 * q + 1], d1, d1);
        }
    double var = 0.0;
    for (; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
    var = add_lanes_f64(var, acc);
    const float rstd = (float)(1.0 / __builtin_sqrt(var / C + eps));
    for (i = 0; i + 4 <= C; i += 4) {   // out = (float)(in - mean) * rstd * w + b
        const float32x4_t v = vld1q_f32(in + i);
        const float32x4_t d = vcvt_high_f32_f64(vcvt_f32_f64(vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vmean)),
                                                vsubq_f64(vcvt_high_f64_f32(v), vmean));
        vst1q_f32(out + i, vfmaq_f32(vld1q_f32(b + i), vmulq_n_f32(d, rstd), vld1q_f32(w + i)));
    }
    for (; i < C; i++) out[i] = (float)(in[i] - mean) * rstd * w[i] + b[i];
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// ---- GEMM micro-kernels: C[12, 32] (+)= A[12, kc] B[kc, 32] --------------------------
// A is row-major, 12 rows lda apart, read in place (each row's cache line serves 16 k);
// B is packed row by row (bp[k * 32 + j], as pack_b writes it); C is row-major, ldc
// apart. accumulate: start from C's values (one FMA chain over all of K, whatever the
// chunking), else from zero.
constexpr int GEMM_MR = 12, GEMM_NR = 32;

void gemm_12x32_plain(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    float acc[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, bp += GEMM_NR)
        for (int r = 0; r < GEMM_MR; r++)
            for (int j = 0; j < GEMM_NR; j++) acc[r][j] += a[r * lda + k] * bp[j];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) c[r * ldc + j] = acc[r][j];
}

#ifdef VT_X86
// 24 of the 32 zmm registers hold the 12 x 32 accumulators; per k, two loads of B and
// 12 broadcasts of A feed 24 FMAs. B's strip comes from L2 (A's 12 rows stay in L1 across
// the strips), two cache lines every 12 cycles, faster than the L1 prefetcher brings them:
// B is prefetched 8 k ahead (4-7% off real base's window on the 2-core Xeon; the AVX2 kernel,
// at half the rate, ran 2% slower with it, and on the AMD EPYC too).
VT_TARGET_AVX512
void gemm_12x32_avx512(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    __m512 acc[GEMM_MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < GEMM_MR; r++) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        _mm_prefetch((const char *)(bp + 8 * GEMM_NR), _MM_HINT_T0);        // (past the strip's end: a hint, never a fault)
        _mm_prefetch((const char *)(bp + 8 * GEMM_NR + 16), _MM_HINT_T0);
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 12
        for (int r = 0; r < GEMM_MR; r++) {
            const __m512 ar = _mm512_set1_ps(a[r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < GEMM_MR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

// AVX2 has 16 ymm registers: the 12 x 32 tile goes as four 6 x 16 blocks (12 accumulators
// each), reading the same A rows and packed B at offsets.
VT_TARGET_AVX2 VT_INLINE
void gemm_6x16_avx2(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        acc[r][0] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

VT_TARGET_AVX2
void gemm_12x32_avx2(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    for (int r0 = 0; r0 < GEMM_MR; r0 += 6)
        for (int j0 = 0; j0 < GEMM_NR; j0 += 16)
            gemm_6x16_avx2(kc, a + r0 * lda, lda, bp + j0, c + r0 * ldc + j0, ldc, accumulate);
}
#endif

#ifdef VT_NEON
// 32 128-bit registers: the 12 x 32 tile goes as six 4 x 16 blocks, 16 accumulators each.
// Four k at a time: one load of each A row gives its four k (a[r][k..k+3]), and each of the
// four k's B vectors is multiplied by a lane of them (FMLA by element): 4 + 16 loads feed 64
// FMAs, with 16 + 4 + 4 registers live (a 6 x 16 block with A broadcast per k spilled).
VT_INLINE void gemm_4x16_neon(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[r][q] = accumulate ? vld1q_f32(c + r * ldc + 4 * q) : vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 4 <= kc; k += 4, bp += 4 * GEMM_NR) {
        const float32x4_t a0 = vld1q_f32(a + k), a1 = vld1q_f32(a + lda + k), a2 = vld1q_f32(a + 2 * lda + k),
                          a3 = vld1q_f32(a + 3 * lda + k);
#define VT_NEON_K(L)                                                                                      \
        {                                                                                                 \
            const float * b = bp + (L) * GEMM_NR;                                                         \
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12); \
            acc[0][0] = vfmaq_laneq_f32(acc[0][0], b0, a0, L); acc[0][1] = vfmaq_laneq_f32(acc[0][1], b1, a0, L); \
            acc[0][2] = vfmaq_laneq_f32(acc[0][2], b2, a0, L); acc[0][3] = vfmaq_laneq_f32(acc[0][3], b3, a0, L); \
            acc[1][0] = vfmaq_laneq_f32(acc[1][0], b0, a1, L); acc[1][1] = vfmaq_laneq_f32(acc[1][1], b1, a1, L); \
            acc[1][2] = vfmaq_laneq_f32(acc[1][2], b2, a1, L); acc[1][3] = vfmaq_laneq_f32(acc[1][3], b3, a1, L); \
            acc[2][0] = vfmaq_laneq_f32(acc[2][0], b0, a2, L); acc[2][1] = vfmaq_laneq_f32(acc[2][1], b1, a2, L); \
            acc[2][2] = vfmaq_laneq_f32(acc[2][2], b2, a2, L); acc[2][3] = vfmaq_laneq_f32(acc[2][3], b3, a2, L); \
            acc[3][0] = vfmaq_laneq_f32(acc[3][0], b0, a3, L); acc[3][1] = vfmaq_laneq_f32(acc[3][1], b1, a3, L); \
            acc[3][2] = vfmaq_laneq_f32(acc[3][2], b2, a3, L); acc[3][3] = vfmaq_laneq_f32(acc[3][3], b3, a3, L); \
        }
        VT_NEON_K(0) VT_NEON_K(1) VT_NEON_K(2) VT_NEON_K(3)   // (the lane must be a constant)
#undef VT_NEON_K
    }
    for (; k < kc; k++, bp += GEMM_NR) {   // the last kc % 4, one k at a time
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const float ar = a[r * lda + k];
            acc[r][0] = vfmaq_n_f32(acc[r][0], b0, ar);
            acc[r][1] = vfmaq_n_f32(acc[r][1], b1, ar);
            acc[r][2] = vfmaq_n_f32(acc[r][2], b2, ar);
            acc[r][3] = vfmaq_n_f32(acc[r][3], b3, ar);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) vst1q_f32(c + r * ldc + 4 * q, acc[r][q]);
}

void gemm_12x32_neon(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate) {
    for (int r0 = 0; r0 < GEMM_MR; r0 += 4)
        for (int j0 = 0; j0 < GEMM_NR; j0 += 16)
            gemm_4x16_neon(kc, a + r0 * lda, lda, bp + j0, c + r0 * ldc + j0, ldc, accumulate);
}
#endif

// One instruction set's kernels.
struct cpu_kernels {
    const char * isa;   // "avx512", "avx2", "neon" or "plain"
    void (*gemm)(int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc, bool accumulate);
    void (*epilogue_row)(float * c, int n, const float * bias, bool gelu, const float * add);
    float (*softmax_row)(float * s, int n);
    void (*layer_norm_row)(const float * in, float * out, int C, const float * w, const float * b, float eps);
};

const cpu_kernels CPU_KERNELS[] = {
#ifdef VT_X86
    {"avx512", gemm_12x32_avx512, epilogue_row_avx512, softmax_row_avx512, layer_norm_row_avx512},
    {"avx2", gemm_12x32_avx2, epilogue_row_avx2, softmax_row_avx2, layer_norm_row_avx2},
#endif
#ifdef VT_NEON
    {"neon", gemm_12x32_neon, epilogue_row_neon, softmax_row_neon, layer_norm_row_neon},
#endif
    {"plain", gemm_12x32_plain, epilogue_row_plain, softmax_row_plain, layer_norm_row_plain},
};

bool cpu_runs(const cpu_kernels & k) {
#ifdef VT_X86
    __builtin_cpu_init();
    if (strcmp(k.isa, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(k.isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#ifdef VT_NEON
    if (strcmp(k.isa, "neon") == 0) return true;   // every aarch64 CPU
#endif
    return strcmp(k.isa, "plain") == 0;
}

// The best set this CPU runs, or the one VT_CPU_ISA names (avx512, avx2, neon, plain: to measure
// or test a lesser one on a better CPU). NULL with vt_last_error() set when VT_CPU_ISA
// names a set that is unknown or that this CPU cannot run.
const cpu_kernels * pick_cpu_kernels() {
    const char * want = getenv("VT_CPU_ISA");
    if (want && *want) {
        for (const cpu_kernels & k : CPU_KERNELS) {
            if (strcmp(k.isa, want) != 0) continue;
            if (cpu_runs(k)) return &k;
            vt_set_error("VT_CPU_ISA=%s: this CPU cannot run it", want);
            return nullptr;
        }
        std::string known;
        for (const cpu_kernels & k : CPU_KERNELS) known += std::string(known.empty() ? "" : ", ") + k.isa;
        vt_set_error("VT_CPU_ISA=%s: unknown; this build has %s", want, known.c_str());
        return nullptr;
    }
    for (const cpu_kernels & k : CPU_KERNELS) if (cpu_runs(k)) return &k;
    VT_ASSERT(!"the plain kernels always run");
}

// ---- GEMM: C[M, N] = A[M, K] W[N, K]^T, f32 -----------------------------------------
// W is packed once per op into 32-column strips (all of K each), shared by the tasks. A
// task owns up to GEMM_NC columns (a run of strips) for a range of rows: it walks K in
// chunks of GEMM_KC (the chunk of its strips stays in L1/L2) and, per chunk, runs every
// 12-row panel of its rows against every strip. A is read where it lies.
constexpr int GEMM_NC = 256, GEMM_KC = 256;

// Floats of W packed: its columns rounded up to whole strips, times K.
size_t gemm_packed_floats(int N, int K) { return (size_t)(N + GEMM_NR - 1) / GEMM_NR * GEMM_NR * K; }

// bp[k * 32 + j] = W[j][k] for rows [0, n) of W (ldw apart), k in [0, kc); columns past n zero.
// Written in order (the n rows are read as n streams): 3x faster than row by row.
void pack_b(const float * W, size_t ldw, int n, int kc, float * bp) {
    for (int k = 0; k < kc; k++, bp += GEMM_NR) {
        for (int j = 0; j < n; j++) bp[j] = W[(size_t)j * ldw + k];
        for (int j = n; j < GEMM_NR; j++) bp[j] = 0.0f;
    }
}

// The micro-kernel on a tile of rows x cols <= 12 x 32 at c (A must have 12 rows): straight
// into C when whole, through a 12 x 32 buffer at the edges.
void gemm_tile(const cpu_kernels & kern, int kc, const float * a, size_t lda, const float * bp, float * c, size_t ldc,
               int rows, int cols, bool accumulate) {
    if (rows == GEMM_MR && cols == GEMM_NR) { kern.gemm(kc, a, lda, bp, c, ldc, accumulate); return; }
    float tile[GEMM_MR * GEMM_NR];
    if (accumulate)
        for (int r = 0; r < rows; r++) memcpy(tile + r * GEMM_NR, c + r * ldc, cols * sizeof(float));
    kern.gemm(kc, a, lda, bp, tile, GEMM_NR, accumulate);
    for (int r = 0; r < rows; r++) memcpy(c + r * ldc, tile + r * GEMM_NR, cols * sizeof(float));
}

// One task: rows [0, m) of A (lda) times nb <= GEMM_NC columns of packed W (bp: their
// strips, K long), into C (ldc); then done(r0, rows) for each finished 12-row panel (the
// epilogue, while the panel is in cache). edge: 12 x K floats for a last, partial panel.
template <typename DONE>
void gemm_block(const cpu_kernels & kern, const float * A, size_t lda, int m, const float * bp, int nb, int K,
                float * C, size_t ldc, float * edge, DONE && done) {
    const int n_strips = (nb + GEMM_NR - 1) / GEMM_NR, n_panels = (m + GEMM_MR - 1) / GEMM_MR;
    const int rows_last = m - (n_panels - 1) * GEMM_MR;
    if (rows_last < GEMM_MR) {   // the kernel reads 12 rows: pad the last panel with zeros
        memset(edge, 0, (size_t)GEMM_MR * K * sizeof(float));
        for (int r = 0; r < rows_last; r++) memcpy(edge + (size_t)r * K, A + (size_t)((n_panels - 1) * GEMM_MR + r) * lda, K * sizeof(float));
    }
    for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
        const int kc = std::min(GEMM_KC, K - k0);
        for (int p = 0; p < n_panels; p++) {
            const int rows = std::min(GEMM_MR, m - p * GEMM_MR);
            const float * a = rows < GEMM_MR ? edge + k0 : A + (size_t)p * GEMM_MR * lda + k0;
            const size_t la = rows < GEMM_MR ? (size_t)K : lda;
            for (int s = 0; s < n_strips; s++)
                gemm_tile(kern, kc, a, la, bp + ((size_t)s * K + k0) * GEMM_NR, C + (size_t)p * GEMM_MR * ldc + s * GEMM_NR, ldc,
                          rows, std::min(GEMM_NR, nb - s * GEMM_NR), k0 > 0);
            if (k0 + kc == K) done(p * GEMM_MR, rows);
        }
    }
}

// ---- bf16 GEMMs on AMX tiles: C[M, N] = A[M, K] W[N, K]^T, f32 accumulation ------------
// The bf16 mode (vt_backend_init("cpu", 0, {VT_TYPE_BF16, ...})) on a CPU with AMX-BF16 and
// AVX512-BF16 whose kernel grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM; a
// hypervisor may hide it): each weight matrix is rounded to bf16 (nearest even) and packed
// once, when it is set, into the tiles' B layout; each GEMM rounds its A rows to bf16 as it
// starts and accumulates in f32 tiles; bias, GELU and the residual stay f32 (the same
// epilogue as the f32 path). AMX: 8 tile registers of 16 rows x 64 bytes; TDPBF16PS
// C[16, 16] += A[16, 32] B[32, 16], B stored as 16 rows of 16 (k, k + 1) pairs.

constexpr int AMX_KB = 32, AMX_NB = 32, AMX_MB = 32;   // a B tile's k, a strip's columns (2 tiles), a panel's rows (2 tiles)
constexpr int AMX_NC = 256;                           // columns per pass over a task's rows (their W stays in L2)

#ifdef VT_X86
#define VT_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512bf16,avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))

struct amx_tile_config {          // ldtilecfg's 64 bytes, palette 1
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Whether this CPU has AVX512-BF16 (VDPBF16PS, VCVTNE2PS2BF16: the bf16 mode's lesser kernels
// and its rounding of rows).
static bool avx512bf16_usable() {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw");
}

// Whether this CPU has AMX-BF16 and AVX512-BF16, the OS saves the tile state (XCR0 bits 17,
// 18) and this process may use it; asked once per process (the permission is the process's).
static bool amx_usable_impl(std::string & why) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) { why = "the CPU has no AMX-BF16"; return false; }
    if (!avx512bf16_usable()) { why = "the CPU has no AVX512-BF16"; return false; }
    __get_cpuid(1, &a, &b, &c, &d);
    if (!(c & (1u << 27))) { why = "the OS does not enable XSAVE"; return false; }
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) { why = "the OS does not save the AMX tile state (XCR0)"; return false; }
#if defined(__linux__)
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        why = std::string("the kernel refuses the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") + strerror(errno) + ")";
        return false;
    }
    return true;
#else
    why = "AMX is used on Linux only";
    return false;
#endif
}

static bool amx_usable(std::string * why_out) {
    static std::string why;
    static const bool ok = amx_usable_impl(why);
    if (why_out) *why_out = why;
    return ok;
}

VT_TARGET_AMX static void amx_configure() {
    amx_tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    // ldtilecfg by hand: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, and
    // the stores of rows and colsb were dropped as dead
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

VT_TARGET_AMX static void amx_release() { _tile_release(); }

// dst[0, k_pad) = bf16(src[0, k)), zeros past k (the tiles' K padding); round to nearest even.
VT_TARGET_AMX static void row_to_bf16(const float * src, int k, int k_pad, uint16_t * dst) {
    int i = 0;
    for (; i + 32 <= k; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)v);
    }
    for (; i < k; i++) dst[i] = vt_f32_to_bf16(src[i]);
    for (; i < k_pad; i++) dst[i] = 0;
}

// The bf16 mode's softmax of one row of scores s [0, n): p[0, n_pad) = bf16(exp(s - max s)),
// zeros past n (n_pad a multiple of 32); returns 1 / the sum of the f32 numerators. exp as
// 2^(x log2 e), 2^frac by its degree-5 Taylor polynomial (2.5e-6 relative, far under bf16's
// rounding of P, 2^-9), scaled by 2^round with VSCALEFPS (0 below -87, where exp is under
// 1.7e-38). One pass over the row after the max: the f32 softmax_row's exact exp, the fill
// and the rounding would be three.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push   // GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
VT_TARGET_AMX VT_INLINE __m512 softmax_numerators_16(const float * s, int i, int n, __m512 vmax) {   // 16 from s + i, 0 past n
    const int left = n - i;
    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
    const __m512 x = _mm512_max_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmax), _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f));
    const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, k);
    __m512 q = _mm512_set1_ps(1.3333558e-3f);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.6181291e-3f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5504109e-2f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022651e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.9314718e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(m, _mm512_scalef_ps(q, k));
}

VT_TARGET_AMX static float softmax_row_bf16(const float * s, int n, int n_pad, uint16_t * p) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, s + i));
    }
    float lanes[16];   // (GCC 12's _mm512_reduce_*_ps warn of an uninitialised register under -Wall)
    _mm512_storeu_ps(lanes, mx);
    float row_max = lanes[0];
    for (int l = 1; l < 16; l++) row_max = std::max(row_max, lanes[l]);
    const __m512 vmax = _mm512_set1_ps(row_max);
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n_pad; i += 32) {
        const __m512 e0 = softmax_numerators_16(s, i, n, vmax), e1 = softmax_numerators_16(s, i + 16, n, vmax);
        sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
        _mm512_storeu_si512((void *)(p + i), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    _mm512_storeu_ps(lanes, sum);
    float total = 0.0f;
    for (int l = 0; l < 16; l++) total += lanes[l];
    return 1.0f / total;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// 32 x 32 of C = A[32 rows, k_pad] (bf16, lda elements apart) times one packed strip (k_pad /
// 32 pairs of B tiles, 1 KiB each), into c (f32, ldc floats apart; 32 x 32 whole).
VT_TARGET_AMX static void amx_32x32(const uint16_t * a, size_t lda, const uint16_t * bp, int k_pad, float * c, size_t ldc) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int k0 = 0; k0 < k_pad; k0 += AMX_KB, bp += 2 * 512) {
        _tile_loadd(4, a + k0, lda * 2);
        _tile_loadd(5, a + 16 * lda + k0, lda * 2);
        _tile_loadd(6, bp, 64);
        _tile_loadd(7, bp + 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4);
    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// amx_32x32 on AVX512-BF16 alone (VT_CPU_BF16=avx512bf16: for CPUs without AMX, Zen 4 or
// Cooper Lake, where it may pay; unmeasured there, slower than f32 on Sapphire Rapids):
// VDPBF16PS adds a (k, k + 1) pair of products per lane, so a row of a B tile (16 columns'
// pairs) is one zmm; 8 rows x 32 columns at a time (16 accumulators), A's pair broadcast.
VT_TARGET_AMX static void dpbf16_32x32(const uint16_t * a, size_t lda, const uint16_t * bp, int k_pad, float * c, size_t ldc) {
    for (int r0 = 0; r0 < AMX_MB; r0 += 8) {
        __m512 acc[8][2];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const uint16_t * b = bp;
        for (int k0 = 0; k0 < k_pad; k0 += AMX_KB, b += 2 * 512) {
            for (int r = 0; r < 16; r++) {
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(b + r * 32));
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + 512 + r * 32));
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    uint32_t pair;
                    memcpy(&pair, a + (size_t)(r0 + i) * lda + k0 + 2 * r, sizeof(pair));
                    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)pair);
                    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
                    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            _mm512_storeu_ps(c + (size_t)(r0 + i) * ldc, acc[i][0]);
            _mm512_storeu_ps(c + (size_t)(r0 + i) * ldc + 16, acc[i][1]);
        }
    }
}
#endif

#ifdef VT_X86
// Elements (bf16) of W [N, K] packed for the tiles: N and K rounded up to 32.
static size_t amx_packed_elems(int N, int K) {
    return (size_t)(N + 31) / 32 * 32 * ((size_t)(K + 31) / 32 * 32);
}

// W [N, K] (f32, row-major; C = A W^T) into strips of 32 columns, each K / 32 pairs of B
// tiles: element (n, k) of strip s = n / 32, k-block kb = k / 32, tile h = n % 32 / 16 at row
// (k % 32) / 2, column n % 16, pair slot k % 2. Padding is zero. A row of W at a time: rounded
// to bf16, its (k, k + 1) pairs go 32 elements apart.
static void amx_pack_w(const float * W, int N, int K, uint16_t * out) {
    const int k_pad = (K + 31) / 32 * 32, kbs = k_pad / 32;
    memset(out, 0, amx_packed_elems(N, K) * sizeof(uint16_t));
    std::vector<uint16_t> row(k_pad);
    for (int n = 0; n < N; n++) {
        row_to_bf16(W + (size_t)n * K, K, k_pad, row.data());
        uint16_t * dst = out + (size_t)(n / 32) * kbs * 1024 + (n % 32) / 16 * 512 + (n % 16) * 2;
        for (int k = 0; k < k_pad; k += 2) memcpy(dst + (size_t)(k / 32) * 1024 + (k % 32) / 2 * 32, row.data() + k, 2 * sizeof(uint16_t));
    }
}
#endif

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

    // Per-thread scratch: a GEMM task's zero-padded edge panel (12 x K) plus, for conv, its
    // im2col rows; for attention a head's packed K and V and one panel's scores.
    size_t scratch_floats(const vt_tensor * t) const {
        if (t->op == VT_OP_LINEAR)
            return std::max((size_t)GEMM_MR * t->src[0]->ne[0], amx ? bf16_scratch_floats(AMX_ROWS, (int)t->src[0]->ne[0], false) : 0);
        if (t->op == VT_OP_CONV1D_K3)
            return std::max((size_t)(GEMM_MR + CONV_ROWS) * 3 * t->src[0]->ne[0],
                            amx ? bf16_scratch_floats(CONV_ROWS_BF16, 3 * (int)t->src[0]->ne[0], true) : 0);
        if (t->op == VT_OP_CONV2D_K3S2)
            return std::max((size_t)(GEMM_MR + CONV_ROWS) * 9 * t->src[1]->ne[2],
                            amx ? bf16_scratch_floats(CONV_ROWS_BF16, 9 * (int)t->src[1]->ne[2], true) : 0);
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
        }
        try {
            for (std::vector<float> & s : scratch) if (s.size() < need) s.resize(need);
            if (packed_w.size() < need_w) packed_w.resize(need_w);
        } catch (const std::bad_alloc &) {
            free(arena);
            vt_set_error("out of memory: %d x %zu + %zu bytes of scratch", pool.n_threads, need * sizeof(float), need_w * sizeof(float));
            return false;
        }
        map_pages(arena, g->arena_size);
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
        const float * x_len = t->src[4] ? (const float *)t->src[4]->data : nullptr;
        auto im2col = [&](int64_t m0, int m, float * col) {
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
    void conv2d_k3s2(vt_tensor * t) {
        const vt_tensor * x = t->src[0], * w = t->src[1], * b = t->src[2];
        const int c_in = (int)w->ne[2], K = 9 * c_in, N = (int)w->ne[3];
        const bool mel = c_in == 1;
        const int64_t f_in = x->ne[1], t_in = mel ? x->ne[0] : x->ne[2];
        const int64_t f_out = t->ne[1], t_out = t->ne[2], M = f_out * t_out * t->ne[3];
        const int64_t chunk = t->iparams[2], chunk_out = (chunk - 1) / 2 + 1;
        // element (b, t, f, i) of x: the mel's strides, or the contiguous [B, T, F, C]
        const size_t sb = mel ? x->nb[2] : x->nb[3], st = mel ? x->nb[0] : x->nb[2], sf = x->nb[1], si = x->nb[0];
        const float * x_len = t->src[4] ? (const float *)t->src[4]->data : nullptr;
        auto im2col = [&](int64_t m0, int m, float * col) {
            for (int r = 0; r < m; r++) {
                const int64_t row = m0 + r, fo = row % f_out, to = row / f_out % t_out, bi = row / f_out / t_out;
                const int64_t c0 = to / chunk_out * chunk, lt = to % chunk_out;               // chunk [c0, c0 + chunk)
                const int64_t end = std::min<int64_t>(std::min<int64_t>(c0 + chunk, t_in), x_len ? (int64_t)x_len[bi] : t_in);
                float * dst = col + (size_t)r * K;
                for (int kf = 0; kf < 3; kf++) {
                    const int64_t fi = 2 * fo + kf - 1;
                    for (int kt = 0; kt < 3; kt++) {
                        const int64_t ti = c0 + 2 * lt + kt - 1;
                        const bool inside = fi >= 0 && fi < f_in && ti >= c0 && ti < end;
                        const char * src = (const char *)x->data + bi * sb + (inside ? ti * st + fi * sf : 0);
                        for (int i = 0; i < c_in; i++) dst[i * 9 + kf * 3 + kt] = inside ? *(const float *)(src + i * si) : 0.0f;
                    }
                }
            }
            return (const float *)col;
        };
        if (const uint16_t * pw = packed_w_bf16(w, N, K)) {
            gemm_tasks_bf16(M, N, K, pw, (const float *)b->data, t->iparams[1] == VT_ACT_GELU, (float *)t->data, CONV_ROWS_BF16,
                            true, im2col, [&](int64_t) { return (const float *)nullptr; });
            return;
        }
        gemm_tasks(M, N, K, (const float *)w->data, (const float *)b->data, t->iparams[1] == VT_ACT_GELU, (float *)t->data,
                   CONV_ROWS, im2col, [&](int64_t) { return (const float *)nullptr; });
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
    // reading P from S, rows scaled by 1 / sum.
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

    void attention(vt_tensor * t) {
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
                for (int s = 0; s < hd_strips; s++)
                    gemm_tile(*kern, T, S, t_pad, vp + (size_t)s * T * GEMM_NR, out + s * GEMM_NR, D, rows,
                              std::min(GEMM_NR, hd - s * GEMM_NR), false);
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
            const float pos = (float)(task % T);
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
            case VT_OP_RELU:       relu(t); break;
            case VT_OP_SILU:       silu(t); break;
            case VT_OP_SILU_MUL:   silu_mul(t); break;
            case VT_OP_LOG_MEL:    log_mel(t); break;
            case VT_OP_CONV2D_K3S2: conv2d_k3s2(t); break;
            case VT_OP_ADD_ROWS:   add_rows(t); break;
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
    // VDPBF16PS only when asked for: on the Sapphire Rapids class Xeon it was measured on, it
    // has half the throughput of an FMA and the mode ran slower than f32 (docs/BENCHMARKS.md)
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
static vt_backend * cpu_init(int device, const vt_backend_params * params) {
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

static int cpu_device_count(void) { return 1; }

static bool cpu_device_memory(int, size_t *, size_t *) {
    vt_set_error("cpu: the CPU has no device memory figure");
    return false;
}

// ---- backends by name ----------------------------------------------------------------

// The backends this build has: a new one is a row here (and a file of its own).
struct vt_backend_reg {
    const char * name;
    vt_backend * (*init)(int device, const vt_backend_params * params);
    int  (*device_count)(void);
    bool (*device_memory)(int device, size_t * free_bytes, size_t * total_bytes);
};

static const vt_backend_reg VT_BACKENDS[] = {
    {"cpu", cpu_init, cpu_device_count, cpu_device_memory},
#ifdef VT_USE_CUDA
    {"cuda", vt_cuda_init, vt_cuda_device_count, vt_cuda_device_memory},
#endif
};

// The row of `name`; NULL with the error set when there is none.
static const vt_backend_reg * backend_reg(const char * name) {
    for (const vt_backend_reg & r : VT_BACKENDS)
        if (name && strcmp(r.name, name) == 0) return &r;
    if (name && strcmp(name, "cuda") == 0)
        vt_set_error("this build has no CUDA backend (nvcc was not found when it was built)");
    else
        vt_set_error("no backend named '%s' (cpu%s)", name ? name : "(null)", vt_backend_built("cuda") ? ", cuda" : "");
    return nullptr;
}

vt_backend * vt_backend_init(const char * name, int device, const vt_backend_params * params) {
    const vt_backend_reg * r = backend_reg(name);
    if (!r) return nullptr;
    if (!params) {
        vt_set_error("%s: NULL params", r->name);
        return nullptr;
    }
    return r->init(device, params);
}

bool vt_backend_built(const char * name) {
    for (const vt_backend_reg & r : VT_BACKENDS)
        if (name && strcmp(r.name, name) == 0) return true;
    return false;
}

int vt_backend_device_count(const char * name) {
    for (const vt_backend_reg & r : VT_BACKENDS)
        if (name && strcmp(r.name, name) == 0) return r.device_count();
    return 0;
}

bool vt_backend_device_memory(const char * name, int device, size_t * free_bytes, size_t * total_bytes) {
    const vt_backend_reg * r = backend_reg(name);
    if (!r) return false;
    if (!free_bytes || !total_bytes) {
        vt_set_error("%s: NULL %s", r->name, !free_bytes ? "free_bytes" : "total_bytes");
        return false;
    }
    return r->device_memory(device, free_bytes, total_bytes);
}
