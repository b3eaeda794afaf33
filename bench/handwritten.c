/* Hand-written C versions of the row-reduction workloads: what a careful programmer gets from gcc for
 * the same work and the same numerics as snipjit's kernels, to tell how much of the gap to the stream
 * limit is the machine's and how much the compiler's. Rows are split in contiguous chunks over
 * `threads` threads, as in stream.c; the row length must be a multiple of 16.
 *
 * softmax_rows:       m = max(x); e = exp(x - m) stored in the output; output *= 1 / sum(e).
 *                     exp is Cody-Waite reduction with a degree-5 polynomial (about 2 ulp), valid
 *                     because x - m <= 0; results below e^-87 flush to zero (and NaN inputs are not
 *                     handled: the workloads' inputs are finite).
 * add_layernorm_rows: t = x + residual stored in the output; mean; variance as the mean of
 *                     (t - mean)^2 (the stable two-pass form); output = (t - mean) / sqrt(var + eps)
 *                     * gamma + beta. Four accumulators per reduction. */
#include <math.h>
#include <stddef.h>

typedef float vec16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int ivec16 __attribute__((vector_size(64), aligned(4), may_alias));

static inline vec16 vmax(vec16 a, vec16 b)
{
    ivec16 a_wins = a > b;                                 /* all ones where true */
    return (vec16)(((ivec16)a & a_wins) | ((ivec16)b & ~a_wins));
}

/* Every lane of the result holds the sum (or the maximum) of v's lanes: four shuffle steps. */
#define HORIZONTAL(name, combine)                                                                  \
    static inline float name(vec16 v)                                                              \
    {                                                                                              \
        v = combine(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)); \
        v = combine(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11)); \
        v = combine(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13)); \
        v = combine(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)); \
        return v[0];                                                                               \
    }
static inline vec16 vadd(vec16 a, vec16 b) { return a + b; }
HORIZONTAL(hsum, vadd)
HORIZONTAL(hmax, vmax)

/* e^x for x <= 0 (lanes below -87 give 0). */
static inline vec16 exp_nonpositive(vec16 x)
{
    const float shifter = 12582912.0f;                     /* 1.5 * 2^23 */
    vec16 t = x * 1.44269504f + shifter;                   /* low bits of t hold k = round(x / ln2) */
    vec16 k = t - shifter;
    vec16 r = x - k * 0.693145752f;                        /* ln2 split in two parts */
    r = r - k * 1.42860677e-06f;
    vec16 p = r * 0.008289573714137077f + 0.041897837072610855f;
    p = p * r + 0.16667649149894714f;
    p = p * r + 0.4999915063381195f;
    p = p * r + 0.9999997019767761f;
    p = p * r + 1.0f;
    ivec16 bits = (ivec16)p + ((ivec16)t << 23);
    return (vec16)(bits & (x >= -87.0f));
}

void softmax_rows(const float *x, float *out, ptrdiff_t rows, ptrdiff_t n, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads)
    for (ptrdiff_t i = 0; i < rows; ++i) {
        const float *row = x + i * n;
        float *o = out + i * n;
        vec16 m0 = *(const vec16 *)row, m1 = m0;
        for (ptrdiff_t j = 0; j + 32 <= n; j += 32) {
            m0 = vmax(m0, *(const vec16 *)(row + j));
            m1 = vmax(m1, *(const vec16 *)(row + j + 16));
        }
        if (n % 32)
            m0 = vmax(m0, *(const vec16 *)(row + n - 16));
        float m = hmax(vmax(m0, m1));
        vec16 s0 = {0}, s1 = {0};
        ptrdiff_t j = 0;
        for (; j + 32 <= n; j += 32) {
            vec16 e0 = exp_nonpositive(*(const vec16 *)(row + j) - m);
            vec16 e1 = exp_nonpositive(*(const vec16 *)(row + j + 16) - m);
            *(vec16 *)(o + j) = e0;
            *(vec16 *)(o + j + 16) = e1;
            s0 += e0;
            s1 += e1;
        }
        for (; j < n; j += 16) {
            vec16 e = exp_nonpositive(*(const vec16 *)(row + j) - m);
            *(vec16 *)(o + j) = e;
            s0 += e;
        }
        float scale = 1.0f / hsum(s0 + s1);
        for (j = 0; j < n; j += 16)
            *(vec16 *)(o + j) *= scale;
    }
}

void add_layernorm_rows(const float *x, const float *residual, const float *gamma, const float *beta,
                        float *out, ptrdiff_t rows, ptrdiff_t n, float eps, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads)
    for (ptrdiff_t i = 0; i < rows; ++i) {
        const float *a = x + i * n, *b = residual + i * n;
        float *o = out + i * n;
        vec16 s[4] = {{0}, {0}, {0}, {0}};
        ptrdiff_t j = 0;
        for (; j + 64 <= n; j += 64)
            for (int u = 0; u < 4; ++u) {
                vec16 t = *(const vec16 *)(a + j + 16 * u) + *(const vec16 *)(b + j + 16 * u);
                *(vec16 *)(o + j + 16 * u) = t;
                s[u] += t;
            }
        for (; j < n; j += 16) {
            vec16 t = *(const vec16 *)(a + j) + *(const vec16 *)(b + j);
            *(vec16 *)(o + j) = t;
            s[0] += t;
        }
        float mean = hsum(s[0] + s[1] + s[2] + s[3]) / (float)n;
        vec16 q[4] = {{0}, {0}, {0}, {0}};
        for (j = 0; j + 64 <= n; j += 64)
            for (int u = 0; u < 4; ++u) {
                vec16 c = *(const vec16 *)(o + j + 16 * u) - mean;
                q[u] += c * c;
            }
        for (; j < n; j += 16) {
            vec16 c = *(const vec16 *)(o + j) - mean;
            q[0] += c * c;
        }
        float rstd = 1.0f / sqrtf(hsum(q[0] + q[1] + q[2] + q[3]) / (float)n + eps);
        for (j = 0; j < n; j += 16)
            *(vec16 *)(o + j) = (*(vec16 *)(o + j) - mean) * rstd * *(const vec16 *)(gamma + j)
                                + *(const vec16 *)(beta + j);
    }
}
