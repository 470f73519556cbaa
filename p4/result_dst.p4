/* Egress: each multicast copy of a result is addressed to the worker it goes to (replica id = worker id).
 * Programmed by controller/jobs.py together with the job's multicast group. */
#ifndef THC_RESULT_DST_P4
#define THC_RESULT_DST_P4

control ThcEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_result_dst(macAddr_t dmac, ip4Addr_t dip) {
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.dstAddr = dip;
        hdr.thc.worker_id = (bit<8>)standard_metadata.egress_rid;
    }

    table result_dst {
        key = {
            hdr.thc.job_id: exact;
            standard_metadata.egress_rid: exact;
        }
        actions = { set_result_dst; NoAction; }
        size = 2048;
        default_action = NoAction();
    }

    apply {
        if (meta.rewrite_result == 1) {
            result_dst.apply();
        }
    }
}

#endif
