// vt-cuda-ptx.cuh - inline PTX for NVIDIA GPUs: the instructions the attention kernels use that
// CUDA C++ has no portable spelling for.
//
//   sm_80+   ex2.approx, tanh.approx, cp.async (global -> shared without registers), ldmatrix (8x8 tiles
//            from shared memory into the mma fragment layout), mma.sync m16n8k16
//   sm_90a   mbarrier, TMA (cp.async.bulk.tensor), wgmma (warpgroup MMA), setmaxnreg, named
//            barriers: compiled in the sm_90a pass only (VT_SM90A)
//
// Each wrapper is one instruction (or one short asm block) with the operand layout it expects
// written beside it; another GPU backend replaces this file and the two attention headers, not
// the portable kernels (vt-cuda-conv.cuh, vt-cuda-norm.cuh, ...).
#pragma once

#include "vt-cuda-common.cuh"

#include <cuda.h>   // CUtensorMap (types only: the driver call is found at run time)

// 2^x on the special-function unit, subnormals flushed (exp2(-inf) = 0)
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tanh(x) on the special-function unit (sm_75+), relative error about 2^-11
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// ---- PTX wrappers (sm_80+): cp.async, ldmatrix, mma.sync ----

__device__ __forceinline__ uint32_t smem_addr(const void * p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, asynchronous; when !pred nothing is read and 16 zeros land.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void * src, bool pred) {
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col), f32 accumulators.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- PTX wrappers (sm_90a only): mbarrier, TMA, wgmma, setmaxnreg ----
// Compiled in the sm_90a pass only (VT_SM90A); the compute_80 PTX pass never sees them, and
// attention_wgmma_kernel's body is empty there (the host never launches it off cc 9.0).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VT_SM90A 1
#else
#define VT_SM90A 0
#endif

// 1 in the code compiled for sm_90a (where attention_wgmma_kernel has its body), 0 in the
// rest: init reads the copy this device runs, so a build without sm_90a code (say, for plain
// sm_90) never launches the empty kernel. A constant: nothing writes it.
__device__ int g_wgmma_built = VT_SM90A;

#if VT_SM90A
// mbarrier: a 64-bit word in shared memory counting arrivals (and, for TMA, bytes) per phase.
// A waiter names the phase by its parity: wait(bar, ph) returns once phase ph has completed,
// at once if the barrier is already past it (so a first wait on parity 1 passes).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// makes the inits visible to the async proxy (TMA) before any thread uses the barriers
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// one arrival, and `bytes` more to come from TMA copies completing on this barrier
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// (the retry loop inside one asm block, labels local to it: to the compiler a straight line,
// so the warp reaches the .aligned wgmma instructions after it converged)
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT;\n}\n"
                 ::"r"(bar), "r"(parity) : "memory");
}

// TMA: the box at coordinates (c0, c1, c2) of the tensor map -> shared memory at dst, swizzled as
// the map says; out-of-bounds elements land as zeros; completion counted in bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap * map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// Registers per thread of the whole warpgroup, moved between warpgroups at run time.
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

// named barriers (ids 1..15; 0 is __syncthreads): sync waits until n threads arrived (itself
// included), arrive counts this thread without waiting
__device__ __forceinline__ void named_barrier_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_barrier_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// orders this thread's generic-proxy shared memory accesses with the async proxy's (TMA, wgmma)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// wgmma: a warpgroup (4 warps, 128 threads) issues D (64 x N, f32 in registers) += A (64 x 16)
// * B (16 x N) asynchronously. fence: before the first wgmma and after this thread touched
// registers a wgmma uses; commit: closes a group of issued wgmmas; wait<N>: until at most N
// groups are in flight (their accumulators readable, their shared memory reusable).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Pins registers in place around asynchronous wgmma: the compiler may not move, reuse or read
// them across this point (an async wgmma still reads or writes them until its wait).
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

// Matrix descriptor of a wgmma operand in shared memory, 128-byte swizzle (the layout TMA's
// SWIZZLE_128B writes): rows of 128 bytes (64 16-bit elements), 16-byte chunk c of row r at
// chunk c ^ (r % 8), in 1024-byte blocks of 8 rows (the tile 1024-byte aligned).
//   bits  0-13  start address >> 4
//   bits 16-29  leading byte offset >> 4
//   bits 32-45  stride byte offset >> 4: 1024, from one 8-row block to the next
//   bits 49-51  base offset: 0 (tiles 1024-byte aligned)
//   bits 62-63  swizzle: 1 = 128B
// K-major (Q, K: the reduction dim contiguous): a k16 step is 32 bytes inside each 128-byte
// row, so the leading offset is unused; the next k step is start + 32 bytes (the hardware
// applies the XOR to the final address, so a 32-byte step inside the swizzled row is right).
// MN-major (V, transposed: the N dim contiguous): the 64 columns of a row are one swizzle atom
// along N (the leading offset would step to the next 64 columns: unused with N = 64), and
// the 16 keys of a k step are two 8-row blocks, 1024 bytes apart (stride offset); the next k
// step is start + 2048 bytes. Both offsets are set to 1024, so the descriptor is right
// whichever of the two the hardware takes as the 8-row step.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

#define VT_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (64 x 128) = (acc ? d : 0) + A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major).
// Accumulator layout (m64nNk16): warp w of the warpgroup owns rows 16w..16w+15; lane l holds
// row 16w + l/4 (d[4j], d[4j+1]) and row 16w + l/4 + 8 (d[4j+2], d[4j+3]), at columns
// 8j + 2(l%4) and +1, j = 0..N/8-1: per 8 columns, mma.sync m16n8's C fragment.
#define VT_WGMMA_SS_N128(ty)                                                                                   \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                                \
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty "\n"                                \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                   \
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"         \
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"         \
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"        \
                 " %64, %65, p, 1, 1, 0, 0;\n}\n"                                                              \
                 : VT_F8(d, 0), VT_F8(d, 8), VT_F8(d, 16), VT_F8(d, 24), VT_F8(d, 32), VT_F8(d, 40),          \
                   VT_F8(d, 48), VT_F8(d, 56)                                                                  \
                 : "l"(da), "l"(db), "r"(acc))
template <typename T> __device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t da, uint64_t db, int acc);
template <> __device__ __forceinline__ void wgmma_m64n128k16_ss<__half>(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    VT_WGMMA_SS_N128("f16");
}
template <> __device__ __forceinline__ void wgmma_m64n128k16_ss<__nv_bfloat16>(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    VT_WGMMA_SS_N128("bf16");
}

// d (64 x 64) += A (64 x 16, registers) * B (16 x 64, shared, MN-major: trans-b = 1).
// A's fragment (per warp, 16 rows): a[0] = row l/4, columns 2(l%4), +1; a[1] = row l/4 + 8,
// same columns; a[2], a[3] = the same rows at columns + 8: mma.sync m16n8k16's A fragment,
// i.e. the accumulator layout above for two 8-column tiles, packed to 16-bit pairs.
#define VT_WGMMA_RS_N64(ty)                                                                                    \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"                                                \
                 " wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty "\n"                                 \
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                   \
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"        \
                 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                \
                 : VT_F8(d, 0), VT_F8(d, 8), VT_F8(d, 16), VT_F8(d, 24)                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <typename T> __device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t * a, uint64_t db);
template <> __device__ __forceinline__ void wgmma_m64n64k16_rs<__half>(float (&d)[32], const uint32_t * a, uint64_t db) {
    VT_WGMMA_RS_N64("f16");
}
template <> __device__ __forceinline__ void wgmma_m64n64k16_rs<__nv_bfloat16>(float (&d)[32], const uint32_t * a, uint64_t db) {
    VT_WGMMA_RS_N64("bf16");
}
#endif // VT_SM90A
