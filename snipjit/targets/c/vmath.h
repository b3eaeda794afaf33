/* vmath.h: vectorised f32 math for snipjit's C target, written with GCC vector extensions.

   Kernels include this header after defining VM_LANES (f32 lanes per vector: 16 with AVX-512, 8 with
   AVX2, ...). Every function works on whole vectors and inlines: no libm call is ever made, so the
   kernels stay vectorised (the tests check the compiled code for calls). Lane-wise loops over
   __builtin_sqrtf / __builtin_fmaf are recognised by GCC as vector instructions (-fno-math-errno).

   Values: `vf` holds floats; `vi` holds the 32-bit lane masks of comparisons (all ones = true).
   Booleans in kernel registers are such masks reinterpreted as `vf`. Where f32 arithmetic is not
   precise enough, `vd`/`vl` hold doubles/int64 for a part of the lanes: 16 doubles would be wider than
   any register, and GCC turns such vectors into scalar code, so a 16-lane vector is widened in two
   parts of 8 (`vm_widen_part`, `vm_narrow_parts`).

   Kernels are compiled with -ffp-contract=off: an a*b+c is fused only where vm_fma says so, since
   several algorithms below need exact products (x*x = hi + lo) or exact differences.

   Accuracy contract (tests/targets/c/test_c_vmath.py measures it over 10^5 points per function, every
   binade from the smallest denormal to FLT_MAX, plus edge values): within 4 ulp of the correctly
   rounded result or 1e-6 relative, NaN where the float64 reference is NaN, infinities exact.

   Techniques (polynomial coefficients are relative-error minimax fits by a Remez exchange, for the
   interval and form named at each table, rounded to f32 or kept as f64):
   - exp family: x = k ln2 + r with a two-part ln2, e^r - 1 = r + r^2 P(r), and 2^k added to the
     exponent bits while every lane's result is normal; a vector with a lane beyond (or NaN) branches
     to a general path that clamps and applies 2^k in two halves, so a denormal result is rounded
     once. Results that may be denormal (sigmoid, erfc and gelu tails) are carried scaled by 2^32 and
     unscaled by the last multiply.
   - log: x = 2^e m, m in [sqrt(1/2), sqrt(2)), f = m - 1 exact, s = f/(2+f), and
     log(1+f) = f - (f^2/2 - s (f^2/2 + s^2 G(s^2))), which is 2 atanh(s) rearranged for accuracy.
   - erf: x + x P(x^2) below 0.75; above, erfc(a) = e^(-a^2) Q(t), t = 2/(2+a), with a^2 = hi + lo
     exact (an FMA gives the low part), so the exponential sees the argument to 2^-48; gelu_erf takes
     Phi(-|x|) = erfc(|x|/sqrt 2)/2 that way for every x (Q fitted from a = 0).
   - pow, sin, cos, tan, gelu(tanh): double precision where f32 cannot carry the argument: y log x,
     the reduction modulo pi/2 (Cody-Waite below 2^20, Payne-Hanek with 24-bit chunks of 2/pi above,
     in a branch taken only when a lane needs it), and 2 sqrt(2/pi)(x + 0.044715 x^3).
   - atan: one reduction (a > 1: pi/2 - atan(1/a)) and a degree-8 polynomial in a^2 on [0, 1];
     asin/acos: the half-angle identity above 1/2; hyperbolics from expm1 and log1p.
   The gated activations (gelu, mish, hard_swish) give their limit -0 at x = -inf, where the textbook
   x * gate(x) would be -inf * 0 = NaN.

   Measured maximum error in ulp of the correctly rounded result (the test fails when a measurement
   exceeds its row; 0 means always correctly rounded):

   function       max ulp   notes
   exp            1.0
   expm1          1.4
   log            0.9
   log1p          1.4
   tanh           2.2
   sigmoid        2.4
   softplus       1.7
   mish           3.6
   erf            1.5
   gelu_erf       5.2       above 4 ulp only below 4e-7 relative (t = 2/(2+a) and Q(t) in f32)
   gelu_tanh      3.2
   pow            0.6       double-precision log and exp, one rounding
   pow_static     0.6       integer exponents by squaring in double
   sqrt           0.0
   reciprocal     0.0
   sin            0.6       exact reduction for every float
   cos            0.6
   tan            0.6
   atan           1.5
   asin           2.5
   acos           1.3
   sinh           1.9
   cosh           1.4
   asinh          1.8
   acosh          2.2
   atanh          2.0
   elu            1.6
   selu           1.8
   celu           1.9
   hard_swish     1.9       gate (x + 3)/6: exact near -3
   softsign       1.5
   abs, neg, relu, leaky_relu, hard_sigmoid, round, floor, ceil, sign: 0.0
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
#else
#define VM_PART_LANES VM_LANES
#endif
#define VM_PARTS (VM_LANES / VM_PART_LANES)

typedef float vf __attribute__((vector_size(VM_LANES * 4)));
typedef int32_t vi __attribute__((vector_size(VM_LANES * 4)));
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
VM_INLINE vd vm_splatd(double c) { vd r; for (int k = 0; k < VM_PART_LANES; k++) r[k] = c; return r; }
VM_INLINE vf vm_lane0(vf x) { return vm_splat(x[0]); }

/* The mask of the first n lanes (0 <= n <= VM_LANES). */
VM_INLINE vi vm_first(int64_t n) {
    vi ids;
    for (int k = 0; k < VM_LANES; k++) ids[k] = k;
    return ids < (int32_t)n;
}

/* m ? a : b per lane, for every vector kind. */
VM_INLINE vf vm_sel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
VM_INLINE vi vm_seli(vi m, vi a, vi b) { return (a & m) | (b & ~m); }
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

/* Lanes [p * VM_PART_LANES, (p + 1) * VM_PART_LANES) of a float vector as doubles, and back. */
typedef float vm_part_f __attribute__((vector_size(VM_PART_LANES * 4)));
#if VM_PARTS == 1
#define VM_PART(x, p) (x)
#define VM_JOIN(a, b) (a)
#elif defined(__clang__) || __GNUC__ >= 12
#define VM_PART(x, p) ((p) ? __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15) \
                           : __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7))
#define VM_JOIN(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#else
#define VM_PART(x, p) ({ vm_part_f _h; memcpy(&_h, (const char *)&(x) + (p) * sizeof _h, sizeof _h); _h; })
#define VM_JOIN(a, b) ({ vf _v; memcpy(&_v, &(a), sizeof(a)); memcpy((char *)&_v + sizeof(a), &(b), sizeof(b)); _v; })
#endif

VM_INLINE vd vm_widen_part(vf x, int p) { return __builtin_convertvector((vm_part_f)VM_PART(x, p), vd); }
VM_INLINE vf vm_narrow_parts(const vd *parts) {
    vm_part_f lo = __builtin_convertvector(parts[0], vm_part_f);
    vm_part_f hi = __builtin_convertvector(parts[VM_PARTS - 1], vm_part_f);
    return (vf)VM_JOIN(lo, hi);
}
#define VM_FOR_PARTS(p) _Pragma("GCC unroll 2") for (int p = 0; p < VM_PARTS; p++)

/* Masks as floats (kernel registers hold booleans this way) and back. */
VM_INLINE vf vm_from_mask(vi m) { return (vf)m; }
VM_INLINE vi vm_to_mask(vf v) { return (vi)v != 0; }
VM_INLINE vf vm_bool(int b) { return vm_from_mask((vi){} - (b != 0)); }

/* ---- arithmetic the vector extensions lack ------------------------------------------------------------ */

VM_INLINE vf vm_fma(vf a, vf b, vf c) {
#ifdef __FP_FAST_FMAF
    vf r;
    for (int k = 0; k < VM_LANES; k++) r[k] = __builtin_fmaf(a[k], b[k], c[k]);
    return r;
#else
    return a * b + c;   /* no FMA unit: rounded twice (hi/lo splits below lose their low parts) */
#endif
}

VM_INLINE vd vm_fmad(vd a, vd b, vd c) {
#ifdef __FP_FAST_FMA
    vd r;
    for (int k = 0; k < VM_PART_LANES; k++) r[k] = __builtin_fma(a[k], b[k], c[k]);
    return r;
#else
    return a * b + c;
#endif
}

VM_INLINE vf vm_sqrt(vf x) { vf r; for (int k = 0; k < VM_LANES; k++) r[k] = __builtin_sqrtf(x[k]); return r; }

/* Horner's rule: sum c[i] x^i (unrolled, so the coefficients become constants). */
VM_INLINE vf vm_poly(vf x, const float *c, int n) {
    vf acc = vm_splat(c[n - 1]);
#pragma GCC unroll 16
    for (int i = n - 2; i >= 0; i--) acc = vm_fma(acc, x, vm_splat(c[i]));
    return acc;
}

VM_INLINE vd vm_polyd(vd x, const double *c, int n) {
    vd acc = vm_splatd(c[n - 1]);
#pragma GCC unroll 16
    for (int i = n - 2; i >= 0; i--) acc = vm_fmad(acc, x, vm_splatd(c[i]));
    return acc;
}

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

/* Clamp into [lo, hi]; NaN stays NaN. */
VM_INLINE vf vm_clamp(vf x, float lo, float hi) {
    return vm_sel(x < lo, vm_splat(lo), vm_sel(x > hi, vm_splat(hi), x));
}
VM_INLINE vd vm_clampd(vd x, double lo, double hi) {
    return vm_seld(x < lo, vm_splatd(lo), vm_seld(x > hi, vm_splatd(hi), x));
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

/* ---- constants ---------------------------------------------------------------------------------------- */

#define VM_LOG2E 0x1.715476p+0f
#define VM_LN2_HI 0x1.62e4p-1f               /* 16 bits: k * VM_LN2_HI is exact for |k| < 2^8 */
#define VM_LN2_LO 0x1.7f7d1cp-20f
#define VM_LN2F 0x1.62e430p-1f
#define VM_LN2_HI_D 0x1.62e42fefa2000p-1     /* 40 bits */
#define VM_LN2_LO_D 0x1.9ef35793c7673p-41
#define VM_LN2_D 0x1.62e42fefa39efp-1
#define VM_LOG2E_D 0x1.71547652b82fep+0
#define VM_PIO2_HI 0x1.921fb6p+0f            /* pi/2 = HI + LO in f32 */
#define VM_PIO2_LO -0x1.777a5cp-25f
#define VM_PI_HI 0x1.921fb6p+1f
#define VM_PI_LO -0x1.777a5cp-24f
#define VM_PIO2_D 0x1.921fb54442d18p+0
#define VM_TWO_OVER_PI_D 0x1.45f306dc9c883p-1
#define VM_SQRT_HALF_BITS 0x3f3504f3         /* bits of f32 sqrt(1/2) */
#define VM_SCALE 0x1p32f                     /* tails that may be denormal are carried times 2^32 */
#define VM_UNSCALE 0x1p-32f

/* (e^r - 1 - r) / r^2 on |r| <= ln2/2, degree 4 */
static const float VM_EXPM1_P[] = {0.5f, 0.16666578f, 0.041666854f, 0.008363141f, 0.0013901285f};
/* (2 atanh(s) - 2s) / s^3 in z = s^2, |s| <= 3 - 2 sqrt(2), degree 2 (f32) and 4 (f64) */
static const float VM_LOG_G[] = {0.66666687f, 0.39988765f, 0.29580513f};
static const double VM_LOG_G_D[] = {0.6666666666737794, 0.3999999879423, 0.2857175506491794,
                                    0.2219137203512146, 0.19363143323032417};
/* (e^r - 1 - r - r^2/2) / r^3 on |r| <= ln2/2, degree 6 (f64) */
static const double VM_EXP_E_D[] = {0.1666666666668092, 0.04166666671885725, 0.00833333331669676,
                                    0.0013888854090797985, 0.00019841285700995367, 2.4859550785756603e-05,
                                    2.758364025861275e-06};
/* erf(x)/x - 1 in z = x^2 on |x| <= 0.75, degree 5, absolute error */
static const float VM_ERF_P[] = {0.12837917f, -0.3761262f, 0.11283393f, -0.026835434f, 0.0051159817f,
                                 -0.0006761097f};
/* erfc(a) e^(a^2) in t = 2/(2+a), on a in [0.75, 10.7] (degree 9) and on [0, 10.7] (degree 11) */
static const float VM_ERFC_Q[] = {2.9667303e-06f, 0.28200036f, 0.2834056f, 0.23639907f, 0.22891353f,
                                  -0.09080984f, 0.37669414f, -0.579253f, 0.33204255f, -0.069383904f};
static const float VM_ERFC_Q0[] = {2.66395e-06f, 0.28201303f, 0.2831833f, 0.23858573f, 0.21542682f,
                                   -0.035790384f, 0.22465894f, -0.2938481f, -0.025518563f, 0.21589267f,
                                   -0.13063142f, 0.026025308f};
/* (atan(a)/a - 1) / a^2 in z = a^2 on [0, 1], degree 8 */
static const float VM_ATAN_P[] = {-0.3333333f, 0.19999756f, -0.14278908f, 0.11036396f, -0.08666957f,
                                  0.06271218f, -0.036115944f, 0.013655946f, -0.0024235686f};
/* (asin(s)/s - 1) / s^2 in z = s^2 on [0, 1/2], degree 4 */
static const float VM_ASIN_P[] = {0.16666673f, 0.074988134f, 0.045009907f, 0.026499338f, 0.038196355f};
/* (sin r - r) / r^3 and (cos r - 1 + r^2/2) / r^4 in z = r^2 on |r| <= pi/4, degree 3 (f64) */
static const double VM_SIN_S_D[] = {-0.1666666666381726, 0.008333331863659003, -0.0001984008196781378,
                                    2.7249411184024675e-06};
static const double VM_COS_C_D[] = {0.041666666664301015, -0.0013888887666142602, 2.480059784146906e-05,
                                    -2.730068539933503e-07};
/* pi/2 in three parts of 33, 33 and 53 bits: k * part is exact for |k| < 2^20 */
static const double VM_PIO2_PARTS[] = {0x1.921fb544p+0, 0x1.0b4611a6p-34, 0x1.3198a2e037073p-69};
/* 2/pi as ten 24-bit chunks: x * chunk is exact for every float x */
static const double VM_TWO_OVER_PI_CHUNKS[] = {
    0x1.45f306p-1, 0x1.b93910p-26, 0x1.529fc0p-52, 0x1.3abe88p-75, 0x1.ea69bap-97,
    0x1.81b6c4p-121, 0x1.2b3278p-145, 0x1.0e4104p-170, 0x1.fca2c6p-193, 0x1.57bd76p-217};

/* ---- exponentials ------------------------------------------------------------------------------------- */

/* 2^k for k in [-126, 127] */
VM_INLINE vf vm_pow2i(vi k) { return (vf)((k + 127) << 23); }

/* v * 2^k for k in [-252, 254], rounded once (each half keeps the intermediate normal) */
VM_INLINE vf vm_ldexp(vf v, vi k) {
    vi half = k >> 1;
    return v * vm_pow2i(half) * vm_pow2i(k - half);
}

/* x = k ln2 + r; returns e^r - 1 and sets *k. x finite, |x| < 2^8 (so adding and removing 1.5 2^23
   rounds x log2(e) to an integer, half to even). */
VM_INLINE vf vm_expm1_reduced(vf x, vi *k) {
    vf kf = (x * VM_LOG2E + 0x1.8p23f) - 0x1.8p23f;
    vf r = vm_fma(kf, vm_splat(-VM_LN2_HI), x);
    r = vm_fma(kf, vm_splat(-VM_LN2_LO), r);
    *k = __builtin_convertvector(kf, vi);
    return vm_fma(r * r, vm_poly(r, VM_EXPM1_P, VM_COUNT(VM_EXPM1_P)), r);
}

/* Whether some lane is outside [lo, hi] or NaN: then the general path runs (for whole vectors). */
VM_INLINE int vm_any_outside(vf x, float lo, float hi) { return vm_any(~((x >= lo) & (x <= hi))); }

/* e^x * 2^scale for scale in [-1, 32]; NaN lanes give garbage. While every 2^(k + scale) is a normal
   float the result is q + 1 with k + scale added to its exponent bits; otherwise x is clamped (beyond,
   the result is 0 or inf anyway) and the scaling takes two steps, so denormals are rounded once. */
VM_INLINE vf vm_exp_scaled(vf x, int scale) {
    vi k;
    float fast_lo = (-124.0f - (float)scale) * VM_LN2F, fast_hi = (125.0f - (float)scale) * VM_LN2F;
    if (__builtin_expect(vm_any_outside(x, fast_lo, fast_hi), 0)) {
        vf q = vm_expm1_reduced(vm_clamp(x, -(151.0f + (float)scale) * VM_LN2F, 89.5f), &k);
        return vm_ldexp(q + 1.0f, k + scale);
    }
    vf q = vm_expm1_reduced(x, &k);
    return (vf)((vi)(q + 1.0f) + ((k + scale) << 23));
}

/* (e^x - 1) * 2^scale for x in [-80, 89.5]: 2^(k+scale) (q + 1 - 2^-k), rounded once (in one step
   while 2^(k + scale) is normal). */
VM_INLINE vf vm_expm1_scaled(vf x, int scale) {
    vi k;
    vf q = vm_expm1_reduced(x, &k);
    vf one_minus = 1.0f - vm_pow2i(-vm_seli(k > 64, (vi){} + 64, k));
    if (__builtin_expect(vm_any_outside(x, -80.0f, (126.0f - (float)scale) * VM_LN2F), 0))
        return vm_ldexp(q + one_minus, k + scale);
    return (q + one_minus) * vm_pow2i(k + scale);
}

VM_INLINE vf vm_keep_nan(vf x, vf r) { return vm_sel(vm_isnan(x), x, r); }
VM_INLINE vf vm_keep_zero(vf x, vf r) { return vm_sel(x == 0.0f, x, r); }  /* odd functions at -0 */

VM_INLINE vf vm_exp(vf x) { return vm_keep_nan(x, vm_exp_scaled(x, 0)); }

VM_INLINE vf vm_expm1(vf x) {
    return vm_keep_zero(x, vm_keep_nan(x, vm_expm1_scaled(vm_clamp(x, -30.0f, 89.5f), 0)));
}

VM_INLINE vf vm_tanh(vf x) {
    vf e = vm_expm1_scaled(vm_clamp(vm_abs(x), 0.0f, 9.1f) * 2.0f, 0);   /* tanh rounds to 1 beyond 9.1 */
    return vm_keep_nan(x, vm_copysign(e / (e + 2.0f), x));
}

VM_INLINE vf vm_sinh(vf x) {
    vf h = vm_expm1_scaled(vm_clamp(vm_abs(x), 0.0f, 89.5f), -1);     /* (e^a - 1)/2 */
    vf b = vm_sel(h > 1e30f, vm_splat(1e30f), h);                      /* h/(2h+1) -> 1/2, never inf/inf */
    return vm_keep_nan(x, vm_copysign(h + b / (b * 2.0f + 1.0f), x));
}

VM_INLINE vf vm_cosh(vf x) {
    vf g = vm_exp_scaled(vm_clamp(vm_abs(x), 0.0f, 89.5f), -1);       /* e^a / 2 */
    return vm_keep_nan(x, g + 0.25f / g);
}

/* 2^32 / (1 + e^-z) for z = hi + lo (|lo| tiny), without overflow or cancellation. */
VM_INLINE vf vm_logistic_scaled(vf hi, vf lo) {
    vf e = vm_exp_scaled(-vm_abs(hi), 32);                       /* e^-|hi| 2^32 */
    e = vm_fma(e, vm_sel(hi < 0.0f, lo, -lo), e);                /* e^-|hi+lo| ~ e^-|hi| (1 -+ lo) */
    return vm_sel(hi >= 0.0f, vm_splat(VM_SCALE), e) / vm_fma(e, vm_splat(VM_UNSCALE), vm_splat(1.0f));
}

/* x * gate(x) given gate * 2^32, for gates that vanish at -inf (the limit there is -0). */
VM_INLINE vf vm_gated(vf x, vf gate_scaled) {
    vf product = vm_sel(x < 0.0f, x * gate_scaled * VM_UNSCALE, x * (gate_scaled * VM_UNSCALE));
    return vm_sel(x == -__builtin_inff(), vm_splat(-0.0f), product);
}

VM_INLINE vf vm_sigmoid(vf x) { return vm_keep_nan(x, vm_logistic_scaled(x, vm_splat(0.0f)) * VM_UNSCALE); }

/* ---- logarithms --------------------------------------------------------------------------------------- */

/* x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), f exact; x > 0 finite (denormals too). */
VM_INLINE vf vm_log_decompose(vf x, vi *e) {
    vi tiny = x < 0x1p-126f;
    vi bits = (vi)vm_sel(tiny, x * 0x1p23f, x) - VM_SQRT_HALF_BITS;
    *e = (bits >> 23) + (tiny & -23);
    return (vf)((bits & 0x7fffff) + VM_SQRT_HALF_BITS) - 1.0f;
}

VM_INLINE vf vm_log_finite(vf x) {
    vi e;
    vf f = vm_log_decompose(x, &e);
    vf ef = __builtin_convertvector(e, vf);
    vf s = f / (f + 2.0f);
    vf z = s * s;
    vf half_f2 = f * f * 0.5f;
    vf r = z * vm_poly(z, VM_LOG_G, VM_COUNT(VM_LOG_G));
    vf low = vm_fma(s, half_f2 + r, ef * VM_LN2_LO);
    return vm_fma(ef, vm_splat(VM_LN2_HI), f - (half_f2 - low));
}

/* log's values at 0, +inf, negatives and NaN around a finite result. */
VM_INLINE vf vm_log_special(vf x, vf r) {
    vf edge = vm_sel(x == 0.0f, vm_splat(-__builtin_inff()), vm_splat(__builtin_nanf("")));
    return vm_sel(x > 0.0f, vm_sel(x == __builtin_inff(), x, r), edge);
}

VM_INLINE vf vm_log(vf x) { return vm_log_special(x, vm_log_finite(x)); }

VM_INLINE vf vm_log1p(vf x) {
    vf u = x + 1.0f;
    vf lost = (x - (u - 1.0f)) / u;   /* what rounding 1 + x dropped, as a log increment */
    return vm_keep_zero(x, vm_log_special(u, vm_log_finite(u) + lost));
}

/* ln(2^e (1 + f)) in double, from the parts vm_log_decompose gives (widened) */
VM_INLINE vd vm_log_d(vd e, vd f) {
    vd s = f / (f + 2.0);
    vd z = s * s;
    return vm_fmad(e, vm_splatd(VM_LN2_D), vm_fmad(s * z, vm_polyd(z, VM_LOG_G_D, VM_COUNT(VM_LOG_G_D)), s * 2.0));
}

/* e^t for double t, before its one rounding to f32 (t clamped to [-110, 100], beyond which f32 gives
   0 or inf) */
VM_INLINE vd vm_exp_d(vd t) {
    t = vm_clampd(t, -110.0, 100.0);
    vd k = vm_roundevend(t * VM_LOG2E_D);
    vd r = vm_fmad(k, vm_splatd(-VM_LN2_HI_D), t);
    r = vm_fmad(k, vm_splatd(-VM_LN2_LO_D), r);
    vd q = vm_fmad(r * r, vm_fmad(r, vm_polyd(r, VM_EXP_E_D, VM_COUNT(VM_EXP_E_D)), vm_splatd(0.5)), r);
    vd scale = (vd)((__builtin_convertvector(k, vl) + 1023) << 52);
    return (q + 1.0) * scale;
}

VM_INLINE vi vm_is_integer(vf y) { return vm_roundeven(y) == y; }

/* x^y with C99/numpy special values */
VM_INLINE vf vm_pow(vf x, vf y) {
    vf ax = vm_abs(x);
    vi e;
    vf f = vm_log_decompose(vm_sel((ax == 0.0f) | (ax == __builtin_inff()), vm_splat(1.0f), ax), &e);
    vf ef = __builtin_convertvector(e, vf);
    vd parts[VM_PARTS];
    VM_FOR_PARTS(p) {
        parts[p] = vm_exp_d(vm_widen_part(y, p) * vm_log_d(vm_widen_part(ef, p), vm_widen_part(f, p)));
    }
    vf mag = vm_narrow_parts(parts);
    mag = vm_sel(ax == 0.0f, vm_sel(y < 0.0f, vm_splat(__builtin_inff()), vm_splat(0.0f)), mag);
    mag = vm_sel(ax == __builtin_inff(), vm_sel(y < 0.0f, vm_splat(0.0f), vm_splat(__builtin_inff())), mag);
    vi integral = vm_is_integer(y);
    vi odd = integral & ~vm_is_integer(y * 0.5f);
    vf r = vm_sel(((vi)x < 0) & odd, -mag, mag);
    r = vm_sel((x < 0.0f) & (x > -__builtin_inff()) & ~integral, vm_splat(__builtin_nanf("")), r);
    r = vm_sel(vm_isnan(x) | vm_isnan(y), x + y, r);
    r = vm_sel((ax == 1.0f) & (vm_abs(y) == __builtin_inff()), vm_splat(1.0f), r);
    return vm_sel((x == 1.0f) | (y == 0.0f), vm_splat(1.0f), r);
}

/* x^n for an integer n, |n| <= 64, by squaring in double: at most 12 roundings of 2^-53, then one to f32 */
VM_INLINE vf vm_powi(vf x, int n) {
    vd parts[VM_PARTS];
    VM_FOR_PARTS(p) {
        vd base = vm_widen_part(x, p), result = vm_splatd(1.0);
        for (unsigned m = (unsigned)(n < 0 ? -n : n); m; m >>= 1) {
            if (m & 1) result = result * base;
            base = base * base;
        }
        parts[p] = n < 0 ? 1.0 / result : result;
    }
    return vm_narrow_parts(parts);
}

/* x^exponent for a compile-time exponent, like numpy's power with a scalar */
VM_INLINE vf vm_pow_static(vf x, float exponent) {
    if (exponent == 0.5f) return vm_sqrt(x);
    if (exponent >= -64.0f && exponent <= 64.0f && exponent == (float)(int)exponent) return vm_powi(x, (int)exponent);
    return vm_pow(x, vm_splat(exponent));
}

/* ---- error function ----------------------------------------------------------------------------------- */

VM_INLINE vf vm_erf_small(vf a) { return vm_fma(a, vm_poly(a * a, VM_ERF_P, VM_COUNT(VM_ERF_P)), a); }

/* erfc(a) * 2^32 = e^(-a^2) Q(2/(2+a)) 2^32 for a in [0.75, 10.7] (q = VM_ERFC_Q) or [0, 10.7]
   (VM_ERFC_Q0), given a^2 = a2_hi + a2_lo exactly */
VM_INLINE vf vm_erfc_scaled(vf a, vf a2_hi, vf a2_lo, const float *q, int n) {
    vf t = 2.0f / (a + 2.0f);
    vf e = vm_exp_scaled(-a2_hi, 32);
    e = vm_fma(e, -a2_lo, e);   /* e^-(hi+lo) = e^-hi (1 - lo) */
    return vm_poly(t, q, n) * e;
}

VM_INLINE vf vm_erf(vf x) {
    vf a = vm_sel(vm_abs(x) > 10.5f, vm_splat(10.5f), vm_abs(x));
    vf a2 = a * a;
    vf large = 1.0f - vm_erfc_scaled(a, a2, vm_fma(a, a, -a2), VM_ERFC_Q, VM_COUNT(VM_ERFC_Q)) * VM_UNSCALE;
    return vm_copysign(vm_sel(a < 0.75f, vm_erf_small(a), large), x);
}

/* x Phi(x), Phi(x) = erfc(-x/sqrt 2)/2, from Phi(-|x|) (no cancellation; Phi(|x|) = 1 - that is at
   least 1/2). With a = |x|/sqrt 2 rounded, a^2 = x^2/2 is formed from x. */
VM_INLINE vf vm_gelu_erf(vf x) {
    vf ax = vm_sel(vm_abs(x) > 15.0f, vm_splat(15.0f), vm_abs(x));
    vf x2 = ax * ax;
    vf erfc = vm_erfc_scaled(ax * 0x1.6a09e6p-1f, x2 * 0.5f, vm_fma(ax, ax, -x2) * 0.5f, VM_ERFC_Q0,
                             VM_COUNT(VM_ERFC_Q0));
    vf tail = vm_sel(vm_abs(x) > 15.0f, vm_splat(0.0f), erfc * 0.5f);   /* Phi(-|x|) 2^32 */
    vf gate = vm_sel(x < 0.0f, tail, vm_fma(tail, vm_splat(-VM_UNSCALE), vm_splat(1.0f)) * VM_SCALE);
    return vm_gated(x, gate);
}

/* x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): 2u in double, split into f32 hi + lo (beyond
   |x| = 20, |2u| > 600 and the gate is exactly 0 or 1). */
VM_INLINE vf vm_gelu_tanh(vf x) {
    vf xc = vm_clamp(x, -20.0f, 20.0f);
    vd z[VM_PARTS], lo[VM_PARTS];
    VM_FOR_PARTS(p) {
        vd xd = vm_widen_part(xc, p);
        z[p] = xd * vm_fmad(xd * xd, vm_splatd(0x1.2444f2a4d8b4bp-4), vm_splatd(0x1.9884533d43651p+0));
    }
    vf hi = vm_narrow_parts(z);
    VM_FOR_PARTS(p) lo[p] = z[p] - vm_widen_part(hi, p);
    return vm_gated(x, vm_logistic_scaled(hi, vm_narrow_parts(lo)));
}

/* ---- trigonometric ------------------------------------------------------------------------------------ */

/* x * 2/pi = q + f exactly enough (|x| >= 2^20): sums of x * chunk reduced mod 4 */
VM_INLINE vd vm_reduce_payne_hanek(vd x, vl *q) {
    vd hi = vm_splatd(0.0), lo = vm_splatd(0.0);
    for (int j = 0; j < VM_COUNT(VM_TWO_OVER_PI_CHUNKS); j++) {
        vd p = x * VM_TWO_OVER_PI_CHUNKS[j];                /* exact: 24 x 24 bits */
        p = p - vm_roundevend(p * 0.25) * 4.0;             /* exact: keeps p mod 4 */
        vd s = hi + p, b = s - hi;                         /* two-sum */
        lo = lo + ((hi - (s - b)) + (p - b));
        hi = s;
    }
    vd k = vm_roundevend(hi);
    *q = __builtin_convertvector(k, vl);
    return ((hi - k) + lo) * VM_PIO2_D;
}

/* sin and cos of finite lanes in double (non-finite lanes give garbage) */
VM_INLINE void vm_sincos_d(vd x, vd *sin_out, vd *cos_out) {
    vl far = (vm_absd(x) >= 0x1p20) & (vm_absd(x) < __builtin_inf());
    vd near = vm_seld(far, vm_splatd(0.0), x);
    vd k = vm_roundevend(near * VM_TWO_OVER_PI_D);
    vd r = near;
#pragma GCC unroll 3
    for (int j = 0; j < VM_COUNT(VM_PIO2_PARTS); j++) r = vm_fmad(k, vm_splatd(-VM_PIO2_PARTS[j]), r);
    vl q = __builtin_convertvector(k, vl);
    if (__builtin_expect(vm_anyd(far), 0)) {
        vl q_far;
        vd r_far = vm_reduce_payne_hanek(vm_seld(far, x, vm_splatd(0.0)), &q_far);
        r = vm_seld(far, r_far, r);
        q = (q_far & far) | (q & ~far);
    }
    vd z = r * r;
    vd s = vm_fmad(r * z, vm_polyd(z, VM_SIN_S_D, VM_COUNT(VM_SIN_S_D)), r);
    vd c = vm_fmad(z * z, vm_polyd(z, VM_COS_C_D, VM_COUNT(VM_COS_C_D)), vm_fmad(z, vm_splatd(-0.5), vm_splatd(1.0)));
    /* quadrant q: sin x = (s, c, -s, -c)[q mod 4], cos x = the same at q + 1 */
    vl swap = (q & 1) != 0;
    vd sin_v = vm_seld(swap, c, s), cos_v = vm_seld(swap, s, c);
    *sin_out = vm_seld((q & 2) != 0, -sin_v, sin_v);
    *cos_out = vm_seld(((q + 1) & 2) != 0, -cos_v, cos_v);
}

/* which = 0: sin, 1: cos, 2: tan; NaN for infinities */
VM_INLINE vf vm_trig(vf x, int which) {
    vd parts[VM_PARTS];
    VM_FOR_PARTS(p) {
        vd s, c;
        vm_sincos_d(vm_widen_part(x, p), &s, &c);
        parts[p] = which == 0 ? s : which == 1 ? c : s / c;
    }
    return vm_sel(vm_abs(x) < __builtin_inff(), vm_narrow_parts(parts), vm_splat(__builtin_nanf("")));
}

VM_INLINE vf vm_sin(vf x) { return vm_keep_zero(x, vm_trig(x, 0)); }
VM_INLINE vf vm_cos(vf x) { return vm_trig(x, 1); }
VM_INLINE vf vm_tan(vf x) { return vm_keep_zero(x, vm_trig(x, 2)); }

VM_INLINE vf vm_atan(vf x) {
    vf a = vm_abs(x);
    vi big = a > 1.0f;
    vf u = vm_sel(big, vm_splat(-1.0f), a) / vm_sel(big, a, vm_splat(1.0f));   /* big: atan a = pi/2 + atan(-1/a) */
    vf z = u * u;
    vf p = vm_fma(u * z, vm_poly(z, VM_ATAN_P, VM_COUNT(VM_ATAN_P)), u);
    return vm_copysign(vm_sel(big, VM_PIO2_HI + (p + VM_PIO2_LO), p), x);
}

/* asin(s) for |s| <= 1/2, z = s^2 */
VM_INLINE vf vm_asin_kernel(vf s, vf z) { return vm_fma(s * z, vm_poly(z, VM_ASIN_P, VM_COUNT(VM_ASIN_P)), s); }

VM_INLINE vf vm_asin(vf x) {
    vf a = vm_abs(x);
    vi big = a > 0.5f;   /* asin a = pi/2 - 2 asin(sqrt((1-a)/2)) */
    vf z = vm_sel(big, (1.0f - a) * 0.5f, a * a);
    vf k = vm_asin_kernel(vm_sel(big, vm_sqrt(z), a), z);
    return vm_copysign(vm_sel(big, VM_PIO2_HI - (k * 2.0f - VM_PIO2_LO), k), x);
}

VM_INLINE vf vm_acos(vf x) {
    vi big = vm_abs(x) > 0.5f;   /* x > 1/2: 2 asin(sqrt((1-x)/2)); x < -1/2: pi - that; else pi/2 - asin x */
    vf z = vm_sel(big, (1.0f - vm_abs(x)) * 0.5f, x * x);
    vf k = vm_asin_kernel(vm_sel(big, vm_sqrt(z), x), z);
    vf far = vm_sel(x > 0.0f, k * 2.0f, VM_PI_HI - (k * 2.0f - VM_PI_LO));
    return vm_sel(big, far, VM_PIO2_HI - (k - VM_PIO2_LO));
}

/* ---- inverse hyperbolic ------------------------------------------------------------------------------- */

/* log1p(near) for a <= 2^12; beyond, log(2a) (the dropped terms are below 2^-24 relative) */
VM_INLINE vf vm_log_twice(vf a, vf near) {
    vi far = a > 0x1p12f;
    return vm_sel(far, vm_log(a) + VM_LN2F, vm_log1p(near));
}

VM_INLINE vf vm_asinh(vf x) {
    vf a = vm_abs(x);
    vf a2 = a * a;
    return vm_copysign(vm_log_twice(a, a + a2 / (vm_sqrt(a2 + 1.0f) + 1.0f)), x);
}

VM_INLINE vf vm_acosh(vf x) {
    vf t = x - 1.0f;
    return vm_sel(x >= 1.0f, vm_log_twice(x, t + vm_sqrt(t * (t + 2.0f))), vm_splat(__builtin_nanf("")));
}

VM_INLINE vf vm_atanh(vf x) {
    vf a = vm_abs(x);
    return vm_copysign(vm_log1p(a * 2.0f / (1.0f - a)) * 0.5f, x);
}

/* ---- activations and simple functions ----------------------------------------------------------------- */

VM_INLINE vf vm_neg(vf x) { return -x; }
VM_INLINE vf vm_reciprocal(vf x) { return 1.0f / x; }
VM_INLINE vf vm_relu(vf x) { return vm_sel(x < 0.0f, vm_splat(0.0f), x); }
VM_INLINE vf vm_leaky_relu(vf x, float alpha) { return vm_sel(x < 0.0f, x * alpha, x); }
VM_INLINE vf vm_prelu(vf x, vf slope) { return vm_sel(x < 0.0f, x * slope, x); }
VM_INLINE vf vm_thresholded_relu(vf x, float alpha) { return vm_sel(x > alpha, x, vm_splat(0.0f)); }
VM_INLINE vf vm_elu(vf x, float alpha) { return vm_sel(x > 0.0f, x, vm_expm1(x) * alpha); }
VM_INLINE vf vm_selu(vf x, float alpha, float gamma) { return vm_elu(x, alpha) * gamma; }
VM_INLINE vf vm_celu(vf x, float alpha) { return vm_sel(x > 0.0f, x, vm_expm1(x / alpha) * alpha); }
VM_INLINE vf vm_softsign(vf x) { return x / (vm_abs(x) + 1.0f); }
VM_INLINE vf vm_round(vf x) { return vm_roundeven(x); }

VM_INLINE vf vm_softplus(vf x) {
    return vm_sel(x > 0.0f, x, vm_splat(0.0f)) + vm_log1p(vm_exp(-vm_abs(x)));
}

VM_INLINE vf vm_mish(vf x) {
    vf e = vm_exp_scaled(vm_sel(x > 20.0f, vm_splat(20.0f), x), 32);   /* beyond 20 the gate rounds to 1 */
    vf n = e * vm_fma(e, vm_splat(VM_UNSCALE), vm_splat(2.0f));       /* tanh(log(1+E)) = n/(n+2), n = E(E+2) */
    return vm_keep_nan(x, vm_gated(x, n / vm_fma(n, vm_splat(VM_UNSCALE), vm_splat(2.0f))));
}

VM_INLINE vf vm_hard_sigmoid(vf x, float alpha, float beta) {
    return vm_clamp(vm_fma(x, vm_splat(alpha), vm_splat(beta)), 0.0f, 1.0f);
}

/* x max(0, min(1, x/6 + 1/2)) with the gate as (x + 3)/6: exact sum near -3, one rounding */
VM_INLINE vf vm_hard_swish(vf x) { return vm_gated(x, vm_clamp((x + 3.0f) / 6.0f, 0.0f, 1.0f) * VM_SCALE); }

/* -1, 0 or 1; NaN stays NaN and -0 becomes 0 */
VM_INLINE vf vm_sign(vf x) {
    return vm_keep_nan(x, vm_sel(x > 0.0f, vm_splat(1.0f), vm_sel(x < 0.0f, vm_splat(-1.0f), vm_splat(0.0f))));
}

#endif
