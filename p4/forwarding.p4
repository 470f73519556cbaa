/* Ordinary IPv4 forwarding (p4lang/tutorials' basic), so hosts can ping and open TCP connections
 * (rendezvous, baselines) through the same switch. Programmed by controller/forwarding.py. */
#ifndef THC_FORWARDING_P4
#define THC_FORWARDING_P4

control Forwarding(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    action drop() {
        meta.drop = 1;
        meta.event = EV_DROP_NO_ROUTE;
    }

    action ipv4_forward(macAddr_t dstAddr, egressSpec_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        meta.event = EV_FORWARDED;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; }
        size = 1024;
        default_action = drop();
    }

    apply {
        ipv4_lpm.apply();
    }
}

#endif
