/* Per-cell bookkeeping: which use of the cell this is, who has contributed, how many are missing.
 * A cell is 2 * (slot_base + slot) + (round & 1): every slot has a shadow cell, so the result of round r
 * stays readable for retransmissions while round r + 1 accumulates in the other cell.
 * BMv2 runs ingress on one thread, so the read here and the write later in the same pass see no other
 * packet in between. */
#ifndef THC_SLOT_STATE_P4
#define THC_SLOT_STATE_P4

control SlotState(inout headers_t hdr, inout metadata_t meta) {
    register<bit<48>>(THC_CELLS) slot_tag;        /* epoch << 32 | round of the cell's current use */
    register<bit<32>>(THC_CELLS) slot_bitmap;     /* workers that contributed to it */
    register<bit<8>>(THC_CELLS)  slot_remaining;  /* contributions still missing */

    action read_tag() {
        meta.cell = ((bit<32>)(meta.slot_base + hdr.thc.slot) << 1) | (bit<32>)hdr.thc.round[0:0];
        slot_tag.read(meta.tag, meta.cell);
    }

    /* First packet of a new use of the cell: it writes, so no reset is ever needed. */
    action start_use() {
        meta.first = 1;
        meta.remaining = meta.n_workers - 1;
        slot_tag.write(meta.cell, meta.epoch ++ hdr.thc.round);
        slot_bitmap.write(meta.cell, meta.my_bit);
        slot_remaining.write(meta.cell, meta.remaining);
    }

    action stale() {
        meta.drop = 1;
        meta.event = EV_DROP_STALE_ROUND;
    }

    action read_contributions() {
        slot_bitmap.read(meta.bitmap, meta.cell);
        slot_remaining.read(meta.remaining, meta.cell);
    }

    action add_contribution() {
        meta.remaining = meta.remaining - 1;
        slot_bitmap.write(meta.cell, meta.bitmap | meta.my_bit);
        slot_remaining.write(meta.cell, meta.remaining);
    }

    action retransmission() {
        meta.dup = 1;
    }

    apply {
        read_tag();
        if (meta.tag[47:32] != meta.epoch || hdr.thc.round > meta.tag[31:0]) {
            start_use();
        } else if (hdr.thc.round < meta.tag[31:0]) {
            stale();
        } else {
            read_contributions();
            if ((meta.bitmap & meta.my_bit) != 0) {
                retransmission();
            } else {
                add_contribution();
            }
        }
    }
}

#endif
