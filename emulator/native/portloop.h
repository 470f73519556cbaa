/* The native port loop: one thread per switch moves frames between AF_PACKET sockets and
 * sw_process() with no Python per packet. Python (emulator/native/portloop.py) opens the sockets and
 * the pcap files, hands them over with sw_portloop_open(), then calls sw_portloop_run() on a thread
 * of its own; PacketIn frames come back through a queue it drains, PacketOut frames go in through
 * sw_portloop_inject(). Lifecycle: create, open, run (until stop), destroy, then close the fds.
 */
#ifndef SW_PORTLOOP_H
#define SW_PORTLOOP_H

#include <stdint.h>

#include "sw_api.h"

#define PORTLOOP_MAX_FRAME 65536u   /* largest frame read from a socket or accepted by inject */
#define PORTLOOP_MAX_BATCH 256u

struct portloop_port {
    uint32_t port;                  /* switch port number */
    int32_t fd;                     /* non-blocking datagram socket (AF_PACKET in production) */
    int32_t pcap_in_fd;             /* -1, or a pcap file (global header written) for received frames */
    int32_t pcap_out_fd;            /* -1, or a pcap file for sent frames */
    uint32_t rx_ring_max_frame;     /* >0: receive through a TPACKET_V2 ring with slots for frames of
                                       this many bytes (the link's MTU + 18); 0 or not AF_PACKET: recvmmsg */
};

struct portloop_cfg {
    uint32_t n_ports;
    const struct portloop_port *ports;
    uint32_t cpu_port;              /* frames to it are never sent on a socket */
    int32_t has_cpu_port;           /* 0: no CPU port, every output port is looked up among ports */
    int32_t deliver_packet_in;      /* 1: CPU-port frames are queued for sw_portloop_take_packet_in */
    uint32_t batch;                 /* frames per recvmmsg/sendmmsg (1..PORTLOOP_MAX_BATCH; 0: 64) */
    int32_t idle_flush_ms;          /* flush pcap buffers after this long without traffic (0: 100) */
    uint64_t service_ns;            /* >0: a paced switch, one received frame per service_ns at most, one
                                       at a time (batch 1), the rest waiting in the sockets (thc-switch --pps) */
};

/* Read with sw_portloop_stats() at any time; the loop adds to them once per batch. */
struct portloop_stats {
    uint64_t rx;                    /* frames received on the ports */
    uint64_t tx;                    /* frames sent */
    uint64_t tx_errors;             /* sends the kernel refused (queue full, above the MTU, link down) */
    uint64_t rx_errors;             /* receive calls that failed other than "nothing to read" */
    uint64_t rx_truncated;          /* frames longer than PORTLOOP_MAX_FRAME, processed truncated */
    uint64_t dropped_no_port;       /* outputs to a port with no socket (or to the CPU port, no packet-in) */
    uint64_t packet_in;             /* CPU-port frames queued for Python */
    uint64_t packet_in_dropped;     /* CPU-port frames dropped because Python's queue was full */
    uint64_t injected;              /* frames taken from the injection queue and processed */
    uint64_t inject_dropped;        /* inject calls refused (queue full, frame too long, no memory) */
    uint64_t batches;               /* batches processed (received or injected) */
    uint64_t pcap_errors;           /* pcap writes that failed */
    uint64_t rx_too_long;           /* frames longer than their ring slot (above the MTU): dropped */
    uint64_t rx_rings;              /* ports that receive through a ring (the rest use recvmmsg) */
};

typedef struct portloop portloop_t;

portloop_t *sw_portloop_create(void);
void sw_portloop_destroy(portloop_t *pl);

/* Take over the ports in cfg (copied; the fds stay the caller's and must outlive pl): buffers, and a
 * receive ring on each port that asks for one. From here on frames wait in the rings for run();
 * frames queued on a socket before are processed now, as setting a ring up would discard them.
 * Returns 0, or -1 with errno set. Once per handle. */
int sw_portloop_open(portloop_t *pl, sw_t *sw, const struct portloop_cfg *cfg);
/* Serve until sw_portloop_stop(); returns 0, or -1 with errno set if it could not start. */
int sw_portloop_run(portloop_t *pl);
/* sw_portloop_destroy() unmaps and removes the rings: call it before closing the sockets. */
/* Make sw_portloop_run() return soon; callable from any thread. A stop before run() counts. */
void sw_portloop_stop(portloop_t *pl);

/* Queue `frame` to be processed as received on `port`; 0 when queued, -1 when dropped. Thread-safe. */
int sw_portloop_inject(portloop_t *pl, uint32_t port, const uint8_t *frame, uint32_t len);

/* An eventfd that is readable while PacketIn frames wait, and once more when run() returns. */
int sw_portloop_packet_in_fd(portloop_t *pl);
/* Pop one PacketIn frame into buf: its length; -1 when none waits. When the frame is longer than
 * cap nothing is popped and its length is returned, so the caller retries with a larger buffer. */
int64_t sw_portloop_take_packet_in(portloop_t *pl, uint8_t *buf, uint32_t cap);

void sw_portloop_stats(portloop_t *pl, struct portloop_stats *out);

#endif
