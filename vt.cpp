// vt.cpp - the tensor library: errors, types, graph building, the arena planner, the backend
// entry points and the table of backends by name. The CPU backend, the f32 reference every
// other backend is tested against, is one row of that table: vt-cpu.h (its kernels in
// vt-cpu-kernels.h), included below as headers so that vt.cpp stays one file to compile.
#define VT_BACKEND_IMPL
#include "vt.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

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
    "rope_time",
    "concat_rows",
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

// The causal variant: iparams[3] 1, src[4] the tail (or NULL). T_out = T_in / stride.
vt_tensor * vt_conv1d_k3_causal(vt_context * ctx, vt_tensor * x, vt_tensor * tail, vt_tensor * w, vt_tensor * b,
                                int stride, enum vt_act act) {
    VT_ASSERT(x->ne[1] % stride == 0);
    if (tail) {
        VT_ASSERT(tail->type == VT_TYPE_F32 && vt_is_contiguous(tail) && tail->ne[0] == x->ne[0] && tail->ne[1] == 3 - stride &&
                  tail->ne[2] == x->ne[2] && tail->ne[3] == 1);
    }
    vt_tensor * t = vt_conv1d_k3(ctx, x, w, b, stride, act, nullptr);
    t->ne[1] = x->ne[1] / stride;
    t->nb[2] = t->nb[1] * t->ne[1];
    t->nb[3] = t->nb[2] * t->ne[2];
    t->src[4] = tail;
    t->iparams[3] = 1;
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

// vt_conv2d_k3s2_pair: src[3] w1, src[5] b1, iparams[3] chunk1 (the first stage's); the rest as
// the second stage's conv2d_k3s2 node, whose x is the first stage's input and x_len its x_len

vt_tensor * vt_conv2d_k3s2_pair(vt_context * ctx, vt_tensor * x, vt_tensor * w1, vt_tensor * b1, int chunk1,
                                vt_tensor * x_len, vt_tensor * w2, vt_tensor * b2, int chunk2, enum vt_act act) {
    VT_ASSERT(w1->ne[0] == 3 && w1->ne[1] == 3 && vt_is_contiguous(w1) && w1->type == w2->type);
    VT_ASSERT(w2->ne[0] == 3 && w2->ne[1] == 3 && vt_is_contiguous(w2) && w2->ne[2] == w1->ne[3]);
    VT_ASSERT(b1 && b1->type == VT_TYPE_F32 && b1->ne[0] == w1->ne[3] && vt_nelements(b1) == b1->ne[0]);
    VT_ASSERT(b2 && b2->type == VT_TYPE_F32 && b2->ne[0] == w2->ne[3] && vt_nelements(b2) == b2->ne[0]);
    const bool mel = w1->ne[2] == 1;
    if (mel) VT_ASSERT(x->ne[3] == 1);
    else VT_ASSERT(x->ne[0] == w1->ne[2] && vt_is_contiguous(x));
    const int64_t f_in = x->ne[1], t_in = mel ? x->ne[0] : x->ne[2], n_b = mel ? x->ne[2] : x->ne[3];
    VT_ASSERT(chunk1 >= 1 && chunk2 >= 1);
    if (chunk1 > t_in) chunk1 = (int)t_in;
    VT_ASSERT(t_in % chunk1 == 0);
    VT_ASSERT(!x_len || (x_len->type == VT_TYPE_F32 && vt_nelements(x_len) == n_b && vt_is_contiguous(x_len)));
    const int64_t t_1 = t_in / chunk1 * ((chunk1 - 1) / 2 + 1), f_1 = (f_in - 1) / 2 + 1;
    if (chunk2 > t_1) chunk2 = (int)t_1;
    VT_ASSERT(t_1 % chunk2 == 0);
    const int64_t ne[4] = {w2->ne[3], (f_1 - 1) / 2 + 1, t_1 / chunk2 * ((chunk2 - 1) / 2 + 1), n_b};
    vt_tensor * t = new_tensor(ctx, w2->type, ne);
    t->op = VT_OP_CONV2D_K3S2;
    t->src[0] = x;
    t->src[1] = w2;
    t->src[2] = b2;
    t->src[3] = w1;
    t->src[4] = x_len;
    t->src[5] = b1;
    t->iparams[1] = act;
    t->iparams[2] = chunk2;
    t->iparams[3] = chunk1;
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

// iparams: {n_head, 0, 0, window}; src[4] kv_start
vt_tensor * vt_attention_window(vt_context * ctx, vt_tensor * q, vt_tensor * k, vt_tensor * v,
                                int n_head, float scale, vt_tensor * kv_start, int window) {
    VT_ASSERT(same_shape(k, v) && q->ne[0] == k->ne[0] && q->ne[2] == k->ne[2] && q->ne[1] <= k->ne[1] && q->ne[3] == 1 && k->ne[3] == 1);
    VT_ASSERT(q->type == k->type && q->type == v->type && window >= 1);
    VT_ASSERT(n_head >= 1 && q->ne[0] % n_head == 0);
    for (const vt_tensor * s : {q, k, v}) VT_ASSERT(s->nb[0] == vt_type_size(s->type));
    VT_ASSERT(!kv_start || (kv_start->type == VT_TYPE_F32 && vt_nelements(kv_start) == q->ne[2] && vt_is_contiguous(kv_start)));
    const int64_t ne[4] = {q->ne[0], q->ne[1], q->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, q->type, ne);
    t->op = VT_OP_ATTENTION;
    t->src[0] = q;
    t->src[1] = k;
    t->src[2] = v;
    t->src[4] = kv_start;
    t->iparams[0] = n_head;
    t->iparams[3] = window;
    t->fparams[0] = scale;
    return t;
}

// vt_concat_rows

vt_tensor * vt_concat_rows(vt_context * ctx, vt_tensor * a, vt_tensor * b) {
    VT_ASSERT(a->type == b->type && a->ne[0] == b->ne[0] && a->ne[2] == b->ne[2] && a->ne[3] == 1 && b->ne[3] == 1);
    VT_ASSERT(a->nb[0] == vt_type_size(a->type) && b->nb[0] == vt_type_size(b->type));
    const int64_t ne[4] = {a->ne[0], a->ne[1] + b->ne[1], a->ne[2], 1};
    vt_tensor * t = new_tensor(ctx, a->type, ne);
    t->op = VT_OP_CONCAT_ROWS;
    t->src[0] = a;
    t->src[1] = b;
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

vt_tensor * vt_rope_qk_at(vt_context * ctx, vt_tensor * qkv, int n_head, int n_rot, float theta, vt_tensor * pos0) {
    VT_ASSERT(pos0 && pos0->type == VT_TYPE_F32 && vt_nelements(pos0) == qkv->ne[2] && vt_is_contiguous(pos0));
    vt_tensor * t = vt_rope_qk(ctx, qkv, n_head, n_rot, theta);
    t->src[1] = pos0;
    return t;
}

// vt_rope_time

vt_tensor * vt_rope_time(vt_context * ctx, vt_tensor * x, vt_tensor * window, int n_rot, float theta, float step) {
    VT_ASSERT(vt_is_contiguous(x) && x->ne[3] == 1 && n_rot >= 2 && n_rot % 2 == 0 && 2 * n_rot <= x->ne[0]);
    VT_ASSERT(theta > 0.0f && x->ne[1] <= theta && step > 0.0f);
    VT_ASSERT(window && window->type == VT_TYPE_F32 && window->ne[0] == x->ne[2] && vt_nelements(window) == x->ne[2]);
    vt_tensor * t = new_tensor(ctx, x->type, x->ne);
    t->op = VT_OP_ROPE_TIME;
    t->src[0] = x;
    t->src[1] = window;
    t->iparams[0] = n_rot;
    t->fparams[0] = theta;
    t->fparams[1] = step;
    return t;
}

// =====================================================================================
// graphs and the arena planner
// =====================================================================================

static vt_tensor * storage_owner(vt_tensor * t) {
    while (t->op == VT_OP_VIEW) t = t->src[0];
    return t;
}


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
        const size_t size = vt_align_up(vt_nbytes(t), VT_ARENA_ALIGN);
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

void * vt_backend::host_alloc(size_t bytes) {
    void * p = malloc(std::max<size_t>(bytes, 1));
    if (!p) vt_set_error("out of memory: %zu bytes of host buffer", bytes);
    else vt_map_pages(p, bytes);
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

bool vt_backend_copy_rows(vt_backend * be, vt_tensor * dst, const vt_tensor * src, int64_t row0) {
    if (!dst->data || !src->data) { vt_set_error("tensor '%s' has no storage yet", !dst->data ? dst->name : src->name); return false; }
    if (!vt_is_contiguous(dst) || !vt_is_contiguous(src) || dst->type != src->type || dst->ne[0] != src->ne[0] ||
        dst->ne[2] != src->ne[2] || dst->ne[3] != 1 || src->ne[3] != 1 || row0 < 0 || row0 + dst->ne[1] > src->ne[1]) {
        vt_set_error("copy_rows: '%s' is not rows [%lld, +%lld) of '%s'", dst->name, (long long)row0, (long long)dst->ne[1], src->name);
        return false;
    }
    return be->copy_rows(dst, src, row0);
}

bool vt_backend_prepare(vt_backend * be, vt_graph * g) {
    if (g->backend != be) { vt_set_error("graph not allocated on backend %s", be->name()); return false; }
    return be->prepare(g);
}

bool vt_backend_wait(vt_backend * be, int slot) {
    if (slot < 0 || slot > 1) { vt_set_error("wait: slot %d (0 or 1)", slot); return false; }
    return be->wait(slot);
}

bool vt_backend_ready(vt_backend * be, int slot) {
    if (slot < 0 || slot > 1) return true;          // no such run: wait reports it
    return be->ready(slot);
}

void * vt_backend_host_alloc(vt_backend * be, size_t bytes) { return be->host_alloc(bytes); }
void   vt_backend_host_free(vt_backend * be, void * p) { if (p) be->host_free(p); }

// =====================================================================================
// the CPU backend: vt-cpu.h (its kernels: vt-cpu-kernels.h)
// =====================================================================================

#include "vt-cpu.h"

// =====================================================================================
// backends by name
// =====================================================================================

// The backends this build has: a new one is a row here (and a file of its own).
struct vt_backend_reg {
    const char * name;
    vt_backend * (*init)(int device, const vt_backend_params * params);
    int  (*device_count)(void);
    bool (*device_memory)(int device, size_t * free_bytes, size_t * total_bytes);
};

static const vt_backend_reg VT_BACKENDS[] = {
    {"cpu", vt_cpu_init, vt_cpu_device_count, vt_cpu_device_memory},
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
