/* THC's codec for one worker on the CPU: the per-coordinate passes of thc/compressor.py (THCCompressor)
 * in C, equal bit for bit to the numpy reference for the same seed (tests/thc/test_native_codec.py).
 *
 * Why it can be exact: every float operation below is the same single IEEE-754 operation, on the same
 * operands, as the reference's numpy/torch element-wise op (the file is compiled with -ffp-contract=off,
 * so no multiply and add are fused), the Walsh-Hadamard transform is the reference's fixed-order radix-2
 * butterfly (thc/hadamard.py fwht on the CPU), and the random bits are numpy's own: SeedSequence hashing
 * and PCG64 as numpy/random/bit_generator.pyx and numpy/random/src/pcg64/pcg64.h compute them.
 *
 * One call encodes or decodes a whole tensor, chunk after chunk, on the calling thread (ctypes releases
 * the GIL). The caller owns every buffer; nothing is allocated here.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The AVX2 paths (8 floats a register) where the compiler targets AVX2 (-mavx2, thc/native/__init__.py
 * _vector_flags) and THC_NO_AVX2 is not defined; the scalar loops everywhere else and for the tails. Both
 * compute every coordinate with the same IEEE operations on the same operands, so both give the same bits
 * (tests/thc/test_native_codec.py builds the scalar path with -DTHC_NO_AVX2 and compares). */
#if defined(__AVX2__) && !defined(THC_NO_AVX2)
#define THC_AVX2 1
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------------------------------------------
 * numpy's SeedSequence(entropy, spawn_key) -> PCG64 (thc/streams.py documents the hashing)
 * ------------------------------------------------------------------------------------------------------ */

#define POOL 4
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_L 0xca01f9ddu
#define MIX_R 0x4973f715u

typedef unsigned __int128 u128;

typedef struct {
    u128 state, inc;
} pcg64;

/* SeedSequence's hashmix: the multiplier advances with every word hashed */
static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= MULT_A;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = MIX_L * x - MIX_R * y;
    return r ^ (r >> 16);
}

#define PCG_MULT (((u128)2549297995355413924ULL << 64) | 4865540595714422341ULL)

static inline void pcg64_step(pcg64 *rng) { rng->state = rng->state * PCG_MULT + rng->inc; }

/* numpy's PCG64.random_raw(): step, then the XSL-RR output of the new state */
static inline uint64_t pcg64_next(pcg64 *rng) {
    pcg64_step(rng);
    uint64_t x = (uint64_t)(rng->state >> 64) ^ (uint64_t)rng->state;
    unsigned rot = (unsigned)(rng->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

/* numpy's pcg64_advance (pcg_advance_lcg_128): the state `delta` steps on, in O(log delta) */
static void pcg64_advance(pcg64 *rng, uint64_t delta) {
    u128 acc_mult = 1u, acc_plus = 0u, cur_mult = PCG_MULT, cur_plus = rng->inc;
    while (delta > 0) {
        if (delta & 1) {
            acc_mult *= cur_mult;
            acc_plus = acc_plus * cur_mult + cur_plus;
        }
        cur_plus = (cur_mult + 1) * cur_plus;
        cur_mult *= cur_mult;
        delta /= 2;
    }
    rng->state = acc_mult * rng->state + acc_plus;
}

/* PCG64(SeedSequence) for the assembled entropy words[0..n) followed by the words of `last` (the chunk
 * index: numpy appends an integer as its little-endian 32-bit words, at least one). words is what
 * SeedSequence.get_assembled_entropy() returns without its last key: the entropy padded to the pool,
 * then the spawn key's other entries (thc/native/__init__.py key_words). */
static void seed_pcg64(pcg64 *rng, const uint32_t *words, int64_t n, uint64_t last) {
    uint32_t tail[2] = {(uint32_t)last, (uint32_t)(last >> 32)};
    int64_t total = n + (last >> 32 ? 2 : 1);
    uint32_t pool[POOL];
    uint32_t h = INIT_A;
#define WORD(i) ((i) < n ? words[i] : tail[(i) - n])
    for (int i = 0; i < POOL; i++) /* mix_entropy */
        pool[i] = hashmix(i < total ? WORD(i) : 0u, &h);
    for (int src = 0; src < POOL; src++)
        for (int dst = 0; dst < POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &h));
    for (int64_t src = POOL; src < total; src++)
        for (int dst = 0; dst < POOL; dst++) pool[dst] = mix(pool[dst], hashmix(WORD(src), &h));
#undef WORD
    uint32_t out[8]; /* generate_state(4, np.uint64) */
    uint32_t hb = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % POOL] ^ hb;
        hb *= MULT_B;
        v *= hb;
        out[i] = v ^ (v >> 16);
    }
    uint64_t s_hi = out[0] | (uint64_t)out[1] << 32, s_lo = out[2] | (uint64_t)out[3] << 32;
    uint64_t i_hi = out[4] | (uint64_t)out[5] << 32, i_lo = out[6] | (uint64_t)out[7] << 32;
    /* pcg64_set_seed -> pcg_setseq_128_srandom_r */
    rng->state = 0;
    rng->inc = ((((u128)i_hi << 64) | i_lo) << 1) | 1u;
    pcg64_step(rng);
    rng->state += ((u128)s_hi << 64) | s_lo;
    pcg64_step(rng);
}

/* ------------------------------------------------------------------------------------------------------
 * The job and the chunks (filled by thc/native/__init__.py)
 * ------------------------------------------------------------------------------------------------------ */

struct thc_job {
    int64_t granularity; /* g */
    int64_t last;        /* 2^b - 1, the largest index */
    int64_t bits;        /* b */
    double inc;          /* Table.inc, 2T/g */
    double half_g_inc;   /* g / 2.0 * inc, as the reference's zeroth coordinate computes it */
    float shift;         /* g/2: grid position of a zero coordinate */
    float g32;           /* g as float32, the grid's top */
    const float *lut;    /* TableQuantizer._lut: per unit cell k = 0..g, (A, B) with F(u) = A + B u */
    const int32_t *values; /* Table.values */
};

struct thc_chunks {
    int64_t count;
    const int64_t *start;  /* Chunk.start: the first coordinate in the flat tensor */
    const int64_t *length; /* Chunk.length */
    const int64_t *padded; /* Chunk.padded: a power of two >= length */
};

/* ------------------------------------------------------------------------------------------------------
 * Power-of-two scaling and sign flips (compressor._pow2_steps, _scale_pow2_, _flip_scale)
 * ------------------------------------------------------------------------------------------------------ */

/* _pow2_steps(e): float32 factors whose product is 2^e, each normal; returns how many (e = 0: none) */
static int pow2_steps(int64_t e, float *factors) {
    int n = 0;
    while (e) {
        int64_t step = e < -126 ? -126 : (e > 127 ? 127 : e);
        factors[n++] = ldexpf(1.0f, (int)step);
        e -= step;
    }
    return n;
}

/* the 2^e of frexp(m), as compressor._exponents takes it (0 for a zero norm) */
static int64_t exponent_of(double m) {
    int e = 0;
    frexp(m, &e);
    return e;
}

/* sign_bit_rows' packed signs of one chunk: the chunk's PCG64 draws, coordinate i's sign in bit
 * (i & 63) ^ 7 of draw i / 64 (numpy's little-endian bytes, the first coordinate in a byte's high bit) */
static void draw_signs(uint64_t *signs, int64_t d, const uint32_t *key, int64_t key_words, uint64_t chunk) {
    pcg64 rng;
    seed_pcg64(&rng, key, key_words, chunk);
    for (int64_t w = 0; w < (d + 63) / 64; w++) signs[w] = pcg64_next(&rng);
}

/* _flip_scale: dst[i] = (D src)[i] 2^e for i < n: the sign flip, then the factors one after another
 * (per coordinate its sign bit flipped, then one multiply per factor, in order) */
#ifdef THC_AVX2
/* flip_scale of the 8 coordinates i .. i + 7 (i a multiple of 8) of src: 8 coordinates per byte of a sign
 * word, coordinate 8k + j taking bit 7 - j of byte k, which a left shift by 24 + j moves into the float's
 * sign bit */
static inline __m256 flip_scale8(const float *src, int64_t i, const uint64_t *signs, const float *factors, int steps) {
    const __m256i shifts = _mm256_setr_epi32(24, 25, 26, 27, 28, 29, 30, 31);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    int byte = (int)((signs[i / 64] >> (i & 63)) & 0xffu);
    __m256i mask = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(byte), shifts), sign);
    __m256 x = _mm256_xor_ps(_mm256_loadu_ps(src + i), _mm256_castsi256_ps(mask));
    for (int s = 0; s < steps; s++) x = _mm256_mul_ps(x, _mm256_set1_ps(factors[s]));
    return x;
}
#endif

static void flip_scale(float *restrict dst, const float *restrict src, int64_t n, const uint64_t *signs, const float *factors,
                       int steps) {
    int64_t i = 0;
#ifdef THC_AVX2
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, flip_scale8(src, i, signs, factors, steps));
#endif
    for (int64_t j = i; j < n; j++) { /* the flips, then each factor a pass (loops the compiler vectorises) */
        uint32_t u;
        memcpy(&u, src + j, 4);
        u ^= (uint32_t)((signs[j / 64] >> ((j & 63) ^ 7)) & 1u) << 31;
        memcpy(dst + j, &u, 4);
    }
    for (int s = 0; s < steps; s++) {
        const float f = factors[s];
        for (int64_t j = i; j < n; j++) dst[j] *= f;
    }
}

/* ------------------------------------------------------------------------------------------------------
 * The Walsh-Hadamard transform (hadamard.fwht on the CPU: stages h = 1, 2, 4, ..., each (a+b, a-b))
 * ------------------------------------------------------------------------------------------------------ */

#define FWHT_BLOCK 4096 /* floats: the stages within a block run while the block sits in L1/L2 */

/* stage h on x[0..n) */
static void fwht_stage(float *restrict x, int64_t n, int64_t h) {
    for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; j++) {
            float a = x[j], b = x[j + h];
            x[j] = a + b;
            x[j + h] = a - b;
        }
}

/* stages h and 2h in one pass: the same four sums and four differences, in the same order */
static void fwht_stage_pair(float *restrict x, int64_t n, int64_t h) {
    for (int64_t i = 0; i < n; i += 4 * h)
        for (int64_t j = i; j < i + h; j++) {
            float x0 = x[j], x1 = x[j + h], x2 = x[j + 2 * h], x3 = x[j + 3 * h];
            float s0 = x0 + x1, d0 = x0 - x1, s1 = x2 + x3, d1 = x2 - x3;
            x[j] = s0 + s1;
            x[j + 2 * h] = s0 - s1;
            x[j + h] = d0 + d1;
            x[j + 3 * h] = d0 - d1;
        }
}

/* stages 1, 2 and 4 on every group of 8 (n a multiple of 8) */
static void fwht_first8(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        float *p = x + i;
        float a0 = p[0] + p[1], a1 = p[0] - p[1], a2 = p[2] + p[3], a3 = p[2] - p[3];
        float a4 = p[4] + p[5], a5 = p[4] - p[5], a6 = p[6] + p[7], a7 = p[6] - p[7];
        float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
        float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
        p[0] = b0 + b4;
        p[4] = b0 - b4;
        p[1] = b1 + b5;
        p[5] = b1 - b5;
        p[2] = b2 + b6;
        p[6] = b2 - b6;
        p[3] = b3 + b7;
        p[7] = b3 - b7;
    }
}

/* stages h, 2h, ... below `top` on x[0..n) */
static void fwht_stages(float *x, int64_t n, int64_t h, int64_t top) {
    while (h < top) {
        if (2 * h < top) {
            fwht_stage_pair(x, n, h);
            h *= 4;
        } else {
            fwht_stage(x, n, h);
            h *= 2;
        }
    }
}

#ifdef THC_AVX2
/* stages 1, 2 and 4 of the 8 floats in a register (fwht_first8): per stage, p holds each float's partner
 * (neighbours, pairs, halves swapped); the lower float of a pair keeps x + p = a + b, the upper p - x = a - b */
static inline __m256 first8_avx2(__m256 x) {
    __m256 p = _mm256_permute_ps(x, 0xB1); /* 1 0 3 2 */
    x = _mm256_blend_ps(_mm256_add_ps(x, p), _mm256_sub_ps(p, x), 0xAA);
    p = _mm256_permute_ps(x, 0x4E); /* 2 3 0 1 */
    x = _mm256_blend_ps(_mm256_add_ps(x, p), _mm256_sub_ps(p, x), 0xCC);
    p = _mm256_permute2f128_ps(x, x, 0x01); /* the halves swapped */
    return _mm256_blend_ps(_mm256_add_ps(x, p), _mm256_sub_ps(p, x), 0xF0);
}

/* (a, b) <- (a + b, a - b) on registers */
#define BUTTERFLY(a, b)                \
    do {                               \
        __m256 t_ = (a);               \
        (a) = _mm256_add_ps(t_, (b));  \
        (b) = _mm256_sub_ps(t_, (b));  \
    } while (0)

/* stages 1 to 16 of 32 floats in four registers, stored at x: first8_avx2 on each register, then stages 8
 * and 16 across the four */
static inline void first32_store(float *x, __m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    v0 = first8_avx2(v0);
    v1 = first8_avx2(v1);
    v2 = first8_avx2(v2);
    v3 = first8_avx2(v3);
    BUTTERFLY(v0, v1);
    BUTTERFLY(v2, v3);
    BUTTERFLY(v0, v2);
    BUTTERFLY(v1, v3);
    _mm256_storeu_ps(x, v0);
    _mm256_storeu_ps(x + 8, v1);
    _mm256_storeu_ps(x + 16, v2);
    _mm256_storeu_ps(x + 24, v3);
}

/* stages 1 to 16 of every 32 floats (n a multiple of 32) */
static void first32_avx2(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 32)
        first32_store(x + i, _mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(x + i + 16),
                      _mm256_loadu_ps(x + i + 24));
}

/* stages h, 2h, ... below `top` on x[0..n), h a multiple of 8: up to three stages a pass over the data (fwht_stage,
 * fwht_stage_pair), 8 coordinates a register */
static void stages_avx2(float *x, int64_t n, int64_t h, int64_t top) {
    while (h < top) {
        int k = 8 * h <= top ? 3 : (4 * h <= top ? 2 : 1); /* stages in this pass */
        int64_t span = h << k;
        for (int64_t i = 0; i < n; i += span)
            for (int64_t j = i; j < i + h; j += 8) {
                __m256 v[8];
                for (int r = 0; r < 1 << k; r++) v[r] = _mm256_loadu_ps(x + j + r * h);
                if (k == 1) {
                    BUTTERFLY(v[0], v[1]);
                } else if (k == 2) {
                    BUTTERFLY(v[0], v[1]);
                    BUTTERFLY(v[2], v[3]);
                    BUTTERFLY(v[0], v[2]);
                    BUTTERFLY(v[1], v[3]);
                } else {
                    for (int r = 0; r < 8; r += 2) BUTTERFLY(v[r], v[r + 1]);
                    BUTTERFLY(v[0], v[2]);
                    BUTTERFLY(v[1], v[3]);
                    BUTTERFLY(v[4], v[6]);
                    BUTTERFLY(v[5], v[7]);
                    for (int r = 0; r < 4; r++) BUTTERFLY(v[r], v[r + 4]);
                }
                for (int r = 0; r < 1 << k; r++) _mm256_storeu_ps(x + j + r * h, v[r]);
            }
        h = span;
    }
}
#undef BUTTERFLY
#endif

#ifdef THC_AVX2
/* the transform's stages from 32 on (n >= 32 a power of two), for x whose first32_avx2 is done */
static void fwht_after32(float *x, int64_t n) {
    int64_t block = n < FWHT_BLOCK ? n : FWHT_BLOCK;
    for (int64_t b = 0; b < n; b += block) stages_avx2(x + b, block, 32, block);
    stages_avx2(x, n, block, n);
}
#endif

/* the unnormalised transform of x[0..n) in place, n a power of two */
static void fwht(float *x, int64_t n) {
    int64_t block = n < FWHT_BLOCK ? n : FWHT_BLOCK;
#ifdef THC_AVX2
    if (n >= 32) {
        for (int64_t b = 0; b < n; b += block) {
            first32_avx2(x + b, block);
            stages_avx2(x + b, block, 32, block);
        }
        stages_avx2(x, n, block, n);
        return;
    }
#endif
    if (n < 8) {
        fwht_stages(x, n, 1, n);
        return;
    }
    fwht_first8(x, n);
    for (int64_t b = 0; b < n; b += block) fwht_stages(x + b, block, 8, block);
    fwht_stages(x, n, block, n);
}

/* ------------------------------------------------------------------------------------------------------
 * Decode (compressor._decode_flat and _sums_to_floats for one chunk)
 * ------------------------------------------------------------------------------------------------------ */

/* numpy's pairwise sum of float64 (DOUBLE_pairwise_sum), which np.sum uses on a contiguous array */
static double pairwise_sum(const double *a, int64_t n) {
    if (n < 8) {
        double res = 0.;
        for (int64_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        int64_t i;
        for (int k = 0; k < 8; k++) r[k] = a[k];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static inline uint64_t sum_at(const void *sums, int64_t bytes, int64_t i) {
    /* read as unsigned, as the reference's range check does: a negative sum is huge */
    return bytes == 4 ? (uint64_t)(int64_t)((const int32_t *)sums)[i] : (uint64_t)((const int64_t *)sums)[i];
}

static inline double sum_value(const void *sums, int64_t bytes, int64_t i) {
    return bytes == 4 ? (double)((const int32_t *)sums)[i] : (double)((const int64_t *)sums)[i];
}

/* Sums of one chunk -> f, with the range check; returns the first coordinate out of range, or -1.
 * One count n: f = float32(S) * float32(alpha), total = sum of S (exact, int64);
 * per-coordinate counts k: f = float32((S / k) * alpha), total = numpy's sum of S/k per piece, added up.
 * *first32: whether f has had the transform's stages 1 to 16 as well (first32_avx2; the common case with
 * AVX2, in the same pass). */
static int64_t sums_to_floats(float *f, const void *sums, int64_t bytes, const int64_t *counts, int64_t n,
                              int64_t g, double alpha, int64_t d, int64_t piece, double *total, double *scratch,
                              int *first32) {
    *first32 = 0;
    if (!counts && bytes == 4) { /* the common case, in passes the compiler vectorises */
        const int32_t *s = sums;
        uint32_t top = 0;
        int64_t acc = 0;
        for (int64_t i = 0; i < d; i++) {
            top = (uint32_t)s[i] > top ? (uint32_t)s[i] : top;
            acc += s[i];
        }
        if ((uint64_t)top > (uint64_t)n * (uint64_t)g) {
            for (int64_t i = 0;; i++)
                if ((uint64_t)(int64_t)s[i] > (uint64_t)n * (uint64_t)g) return i;
        }
        *total = (double)acc;
        float a32 = (float)alpha;
#ifdef THC_AVX2
        if (d >= 32) { /* d a power of two: whole groups of 32 */
            const __m256 va = _mm256_set1_ps(a32);
#define SCALED(k) _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(s + i + 8 * (k)))), va)
            for (int64_t i = 0; i < d; i += 32) first32_store(f + i, SCALED(0), SCALED(1), SCALED(2), SCALED(3));
#undef SCALED
            *first32 = 1;
            return -1;
        }
#endif
        for (int64_t i = 0; i < d; i++) f[i] = (float)s[i] * a32;
        return -1;
    }
    if (!counts) {
        uint64_t limit = (uint64_t)n * (uint64_t)g, acc = 0;
        float a32 = (float)alpha;
        for (int64_t i = 0; i < d; i++) {
            uint64_t s = sum_at(sums, bytes, i);
            if (s > limit) return i;
            acc += s;
            f[i] = (bytes == 4 ? (float)((const int32_t *)sums)[i] : (float)((const int64_t *)sums)[i]) * a32;
        }
        *total = (double)acc;
        return -1;
    }
    double t = 0.0;
    for (int64_t p = 0; p < d; p += piece) {
        for (int64_t i = p; i < p + piece; i++) {
            uint64_t s = sum_at(sums, bytes, i);
            if (s > (uint64_t)counts[i] * (uint64_t)g) return i;
            double mean = sum_value(sums, bytes, i) / (double)counts[i];
            scratch[i - p] = mean;
            f[i] = (float)(mean * alpha);
        }
        t += pairwise_sum(scratch, piece);
    }
    *total = t;
    return -1;
}

/* The tail of _decode_flat for one chunk whose f = alpha S is in work (with first32: and has had the
 * transform's first stages, sums_to_floats): H f, the zeroth coordinate made exact, then
 * out[0..length) = D (H f) 2^e */
static void finish_decode(const struct thc_job *job, float *work, int64_t d, int64_t length, double alpha,
                          double total, double m, int64_t e, const uint64_t *signs, float *out, int first32) {
#ifdef THC_AVX2
    if (first32)
        fwht_after32(work, d);
    else
#else
    (void)first32; /* only the AVX2 pass of sums_to_floats does the first stages */
#endif
        fwht(work, d);
    work[0] = (float)(alpha * total - job->half_g_inc * m);
    float factors[16];
    int steps = pow2_steps(e, factors);
    flip_scale(out, work, length, signs, factors, steps);
}

/* ------------------------------------------------------------------------------------------------------
 * The max norms (compressor._checked_norms' conditions, read where the caller keeps them)
 * ------------------------------------------------------------------------------------------------------ */

/* chunk c's max norm as float64: norms holds float32 (norm_bytes 4) or float64 (8) values */
static inline double norm_at(const void *norms, int64_t norm_bytes, int64_t c) {
    return norm_bytes == 4 ? (double)((const float *)norms)[c] : ((const double *)norms)[c];
}

/* The first chunk whose max norm is not finite and non-negative or, with own (this worker's float32 norms),
 * lies below own (1 - 1e-6), as _checked_norms compares them in float64; -1 when none (the caller words the
 * error). */
static int64_t first_bad_norm(const void *norms, int64_t norm_bytes, const float *own, int64_t count) {
    for (int64_t c = 0; c < count; c++) {
        double m = norm_at(norms, norm_bytes, c);
        if (!(m >= 0.0 && m < INFINITY)) return c; /* NaN fails both */
        if (own && m < (double)own[c] * (1 - 1e-6)) return c;
    }
    return -1;
}

/* THCCompressor._decode_flat (transform on, float32 on the CPU) for every chunk.
 * sums[c]: chunk c's `padded` sums, int32 (sum_bytes 4) or int64 (8); counts: NULL for one count n, else
 * per chunk its per-coordinate counts (int64); piece: parallel.BLOCK, the reference's summation pieces;
 * out: the flat float32 result; work: max padded floats; scratch: min(piece, max padded) doubles;
 * signs: (max padded + 63) / 64 words; max_norms: one per chunk, float32 or float64 (norm_bytes 4 or 8).
 * Returns 0; 1 when a sum leaves [0, n g]: bad[0] its chunk, bad[1] its coordinate (nothing after that
 * chunk is written); 2 when a max norm is not finite and non-negative: bad[0] its chunk (nothing written). */
int64_t thc_decode(const struct thc_job *job, const struct thc_chunks *chunks, const uint32_t *sign_key,
                   int64_t sign_words, const void *max_norms, int64_t norm_bytes, const void *const *sums,
                   int64_t sum_bytes, int64_t n, const int64_t *const *counts, int64_t piece, float *out, float *work,
                   double *scratch, uint64_t *signs, int64_t *bad) {
    int64_t refused = first_bad_norm(max_norms, norm_bytes, NULL, chunks->count);
    if (refused >= 0) {
        bad[0] = refused;
        return 2;
    }
    for (int64_t c = 0; c < chunks->count; c++) {
        int64_t d = chunks->padded[c], length = chunks->length[c];
        double given = norm_at(max_norms, norm_bytes, c);
        int64_t e = exponent_of(given);
        double m = ldexp(given, (int)-e);
        double alpha = job->inc * m / (double)((counts ? 1 : n) * d);
        double total = 0.0;
        int first32 = 0;
        int64_t at = sums_to_floats(work, sums[c], sum_bytes, counts ? counts[c] : NULL, n, job->granularity, alpha, d,
                                    d < piece ? d : piece, &total, scratch, &first32);
        if (at >= 0) {
            bad[0] = c;
            bad[1] = at;
            return 1;
        }
        draw_signs(signs, d, sign_key, sign_words, (uint64_t)c);
        finish_decode(job, work, d, length, alpha, total, m, e, signs, out + chunks->start[c], first32);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------
 * Encode (compressor._transformed_indices, TableQuantizer.quantize_, the error-feedback update)
 * ------------------------------------------------------------------------------------------------------ */

#ifdef THC_AVX2
/* quantize_run's constants, in registers */
struct qconst {
    __m256 scale, shift, g, top, zero, unit;
    __m256i low_bytes;
    const float *lut;
};

static inline struct qconst qconst_of(const struct thc_job *job, float scale) {
    struct qconst q = {_mm256_set1_ps(scale), _mm256_set1_ps(job->shift), _mm256_set1_ps(job->g32),
                       _mm256_set1_ps((float)job->last), _mm256_setzero_ps(), _mm256_set1_ps(0x1p-24f),
                       _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                                        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                       job->lut};
    return q;
}

/* quantize_run's loop for the 8 coordinates at x, with their draws r (as uint32 lanes), into idx: the same
 * operations, the LUT's two coefficients gathered; a compare and blend is the scalar ?: (NaN too: it fails
 * the compare either way) */
static inline void quantize8(const struct qconst *q, const float *x, __m256i r, uint8_t *idx) {
    __m256 u = _mm256_mul_ps(_mm256_loadu_ps(x), q->scale);
    u = _mm256_add_ps(u, q->shift);
    u = _mm256_blendv_ps(q->zero, u, _mm256_cmp_ps(u, q->zero, _CMP_GE_OQ));
    u = _mm256_blendv_ps(q->g, u, _mm256_cmp_ps(u, q->g, _CMP_LE_OQ));
    __m256i cell = _mm256_cvttps_epi32(u);
    cell = _mm256_add_epi32(cell, cell);
    u = _mm256_mul_ps(u, _mm256_i32gather_ps(q->lut + 1, cell, 4));
    u = _mm256_add_ps(u, _mm256_i32gather_ps(q->lut, cell, 4));
    u = _mm256_add_ps(u, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r, 8)), q->unit));
    u = _mm256_blendv_ps(q->top, u, _mm256_cmp_ps(u, q->top, _CMP_LE_OQ));
    __m256i bytes = _mm256_shuffle_epi8(_mm256_cvttps_epi32(u), q->low_bytes); /* each index's low byte */
    uint32_t eight[2] = {(uint32_t)_mm256_extract_epi32(bytes, 0), (uint32_t)_mm256_extract_epi32(bytes, 4)};
    memcpy(idx, eight, 8);
}
#endif

/* TableQuantizer.quantize_ of coordinates [lo, hi) of a chunk's transformed x, with r[i - lo] the 32-bit
 * draw of coordinate i: grid position u = x scale + g/2, clipped to [0, g], mapped by F (one LUT entry per
 * unit cell) and rounded with the 24-bit uniform of r. */
static void quantize_run(const struct thc_job *job, const float *restrict x, int64_t lo, int64_t hi, float scale,
                         const uint32_t *restrict r, uint8_t *restrict idx) {
    const float *restrict lut = job->lut;
    const float g = job->g32, shift = job->shift, top = (float)job->last;
    int64_t i = lo;
#ifdef THC_AVX2
    const struct qconst q = qconst_of(job, scale);
    for (; i + 8 <= hi; i += 8) quantize8(&q, x + i, _mm256_loadu_si256((const __m256i *)(r + (i - lo))), idx + i);
#endif
    for (; i < hi; i++) {
        float u = x[i] * scale;
        u = u + shift;
        u = u >= 0.0f ? u : 0.0f; /* np.maximum, np.minimum: the operand itself unless it is past the bound */
        u = u <= g ? u : g;
        int32_t cell = (int32_t)u;
        u = u * lut[2 * cell + 1];
        u = u + lut[2 * cell];
        u = u + (float)(r[i - lo] >> 8) * 0x1p-24f;
        u = u <= top ? u : top; /* F + r may round up to 2^b in float32 */
        idx[i] = (uint8_t)(int32_t)u;
    }
}

#define CHAINS 4   /* PCG64 chains stepped together: one chain's multiply latency would bound the draws */
#define QBLOCK 256 /* draws per chain between quantizing passes */

/* The chunk's rounding: coordinate 2i takes the low, 2i+1 the high 32 bits of draw i of the chunk's PCG64
 * stream (numpy's random_raw viewed as uint32). The draws are split into CHAINS consecutive runs, each
 * from its own copy of the stream advanced to the run's start, so the same draws come out of
 * independent multiplies. */
static void quantize(const struct thc_job *job, const float *x, int64_t d, float scale, const pcg64 *stream,
                     uint8_t *idx) {
    int64_t draws = (d + 1) / 2;
    int chains = draws >= CHAINS * QBLOCK ? CHAINS : 1;
    int64_t run = (draws + chains - 1) / chains;
    pcg64 rng[CHAINS];
    for (int j = 0; j < chains; j++) {
        rng[j] = *stream;
        pcg64_advance(&rng[j], (uint64_t)(j * run));
    }
    int64_t t = 0; /* draws done per chain */
#ifdef THC_AVX2
    if (chains == CHAINS) {
        /* 4 draws a chain, then their 8 coordinates a chain quantized, while every chain has 4 whole draws left
         * (both halves within d): the draws' integer multiplies and the quantizer's vector work overlap */
        const struct qconst q = qconst_of(job, scale);
        const int64_t whole = d / 2 - (CHAINS - 1) * run; /* the last chain's whole draws, the fewest */
        pcg64 r0 = rng[0], r1 = rng[1], r2 = rng[2], r3 = rng[3];
        for (; t + 4 <= whole; t += 4) {
            uint64_t a[CHAINS][4];
            for (int k = 0; k < 4; k++) {
                a[0][k] = pcg64_next(&r0);
                a[1][k] = pcg64_next(&r1);
                a[2][k] = pcg64_next(&r2);
                a[3][k] = pcg64_next(&r3);
            }
            for (int j = 0; j < CHAINS; j++) { /* draw k's low half is coordinate 2k's, its high half 2k + 1's */
                int64_t at = 2 * (j * run + t);
                __m256i r = _mm256_set_epi64x((long long)a[j][3], (long long)a[j][2], (long long)a[j][1],
                                              (long long)a[j][0]);
                quantize8(&q, x + at, r, idx + at);
            }
        }
        rng[0] = r0, rng[1] = r1, rng[2] = r2, rng[3] = r3;
    }
#endif
    uint32_t halves[CHAINS][2 * QBLOCK]; /* per chain its draws as uint32: draw k's low half, then its high */
#define DRAW(j, k, state)                                \
    do {                                                 \
        uint64_t v_ = pcg64_next(&(state));              \
        halves[j][2 * (k)] = (uint32_t)v_;               \
        halves[j][2 * (k) + 1] = (uint32_t)(v_ >> 32);   \
    } while (0)
    for (; t < run; t += QBLOCK) {
        int64_t count = run - t < QBLOCK ? run - t : QBLOCK;
        if (chains == CHAINS) { /* the four states in locals, so that they stay in registers */
            pcg64 r0 = rng[0], r1 = rng[1], r2 = rng[2], r3 = rng[3];
            for (int64_t k = 0; k < count; k++) {
                DRAW(0, k, r0);
                DRAW(1, k, r1);
                DRAW(2, k, r2);
                DRAW(3, k, r3);
            }
            rng[0] = r0, rng[1] = r1, rng[2] = r2, rng[3] = r3;
        } else {
            for (int64_t k = 0; k < count; k++) DRAW(0, k, rng[0]);
        }
        for (int j = 0; j < chains; j++) {
            int64_t first = j * run + t, last = first + count; /* draws [first, last) */
            last = last < draws ? last : draws;
            if (first >= last) continue;
            int64_t hi = 2 * last < d ? 2 * last : d;
            quantize_run(job, x, 2 * first, hi, scale, halves[j], idx);
        }
    }
#undef DRAW
}

/* pack_indices (thc/packing.py) of idx[0..n) at out: b bits each, the first coordinate in the high bits,
 * then zero bits up to `span` indices; out starts on a byte boundary */
static void pack(const uint8_t *idx, int64_t n, int64_t span, int64_t bits, uint8_t *out) {
    if (bits == 8) {
        memcpy(out, idx, (size_t)n);
        memset(out + n, 0, (size_t)(span - n));
        return;
    }
    if (bits == 4) {
        int64_t i = 0;
#ifdef THC_AVX2
        /* 32 indices into 16 bytes: each pair of bytes (a, b) to a 16 + b, then the 16-bit results' low bytes */
        const __m256i weights = _mm256_set1_epi16(0x0110);
        for (; i + 32 <= n; i += 32) {
            __m256i pairs = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(idx + i)), weights);
            __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
            _mm_storeu_si128((__m128i *)out, bytes);
            out += 16;
        }
#endif
        for (; i + 1 < n; i += 2) *out++ = (uint8_t)(idx[i] << 4 | idx[i + 1]);
        if (i < n) *out++ = (uint8_t)(idx[i] << 4), i += 2;
        memset(out, 0, (size_t)((span - i) / 2));
        return;
    }
    uint64_t acc = 0;
    int held = 0;
    for (int64_t i = 0; i < span; i++) {
        acc = acc << bits | (i < n ? idx[i] : 0u);
        held += (int)bits;
        while (held >= 8) {
            held -= 8;
            *out++ = (uint8_t)(acc >> held);
        }
    }
    if (held) *out = (uint8_t)(acc << (8 - held));
}

/* THCCompressor.encode (transform on, THC quantizer, float32 on the CPU) for every chunk:
 * work = D v 2^-e zero-padded, H work in place, quantize. Outputs, each optional (NULL):
 * indices: per chunk its `padded` indices, one after another;
 * packed: per chunk its indices packed b bits each (pack), padded with index 0 to a multiple of
 *   per_packet (host_agent's request payloads; per_packet b must be a multiple of 8);
 * memory: the error-feedback memory, v minus this worker's own decoded contribution (feedback.update).
 * round_key: the rounding streams' key words (this worker's), sign_key the shared signs'.
 * max_norms as thc_decode's; own: this worker's float32 norms, to hold the max norms to (NULL: not).
 * work: max padded floats; idx: max padded bytes (used when indices is NULL); signs as thc_decode's.
 * Returns 0, or 1 + the first chunk whose max norm is refused (first_bad_norm; nothing written). */
int64_t thc_encode(const struct thc_job *job, const struct thc_chunks *chunks, const uint32_t *sign_key,
                   int64_t sign_words, const uint32_t *round_key, int64_t round_words, const void *max_norms,
                   int64_t norm_bytes, const float *own, const float *v, uint8_t *indices, uint8_t *packed,
                   int64_t per_packet, float *memory, float *work, uint8_t *idx, uint64_t *signs) {
    int64_t refused = first_bad_norm(max_norms, norm_bytes, own, chunks->count);
    if (refused >= 0) return 1 + refused;
    int64_t at_index = 0, at_packed = 0;
    for (int64_t c = 0; c < chunks->count; c++) {
        int64_t d = chunks->padded[c], length = chunks->length[c];
        const float *src = v + chunks->start[c];
        double m = norm_at(max_norms, norm_bytes, c);
        int64_t e = exponent_of(m);
        double mm = ldexp(m, (int)-e);
        /* 1 / (M 2^-e inc): one table unit per inc of y = H D v 2^-e / (M 2^-e); 0 for an all-zero chunk */
        float scale = m > 0 ? (float)(1.0 / (mm * job->inc)) : 0.0f;
        float factors[16];
        int steps = pow2_steps(-e, factors);
        draw_signs(signs, d, sign_key, sign_words, (uint64_t)c);
        int fused = 0;
#ifdef THC_AVX2
        if (length == d && d >= 32) { /* a whole chunk: the flip straight into the transform's first stages */
#define FLIPPED(k) flip_scale8(src, i + 8 * (k), signs, factors, steps)
            for (int64_t i = 0; i < d; i += 32) first32_store(work + i, FLIPPED(0), FLIPPED(1), FLIPPED(2), FLIPPED(3));
#undef FLIPPED
            fwht_after32(work, d);
            fused = 1;
        }
#endif
        if (!fused) {
            flip_scale(work, src, length, signs, factors, steps);
            memset(work + length, 0, (size_t)(d - length) * sizeof(float));
            fwht(work, d);
        }
        pcg64 rng;
        seed_pcg64(&rng, round_key, round_words, (uint64_t)c);
        uint8_t *out = indices ? indices + at_index : idx;
        quantize(job, work, d, scale, &rng, out);
        at_index += d;
        if (packed) {
            int64_t span = (d + per_packet - 1) / per_packet * per_packet;
            pack(out, d, span, job->bits, packed + at_packed);
            at_packed += span * job->bits / 8;
        }
        if (memory) { /* decode this worker's own table values with n = 1, then e = v - decoded */
            double alpha = job->inc * mm / (double)d;
            float a32 = (float)alpha;
            int64_t total = 0;
            for (int64_t i = 0; i < d; i++) {
                int32_t s = job->values[out[i]];
                total += s;
                work[i] = (float)s * a32;
            }
            float *dst = memory + chunks->start[c];
            finish_decode(job, work, d, length, alpha, (double)total, mm, e, signs, dst, 0);
            for (int64_t i = 0; i < length; i++) dst[i] = src[i] - dst[i];
        }
    }
    return 0;
}
