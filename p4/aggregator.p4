/*
 * The sums. A cell is THC_WORDS 64-bit register words, one register per word: THC sums in 8- or 16-bit
 * lanes (eight or four coordinates a word), FIX32 sums in two int32 lanes; NORM maxima in two float32
 * lanes of the first NORM_WORDS words.
 * Each read-modify-write is one action (BMv2 locks a register for the duration of an action).
 */
#ifndef THC_AGGREGATOR_P4
#define THC_AGGREGATOR_P4

#define ACC_REGISTER(k) register<bit<64>>(THC_CELLS) acc_##k;

/* THC lanes: the job was admitted only if n * g fits a lane, so one 64-bit add never carries across. */
#define ADD_LANES(k)                                            \
    acc_##k.read(meta.tmp, meta.acc_cell);                          \
    meta.w##k = (meta.tmp & meta.keep) + meta.w##k;             \
    acc_##k.write(meta.acc_cell, meta.w##k);

/* FIX32 lanes wrap as int32: the low lane is the low half of the 64-bit sum, the high lane the sum of
 * the high halves (the carry out of the low lane is dropped, the one out of the high lane falls off). */
#define ADD_INT32(k)                                                                   \
    acc_##k.read(meta.tmp, meta.acc_cell);                                                 \
    meta.tmp = meta.tmp & meta.keep;                                                   \
    meta.w##k = ((meta.tmp + meta.w##k) & 0x00000000ffffffff) |                        \
                ((meta.tmp & 0xffffffff00000000) + (meta.w##k & 0xffffffff00000000));  \
    acc_##k.write(meta.acc_cell, meta.w##k);

/* NORM lanes: non-negative float32 values order like their bit patterns, so max is an unsigned compare,
 * each 32-bit lane alone. */
#define MAX_FLOAT32(k)                                                                                  \
    acc_##k.read(meta.tmp, meta.acc_cell);                                                                  \
    meta.tmp = meta.tmp & meta.keep;                                                                    \
    meta.hi = (meta.tmp[63:32] > meta.w##k[63:32]) ? meta.tmp[63:32] : meta.w##k[63:32];                \
    meta.lo = (meta.tmp[31:0] > meta.w##k[31:0]) ? meta.tmp[31:0] : meta.w##k[31:0];                    \
    meta.w##k = meta.hi ++ meta.lo;                                                                     \
    acc_##k.write(meta.acc_cell, meta.w##k);

#define ACC_READ(k) acc_##k.read(meta.w##k, meta.acc_cell);

control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    FOR_EACH_WORD(ACC_REGISTER)

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

    action max_float32() {
        FOR_EACH_NORM_WORD(MAX_FLOAT32)
    }

    action read_norms() {
        FOR_EACH_NORM_WORD(ACC_READ)
    }

    apply {
        if (meta.first == 1) {
            meta.keep = 0;
        } else {
            meta.keep = 0xffffffffffffffff;
        }
        if (meta.dup == 0) {
            if (hdr.thc.op == OP_NORM) {
                max_float32();
            } else if (hdr.thc.op == OP_THC) {
                add_lanes();
            } else {
                add_int32();
            }
        } else {
            if (hdr.thc.op == OP_NORM) {
                read_norms();
            } else {
                read_sums();
            }
        }
    }
}

#endif
