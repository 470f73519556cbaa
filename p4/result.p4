/* What happens to a counted request: wait for the others (drop), multicast the finished sums to the job's
 * group, or answer a retransmission of a finished slot with the stored sums, unicast. A RELEASE multicasts
 * the sums so far; a late contribution to a released slot is answered like a retransmission; a QUERY gets
 * the cell's STATUS. */
#ifndef THC_RESULT_P4
#define THC_RESULT_P4

#define WORD_OUT(k) hdr.thc_words.v##k = meta.w##k;
#define NORM_OUT(k) hdr.thc_norms.n##k = meta.w##k;

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

    /* Every result says how many contributions it sums, and its lengths are those of what it carries. */
    action common_result() {
        hdr.thc.count = meta.count;
        hdr.ipv4.ttl = 64;
        hdr.udp.checksum = 0;
    }

    /* THC or FIX32: the cell's words, lanes as the op has them in this job (a RELEASE gets a payload). */
    action words_result(in bit<8> lane_bits) {
        hdr.thc_words.setValid();
        FOR_EACH_WORD(WORD_OUT)
        hdr.thc_idx8.setInvalid();
        hdr.thc_idx16.setInvalid();
        hdr.thc_pad_a.setInvalid();
        hdr.thc_pad_b.setInvalid();
        hdr.thc.lane_bits = lane_bits;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES + WORDS_BYTES;
        hdr.udp.length = THC_L4_BYTES + WORDS_BYTES;
    }

    /* NORM: the cell's lane-wise maxima, NORM_WORDS words (a RELEASE gets a payload). */
    action norm_result() {
        hdr.thc_norms.setValid();
        FOR_EACH_NORM_WORD(NORM_OUT)
        hdr.thc.lane_bits = LANES_INT32;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES + NORMS_BYTES;
        hdr.udp.length = THC_L4_BYTES + NORMS_BYTES;
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

    /* Out of the port it came in, addresses swapped: the answer goes back to the sender, unicast. */
    action back_to_sender() {
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        macAddr_t mac = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = mac;
        ip4Addr_t ip = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = ip;
    }

    action to_sender() {
        back_to_sender();
        hdr.thc.kind = KIND_RESULT_RETX;
        meta.event = EV_RETX_ANSWERED;
    }

    /* A QUERY's answer, header only, to the sender: the workers whose contributions the named use holds,
     * and how many it still lacks (0: complete, its result went out). On a leaf, the leaf's own cell. */
    action status() {
        hdr.thc.kind = KIND_STATUS;
        hdr.thc.value = meta.bitmap;
        hdr.thc.count = meta.remaining;
        hdr.ipv4.ttl = 64;
        hdr.udp.checksum = 0;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES;
        hdr.udp.length = THC_L4_BYTES;
        back_to_sender();
        meta.event = EV_QUERY_ANSWERED;
    }

    /* A leaf sends what it completed (or answers a retransmission with its stored partial) to the spine:
     * the cell's words in the job's lanes, the count of its contributions, its own id. ipv4_lpm routes it
     * (meta.up). */
    action to_spine() {
        hdr.thc.kind = KIND_PARTIAL;
        hdr.thc.worker_id = meta.leaf_id;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = meta.spine_addr;
        meta.up = 1;
    }

    /* A leaf passes a RELEASE of a use it completed to the spine, as the leaf's own (its padding kept). */
    action release_to_spine() {
        hdr.thc.worker_id = meta.leaf_id;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = meta.spine_addr;
        meta.up = 1;
        meta.event = EV_RELEASE_UP;
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

    /* A pool job's use without a pool cell (README.md, "Shared pool"): header only, back to the sender, which
     * aggregates the use elsewhere; every request, retransmission and query of the use gets it. */
    action fallback() {
        hdr.thc.kind = KIND_FALLBACK;
        hdr.thc.count = 0;
        hdr.thc.value = 0;
        hdr.thc_idx8.setInvalid();
        hdr.thc_idx16.setInvalid();
        hdr.thc_words.setInvalid();
        hdr.thc_norms.setInvalid();
        hdr.thc_pad_a.setInvalid();
        hdr.thc_pad_b.setInvalid();
        hdr.ipv4.ttl = 64;
        hdr.udp.checksum = 0;
        hdr.ipv4.totalLen = 20 + THC_L4_BYTES;
        hdr.udp.length = THC_L4_BYTES;
        back_to_sender();
        meta.event = EV_POOL_FALLBACK;
    }

    /* An ACK is taken in by the bookkeeping (slot_state.p4): nothing goes back. */
    action acked() {
        meta.drop = 1;
        meta.event = EV_POOL_ACK;
    }

    apply {
        if (meta.down == 1) {
            fan_out();
        } else if (meta.ack == 1) {
            acked();
        } else if (meta.fallback == 1) {
            fallback();
            if (meta.taken == 1) {
                meta.event = EV_POOL_TAKEN;
            }
        } else if (meta.query == 1) {
            status();
        } else if (meta.release_up == 1) {
            release_to_spine();
        } else if (meta.remaining != 0) {
            if (meta.dup == 1) {
                duplicate();
            } else {
                consumed();
            }
        } else {
            common_result();
            if (hdr.thc.op == OP_THC) {
                words_result(meta.lane_bits);
            } else if (hdr.thc.op == OP_FIX32) {
                words_result(LANES_INT32);
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
