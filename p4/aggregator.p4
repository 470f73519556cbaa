/* The sums. One 32-bit register per pair of coordinates holds two 16-bit sum lanes (THC) or one int32
 * sum (FIX32); norms are reduced with max. Each read-modify-write is one action (BMv2 locks a register
 * for the duration of an action). */
#ifndef THC_AGGREGATOR_P4
#define THC_AGGREGATOR_P4

#define ACC_REGISTER(i, a, b) register<bit<32>>(THC_CELLS) acc_##i;
#define ACC_ADD(i, a, b)                                        \
    acc_##i.read(meta.tmp, meta.cell);                          \
    meta.w##i = (meta.tmp & meta.keep) + meta.w##i;             \
    acc_##i.write(meta.cell, meta.w##i);
#define ACC_READ(i, a, b) acc_##i.read(meta.w##i, meta.cell);

control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    FOR_EACH_PAIR(ACC_REGISTER)
    register<bit<32>>(THC_CELLS) norm_max;

    /* First packet of a use: keep = 0, so the old cell content is ignored (write); later: add. */
    action accumulate() {
        FOR_EACH_PAIR(ACC_ADD)
    }

    action read_sums() {
        FOR_EACH_PAIR(ACC_READ)
    }

    /* Non-negative float32 values order like their bit patterns: max is an unsigned compare. */
    action max_norm() {
        norm_max.read(meta.tmp, meta.cell);
        meta.tmp = meta.tmp & meta.keep;
        meta.tmp = (hdr.thc.value > meta.tmp) ? hdr.thc.value : meta.tmp;
        norm_max.write(meta.cell, meta.tmp);
        hdr.thc.value = meta.tmp;
    }

    action read_norm() {
        norm_max.read(hdr.thc.value, meta.cell);
    }

    apply {
        if (meta.first == 1) {
            meta.keep = 0;
        } else {
            meta.keep = 0xffffffff;
        }
        if (meta.dup == 0) {
            if (hdr.thc.op == OP_NORM) {
                max_norm();
            } else {
                accumulate();
            }
        } else {
            if (hdr.thc.op == OP_NORM) {
                read_norm();
            } else {
                read_sums();
            }
        }
    }
}

#endif
