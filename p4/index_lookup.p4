/* Index -> table value. One exact table per index byte (a table can be applied once per pass); each
 * entry maps two 4-bit indices to the word V[hi] << 16 | V[lo], so one register add later sums two
 * coordinates in two 16-bit lanes. FIX32 requests skip the lookup: their words are the values.
 * Programmed by controller/lookup_tables.py. */
#ifndef THC_INDEX_LOOKUP_P4
#define THC_INDEX_LOOKUP_P4

#define LUT(i, a, b)                                            \
    action set_w_##i(bit<32> w) {                               \
        meta.w##i = w;                                          \
    }                                                           \
    table lut_##i {                                             \
        key = { hdr.thc_idx.p##i: exact; }                      \
        actions = { set_w_##i; bad_index; }                     \
        size = 256;                                             \
        default_action = bad_index();                           \
    }
#define APPLY_LUT(i, a, b) lut_##i.apply();
#define COPY_FIX(i, a, b) meta.w##i = hdr.thc_fix.v##i;
#define COPY_LANES(i, a, b) meta.w##i = hdr.thc_res16.c##a ++ hdr.thc_res16.c##b;

control IndexLookup(inout headers_t hdr, inout metadata_t meta) {
    /* An index with no entry: larger than the installed table (b < 4) or no table installed yet. */
    action bad_index() {
        meta.drop = 1;
        meta.event = EV_DROP_BAD_INDEX;
    }

    FOR_EACH_PAIR(LUT)

    action copy_fix() {
        FOR_EACH_PAIR(COPY_FIX)
    }

    /* A leaf's PARTIAL already holds table values (two 16-bit lane sums per word): no lookup. */
    action copy_lanes() {
        FOR_EACH_PAIR(COPY_LANES)
    }

    apply {
        if (hdr.thc.op == OP_THC && hdr.thc.kind == KIND_PARTIAL) {
            copy_lanes();
        } else if (hdr.thc.op == OP_THC) {
            FOR_EACH_PAIR(APPLY_LUT)
        } else if (hdr.thc.op == OP_FIX32) {
            copy_fix();
        }
    }
}

#endif
