/* vmath.h: the vector primitives of snipjit's C target, written with GCC vector extensions.

   Kernels include this header after defining VM_LANES (f32 lanes per vector: 16 with AVX-512, 8 with
   AVX2, ...). It holds what the generated code is built from: the vector types, splats, selects,
   any-lane tests, FMA, square root, rounding, IEEE min/max, loads and stores (tails included). The math
   functions themselves (exp, erf, sin, ...) are not here: snipjit's math library
   (snipjit/targets/vmath) renders each one the kernel uses into the kernel's C source, from the same
   definitions the LLVM target renders, so both targets compute the same bits.

   No libm call is ever made, so the kernels stay vectorised. Lane-wise loops over __builtin_sqrtf /
   __builtin_fmaf are recognised by GCC as vector instructions (-fno-math-errno).

   Values: `vf` holds floats; `vi` holds the 32-bit lane masks of comparisons (all ones = true).
   Booleans in kernel registers are such masks reinterpreted as `vf`. Where f32 arithmetic is not
   precise enough, `vd`/`vl` hold doubles/int64 for a part of the lanes: a vector of doubles wider than
   the registers turns into scalar code for compares and selects, so a 16-lane vector is handled in two
   parts of 8 and an 8-lane one in two parts of 4 (`VM_PART` takes a part of a float vector, `VM_JOIN`
   joins two parts).

   Kernels are compiled with -ffp-contract=off: an a*b+c is fused only where vm_fma says so, exactly
   as the LLVM target fuses only its llvm.fmuladd calls.
*/
#ifndef SNIPJIT_VMATH_H
#define SNIPJIT_VMATH_H

#include <stdint.h>
#include <string.h>

#ifndef VM_LANES
#error "define VM_LANES (f32 lanes per vector) before including vmath.h"
#endif

#if VM_LANES > 8
#define VM_PART_LANES 8
#elif VM_LANES > 4
#define VM_PART_LANES 4
#else
#define VM_PART_LANES VM_LANES
#endif
#define VM_PARTS (VM_LANES / VM_PART_LANES)

typedef float vf __attribute__((vector_size(VM_LANES * 4)));
typedef int32_t vi __attribute__((vector_size(VM_LANES * 4)));
typedef uint32_t vu __attribute__((vector_size(VM_LANES * 4)));
typedef int8_t vb __attribute__((vector_size(VM_LANES)));
typedef double vd __attribute__((vector_size(VM_PART_LANES * 8)));
typedef int64_t vl __attribute__((vector_size(VM_PART_LANES * 8)));

#define VM_INLINE static inline __attribute__((always_inline))

/* Instructions the vector extensions do not reach: masked moves for tails, any-lane tests, rounding,
   IEEE min/max.
   With GCC they come from the builtins <immintrin.h> wraps, called directly: parsing that header would
   cost 0.2 s per kernel, more than the kernel's own compile. Other compilers and ISAs take the portable
   code below each use. (mode of VM_ROUND: 0 nearest-even, 1 down, 2 up; 8 suppresses the inexact flag.) */
typedef char vm_bytes16 __attribute__((vector_size(16)));
typedef int32_t vm_ints8 __attribute__((vector_size(32)));
typedef long long vm_llongs8 __attribute__((vector_size(64)));
#if defined(__GNUC__) && !defined(__clang__)
#define VM_MASK16(n) ((uint16_t)((1u << (n)) - 1))
#if VM_LANES == 16 && defined(__AVX512F__)
#define VM_ANY(m) (__builtin_ia32_ptestmd512((m), (m), (uint16_t)-1) != 0)
#define VM_ANYD(m) (__builtin_ia32_ptestmq512((vm_llongs8)(m), (vm_llongs8)(m), (uint8_t)-1) != 0)
#define VM_LOAD_N(p, n) __builtin_ia32_loadups512_mask((const float *)(p), (vf){0}, VM_MASK16(n))
#define VM_STORE_N(p, v, n) __builtin_ia32_storeups512_mask((float *)(p), (v), VM_MASK16(n))
#define VM_ROUND(x, mode) __builtin_ia32_rndscaleps_mask((x), 8 | (mode), (x), (uint16_t)-1, 4)
#endif
#if VM_LANES == 16 && defined(__AVX512DQ__)
#define VM_RANGE(a, b, imm) __builtin_ia32_rangeps512_mask((a), (b), (imm), (a), (uint16_t)-1, 4)
#endif
#if VM_LANES == 16 && defined(__AVX512BW__) && defined(__AVX512VL__)
#define VM_LOAD_BYTES_N(p, n) \
    ((vb)__builtin_ia32_loaddquqi128_mask((const char *)(p), (vm_bytes16){0}, VM_MASK16(n)))
#define VM_STORE_BYTES_N(p, v, n) __builtin_ia32_storedquqi128_mask((char *)(p), (vm_bytes16)(v), VM_MASK16(n))
#endif
#if VM_LANES == 8 && defined(__AVX2__)
#define VM_LOAD_N(p, n) __builtin_ia32_maskloadps256((const vf *)(p), (vm_ints8)vm_first(n))
#define VM_STORE_N(p, v, n) __builtin_ia32_maskstoreps256((vf *)(p), (vm_ints8)vm_first(n), (v))
#define VM_ROUND(x, mode) __builtin_ia32_roundps256((x), 8 | (mode))
#endif
#endif
#define VM_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#if defined(__clang__) || __GNUC__ >= 12
#define VM_SHUFFLE(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define VM_SHUFFLE(v, ...) __builtin_shuffle(v, (vi){__VA_ARGS__})
#endif

/* ---- lanes, selection, bits ------------------------------------------------------------------------ */

VM_INLINE vf vm_splat(float c) { vf r; for (int k = 0; k < VM_LANES; k++) r[k] = c; return r; }
VM_INLINE vf vm_lane0(vf x) { return vm_splat(x[0]); }

/* The mask of the first n lanes (0 <= n <= VM_LANES). */
VM_INLINE vi vm_first(int64_t n) {
    vi ids;
    for (int k = 0; k < VM_LANES; k++) ids[k] = k;
    return ids < (int32_t)n;
}

/* m ? a : b per lane, for every vector kind. */
VM_INLINE vf vm_sel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
VM_INLINE vd vm_seld(vl m, vd a, vd b) { return (vd)(((vl)a & m) | ((vl)b & ~m)); }

/* Whether any lane of a mask is set (for branches around rare slow paths). */
VM_INLINE int vm_any(vi m) {
#ifdef VM_ANY
    return VM_ANY(m);
#else
    int32_t acc = 0;
    for (int k = 0; k < VM_LANES; k++) acc |= m[k];
    return acc != 0;
#endif
}

VM_INLINE int vm_anyd(vl m) {
#ifdef VM_ANYD
    return VM_ANYD(m);
#else
    int64_t acc = 0;
    for (int k = 0; k < VM_PART_LANES; k++) acc |= m[k];
    return acc != 0;
#endif
}

VM_INLINE vi vm_isnan(vf x) { return x != x; }
VM_INLINE vf vm_abs(vf x) { return (vf)((vi)x & INT32_MAX); }
VM_INLINE vd vm_absd(vd x) { return (vd)((vl)x & INT64_MAX); }
VM_INLINE vf vm_copysign(vf mag, vf sign) { return (vf)(((vi)mag & INT32_MAX) | ((vi)sign & INT32_MIN)); }

/* Lanes [p * VM_PART_LANES, (p + 1) * VM_PART_LANES) of a float vector, and two such parts joined. */
typedef float vm_part_f __attribute__((vector_size(VM_PART_LANES * 4)));
typedef int32_t vm_part_i __attribute__((vector_size(VM_PART_LANES * 4)));
#if VM_PARTS == 1
#define VM_PART(x, p) (x)
#define VM_JOIN(a, b) (a)
#elif (defined(__clang__) || __GNUC__ >= 12) && VM_LANES == 16
#define VM_PART(x, p) ((p) ? __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15) \
                           : __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7))
#define VM_JOIN(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#elif (defined(__clang__) || __GNUC__ >= 12) && VM_LANES == 8
#define VM_PART(x, p) ((p) ? __builtin_shufflevector(x, x, 4, 5, 6, 7) : __builtin_shufflevector(x, x, 0, 1, 2, 3))
#define VM_JOIN(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7)
#else
#define VM_PART(x, p) ({ vm_part_f _h; memcpy(&_h, (const char *)&(x) + (p) * sizeof _h, sizeof _h); _h; })
#define VM_JOIN(a, b) ({ vf _v; memcpy(&_v, &(a), sizeof(a)); memcpy((char *)&_v + sizeof(a), &(b), sizeof(b)); _v; })
#endif

/* Masks as floats (kernel registers hold booleans this way) and back. */
VM_INLINE vf vm_from_mask(vi m) { return (vf)m; }
VM_INLINE vi vm_to_mask(vf v) { return (vi)v != 0; }
VM_INLINE vf vm_bool(int b) { return vm_from_mask((vi){} - (b != 0)); }

/* ---- arithmetic the vector extensions lack ------------------------------------------------------------ */

/* a*b + c rounded once: the FMA instruction itself when GCC's builtin for this width is at hand (a lane
   loop over __builtin_fmaf becomes the same instruction, but hundreds of them slow the compile down).
   The math library asks for it only on ISA levels with FMA, exactly where the LLVM target emits
   llvm.fmuladd; without FMA hardware the lane loop would call libm's fmaf (exact, but slow). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__FMA__)
#if VM_LANES == 16 && defined(__AVX512F__)
#define VM_FMA_F(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (uint16_t)-1, 4)
#elif VM_LANES == 8
#define VM_FMA_F(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#elif VM_LANES == 4
#define VM_FMA_F(a, b, c) __builtin_ia32_vfmaddps((a), (b), (c))
#endif
#if VM_PART_LANES == 8 && defined(__AVX512F__)
#define VM_FMA_D(a, b, c) __builtin_ia32_vfmaddpd512_mask((a), (b), (c), (uint8_t)-1, 4)
#elif VM_PART_LANES == 4
#define VM_FMA_D(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#endif
#endif

VM_INLINE vf vm_fma(vf a, vf b, vf c) {
#if defined(VM_FMA_F)
    return VM_FMA_F(a, b, c);
#else
    vf r;
    for (int k = 0; k < VM_LANES; k++) r[k] = __builtin_fmaf(a[k], b[k], c[k]);
    return r;
#endif
}

VM_INLINE vd vm_fmad(vd a, vd b, vd c) {
#if defined(VM_FMA_D)
    return VM_FMA_D(a, b, c);
#else
    vd r;
    for (int k = 0; k < VM_PART_LANES; k++) r[k] = __builtin_fma(a[k], b[k], c[k]);
    return r;
#endif
}

VM_INLINE vf vm_sqrt(vf x) { vf r; for (int k = 0; k < VM_LANES; k++) r[k] = __builtin_sqrtf(x[k]); return r; }

/* Rounding to an integer; portably, adding and removing 2^23 rounds in the default rounding mode. */
VM_INLINE vf vm_roundeven(vf x) {
#ifdef VM_ROUND
    return VM_ROUND(x, 0);
#else
    vf a = vm_abs(x);
    vf r = vm_copysign((a + 0x1p23f) - 0x1p23f, x);
    return vm_sel(a < 0x1p23f, r, x);
#endif
}

VM_INLINE vd vm_roundevend(vd x) {
    vd a = vm_absd(x);
    vd r = (a + 0x1p52) - 0x1p52;
    r = (vd)(((vl)r & INT64_MAX) | ((vl)x & INT64_MIN));
    return vm_seld(a < 0x1p52, r, x);
}

VM_INLINE vf vm_floor(vf x) {
#ifdef VM_ROUND
    return VM_ROUND(x, 1);
#else
    vf r = vm_roundeven(x);
    return vm_sel(r > x, r - 1.0f, r);
#endif
}

VM_INLINE vf vm_ceil(vf x) {
#ifdef VM_ROUND
    return VM_ROUND(x, 2);
#else
    vf r = vm_roundeven(x);
    return vm_copysign(vm_sel(r < x, r + 1.0f, r), x);   /* ceil(-0.5) is -0 */
#endif
}

/* IEEE maximum/minimum: NaN if either is NaN, and +0 > -0. AVX-512DQ's range instruction orders the
   zeros (but ignores a NaN operand); elsewhere equal lanes combine their bits. */
VM_INLINE vf vm_maximum(vf a, vf b) {
#ifdef VM_RANGE
    vf r = VM_RANGE(a, b, 5);
#else
    vf r = vm_sel(a == b, (vf)((vi)a & (vi)b), vm_sel(a > b, a, b));
#endif
    return vm_sel(vm_isnan(a) | vm_isnan(b), a + b, r);
}

VM_INLINE vf vm_minimum(vf a, vf b) {
#ifdef VM_RANGE
    vf r = VM_RANGE(a, b, 4);
#else
    vf r = vm_sel(a == b, (vf)((vi)a | (vi)b), vm_sel(a < b, a, b));
#endif
    return vm_sel(vm_isnan(a) | vm_isnan(b), a + b, r);
}

/* ---- memory ------------------------------------------------------------------------------------------- */

VM_INLINE vf vm_load(const char *p) { vf v; memcpy(&v, p, sizeof v); return v; }
VM_INLINE void vm_store(char *p, vf v) { memcpy(p, &v, sizeof v); }
VM_INLINE vf vm_load1(const char *p) { float x; memcpy(&x, p, 4); return vm_splat(x); }
VM_INLINE void vm_store1(char *p, vf v) { float x = v[0]; memcpy(p, &x, 4); }

/* Booleans are bytes (0/1) in memory and masks in registers. */
VM_INLINE vf vm_bool_to_vf(vb b) { return vm_from_mask(__builtin_convertvector(b, vi) != 0); }
VM_INLINE vb vm_vf_to_bool(vf v) { return __builtin_convertvector(vm_to_mask(v), vb) & 1; }
VM_INLINE vf vm_load_bool(const char *p) { vb b; memcpy(&b, p, sizeof b); return vm_bool_to_vf(b); }
VM_INLINE void vm_store_bool(char *p, vf v) { vb b = vm_vf_to_bool(v); memcpy(p, &b, sizeof b); }
VM_INLINE vf vm_load1_bool(const char *p) { return vm_from_mask(vm_splat((float)p[0]) != 0.0f); }
VM_INLINE void vm_store1_bool(char *p, vf v) { p[0] = vm_to_mask(v)[0] != 0; }

/* Tails: the first n lanes (0 < n <= VM_LANES) from/to memory, other lanes zero/untouched: masked
   moves, else a byte copy through a stack vector. */
VM_INLINE vf vm_load_n(const char *p, int64_t n) {
#ifdef VM_LOAD_N
    return VM_LOAD_N(p, n);
#else
    vf v = {0};
    memcpy(&v, p, (size_t)n * 4);
    return v;
#endif
}

VM_INLINE void vm_store_n(char *p, vf v, int64_t n) {
#ifdef VM_STORE_N
    VM_STORE_N(p, v, n);
#else
    memcpy(p, &v, (size_t)n * 4);
#endif
}

VM_INLINE vf vm_load_bool_n(const char *p, int64_t n) {
#ifdef VM_LOAD_BYTES_N
    return vm_bool_to_vf(VM_LOAD_BYTES_N(p, n));
#else
    vb b = {0};
    memcpy(&b, p, (size_t)n);
    return vm_bool_to_vf(b);
#endif
}

VM_INLINE void vm_store_bool_n(char *p, vf v, int64_t n) {
#ifdef VM_STORE_BYTES_N
    VM_STORE_BYTES_N(p, vm_vf_to_bool(v), n);
#else
    vb b = vm_vf_to_bool(v);
    memcpy(p, &b, (size_t)n);
#endif
}

#endif
