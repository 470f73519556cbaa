/* A THC "switch" for benchmarks that costs next to nothing: answers every THC request arriving on an
 * interface at once, as if all n workers had sent the same request (count n, sums n * table[index], the
 * norm itself, n * each FIX32 value), a batch per recvmmsg/sendmmsg. Runs until killed.
 *
 *     echo_switch IFACE N LANE_BITS V0 V1 ... V15      (built and started by bench/bench_host_agent.py)
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
        fprintf(stderr, "usage: echo_switch IFACE N LANE_BITS V0..V15\n");
        return 2;
    }
    int n = atoi(argv[2]), lane = atoi(argv[3]);
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
            if (len < 58 || f[12] != 0x08 || f[13] != 0 || f[14] != 0x45 || f[23] != 17 || f[36] != 0x54
                || f[37] != 0x48 || f[42] != 1 || (f[43] & 0x0F) != 0)
                continue;
            int op = f[43] >> 4, payload;
            if (op == 1)
                payload = 0;
            else if (op == 2)
                payload = (int)(len - 58) * 2 * lane / 8;
            else
                payload = (int)(len - 58);
            uint8_t *o = out[k];
            memcpy(o, f + 6, 6); /* back to the sender */
            memcpy(o + 6, f, 6);
            memcpy(o + 12, f + 12, 46);
            memcpy(o + 26, f + 30, 4); /* IPv4 source <-> destination */
            memcpy(o + 30, f + 26, 4);
            int total = 20 + 8 + 16 + payload;
            o[16] = (uint8_t)(total >> 8), o[17] = (uint8_t)total;
            o[22] = 64;
            uint16_t sum = ip_checksum(o + 14);
            o[24] = (uint8_t)(sum >> 8), o[25] = (uint8_t)sum;
            o[38] = (uint8_t)((total - 20) >> 8), o[39] = (uint8_t)(total - 20), o[40] = o[41] = 0;
            o[43] = (uint8_t)(op << 4 | 1);
            o[48] = (uint8_t)n;
            o[49] = (uint8_t)(op == 1 ? 0 : op == 2 ? lane : 32);
            const uint8_t *p = f + 58;
            uint8_t *q = o + 58;
            if (op == 2) {
                for (unsigned i = 0; i < len - 58; i++) {
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
