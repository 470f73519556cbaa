/*
 * Index -> table value, for the 1,024 (8-bit lanes) or 512 (16-bit lanes) indices of a THC request.
 *
 * A job's table is one entry of `values`, keyed by the job: its 2^b values V[0..2^b-1] (integers 0..g,
 * g <= 255) as the bytes of two 64-bit parameters, installed by the controller over P4Runtime with the job.
 * An index x then selects byte x of that vector, and the eight (or four) values of one register word are
 * concatenated into its lanes, so one 64-bit add in the aggregator sums eight (or four) coordinates.
 * FIX32 and NORM requests and a leaf's PARTIAL skip the lookup: their words are already values.
 * Programmed by controller/lookup_tables.py.
 */
#ifndef THC_INDEX_LOOKUP_P4
#define THC_INDEX_LOOKUP_P4

/* V[x] for a 4-bit index x: byte x[2:0] of values_lo (x < 8) or of values_hi (x >= 8). */
#define VALUE(x) ((((x)[3:3] == 1) ? meta.values_hi : meta.values_lo) >> ((x)[2:0] ++ 3w0))[7:0]

/* Word k from the eight indices of q<k> (8-bit lanes) or the four of q<k> (16-bit lanes). */
#define LOOKUP8(k) \
    meta.w##k = VALUE(hdr.thc_idx8.q##k[31:28]) ++ VALUE(hdr.thc_idx8.q##k[27:24]) ++ \
                VALUE(hdr.thc_idx8.q##k[23:20]) ++ VALUE(hdr.thc_idx8.q##k[19:16]) ++ \
                VALUE(hdr.thc_idx8.q##k[15:12]) ++ VALUE(hdr.thc_idx8.q##k[11:8]) ++ \
                VALUE(hdr.thc_idx8.q##k[7:4]) ++ VALUE(hdr.thc_idx8.q##k[3:0]);
#define LOOKUP16(k) \
    meta.w##k = 8w0 ++ VALUE(hdr.thc_idx16.q##k[15:12]) ++ 8w0 ++ VALUE(hdr.thc_idx16.q##k[11:8]) ++ \
                8w0 ++ VALUE(hdr.thc_idx16.q##k[7:4]) ++ 8w0 ++ VALUE(hdr.thc_idx16.q##k[3:0]);
#define IDX8(k) hdr.thc_idx8.q##k
#define IDX16(k) hdr.thc_idx16.q##k
#define COPY_WORD(k) meta.w##k = hdr.thc_words.v##k;
#define COPY_NORMS(k) meta.w##k = hdr.thc_norms.n##k;

control IndexLookup(inout headers_t hdr, inout metadata_t meta) {
    /* The job's table: V[0..7] in values_lo and V[8..15] in values_hi, V[j] in bits 8(j % 8) + 7 .. 8(j % 8).
     * index_mask has, in each of its eight nibbles, the index bits a table of 2^b entries never uses
     * (0 for b = 4, 0x88888888 for b = 3, ...): a request with any of them set is dropped as BAD_INDEX. */
    action set_values(bit<64> values_lo, bit<64> values_hi, bit<32> index_mask) {
        meta.values_lo = values_lo;
        meta.values_hi = values_hi;
        meta.index_mask = index_mask;
    }

    /* The job has no table installed, or an index outside it. */
    action bad_index() {
        meta.drop = 1;
        meta.event = EV_DROP_BAD_INDEX;
    }

    table values {
        key = { hdr.thc.job_id: exact; }
        actions = { set_values; bad_index; }
        size = 64;
        default_action = bad_index();
    }

    action lookup8() {
        FOR_EACH_WORD(LOOKUP8)
        meta.stray_bits = OR_WORDS(IDX8) & meta.index_mask;
    }

    action lookup16() {
        FOR_EACH_WORD(LOOKUP16)
        meta.stray_bits = (bit<32>)OR_WORDS(IDX16) & meta.index_mask;
    }

    action copy_words() {
        FOR_EACH_WORD(COPY_WORD)
    }

    action copy_norms() {
        FOR_EACH_NORM_WORD(COPY_NORMS)
    }

    apply {
        if (hdr.thc.op == OP_THC && hdr.thc.kind == KIND_REQUEST) {
            values.apply();
            if (meta.drop == 0) {
                if (meta.lane_bits == LANES_8) {
                    lookup8();
                } else {
                    lookup16();
                }
                if (meta.stray_bits != 0) {
                    bad_index();
                }
            }
        } else if (hdr.thc.op == OP_NORM) {
            copy_norms();  /* NORM requests and partials */
        } else {
            copy_words();  /* FIX32 requests, and partials of THC or FIX32 */
        }
    }
}

#endif
