/* Is this THC request for us, is it the job's (its key), and may it use the slot it names? Programmed by
 * controller/jobs.py. */
#ifndef THC_JOB_CHECK_P4
#define THC_JOB_CHECK_P4

control JobCheck(inout headers_t hdr, inout metadata_t meta) {
    action serve() {
        meta.serve = 1;
    }

    /* The aggregation service address(es) of this switch; THC packets to other addresses are forwarded. */
    table service_addr {
        key = { hdr.ipv4.dstAddr: exact; }
        actions = { serve; NoAction; }
        size = 16;
        default_action = NoAction();
    }

    action set_job(bit<8> n_workers, bit<16> slot_base, bit<16> n_slots, bit<16> mcast_grp,
                   bit<32> worker_mask, bit<8> lane_bits, bit<16> epoch, bit<32> key) {
        meta.n_workers = n_workers;
        meta.slot_base = slot_base;
        meta.n_slots = n_slots;
        meta.mcast_grp = mcast_grp;
        meta.worker_mask = worker_mask;
        meta.lane_bits = lane_bits;
        meta.epoch = epoch;
        meta.key = key;
    }

    /* The default action. Its parameter is where the controller keeps the last epoch it gave a job on this
     * switch, so that an epoch is never given twice while registers may hold its cells (a push of the
     * pipeline clears both); the data plane only copies it into metadata nobody reads. */
    action unknown_job(bit<16> last_epoch) {
        meta.drop = 1;
        meta.event = EV_DROP_UNKNOWN_JOB;
        meta.last_epoch = last_epoch;
    }

    table jobs {
        key = { hdr.thc.job_id: exact; }
        actions = { set_job; unknown_job; }
        size = 64;
        default_action = unknown_job(0);
    }

    /* Two-level aggregation: on a leaf, the job's completed sums go to the spine as one PARTIAL. */
    action to_spine(bit<8> leaf_id, ip4Addr_t spine_addr) {
        meta.leaf = 1;
        meta.leaf_id = leaf_id;
        meta.spine_addr = spine_addr;
    }

    table uplink {
        key = { hdr.thc.job_id: exact; }
        actions = { to_spine; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    action reject(bit<32> event) {
        meta.drop = 1;
        meta.event = event;
    }

    apply {
        service_addr.apply();
        if (meta.serve == 1) {
            jobs.apply();
            if (meta.drop == 0) {
                uplink.apply();
                if (hdr.thc.version != THC_VERSION) {
                    reject(EV_DROP_BAD_OP);  /* another wire format: its fields cannot be read as ours */
                } else if (hdr.thc.key != meta.key) {
                    /* not one of the job's packets: it may neither count, nor be answered, nor reach a worker */
                    reject(EV_DROP_BAD_KEY);
                }
            }
            if (hdr.thc.kind == KIND_RESULT || hdr.thc.kind == KIND_RESULT_RETX) {
                /* a result addressed to a service address: the spine's answer to this leaf, or forwarded */
                if (meta.leaf == 0) {
                    meta.drop = 0;
                    meta.serve = 0;
                } else if (meta.drop == 0) {
                    meta.down = 1;
                }
            } else if (meta.drop == 0) {
                meta.my_bit = 32w1 << hdr.thc.worker_id;
                if (hdr.thc.worker_id >= THC_MAX_WORKERS || (meta.worker_mask & meta.my_bit) == 0) {
                    reject(EV_DROP_FOREIGN_WORKER);
                } else if (hdr.thc.slot >= meta.n_slots) {
                    reject(EV_DROP_SLOT_RANGE);
                } else if (hdr.thc.op != OP_NORM && hdr.thc.op != OP_THC && hdr.thc.op != OP_FIX32) {
                    reject(EV_DROP_BAD_OP);
                } else if ((hdr.thc.op == OP_THC && hdr.thc.lane_bits != meta.lane_bits) ||
                           (hdr.thc.op != OP_THC && hdr.thc.lane_bits != LANES_INT32)) {
                    /* framed for another cell than the job's: the workers' job description is not the switch's */
                    reject(EV_DROP_LANE_MISMATCH);
                }
            }
        }
    }
}

#endif
