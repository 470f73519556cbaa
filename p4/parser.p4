/* Parser, checksums and deparser. Only requests and partials carry a parsed payload: results crossing a
 * non-aggregating switch are forwarded with their payload untouched. */
#ifndef THC_PARSER_P4
#define THC_PARSER_P4

parser ThcParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, 17): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            THC_UDP_PORT: parse_thc;
            default: accept;
        }
    }
    state parse_thc {
        packet.extract(hdr.thc);
        transition select(hdr.thc.op, hdr.thc.kind, hdr.thc.lane_bits) {
            (OP_THC, KIND_REQUEST, LANES_8): parse_indices8;
            (OP_THC, KIND_REQUEST, LANES_16): parse_indices16;
            (OP_FIX32, KIND_REQUEST, LANES_INT32): parse_words;
            (OP_NORM, KIND_REQUEST, LANES_INT32): parse_norms;
            (OP_NORM, KIND_PARTIAL, _): parse_norms;
            (OP_THC, KIND_PARTIAL, _): parse_words;
            (OP_FIX32, KIND_PARTIAL, _): parse_words;
            (OP_THC, KIND_RELEASE, _): parse_release_pad;
            (OP_FIX32, KIND_RELEASE, _): parse_release_pad;
            default: accept;   /* results, NORM RELEASE; a request with another lane width is refused in ingress */
        }
    }
    state parse_indices8 {
        packet.extract(hdr.thc_idx8);
        transition accept;
    }
    state parse_indices16 {
        packet.extract(hdr.thc_idx16);
        packet.extract(hdr.thc_pad_a);
        transition accept;
    }
    state parse_release_pad {
        packet.extract(hdr.thc_pad_a);
        packet.extract(hdr.thc_pad_b);
        transition accept;
    }
    state parse_norms {
        packet.extract(hdr.thc_norms);
        transition accept;
    }
    state parse_words {
        packet.extract(hdr.thc_words);
        transition accept;
    }
}

control ThcVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control ThcComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control ThcDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.thc);
        packet.emit(hdr.thc_idx8);
        packet.emit(hdr.thc_idx16);
        packet.emit(hdr.thc_words);
        packet.emit(hdr.thc_norms);
        packet.emit(hdr.thc_pad_a);
        packet.emit(hdr.thc_pad_b);
    }
}

#endif
