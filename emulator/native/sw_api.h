/* The native backend's ABI: what every generated switch library exports.
 *
 * The generator (emulator/native/) emits one C file per BMv2 JSON; it #includes this header and
 * runtime.h, is compiled with the system C compiler into a shared object cached by the JSON's hash,
 * and is loaded with ctypes. The port loop (portloop.c) is compiled into the same object and drives
 * sw_process() directly, so no Python runs per packet.
 *
 * Locking: one mutex per switch. sw_process() expects the caller to hold it (the port loop takes it
 * once per batch); sw_process_locked() takes it itself. Every control-plane entry point takes it.
 */
#ifndef SW_API_H
#define SW_API_H

#include <stdint.h>

#define SW_MAX_OUT 256              /* frames one received frame may produce (multicast copies) */
#define SW_OUT_BUF (1u << 20)       /* bytes of output frames for one call */

typedef struct sw_out {
    uint32_t count;                 /* frames in this batch */
    uint32_t used;                  /* bytes of buf in use */
    uint32_t port[SW_MAX_OUT];      /* egress port of frame i */
    uint32_t off[SW_MAX_OUT];       /* frame i is buf[off[i] .. off[i] + len[i]) */
    uint32_t len[SW_MAX_OUT];
    uint8_t buf[SW_OUT_BUF];
} sw_out_t;

typedef struct sw sw_t;             /* opaque: the generated program's state */

sw_t *sw_create(void);
void sw_destroy(sw_t *sw);
void sw_lock(sw_t *sw);
void sw_unlock(sw_t *sw);

/* Run one received frame; append every frame that leaves to `out` (not reset here). Returns the
 * number of frames appended. Never fails: a frame that does not fit in `out` is dropped and counted. */
int sw_process(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out);
int sw_process_locked(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out);

#endif
