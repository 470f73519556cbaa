/* A hand-written stand-in for a generated switch library (emulator/native/sw_api.h), so the native
 * port loop is tested and benchmarked before the generator exists: a fixed port map, port p -> the
 * port set with stub_route(), optionally rewriting the destination MAC as an IPv4 route would.
 * Frames from a port without a route are dropped. Not a P4 program; holds no tests.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sw_api.h"

#define STUB_PORTS 1024

struct sw {
    pthread_mutex_t mu;
    int32_t route[STUB_PORTS];      /* egress port, -1: drop */
    uint8_t set_dst[STUB_PORTS];
    uint8_t dst_mac[STUB_PORTS][6];
    uint64_t processed;
    uint64_t out_of_room;
};

sw_t *sw_create(void)
{
    sw_t *sw = calloc(1, sizeof *sw);
    if (!sw)
        return NULL;
    pthread_mutex_init(&sw->mu, NULL);
    for (int i = 0; i < STUB_PORTS; i++)
        sw->route[i] = -1;
    return sw;
}

void sw_destroy(sw_t *sw)
{
    if (sw)
        pthread_mutex_destroy(&sw->mu);
    free(sw);
}

void sw_lock(sw_t *sw) { pthread_mutex_lock(&sw->mu); }
void sw_unlock(sw_t *sw) { pthread_mutex_unlock(&sw->mu); }

/* Frames from `in_port` leave on `out_port` (-1: dropped); a non-NULL `dst_mac` replaces bytes 0..5. */
void stub_route(sw_t *sw, uint32_t in_port, int32_t out_port, const uint8_t *dst_mac)
{
    if (in_port >= STUB_PORTS)
        return;
    sw_lock(sw);
    sw->route[in_port] = out_port;
    sw->set_dst[in_port] = dst_mac != NULL;
    if (dst_mac)
        memcpy(sw->dst_mac[in_port], dst_mac, 6);
    sw_unlock(sw);
}

uint64_t stub_processed(sw_t *sw)
{
    sw_lock(sw);
    uint64_t n = sw->processed;
    sw_unlock(sw);
    return n;
}

int sw_process(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out)
{
    sw->processed++;
    if (port >= STUB_PORTS || sw->route[port] < 0)
        return 0;
    if (out->count >= SW_MAX_OUT || len > SW_OUT_BUF - out->used) {
        sw->out_of_room++;
        return 0;
    }
    uint32_t i = out->count++;
    out->port[i] = (uint32_t)sw->route[port];
    out->off[i] = out->used;
    out->len[i] = len;
    if (len)
        memcpy(out->buf + out->used, frame, len);
    if (sw->set_dst[port] && len >= 6)
        memcpy(out->buf + out->used, sw->dst_mac[port], 6);
    out->used += len;
    return 1;
}

int sw_process_locked(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out)
{
    sw_lock(sw);
    int n = sw_process(sw, port, frame, len, out);
    sw_unlock(sw);
    return n;
}
