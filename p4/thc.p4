/*
 * THC in-network aggregation for BMv2 (v1model).
 *
 * Workers send 4-bit THC table indices, 1,024 a request; the switch maps them to table values with the
 * job's table, which the controller installs, sums the values in lanes of 64-bit registers (eight
 * coordinates an add), and returns the sums to every worker. Loss recovery in the data plane (shadow
 * cells, worker bitmaps, answers to retransmissions) follows SwitchML. README.md is the contract: packet
 * formats, tables, registers, counters and the worker protocol.
 */
#include <core.p4>
#include <v1model.p4>

#include "config.p4"
#include "headers.p4"
#include "parser.p4"
#include "forwarding.p4"
#include "job_check.p4"
#include "index_lookup.p4"
#include "slot_state.p4"
#include "aggregator.p4"
#include "result.p4"
#include "result_dst.p4"

control ThcIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    counter(THC_EVENTS, CounterType.packets_and_bytes) thc_events;
    /* The same events per job: cell job_id * THC_EVENTS + event, for THC packets to a service address. */
    counter(THC_JOB_EVENTS, CounterType.packets_and_bytes) thc_job_events;

    Forwarding() forwarding;
    JobCheck() job_check;
    IndexLookup() index_lookup;
    SlotState() slot_state;
    Aggregator() aggregator;
    Result() result;

    apply {
        if (standard_metadata.parser_error != error.NoError || standard_metadata.checksum_error == 1) {
            meta.drop = 1;
            meta.event = EV_DROP_MALFORMED;
        } else if (!hdr.ipv4.isValid()) {
            meta.drop = 1;
            meta.event = EV_DROP_NOT_IPV4;
        } else {
            if (hdr.thc.isValid() && (hdr.thc.kind <= KIND_QUERY || hdr.thc.kind == KIND_ACK)) {
                job_check.apply(hdr, meta);
            }
            if (meta.serve == 0) {
                /* ordinary IPv4: routed below */
            } else if (meta.down == 1) {
                result.apply(hdr, meta, standard_metadata);
            } else if (meta.drop == 0) {
                if (hdr.thc.kind == KIND_REQUEST || hdr.thc.kind == KIND_PARTIAL) {
                    index_lookup.apply(hdr, meta);
                }
                if (meta.drop == 0) {
                    slot_state.apply(hdr, meta);
                }
                if (meta.drop == 0 && meta.release_up == 0 && meta.query == 0 && meta.fallback == 0 &&
                    meta.ack == 0) {
                    aggregator.apply(hdr, meta);
                }
                if (meta.drop == 0) {
                    result.apply(hdr, meta, standard_metadata);
                }
            }
            if (meta.serve == 0 || meta.up == 1) {
                /* ordinary IPv4, or a leaf's PARTIAL on its way to the spine (keeping the aggregation's event) */
                bit<32> event = meta.event;
                forwarding.apply(hdr, meta, standard_metadata);
                if (meta.up == 1 && meta.drop == 0) {
                    meta.event = event;
                }
            }
        }
        if (meta.drop == 1) {
            mark_to_drop(standard_metadata);
        }
        thc_events.count(meta.event);
        if (meta.serve == 1) {
            thc_job_events.count(((bit<32>)hdr.thc.job_id << 5) | meta.event);
        }
    }
}

V1Switch(ThcParser(), ThcVerifyChecksum(), ThcIngress(), ThcEgress(), ThcComputeChecksum(),
         ThcDeparser()) main;
