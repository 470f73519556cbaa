/*
 * The sums. A cell is THC_WORDS 64-bit register words, one register per word: THC sums in 8- or 16-bit
 * lanes (eight or four coordinates a word), FIX32 sums in two int32 lanes; norms are reduced with max.
 * Each read-modify-write is one action (BMv2 locks a register for the duration of an action).
 */
#ifndef THC_AGGREGATOR_P4
#define THC_AGGREGATOR_P4

#define ACC_REGISTER(k) register<bit<64>>(THC_CELLS) acc_##k;

/* THC lanes: the job was admitted only if n * g fits a lane, so one 64-bit add never carries across. */
#define ADD_LANES(k)                                            \
    acc_##k.read(meta.tmp, meta.cell);                          \
    meta.w##k = (meta.tmp & meta.keep) + meta.w##k;             \
    acc_##k.write(meta.cell, meta.w##k);

/* FIX32 lanes wrap as int32: the low lane is the low half of the 64-bit sum, the high lane the sum of
 * the high halves (the carry out of the low lane is dropped, the one out of the high lane falls off). */
#define ADD_INT32(k)                                                                   \
    acc_##k.read(meta.tmp, meta.cell);                                                 \
    meta.tmp = meta.tmp & meta.keep;                                                   \
    meta.w##k = ((meta.tmp + meta.w##k) & 0x00000000ffffffff) |                        \
                ((meta.tmp & 0xffffffff00000000) + (meta.w##k & 0xffffffff00000000));  \
    acc_##k.write(meta.cell, meta.w##k);

#define ACC_READ(k) acc_##k.read(meta.w##k, meta.cell);

control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    FOR_EACH_WORD(ACC_REGISTER)
    register<bit<32>>(THC_CELLS) norm_max;

    /* First packet of a use: keep = 0, so the old cell content is ignored (write); later: add. */
    action add_lanes() {
        FOR_EACH_WORD(ADD_LANES)
    }

    action add_int32() {
        FOR_EACH_WORD(ADD_INT32)
    }

    action read_sums() {
        FOR_EACH_WORD(ACC_READ)
    }

    /* Non-negative float32 values order like their bit patterns: max is an unsigned compare. */
    action max_norm() {
        norm_max.read(meta.norm, meta.cell);
        meta.norm = meta.norm & meta.keep[31:0];
        meta.norm = (hdr.thc.value > meta.norm) ? hdr.thc.value : meta.norm;
        norm_max.write(meta.cell, meta.norm);
        hdr.thc.value = meta.norm;
    }

    action read_norm() {
        norm_max.read(hdr.thc.value, meta.cell);
    }

    apply {
        if (meta.first == 1) {
            meta.keep = 0;
        } else {
            meta.keep = 0xffffffffffffffff;
        }
        if (meta.dup == 0) {
            if (hdr.thc.op == OP_NORM) {
                max_norm();
            } else if (hdr.thc.op == OP_THC) {
                add_lanes();
            } else {
                add_int32();
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
