/* Meters and the switch's clock for generated switch programs (the Python engine's
 * emulator/engine/meters.py, which follows BMv2's src/bm_sim/meters.cpp: read it first).
 *
 * Included by the generated file before its `struct sw`, which holds every meter array inline and
 * the clock fields; the control-plane entry points are in meters_api.h. A meter with nrates == 0 is
 * unconfigured (always green); rates are stored peak first, as BMv2 checks them.
 */
#ifndef SW_METERS_H
#define SW_METERS_H

#define METER_MAX_RATES 4

typedef struct meter_rate {
    double info_rate;            /* tokens per microsecond */
    uint64_t burst, tokens, tokens_last;
    uint32_t color;
} meter_rate_t;

typedef struct meter {
    uint32_t nrates;             /* 0: unconfigured */
    meter_rate_t r[METER_MAX_RATES];
} meter_t;

/* Microseconds since the switch started, or the time the control plane pinned (tests). A macro:
 * this header comes before the generated `struct sw`, which holds the meters and the clock fields. */
#define SW_NOW(sw) ((sw)->clock_pinned ? (sw)->pinned_now : (int64_t)now_us((sw)->start_ns))

/* The colour of one packet of `amount` packets or bytes at time `now` (BMv2's Meter::execute). */
static inline uint32_t meter_execute(meter_t *m, int64_t now, uint64_t amount) {
    for (uint32_t k = 0; k < m->nrates; k++) {
        meter_rate_t *r = &m->r[k];
        uint64_t since = (uint64_t)((double)now * r->info_rate);
        if (since > r->tokens_last) {  /* BMv2 asserts time never goes back; a pinned clock might */
            uint64_t tokens = r->tokens + (since - r->tokens_last);
            r->tokens = tokens < r->burst ? tokens : r->burst;
            r->tokens_last = since;
        }
        if (r->tokens < amount) return r->color;
        r->tokens -= amount;
    }
    return 0;
}

#endif
