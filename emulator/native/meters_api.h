/* The exported control-plane API of meters and the clock (see meters.h). Included by the generated
 * file after driver.h, once its `struct sw` and `meter_array()` exist. */
#ifndef SW_METERS_API_H
#define SW_METERS_API_H

/* Configure meter `idx` of array `mi`: `n` (rate per microsecond, burst) pairs in P4 order
 * (committed, peak); n == 0 resets it to unconfigured. Returns 0, or -1 for a bad array/index. */
int sw_meter_set(sw_t *sw, uint32_t mi, uint32_t idx, uint32_t n, const double *rates, const uint64_t *bursts) {
    uint32_t size;
    meter_t *m = meter_array(sw, mi, &size);
    if (!m || idx >= size || n > METER_MAX_RATES) return -1;
    sw_lock(sw);
    m = &m[idx];
    for (uint32_t k = 0; k < n; k++) {  /* stored reversed: the peak rate is checked first */
        meter_rate_t *r = &m->r[n - 1 - k];
        r->info_rate = rates[k];
        r->burst = r->tokens = bursts[k];
        r->tokens_last = 0;
        r->color = k + 1;
    }
    m->nrates = n;
    sw_unlock(sw);
    return 0;
}

/* Every meter of array `mi` back to unconfigured. */
int sw_meter_reset(sw_t *sw, uint32_t mi) {
    uint32_t size;
    meter_t *m = meter_array(sw, mi, &size);
    if (!m) return -1;
    sw_lock(sw);
    for (uint32_t i = 0; i < size; i++) m[i].nrates = 0;
    sw_unlock(sw);
    return 0;
}

/* Pin the clock at `now` microseconds (pinned != 0), or let it run (pinned == 0). */
void sw_pin_clock(sw_t *sw, int pinned, int64_t now) {
    sw_lock(sw);
    sw->clock_pinned = pinned;
    sw->pinned_now = now;
    sw_unlock(sw);
}

#endif
