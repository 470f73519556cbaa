/* Per-cell bookkeeping: which use of the cell this is, who has contributed, how many are missing.
 * A cell is 2 * (slot_base + slot) + (round & 1): every slot has a shadow cell, so the result of round r
 * stays readable for retransmissions while round r + 1 accumulates in the other cell.
 * A use is identified by (epoch, op, round); which newer rounds may start one is README.md's "Round window".
 * A RELEASE completes a use with the k < n contributions it has (README.md, "Partial aggregation"); on a
 * leaf whose use is complete it goes on to the spine, which releases its own use ("Two-level aggregation").
 * A QUERY changes nothing: the Result control answers it with what the cell holds ("Queries"). */
#ifndef THC_SLOT_STATE_P4
#define THC_SLOT_STATE_P4

control SlotState(inout headers_t hdr, inout metadata_t meta) {
    register<bit<52>>(THC_CELLS) slot_tag;        /* epoch << 36 | op << 32 | round of the cell's current use */
    register<bit<32>>(THC_CELLS) slot_bitmap;     /* workers that contributed to it */
    register<bit<8>>(THC_CELLS)  slot_remaining;  /* contributions still missing; 0: complete (or released) */
    register<bit<8>>(THC_CELLS)  slot_count;      /* contributions summed: n, or k < n after a RELEASE */

    action refuse(bit<32> event) {
        meta.drop = 1;
        meta.event = event;
    }

    /* The whole read-modify-write of the cell's registers is this one action: BMv2 holds an action's
     * registers locked while it runs, so no other packet sees the cell half-updated. */
    action use_cell() {
        /* a PARTIAL from a leaf carries the count of the leaf's contributions; anything else is one */
        meta.weight = (hdr.thc.kind == KIND_PARTIAL) ? hdr.thc.count : 8w1;
        meta.cell = ((bit<32>)(meta.slot_base + hdr.thc.slot) << 1) | (bit<32>)hdr.thc.round[0:0];
        slot_tag.read(meta.tag, meta.cell);
        slot_bitmap.read(meta.bitmap, meta.cell);
        slot_remaining.read(meta.remaining, meta.cell);
        slot_count.read(meta.count, meta.cell);
        bit<32> stored = meta.tag[31:0];
        if (hdr.thc.kind == KIND_QUERY) {
            /* a QUERY reads the cell's use as a retransmission of the request would find it, and writes
             * nothing: a use not started here has no contribution in and lacks all n */
            meta.query = 1;
            if (meta.tag[51:36] != meta.epoch || hdr.thc.round > stored) {
                meta.bitmap = 0;
                meta.remaining = meta.n_workers;
            } else if (hdr.thc.round < stored) {
                refuse(EV_DROP_STALE_ROUND);
            } else if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            }
        } else if (hdr.thc.kind == KIND_RELEASE) {
            /* a RELEASE acts only on the cell's current, incomplete use: it completes it as it is */
            if (meta.tag[51:36] != meta.epoch || hdr.thc.round > stored) {
                refuse(EV_RELEASE_IGNORED);  /* the use has not started here */
            } else if (hdr.thc.round < stored) {
                refuse(EV_DROP_STALE_ROUND);
            } else if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            } else if (meta.remaining != 0) {
                meta.release = 1;
                meta.dup = 1;
                meta.remaining = 0;
                slot_remaining.write(meta.cell, 0);
            } else if (meta.leaf == 1) {
                meta.release_up = 1;  /* complete here, its partial went up: the spine's use may wait on a silent leaf */
            } else {
                refuse(EV_RELEASE_IGNORED);  /* already complete: its result went out */
            }
        } else if (meta.tag[51:36] != meta.epoch) {
            /* first use in this epoch: a run starts at request 0, so only rounds 0 and 1 */
            if (hdr.thc.round < 2) {
                meta.first = 1;
            } else {
                refuse(EV_DROP_FAR_ROUND);
            }
        } else if (hdr.thc.round < stored) {
            refuse(EV_DROP_STALE_ROUND);
        } else if (hdr.thc.round == stored) {
            if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            } else if ((meta.bitmap & meta.my_bit) != 0) {
                meta.dup = 1;
            } else if (meta.remaining == 0) {
                /* the use was released without this worker: never added, answered with the result */
                meta.dup = 1;
                meta.late = 1;
            } else {
                meta.remaining = meta.remaining - 1;
                meta.count = meta.count + meta.weight;
                slot_bitmap.write(meta.cell, meta.bitmap | meta.my_bit);
                slot_remaining.write(meta.cell, meta.remaining);
                slot_count.write(meta.cell, meta.count);
            }
        } else if (hdr.thc.round - stored == 2 && meta.remaining == 0) {
            /* the next use: a worker sends round r only once round r - 2 is complete (or released) */
            meta.first = 1;
        } else {
            refuse(EV_DROP_FAR_ROUND);
        }
        if (meta.first == 1) {
            /* the first packet of a use writes, so no reset is ever needed */
            meta.remaining = meta.n_workers - 1;
            meta.count = meta.weight;
            slot_tag.write(meta.cell, meta.epoch ++ hdr.thc.op ++ hdr.thc.round);
            slot_bitmap.write(meta.cell, meta.my_bit);
            slot_remaining.write(meta.cell, meta.remaining);
            slot_count.write(meta.cell, meta.weight);
        }
    }

    apply {
        use_cell();
    }
}

#endif
