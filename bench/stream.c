/* The memory-bandwidth limit of the benchmark: the fewest instructions that read every input array
 * once and write every output array once, split in contiguous chunks over `threads` threads.
 * Each output receives the sum of the inputs, so that no load can be optimised away; n_inputs >= 1. */
#include <stddef.h>

/* 8 floats (one AVX register; two SSE ones), at any float-aligned address: a wider type goes through the
 * stack where the ISA has no register of its size, which made the kernel 3x slower on AVX2. */
typedef float vec8 __attribute__((vector_size(32), aligned(4), may_alias));

void stream_sum(const float *const *inputs, int n_inputs, float *const *outputs, int n_outputs,
                ptrdiff_t n, int threads)
{
    const ptrdiff_t vectors = n / 16;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (ptrdiff_t v = 0; v < vectors; ++v) {
        vec8 lo = *(const vec8 *)(inputs[0] + 16 * v), hi = *(const vec8 *)(inputs[0] + 16 * v + 8);
        for (int k = 1; k < n_inputs; ++k) {
            lo += *(const vec8 *)(inputs[k] + 16 * v);
            hi += *(const vec8 *)(inputs[k] + 16 * v + 8);
        }
        for (int k = 0; k < n_outputs; ++k) {
            *(vec8 *)(outputs[k] + 16 * v) = lo;
            *(vec8 *)(outputs[k] + 16 * v + 8) = hi;
        }
    }
    for (ptrdiff_t i = 16 * vectors; i < n; ++i) {
        float acc = inputs[0][i];
        for (int k = 1; k < n_inputs; ++k)
            acc += inputs[k][i];
        for (int k = 0; k < n_outputs; ++k)
            outputs[k][i] = acc;
    }
}
