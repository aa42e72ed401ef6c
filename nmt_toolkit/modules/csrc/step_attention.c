/* One decoding step of multi-head attention on the CPU, for modules/cpu_kernels.py (see its docstring).
 *
 * Plain C on raw float32 buffers: no Python or torch headers, so it compiles in about a second with the
 * system compiler, and the caller passes tensors as data pointers (ctypes releases the GIL for the call).
 * Every row of the step (beam b of sentence s, rows laid out s * w + b) is its own small attention problem:
 * a query of d_k floats against the keys of its sentence and head. The gain over torch's batched products
 * is what is not done: no [rows, heads] transposes of queries and outputs, no masked foreign-beam keys,
 * no separate softmax pass over memory; each key and value vector is read once per row, from a layout
 * where it is contiguous.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float dot_n(const float *restrict a, const float *restrict b, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

static inline void axpy_n(float *restrict y, float a, const float *restrict x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

/* d = 64 (d_model / heads of every named architecture) as a constant: the loops unroll into a few vector
 * instructions with no remainder handling, about twice as fast as the general length. */
#define HEAD_DIM 64

/* Built with OpenMP (modules/cpu_kernels.py tries that first), a call shares its sentences or rows among
 * `threads` threads of the process's OpenMP runtime: torch's own (libgomp is loaded once per process), whose
 * threads are the intra-op threads that just ran the step's matrix products. Each sentence or row is computed
 * by one thread exactly as in a serial call, so results do not depend on the thread count. Below these
 * sizes a call stays on one thread (waking the others costs more than it saves). */
#define MIN_SENTENCES_PER_THREAD 4
#define MIN_ROWS_PER_THREAD 16

#ifdef _OPENMP
#define OMP(directive) _Pragma(#directive)
#else
#define OMP(directive)
#endif

/* The team for a call over `items` sentences or rows: the caller's thread count, or 1 for a small call. */
static inline int team(int64_t threads, int64_t items, int64_t min_per_thread) {
    return threads > 1 && items >= 2 * min_per_thread ? (int)threads : 1;
}

int nmt_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* Positions ahead that the self-attention loops prefetch: the caches of a beam batch exceed the last-level
 * cache, and a position's block (1 KB at beam 4, d 64) alone is too short a stream for the hardware. */
#define PF 4

static inline void prefetch(const float *p, int64_t n) {
    for (int64_t c = 0; c < n; c += 16) __builtin_prefetch(p + c);
}
static inline float dot(const float *restrict a, const float *restrict b, int64_t n) {
    return n == HEAD_DIM ? dot_n(a, b, HEAD_DIM) : dot_n(a, b, n);
}

static inline void axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
    if (n == HEAD_DIM) axpy_n(y, a, x, HEAD_DIM);
    else axpy_n(y, a, x, n);
}

/* scores[0..n) -> probabilities in place; returns 0, or -1 when every score is -inf (nothing to attend). */
static inline int softmax_in_place(float *scores, int64_t n) {
    float top = -INFINITY;
    for (int64_t i = 0; i < n; ++i) top = scores[i] > top ? scores[i] : top;
    if (top == -INFINITY) return -1;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        scores[i] = expf(scores[i] - top);
        sum += scores[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) scores[i] *= inv;
    return 0;
}

/* Self-attention of step `pos` (0-based).
 * qkv   [rows, ld_qkv]: per row q (heads*dk), k (heads*dk), v (heads*dv), in that order from column 0.
 * kc    [*, heads, cap, beam, dk], vc [*, heads, cap, beam, dv]: the caches; this step's keys and values are
 *       written at position pos, slot b (rows of sentence s are beams 0..w-1).
 * anc   [*, beam, anc_cap] int64: the slot holding row (s, b)'s ancestor at each position (already holding b
 *       at pos), or NULL when beam == 1 (every row its own line, slot 0).
 * out   [rows, heads*dv], rows = sents * w.
 * Returns 0, or -1 when out of memory. */
int nmt_self_step(const float *qkv, int64_t ld_qkv, float *kc, float *vc, int64_t cap, int64_t beam,
                  const int64_t *anc, int64_t anc_cap, int64_t sents, int64_t w, int64_t heads,
                  int64_t dk, int64_t dv, int64_t pos, float scaling, float *out, int64_t threads) {
    const int64_t hk = heads * dk, hv = heads * dv, len = pos + 1;
    const int nt = team(threads, sents, MIN_SENTENCES_PER_THREAD);
    int failed = 0;
    (void)nt;
    OMP(omp parallel num_threads(nt) reduction(| : failed))
    {
    /* each thread: its share of the sentences, and its own score buffer */
    OMP(omp for schedule(static))
    for (int64_t s = 0; s < sents; ++s)
        for (int64_t b = 0; b < w; ++b) {
            const float *row = qkv + (s * w + b) * ld_qkv;
            for (int64_t h = 0; h < heads; ++h) {
                memcpy(kc + (((s * heads + h) * cap + pos) * beam + b) * dk, row + hk + h * dk, dk * sizeof(float));
                memcpy(vc + (((s * heads + h) * cap + pos) * beam + b) * dv, row + 2 * hk + h * dv, dv * sizeof(float));
            }
        }
    /* Per sentence and head, positions outer and beams inner: the [beam, d] block of a position (every
     * slot a row of the sentence may read there) is one contiguous stretch, so the cache streams through
     * in address order once, however the rows' ancestry lines cross. */
    float *scores = malloc((size_t)(w * len) * sizeof(float));
    int skip[w > 0 ? w : 1];
    if (!scores) failed = 1;
    OMP(omp for schedule(static))
    for (int64_t s = 0; s < sents; ++s)
        for (int64_t h = 0; h < heads && scores; ++h) {
            const float *keys = kc + (s * heads + h) * cap * beam * dk;
            const float *values = vc + (s * heads + h) * cap * beam * dv;
            const int64_t *lines = anc ? anc + s * beam * anc_cap : NULL;
            for (int64_t p = 0; p < len; ++p) {
                const float *block = keys + p * beam * dk;
                /* PF positions ahead, running on into this head's values: one unbroken stream */
                if (p + PF < len)
                    prefetch(block + PF * beam * dk, beam * dk);
                else
                    prefetch(values + (p + PF - len) * beam * dv, beam * dv);
                for (int64_t b = 0; b < w; ++b) {
                    const int64_t slot = lines ? lines[b * anc_cap + p] : 0;
                    scores[b * len + p] = scaling * dot(qkv + (s * w + b) * ld_qkv + h * dk, block + slot * dk, dk);
                }
            }
            for (int64_t b = 0; b < w; ++b) {
                memset(out + (s * w + b) * hv + h * dv, 0, dv * sizeof(float));
                skip[b] = softmax_in_place(scores + b * len, len);
            }
            for (int64_t p = 0; p < len; ++p) {
                const float *block = values + p * beam * dv;
                if (p + PF < len)  /* ... and on into the next head's (or sentence's) keys */
                    prefetch(block + PF * beam * dv, beam * dv);
                else if (s * heads + h + 1 < sents * heads)
                    prefetch(keys + (cap + p + PF - len) * beam * dk, beam * dk);
                for (int64_t b = 0; b < w; ++b) {
                    if (skip[b]) continue;
                    const int64_t slot = lines ? lines[b * anc_cap + p] : 0;
                    axpy(out + (s * w + b) * hv + h * dv, scores[b * len + p], block + slot * dv, dv);
                }
            }
        }
    free(scores);
    }
    return failed ? -1 : 0;
}

/* Encoder-decoder attention of one step: the w rows of sentence s attend to its src_len encoder positions.
 * q     [rows, ld_q] (heads*dk from column 0); k [sents, heads, src_len, dk], v [sents, heads, src_len, dv];
 * bias  [sents, src_len] (0 or -inf at padding) or NULL; out [rows, heads*dv], rows = sents * w.
 * Returns 0, or -1 when out of memory. */
int nmt_cross_step(const float *q, int64_t ld_q, const float *k, const float *v, const float *bias, int64_t sents,
                   int64_t w, int64_t heads, int64_t dk, int64_t dv, int64_t src_len, float scaling,
                   float *out, int64_t threads) {
    const int64_t hv = heads * dv;
    const int nt = team(threads, sents, MIN_SENTENCES_PER_THREAD);
    int failed = 0;
    (void)nt;
    OMP(omp parallel num_threads(nt) reduction(| : failed))
    {
    float *scores = malloc((size_t)(w * src_len) * sizeof(float));
    if (!scores) failed = 1;
    OMP(omp for schedule(static))
    for (int64_t s = 0; s < sents; ++s)
        for (int64_t h = 0; h < heads && scores; ++h) {
            const float *keys = k + (s * heads + h) * src_len * dk;
            const float *values = v + (s * heads + h) * src_len * dv;
            const float *pad = bias ? bias + s * src_len : NULL;
            for (int64_t t = 0; t < src_len; ++t) {  /* each key once for the w queries of the sentence */
                const float *key = keys + t * dk;
                for (int64_t b = 0; b < w; ++b) {
                    float x = scaling * dot(q + (s * w + b) * ld_q + h * dk, key, dk);
                    scores[b * src_len + t] = pad ? x + pad[t] : x;
                }
            }
            int skip[w > 0 ? w : 1];
            for (int64_t b = 0; b < w; ++b) {
                float *oh = out + (s * w + b) * hv + h * dv;
                memset(oh, 0, dv * sizeof(float));
                skip[b] = softmax_in_place(scores + b * src_len, src_len);
            }
            for (int64_t t = 0; t < src_len; ++t) {
                const float *value = values + t * dv;
                for (int64_t b = 0; b < w; ++b)
                    if (!skip[b]) axpy(out + (s * w + b) * hv + h * dv, scores[b * src_len + t], value, dv);
            }
        }
    free(scores);
    }
    return failed ? -1 : 0;
}

/* ---------------------------------------------------------------- the candidates of a beam step
 * A beam step needs, per row of logits x [rows, V], the log-normaliser lse = log(sum(exp(x))) and the top
 * kk logits (the top kk log-probabilities are those minus lse). torch gets them through a log_softmax
 * (two reads and one write of the [rows, V] logits) and a top-k (two more reads); these read the row once
 * each, and write nothing but the results. */

/* exp(x) for x <= 0 (-inf and anything below -87 give about 1e-38, which adds nothing to a sum that holds
 * exp(0) = 1): x = n ln2 + r with n = round(x / ln2), then Cephes' expf polynomial of r (relative error below
 * 2e-7) scaled by 2^n through the exponent bits. Written with GCC/clang vector extensions, 16 lanes at once
 * (the compiler splits them to the machine's vector width): the type pun of the scaling does not
 * auto-vectorise. */
typedef float vfloat __attribute__((vector_size(64)));
typedef int32_t vint __attribute__((vector_size(64)));
#define LANES 16

static inline vfloat exp_nonpositive(vfloat x) {
    const vfloat lo = (vfloat){0} - 87.0f;
    const vint below = x < lo;  /* lanes of -1 where true (also false for NaN, which then stays NaN) */
    x = (vfloat)(((vint)x & ~below) | ((vint)lo & below));
    const vint n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, vint);  /* toward zero: round */
    const vfloat nf = __builtin_convertvector(n, vfloat);
    const vfloat r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    vfloat p = (vfloat){0} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (vfloat)((n + 127) << 23);
}

static inline float exp_nonpositive_1(float x) {
    vfloat v = (vfloat){0} + x;
    return exp_nonpositive(v)[0];
}

static inline float sum_exp_shifted(const float *row, int64_t start, int64_t end, float shift) {
    vfloat acc = {0};
    int64_t i = start;
    for (; i + LANES <= end; i += LANES) {
        vfloat v;
        memcpy(&v, row + i, sizeof v);
        acc += exp_nonpositive(v - shift);
    }
    float sum = 0.0f;
    for (int l = 0; l < LANES; ++l) sum += acc[l];
    for (; i < end; ++i) sum += exp_nonpositive_1(row[i] - shift);
    return sum;
}

#define LSE_BLOCK 512

/* lse[r] for the rows of x (row stride ld); a row of -inf only gives -inf. */
void nmt_row_logsumexp(const float *x, int64_t ld, int64_t width, int64_t rows, float *lse, int64_t threads) {
    const int nt = team(threads, rows, MIN_ROWS_PER_THREAD);
    (void)nt;
    OMP(omp parallel for schedule(static) num_threads(nt))
    for (int64_t r = 0; r < rows; ++r) {
        const float *row = x + r * ld;
        float top = -INFINITY, sum = 0.0f;
        for (int64_t start = 0; start < width; start += LSE_BLOCK) {  /* a block: its max, then its exps (in L1) */
            const int64_t end = start + LSE_BLOCK < width ? start + LSE_BLOCK : width;
            float block_top = -INFINITY;
#pragma omp simd reduction(max : block_top)
            for (int64_t i = start; i < end; ++i) block_top = row[i] > block_top ? row[i] : block_top;
            if (block_top == -INFINITY) continue;
            if (block_top > top) {
                sum *= exp_nonpositive_1(top - block_top);
                top = block_top;
            }
            sum += sum_exp_shifted(row, start, end, top);
        }
        lse[r] = top == -INFINITY ? -INFINITY : top + logf(sum);
    }
}

#define TOPK_CHUNK 64  /* 16 and 32 measured 20 % and 3 % slower: more horizontal maxima */

/* The kk largest values of each row (descending; equal values by lower index first) and their columns, for
 * every row; values [rows, kk], index [rows, kk]. A chunk whose maximum does not beat the
 * current kk-th value is skipped after one vector comparison, which is almost every chunk. -inf values are
 * returned only when a row has fewer than kk finite ones (then with the lowest such columns). */
void nmt_row_topk(const float *x, int64_t ld, int64_t width, int64_t kk, int64_t rows,
                  float *values, int64_t *index, int64_t threads) {
    const int nt = team(threads, rows, MIN_ROWS_PER_THREAD);
    (void)nt;
    OMP(omp parallel for schedule(static) num_threads(nt))
    for (int64_t r = 0; r < rows; ++r) {
        const float *row = x + r * ld;
        float *val = values + r * kk;
        int64_t *idx = index + r * kk;
        int64_t filled = 0;
        float floor_value = -INFINITY;  /* the kk-th value once kk are held */
        for (int64_t start = 0; start < width; start += TOPK_CHUNK) {
            const int64_t end = start + TOPK_CHUNK < width ? start + TOPK_CHUNK : width;
            if (filled == kk) {
                float chunk_top = -INFINITY;
#pragma omp simd reduction(max : chunk_top)
                for (int64_t i = start; i < end; ++i) chunk_top = row[i] > chunk_top ? row[i] : chunk_top;
                if (!(chunk_top > floor_value)) continue;
            }
            for (int64_t i = start; i < end; ++i) {
                const float v = row[i];
                if (filled == kk && !(v > floor_value)) continue;
                int64_t j = filled < kk ? filled++ : kk - 1;  /* insertion: later columns stay behind ties */
                while (j > 0 && v > val[j - 1]) {
                    val[j] = val[j - 1];
                    idx[j] = idx[j - 1];
                    --j;
                }
                val[j] = v;
                idx[j] = i;
                if (filled == kk) floor_value = val[kk - 1];
            }
        }
    }
}
