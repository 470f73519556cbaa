/* A THC "switch" for benchmarks that costs next to nothing: answers every THC request arriving on an
 * interface at once, as if all n workers had sent the same request (count n, sums n * table[index], the
 * norm itself, n * each FIX32 value), a batch per recvmmsg/sendmmsg. Runs until killed.
 *
 *     echo_switch IFACE N WORDS V0 V1 ... V15      (built and started by bench/bench_host_agent.py)
 *
 * The wire format's version and sizes come from contract/__init__.py (-D flags, as host_agent/native/fastio.c
 * gets its version; p4/README.md, "Packet formats"): a 20-byte THC header at byte 42, the payload at 62. A request
 * carries what one cell of WORDS 64-bit words holds, in the lanes its lane_bits says: THC 8-bit lanes
 * 8 * WORDS indices, 16-bit lanes 4 * WORDS (two a byte, then 256 bytes of padding), FIX32 2 * WORDS int32,
 * NORM 16 float32 norms in 32-bit lanes (NORM_WORDS = 8 words). The result keeps the request's header (slot,
 * round, value, lane_bits and the job's key), with kind RESULT and count N, and carries the cell's
 * WORDS * 8 bytes of sums (NORM: the norms themselves, the maxima of N equal requests). A request whose
 * lane_bits or payload length is not one of these is dropped, as the program drops it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BATCH 256
#define FRAME 2048
#define THC 42     /* the THC header */
#define PAYLOAD 62 /* its payload */
#define MAX_WORDS ((FRAME - PAYLOAD) / 8)
/* From contract/__init__.py, as bench_host_agent.py builds it: THC_VERSION, NORM_BYTES (NORM_PAYLOAD_BYTES: a
 * NORM request's and result's norms) and PAD16 (PAD16_BYTES: a 16-bit-lane request's padding). */
#if !defined(THC_VERSION) || !defined(NORM_BYTES) || !defined(PAD16)
#error "build with -DTHC_VERSION= -DNORM_BYTES= -DPAD16= from contract/__init__.py (bench_host_agent.build_echo_switch)"
#endif

/* Bytes after the THC header of a request of `op` with lanes `lane` (-1: the program drops it). */
static int request_payload(int op, int lane, int words)
{
    if (op == 1)
        return lane == 32 ? NORM_BYTES : -1;
    if (op == 2)
        return lane == 8 || lane == 16 ? words * (64 / lane) / 2 + (lane == 16 ? PAD16 : 0) : -1;
    if (op == 3)
        return lane == 32 ? words * 8 : -1;
    return -1;
}

static uint16_t ip_checksum(const uint8_t *h)
{
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        if (i != 10)
            sum += (uint32_t)h[i] << 8 | h[i + 1];
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)~sum;
}

int main(int argc, char **argv)
{
    if (argc != 20) {
        fprintf(stderr, "usage: echo_switch IFACE N WORDS V0..V15\n");
        return 2;
    }
    int n = atoi(argv[2]), words = atoi(argv[3]);
    if (n < 1 || n > 32 || words < 1 || words > MAX_WORDS) {
        fprintf(stderr, "echo_switch: N must be 1..32 and WORDS 1..%d\n", MAX_WORDS);
        return 2;
    }
    int table[16];
    for (int i = 0; i < 16; i++)
        table[i] = atoi(argv[4 + i]);
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
    if (fd < 0) {
        perror("socket");
        return 1;
    }
    int one = 1, size = 8 << 20;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    struct sockaddr_ll addr = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
                               .sll_ifindex = (int)if_nametoindex(argv[1])};
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        perror("bind");
        return 1;
    }
    static uint8_t in[BATCH][FRAME], out[BATCH][FRAME];
    struct mmsghdr rmsg[BATCH], smsg[BATCH];
    struct iovec riov[BATCH], siov[BATCH];
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        memset(rmsg, 0, sizeof rmsg);
        for (int i = 0; i < BATCH; i++) {
            riov[i] = (struct iovec){in[i], FRAME};
            rmsg[i].msg_hdr.msg_iov = &riov[i];
            rmsg[i].msg_hdr.msg_iovlen = 1;
        }
        int got = recvmmsg(fd, rmsg, BATCH, MSG_WAITFORONE, NULL);
        if (got <= 0)
            continue;
        int k = 0;
        for (int r = 0; r < got; r++) {
            const uint8_t *f = in[r];
            unsigned len = rmsg[r].msg_len;
            if (len < PAYLOAD || f[12] != 0x08 || f[13] != 0 || f[14] != 0x45 || f[23] != 17 || f[36] != 0x54
                || f[37] != 0x48 || f[THC] != THC_VERSION || (f[THC + 1] & 0x0F) != 0)
                continue; /* not a THC request of this wire format */
            int op = f[THC + 1] >> 4, lane = f[THC + 7];
            int in_payload = request_payload(op, lane, words);
            unsigned ip_len = (unsigned)f[16] << 8 | f[17];
            if (in_payload < 0 || 14 + ip_len > len || ip_len != 20 + 8 + 20 + (unsigned)in_payload)
                continue; /* LANE_MISMATCH or MALFORMED in the program */
            int payload = op == 1 ? NORM_BYTES : 8 * words;
            uint8_t *o = out[k];
            memcpy(o, f + 6, 6); /* back to the sender */
            memcpy(o + 6, f, 6);
            memcpy(o + 12, f + 12, PAYLOAD - 12); /* IPv4, UDP, the THC header with the key */
            memcpy(o + 26, f + 30, 4);            /* IPv4 source <-> destination */
            memcpy(o + 30, f + 26, 4);
            int total = 20 + 8 + 20 + payload;
            o[16] = (uint8_t)(total >> 8), o[17] = (uint8_t)total;
            o[22] = 64;
            uint16_t sum = ip_checksum(o + 14);
            o[24] = (uint8_t)(sum >> 8), o[25] = (uint8_t)sum;
            o[38] = (uint8_t)((total - 20) >> 8), o[39] = (uint8_t)(total - 20), o[40] = o[41] = 0;
            o[THC + 1] = (uint8_t)(op << 4 | 1); /* RESULT */
            o[THC + 6] = (uint8_t)n;             /* count; lane_bits stays the request's */
            const uint8_t *p = f + PAYLOAD;
            uint8_t *q = o + PAYLOAD;
            if (op == 1) {
                memcpy(q, p, NORM_BYTES);
            } else if (op == 2) {
                for (int i = 0; i < in_payload - (lane == 16 ? PAD16 : 0); i++) {
                    int hi = n * table[p[i] >> 4], lo = n * table[p[i] & 15];
                    if (lane == 16) {
                        q[4 * i] = (uint8_t)(hi >> 8), q[4 * i + 1] = (uint8_t)hi;
                        q[4 * i + 2] = (uint8_t)(lo >> 8), q[4 * i + 3] = (uint8_t)lo;
                    } else {
                        q[2 * i] = (uint8_t)hi, q[2 * i + 1] = (uint8_t)lo;
                    }
                }
            } else if (op == 3) {
                for (int i = 0; i < payload; i += 4) {
                    uint32_t v = (uint32_t)p[i] << 24 | (uint32_t)p[i + 1] << 16 | (uint32_t)p[i + 2] << 8 | p[i + 3];
                    v *= (uint32_t)n;
                    q[i] = (uint8_t)(v >> 24), q[i + 1] = (uint8_t)(v >> 16), q[i + 2] = (uint8_t)(v >> 8), q[i + 3] = (uint8_t)v;
                }
            }
            siov[k] = (struct iovec){o, (size_t)(14 + total)};
            memset(&smsg[k], 0, sizeof smsg[k]);
            smsg[k].msg_hdr.msg_iov = &siov[k];
            smsg[k].msg_hdr.msg_iovlen = 1;
            k++;
        }
        for (int s = 0; s < k;) {
            int r = sendmmsg(fd, smsg + s, (unsigned)(k - s), 0);
            s += r > 0 ? r : 1; /* a refused frame is a loss */
        }
    }
}
