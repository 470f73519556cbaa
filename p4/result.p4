/* What happens to a counted request: wait for the others (drop), multicast the finished sums to the job's
 * group, or answer a retransmission of a finished slot with the stored sums, unicast. A RELEASE multicasts
 * the sums so far; a late contribution to a released slot is answered like a retransmission. */
#ifndef THC_RESULT_P4
#define THC_RESULT_P4

#define RES8_OUT(i, a, b)  hdr.thc_res8.c##a = meta.w##i[23:16];  hdr.thc_res8.c##b = meta.w##i[7:0];
#define RES16_OUT(i, a, b) hdr.thc_res16.c##a = meta.w##i[31:16]; hdr.thc_res16.c##b = meta.w##i[15:0];
#define FIX_OUT(i, a, b)   hdr.thc_fix.v##i = meta.w##i;

control Result(inout headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    action consumed() {
        meta.drop = 1;
        meta.event = EV_CONSUMED;
    }

    action duplicate() {
        meta.drop = 1;
        meta.event = EV_DROP_DUPLICATE;
    }

    action common_result() {
        hdr.thc.count = meta.count;
        hdr.ipv4.ttl = 64;
        hdr.udp.checksum = 0;
    }

    /* Lane sums fit 8 bits when the job has n * g <= 255 (the controller decides, per job). */
    action thc_result8() {
        hdr.thc_res8.setValid();
        FOR_EACH_PAIR(RES8_OUT)
        hdr.thc_idx.setInvalid();
        hdr.thc_res16.setInvalid();  /* a PARTIAL's payload, on a spine */
        hdr.thc.lane_bits = 8;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES + RESULT8_BYTES;
        hdr.udp.length = THC_L4_BYTES + RESULT8_BYTES;
    }

    action thc_result16() {
        hdr.thc_res16.setValid();
        FOR_EACH_PAIR(RES16_OUT)
        hdr.thc_idx.setInvalid();
        hdr.thc.lane_bits = 16;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES + RESULT16_BYTES;
        hdr.udp.length = THC_L4_BYTES + RESULT16_BYTES;
    }

    /* A FIX32 request carries its payload already; a RELEASE (no payload) gets one. */
    action fix_result() {
        hdr.thc_fix.setValid();
        FOR_EACH_PAIR(FIX_OUT)
        hdr.thc.lane_bits = 32;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES + FIX32_BYTES;
        hdr.udp.length = THC_L4_BYTES + FIX32_BYTES;
    }

    action norm_result() {
        hdr.thc.lane_bits = 0;
    }

    /* Every worker gets a copy; egress rewrites each copy's destination (ThcEgress.result_dst). */
    action to_group() {
        standard_metadata.mcast_grp = meta.mcast_grp;
        hdr.thc.kind = KIND_RESULT;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        meta.rewrite_result = 1;
        meta.event = EV_COMPLETED;
    }

    action to_sender() {
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        hdr.thc.kind = KIND_RESULT_RETX;
        macAddr_t mac = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = mac;
        ip4Addr_t ip = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = ip;
        meta.event = EV_RETX_ANSWERED;
    }

    /* A leaf sends what it completed (or answers a retransmission with its stored partial) to the spine:
     * always 16-bit lanes, the count of its contributions, its own id. ipv4_lpm routes it (meta.up). */
    action to_spine() {
        hdr.thc.kind = KIND_PARTIAL;
        hdr.thc.worker_id = meta.leaf_id;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = meta.spine_addr;
        meta.up = 1;
    }

    /* A spine's result (or its answer to a re-sent partial) reaches a leaf: every local worker gets it. */
    action fan_out() {
        standard_metadata.mcast_grp = meta.mcast_grp;
        hdr.thc.kind = KIND_RESULT;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        meta.rewrite_result = 1;
        meta.event = EV_FANNED_OUT;
    }

    apply {
        if (meta.down == 1) {
            fan_out();
        } else if (meta.remaining != 0) {
            if (meta.dup == 1) {
                duplicate();
            } else {
                consumed();
            }
        } else {
            common_result();
            if (hdr.thc.op == OP_THC) {
                if (meta.lane_bits == 8 && meta.leaf == 0) {
                    thc_result8();
                } else {
                    thc_result16();
                }
            } else if (hdr.thc.op == OP_FIX32) {
                fix_result();
            } else {
                norm_result();
            }
            if (meta.leaf == 1) {
                to_spine();
                if (meta.release == 1) {
                    meta.event = EV_RELEASED;
                } else if (meta.late == 1) {
                    meta.event = EV_LATE;  /* never added here either: the stored partial goes up again */
                } else if (meta.dup == 1) {
                    meta.event = EV_PARTIAL_RESENT;
                } else {
                    meta.event = EV_COMPLETED;
                }
            } else if (meta.release == 1) {
                to_group();
                meta.event = EV_RELEASED;
            } else if (meta.dup == 1) {
                to_sender();
                if (meta.late == 1) {
                    meta.event = EV_LATE;
                }
            } else {
                to_group();
            }
        }
    }
}

#endif
