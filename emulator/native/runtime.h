/* Run-time support for generated switch programs: values, bit I/O, hashes, tables, multicast.
 *
 * The generator (emulator/native/cgen.py) emits a C file per BMv2 JSON that first defines the
 * program's sizes (NSLOTS, NTABLES, ...), then includes this file, then its parser, actions,
 * controls and deparser, then driver.h (simple_switch's packet semantics, shared by all programs).
 * Semantics follow the Python engine (emulator/engine/), which is the reference: BMv2's arbitrary
 * precision arithmetic becomes signed 128-bit arithmetic, exact for fields up to 64 bits (wider
 * fields are refused by the generator), or uint64_t arithmetic where a value's range allows
 * (emulator/native/cvalues.py).
 */
#ifndef SW_RUNTIME_H
#define SW_RUNTIME_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif

#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sw_api.h"

typedef __int128 V;           /* an expression value: BMv2's Data, exact for our widths */
typedef unsigned __int128 UV;

#define U64(x) ((uint64_t)(x))

/* ------------------------------------------------------------------ statistics (switch.py STAT_KEYS) */
enum {
    ST_PACKETS_IN, ST_PACKETS_OUT, ST_DROPPED, ST_DROPPED_INGRESS, ST_DROPPED_EGRESS,
    ST_DROPPED_NO_GROUP, ST_DROPPED_PRIORITY, ST_DROPPED_EXCEPTION, ST_DROPPED_PASS_LIMIT,
    ST_DROPPED_COPY_LIMIT,
    ST_PARSER_ERRORS, ST_CHECKSUM_ERRORS, ST_EXCEPTIONS, ST_MULTICAST_REPLICAS, ST_RESUBMITS,
    ST_RECIRCULATIONS, ST_OUT_OF_BOUNDS, ST_DROPPED_OUTPUT_FULL, ST_CLONES, ST_CLONES_UNCONFIGURED,
    ST_DIGESTS, ST_DIGESTS_DROPPED, NSTATS
};

/* ------------------------------------------------------------------ per-pass context */
typedef struct pkt {
    V F[NSLOTS];                 /* the PHV: the same slots as the Python engine's layout */
} pkt_t;

typedef struct pass_ctx {
    jmp_buf fail;                /* an exception (Python: an exception in generated code) */
    jmp_buf perr;                /* a parser exception from inside an expression (lookahead) */
    int perr_code;
    uint32_t perr_pos;
    struct sw *sw;               /* the switch: custom CRC parameters and the generator of the random hash */
    const uint8_t *payload;      /* bytes after the parsed headers */
    uint32_t payload_len;
} pass_ctx_t;

#define RAISE(cx) longjmp((cx)->fail, 1)

/* Receives a log_msg call: its index among the program's calls and its n arguments (Python's
 * NativeSwitch formats them the way BMv2 does). Called with the switch locked, from the packet's thread. */
typedef void (*log_msg_fn)(uint32_t id, uint32_t n, const V *args);

/* Receives the switch's own notices, once each (NOTICE_*; Python's NativeSwitch logs them as the Python
 * backend does). Called with the switch locked, from the packet's thread. */
typedef void (*notice_fn)(uint32_t code);
#define NOTICE_COPY_LIMIT 1 /* switch.py COPY_LIMIT_NOTICE */

/* ------------------------------------------------------------------ bits */
/* n big-endian bytes at p. The parser and deparser pass constant sizes: the common ones become one load
 * or store and a byte swap (THC's 128-word headers are 128 of them a packet). */
static inline __attribute__((always_inline)) uint64_t rd_be(const uint8_t *p, unsigned n) {
    uint16_t v16;
    uint32_t v32;
    uint64_t v = 0;
    switch (n) {
    case 2: memcpy(&v16, p, 2); return __builtin_bswap16(v16);
    case 4: memcpy(&v32, p, 4); return __builtin_bswap32(v32);
    case 8: memcpy(&v, p, 8); return __builtin_bswap64(v);
    default:
        for (unsigned i = 0; i < n; i++) v = (v << 8) | p[i];
        return v;
    }
}

static inline __attribute__((always_inline)) void wr_be(uint8_t *p, unsigned n, uint64_t v) {
    uint16_t v16 = __builtin_bswap16((uint16_t)v);
    uint32_t v32 = __builtin_bswap32((uint32_t)v);
    uint64_t v64 = __builtin_bswap64(v);
    switch (n) {
    case 2: memcpy(p, &v16, 2); return;
    case 4: memcpy(p, &v32, 4); return;
    case 8: memcpy(p, &v64, 8); return;
    default:
        for (unsigned i = n; i-- > 0;) { p[i] = (uint8_t)v; v >>= 8; }
    }
}

/* `width` (<= 64) bits starting `bit` bits into p, big-endian bit order (BMv2's field packing). */
static inline uint64_t get_bits(const uint8_t *p, unsigned bit, unsigned width) {
    if (width == 0) return 0;
    p += bit >> 3;
    bit &= 7;
    unsigned nbytes = (bit + width + 7) >> 3;  /* <= 9 */
    UV acc = 0;
    for (unsigned i = 0; i < nbytes; i++) acc = (acc << 8) | p[i];
    acc >>= (nbytes * 8 - bit - width);
    return (uint64_t)(acc & ((((UV)1) << width) - 1));
}

static inline void put_bits(uint8_t *p, unsigned bit, unsigned width, uint64_t v) {
    if (width == 0) return;
    p += bit >> 3;
    bit &= 7;
    unsigned nbytes = (bit + width + 7) >> 3;
    unsigned shift = nbytes * 8 - bit - width;
    UV mask = ((((UV)1) << width) - 1) << shift;
    UV acc = 0;
    for (unsigned i = 0; i < nbytes; i++) acc = (acc << 8) | p[i];
    acc = (acc & ~mask) | ((((UV)v) << shift) & mask);
    for (unsigned i = nbytes; i-- > 0;) { p[i] = (uint8_t)acc; acc >>= 8; }
}

static inline V mask_bits(unsigned w) { return w >= 127 ? (V)-1 : (V)((((UV)1) << w) - 1); }

/* ------------------------------------------------------------------ BMv2 arithmetic helpers */
#define SHIFT_LIMIT 65536

static inline V v_shl(pass_ctx_t *cx, V a, V b) {
    if (b < 0) RAISE(cx);
    if (b > SHIFT_LIMIT && a) RAISE(cx);
    if (b >= 127) return 0;      /* only its low bits are ever stored: they are 0 */
    return (V)(((UV)a) << (unsigned)b);
}

static inline V v_shl_masked(pass_ctx_t *cx, V a, V b, V mask, unsigned mask_bits_len) {
    if (b < 0) RAISE(cx);
    if (b >= (V)mask_bits_len) return 0;
    return (V)(((UV)a) << (unsigned)b) & mask;
}

static inline V v_shr(pass_ctx_t *cx, V a, V b) {
    if (b < 0) RAISE(cx);
    if (b >= 127) return a < 0 ? -1 : 0;
    return a >> (unsigned)b;
}

/* uint64_t shifts by a run-time amount known to be >= 0 (cvalues.py): a shift by 64 or more, undefined
 * in C, leaves no bit of the low 64. */
static inline uint64_t shr64(uint64_t a, uint64_t b) { return b < 64 ? a >> b : 0; }
static inline uint64_t shl64(uint64_t a, uint64_t b) { return b < 64 ? a << b : 0; }

/* c ? a : b without a branch, for arms that cannot raise (cvalues.py): a selection on packet data is
 * as often one way as the other, and a mispredicted branch costs more than computing both arms. */
static inline uint64_t sel64(int c, uint64_t a, uint64_t b) {
    return b ^ ((a ^ b) & (0 - (uint64_t)(c != 0)));  /* a ^ b: once for many selections between the same two */
}

static inline V v_div(pass_ctx_t *cx, V a, V b) {
    if (a < 0 || b <= 0) RAISE(cx);
    return a / b;
}

static inline V v_mod(pass_ctx_t *cx, V a, V b) {
    if (a < 0 || b <= 0) RAISE(cx);
    return a % b;
}

static inline V v_two_comp_mod(pass_ctx_t *cx, V x, V w) {
    if (w <= 0 || w > 126) RAISE(cx);
    V half = ((V)1) << (unsigned)(w - 1);
    return ((x + half) & mask_bits((unsigned)w)) - half;
}

static inline V v_usat_cast(pass_ctx_t *cx, V x, V w) {
    if (w <= 0 || w > 126) RAISE(cx);
    V top = mask_bits((unsigned)w);
    return x > top ? top : (x < 0 ? 0 : x);
}

static inline V v_sat_cast(pass_ctx_t *cx, V x, V w) {
    if (w <= 0 || w > 126) RAISE(cx);
    V top = (((V)1) << (unsigned)(w - 1)) - 1, bottom = -(((V)1) << (unsigned)(w - 1));
    return x > top ? top : (x < bottom ? bottom : x);
}

/* A lookahead past the end of the packet is PacketTooShort (runtime.py _lookahead). */
static inline uint64_t lookahead_err(pass_ctx_t *cx, uint32_t pos, int code) {
    cx->perr_code = code;
    cx->perr_pos = pos;
    longjmp(cx->perr, 1);
}

static inline uint64_t lookahead(pass_ctx_t *cx, const uint8_t *D, uint32_t L, uint32_t pos, uint32_t off,
                                 unsigned width) {
    uint64_t start = (uint64_t)pos + (off >> 3);
    unsigned bit = off & 7, nbytes = (bit + width + 7) >> 3;
    if (start + nbytes > L) return lookahead_err(cx, pos, ERR_TOO_SHORT);
    return get_bits(D + start, bit, width);
}

static inline V hash_offset(V h, V base, V size) {
    if (size == 0) size = 1;     /* BMv2: "hash max given as 0, but treating it as 1" */
    V r = h % size;
    if (r != 0 && ((r < 0) != (size < 0))) r += size;  /* Python's floor modulo */
    return r + base;
}

/* ------------------------------------------------------------------ header stacks (runtime.py) */
static inline void hdr_swap(V *F, int a, int b, int size) {
    for (int k = 0; k < size; k++) { V t = F[a + k]; F[a + k] = F[b + k]; F[b + k] = t; }
}

static inline int stack_last(pass_ctx_t *cx, V n) {
    if (n <= 0) RAISE(cx);
    return (int)(n - 1);
}

static inline int stack_at(pass_ctx_t *cx, const int *bases, int n, V idx) {
    if (idx < 0 || idx >= n) RAISE(cx);
    return bases[(int)idx];
}

static void stack_push(pass_ctx_t *cx, V *F, const int *bases, int n, int size, int next_slot, V num) {
    if (num < 0) RAISE(cx);
    if (num == 0) return;
    V nx = F[next_slot] + num;
    F[next_slot] = nx < n ? nx : n;
    for (V i = n - 1; i >= num; i--) hdr_swap(F, bases[(int)i], bases[(int)(i - num)], size);
    for (V i = 0; i < (num < n ? num : n); i++) F[bases[(int)i] + size - 1] = 0;
}

static void stack_pop(pass_ctx_t *cx, V *F, const int *bases, int n, int size, int next_slot, V num) {
    if (num < 0) RAISE(cx);
    if (num == 0) return;
    V cur = F[next_slot];
    F[next_slot] = cur - (cur < num ? cur : num);
    int i = 0;
    if (num < n) {
        for (i = 0; i < n - (int)num; i++) hdr_swap(F, bases[i], bases[i + (int)num], size);
        i = n - (int)num;
    }
    for (int k = i; k < n; k++) F[bases[k] + size - 1] = 0;
}

static inline void assign_header(V *F, int dst, int src, int nfields) {
    if (F[src + nfields]) memmove(&F[dst], &F[src], sizeof(V) * (nfields + 1));
    else F[dst + nfields] = 0;
}

static inline int header_eq(const V *F, int a, int b, int nfields) {
    if (!F[a + nfields] || !F[b + nfields]) return 0;
    for (int k = 0; k < nfields; k++) if (F[a + k] != F[b + k]) return 0;
    return 1;
}

/* ------------------------------------------------------------------ hashes (hashes.py) */
static uint64_t h_csum16(const uint8_t *b, uint32_t n) {
    uint64_t sum = 0;
    uint32_t i = 0;
    for (; i + 1 < n; i += 2) sum += ((uint32_t)b[i] << 8) | b[i + 1];
    if (i < n) sum += (uint32_t)b[i] << 8;
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return (~sum) & 0xFFFF;
}

static uint64_t h_crc32(const uint8_t *b, uint32_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return crc ^ 0xFFFFFFFFu;
}

static uint64_t h_crc16(const uint8_t *b, uint32_t n) {
    uint32_t crc = 0;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0xA001 : crc >> 1;
    }
    return crc & 0xFFFF;
}

/* crc16_custom / crc32_custom (BMv2 calculations.cpp crc_custom<T>): table-driven, parameters set
 * per calculation by the control plane (NativeSwitch pushes the Python engine's CustomCrc). */
typedef struct crc_custom {
    unsigned width;
    uint64_t init, xor_out;
    int reflect_data, reflect_remainder;
    uint64_t table[256];
} crc_custom_t;

static inline uint64_t reflect_bits(uint64_t v, unsigned n) {
    uint64_t r = 0;
    for (unsigned i = 0; i < n; i++) if (v & (1ull << i)) r |= 1ull << (n - 1 - i);
    return r;
}

static void crc_custom_config(crc_custom_t *c, unsigned width, uint64_t poly, uint64_t init, uint64_t xor_out,
                              int reflect_data, int reflect_remainder) {
    uint64_t mask = width >= 64 ? UINT64_MAX : (1ull << width) - 1;
    for (unsigned d = 0; d < 256; d++) {
        uint64_t rem = (uint64_t)d << (width - 8);
        for (int bit = 0; bit < 8; bit++)
            rem = (rem >> (width - 1)) & 1 ? ((rem << 1) ^ poly) & mask : (rem << 1) & mask;
        c->table[d] = rem;
    }
    c->width = width;
    c->init = init;
    c->xor_out = xor_out;
    c->reflect_data = reflect_data;
    c->reflect_remainder = reflect_remainder;
}

static uint64_t h_crc_custom(const crc_custom_t *c, const uint8_t *b, uint32_t n) {
    unsigned w = c->width;
    uint64_t mask = w >= 64 ? UINT64_MAX : (1ull << w) - 1, rem = c->init;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t byte = c->reflect_data ? reflect_bits(b[i], 8) : b[i];
        rem = c->table[(byte ^ (rem >> (w - 8))) & 0xFF] ^ ((rem << 8) & mask);
    }
    return (c->reflect_remainder ? reflect_bits(rem, w) : rem) ^ c->xor_out;
}

static uint64_t h_identity(const uint8_t *b, uint32_t n) {
    /* the first (up to) 8 bytes, big-endian */
    return rd_be(b, n < 8 ? n : 8);
}

static uint64_t h_xor16(const uint8_t *b, uint32_t n) {
    uint64_t r = 0;
    uint32_t i = 0;
    for (; i + 1 < n; i += 2) r ^= ((uint32_t)b[i] << 8) | b[i + 1];
    if (i < n) r ^= (uint32_t)b[i] << 8;
    return r;
}

/* ------------------------------------------------------------------ match tables (engine/match_tables.py)
 * Entries live in parallel arrays. Exact tables find an entry through an open-addressing hash of
 * the key; lpm, ternary and range tables scan `order` (entries sorted by the Python engine's
 * preference: longest prefix, or highest priority then lowest handle) and take the first match.
 * Entry ids are the Python engine's handles, so both backends name entries alike. */
typedef struct table {
    const char *name;
    int exact;                   /* 1: hash lookup on key values; 0: scan */
    uint32_t nkeys, nparams;
    const uint8_t *is_range;     /* per key field (scan tables) */
    uint32_t n, cap;
    int32_t *ids, *actions;
    int64_t *sk;                 /* 2 per entry: sort key */
    uint64_t *pk, *by;           /* direct counters */
    uint64_t *km;                /* 3 per key field per entry: lo, hi, mask (exact: lo = value) */
    uint64_t *params;            /* nparams per entry */
    int32_t *order;              /* scan order */
    int32_t *hslots;             /* exact: entry index + 1, 0 = empty */
    uint32_t hcap;
    uint32_t direct_bits;        /* exact, one key of at most 16 bits: index `direct` by the key */
    int32_t *direct;             /* entry index + 1 per key value, 0 = none */
    int32_t def_action;          /* -1: no action (no default entry in the JSON) */
    uint64_t def_params[SW_MAX_PARAMS > 0 ? SW_MAX_PARAMS : 1];
} table_t;

static inline uint64_t tbl_hash(const uint64_t *key, uint32_t nkeys) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < nkeys; i++) {
        h ^= key[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h ^ (h >> 31);
}

static inline int32_t tbl_lookup(const table_t *t, const uint64_t *key) {
    if (t->direct) return key[0] >> t->direct_bits ? -1 : t->direct[key[0]] - 1;
    if (t->exact) {
        if (!t->hcap) return -1;
        uint32_t m = t->hcap - 1, i = (uint32_t)tbl_hash(key, t->nkeys) & m;
        for (;;) {
            int32_t s = t->hslots[i];
            if (!s) return -1;
            const uint64_t *km = &t->km[(size_t)(s - 1) * t->nkeys * 3];
            uint32_t k = 0;
            while (k < t->nkeys && km[k * 3] == key[k]) k++;
            if (k == t->nkeys) return s - 1;
            i = (i + 1) & m;
        }
    }
    for (uint32_t o = 0; o < t->n; o++) {
        int32_t e = t->order[o];
        const uint64_t *km = &t->km[(size_t)e * t->nkeys * 3];
        uint32_t k = 0;
        for (; k < t->nkeys; k++) {
            const uint64_t *f = &km[k * 3];
            if (t->is_range[k] ? (key[k] < f[0] || key[k] > f[1]) : ((key[k] & f[2]) != f[0])) break;
        }
        if (k == t->nkeys) return e;
    }
    return -1;
}

/* ------------------------------------------------------------------ multicast (pre.py) */
/* ------------------------------------------------------------------ parse value sets */
typedef struct vset {            /* the members one select case tests, padded and masked (valuesets.py) */
    uint32_t n;
    UV *v;
} vset_t;

static inline int vset_has(const vset_t *s, UV key) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->v[i] == key) return 1;
    return 0;
}

typedef struct mc_group {
    uint32_t n;
    uint32_t *ports, *rids;
} mc_group_t;

#define MC_GROUPS 65536

/* ------------------------------------------------------------------ digests (learning.py) */
#define DIGEST_QUEUE 65536  /* learning.MAX_PENDING: samples waiting for the controller */
typedef struct digest_queue {
    uint32_t head, count, width;
    uint32_t *ids;   /* learn list id of each sample (NULL: the program has no learn lists) */
    uint64_t *vals;  /* width values per sample */
} digest_queue_t;

static void digest_queue_init(digest_queue_t *q, uint32_t width) {
    q->width = width ? width : 1;
    q->ids = calloc(DIGEST_QUEUE, sizeof(uint32_t));
    q->vals = calloc((size_t)DIGEST_QUEUE * q->width, sizeof(uint64_t));
    if (!q->ids || !q->vals) { free(q->ids); free(q->vals); q->ids = NULL; q->vals = NULL; }
}

/* ------------------------------------------------------------------ mirroring (mirroring.py) */
#define MIRROR_SESSIONS 32768
#define MIRROR_SESSION_MASK 0x7FFF
typedef struct mirror_session {
    int32_t port;  /* -1: none */
    int32_t mgid;  /* -1: none */
    uint8_t set;
} mirror_session_t;

static inline uint64_t now_us(uint64_t start_ns) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - start_ns) / 1000u;
}

static inline uint64_t rng_next(uint64_t *s) {  /* xorshift64*: random() and rng_uniform */
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static inline V rng_in_span(uint64_t *s, V span) {  /* runtime.py _random: x % span */
    uint64_t x = rng_next(s);
    return span > (V)UINT64_MAX ? (V)x : (V)(x % (uint64_t)span);
}

#endif
