/* Compile-time limits and codes of the THC aggregation program (see README.md, the contract). */
#ifndef THC_CONFIG_P4
#define THC_CONFIG_P4

/*
 * Register words per cell. A cell holds THC_WORDS 64-bit words of sum lanes: 8 KiB bits = 1 KiB with
 * the default 128, the largest power of two whose result frame fits a 1500-byte MTU. A request carries
 * as many coordinates as one cell holds lanes: 8 * THC_WORDS with 8-bit lanes (1,024), 4 * THC_WORDS
 * with 16-bit lanes (512), 2 * THC_WORDS int32 values for FIX32 (256). -DTHC_WORDS=32|64: smaller cells,
 * for the benchmarks of coordinates per packet.
 */
#ifndef THC_WORDS
#define THC_WORDS 128
#endif

/*
 * A NORM request's payload: NORM_WORDS 64-bit words, two float32 norms a word (first norm in the high
 * bits), 16 norms a request; the switch keeps their lane-wise maxima in the cell's first NORM_WORDS words.
 */
#define NORM_WORDS 8
#define NORMS_BYTES (8 * NORM_WORDS)
#define FOR_EACH_NORM_WORD(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)

#define THC_SLOTS 1024          /* slots shared by all jobs */
#define THC_CELLS 2048          /* two cells per slot: the shadow copy */
/* Bookkeeping (tag, bitmap, remaining, count, lease) is kept for more slots than there are cells of sums: a
 * pool job's slots are numbered from THC_SLOTS on (its slot_base >= THC_SLOTS) and its sums live in cells
 * claimed from the shared pool round by round (slot_state.p4, README.md "Shared pool"). */
#define THC_BOOK_SLOTS 4096     /* static slots 0..1023, pool jobs' slots 1024..4095 */
#define THC_BOOK_CELLS 8192     /* two bookkeeping cells per slot */
#define POOL_EPOCHS 65536       /* cells of pool_claims and pool_frees: one per epoch (16 bits) */
#define THC_EVENTS 32           /* cells of the thc_events counter: 28 events, room for more */
#define THC_JOB_IDS 256         /* hdr.thc.job_id is 8 bits */
#define THC_JOB_EVENTS 8192     /* thc_job_events: THC_EVENTS cells per job id (job_id * 32 + event) */

const bit<16> THC_UDP_PORT = 21576;   /* 0x5448, "TH" */
const bit<8>  THC_VERSION  = 3;       /* 3: NORM_WORDS norms a NORM request (2: one, in the header) */
const bit<8>  THC_MAX_WORKERS = 32;   /* the worker bitmap is 32 bits */

const bit<4> OP_NORM  = 1;
const bit<4> OP_THC   = 2;
const bit<4> OP_FIX32 = 3;

const bit<4> KIND_REQUEST     = 0;
const bit<4> KIND_RESULT      = 1;
const bit<4> KIND_RESULT_RETX = 2;
const bit<4> KIND_RELEASE     = 3;   /* worker -> switch: complete the slot's use with what it has */
const bit<4> KIND_PARTIAL     = 4;   /* leaf -> spine: a leaf's sums and their count */
const bit<4> KIND_QUERY       = 5;   /* worker -> switch, header only: what does the cell hold of this use? */
const bit<4> KIND_STATUS      = 6;   /* switch -> the querying worker, header only: value = bitmap, count = lacking */
const bit<4> KIND_FALLBACK    = 7;   /* switch -> the sender, header only: this use has no pool cell, aggregate it elsewhere */
const bit<4> KIND_ACK         = 8;   /* worker -> switch, header only: I have this pool use's result (its cell may go) */

/* A bookkeeping cell's lease (slot_state.cell_lease): where the use's sums are, for a pool job. */
const bit<16> LEASE_FALLBACK = 0x8000;   /* the use found its pool cell taken: every request of it falls back */
const bit<16> LEASE_CLAIMED  = 0x4000;   /* the use holds pool cell lease[11:0] */
const bit<16> LEASE_FREED    = 0;        /* the use is over: every worker has its result, its cell went back */

/* Lane widths: what a packet's lane_bits says about its payload. */
const bit<8> LANES_8     = 8;    /* THC, n * g <= 255 */
const bit<8> LANES_16    = 16;   /* THC, n * g <= 65535 */
const bit<8> LANES_INT32 = 32;   /* FIX32 (int32), NORM (float32 bit patterns) */

/* One event per packet, counted in ThcIngress.thc_events. */
const bit<32> EV_CONSUMED            = 0;
const bit<32> EV_COMPLETED           = 1;
const bit<32> EV_RETX_ANSWERED       = 2;
const bit<32> EV_DROP_UNKNOWN_JOB    = 3;
const bit<32> EV_DROP_FOREIGN_WORKER = 4;
const bit<32> EV_DROP_SLOT_RANGE     = 5;
const bit<32> EV_DROP_STALE_ROUND    = 6;
const bit<32> EV_DROP_DUPLICATE      = 7;
const bit<32> EV_DROP_BAD_INDEX      = 8;
const bit<32> EV_DROP_MALFORMED      = 9;
const bit<32> EV_DROP_BAD_OP         = 10;
const bit<32> EV_FORWARDED           = 11;
const bit<32> EV_DROP_NO_ROUTE       = 12;
const bit<32> EV_DROP_NOT_IPV4       = 13;
const bit<32> EV_DROP_OP_MISMATCH    = 14;
const bit<32> EV_DROP_FAR_ROUND      = 15;
const bit<32> EV_RELEASED            = 16;  /* a RELEASE completed a use with k < n: sums multicast */
const bit<32> EV_LATE                = 17;  /* a contribution to a released use: not added, answered */
const bit<32> EV_RELEASE_IGNORED     = 18;  /* a RELEASE for a complete use, or one not in the cell */
const bit<32> EV_PARTIAL_RESENT      = 19;  /* leaf: a retransmission to a complete use re-sends its partial up */
const bit<32> EV_FANNED_OUT          = 20;  /* leaf: a spine's result multicast down to the local workers */
const bit<32> EV_DROP_BAD_KEY        = 21;  /* the packet's key is not its job's */
const bit<32> EV_DROP_LANE_MISMATCH  = 22;  /* framed for another lane width than its op has in its job */
const bit<32> EV_RELEASE_UP          = 23;  /* leaf: a RELEASE for a use the leaf completed went on to the spine */
const bit<32> EV_QUERY_ANSWERED      = 24;  /* a QUERY answered with the cell's STATUS for the use it names */
const bit<32> EV_POOL_TAKEN          = 25;  /* a pool use's first request found its cell held by another live use: FALLBACK */
const bit<32> EV_POOL_FALLBACK       = 26;  /* a later request, retransmission or query of a use that fell back: FALLBACK */
const bit<32> EV_POOL_ACK            = 27;  /* an ACK taken: the use's pool cell goes back once every worker acked */

/* Bytes after the IPv4 header: UDP (8) + THC header (20) + payload. */
#define THC_L4_BYTES 28
#define WORDS_BYTES (8 * THC_WORDS)   /* results, FIX32 requests, partials: the cell's words */

/*
 * P4 has no loops: per-word code is written once as a macro M(k) and unrolled here for every word k.
 */
#define WORDS_0_31(M) \
    M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
#define WORDS_32_63(M) \
    M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39) M(40) M(41) M(42) M(43) M(44) M(45) M(46) M(47) \
    M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55) M(56) M(57) M(58) M(59) M(60) M(61) M(62) M(63)
#define WORDS_64_127(M) \
    M(64) M(65) M(66) M(67) M(68) M(69) M(70) M(71) M(72) M(73) M(74) M(75) M(76) M(77) M(78) M(79) \
    M(80) M(81) M(82) M(83) M(84) M(85) M(86) M(87) M(88) M(89) M(90) M(91) M(92) M(93) M(94) M(95) \
    M(96) M(97) M(98) M(99) M(100) M(101) M(102) M(103) M(104) M(105) M(106) M(107) M(108) M(109) \
    M(110) M(111) M(112) M(113) M(114) M(115) M(116) M(117) M(118) M(119) M(120) M(121) M(122) M(123) \
    M(124) M(125) M(126) M(127)

/* The OR of f(k) over 16 words at a time: a flat chain of 16, so that expressions stay shallow. */
#define OR_0_15(f) \
    (f(0) | f(1) | f(2) | f(3) | f(4) | f(5) | f(6) | f(7) | \
     f(8) | f(9) | f(10) | f(11) | f(12) | f(13) | f(14) | f(15))
#define OR_16_31(f) \
    (f(16) | f(17) | f(18) | f(19) | f(20) | f(21) | f(22) | f(23) | \
     f(24) | f(25) | f(26) | f(27) | f(28) | f(29) | f(30) | f(31))
#define OR_32_47(f) \
    (f(32) | f(33) | f(34) | f(35) | f(36) | f(37) | f(38) | f(39) | \
     f(40) | f(41) | f(42) | f(43) | f(44) | f(45) | f(46) | f(47))
#define OR_48_63(f) \
    (f(48) | f(49) | f(50) | f(51) | f(52) | f(53) | f(54) | f(55) | \
     f(56) | f(57) | f(58) | f(59) | f(60) | f(61) | f(62) | f(63))
#define OR_64_79(f) \
    (f(64) | f(65) | f(66) | f(67) | f(68) | f(69) | f(70) | f(71) | \
     f(72) | f(73) | f(74) | f(75) | f(76) | f(77) | f(78) | f(79))
#define OR_80_95(f) \
    (f(80) | f(81) | f(82) | f(83) | f(84) | f(85) | f(86) | f(87) | \
     f(88) | f(89) | f(90) | f(91) | f(92) | f(93) | f(94) | f(95))
#define OR_96_111(f) \
    (f(96) | f(97) | f(98) | f(99) | f(100) | f(101) | f(102) | f(103) | \
     f(104) | f(105) | f(106) | f(107) | f(108) | f(109) | f(110) | f(111))
#define OR_112_127(f) \
    (f(112) | f(113) | f(114) | f(115) | f(116) | f(117) | f(118) | f(119) | \
     f(120) | f(121) | f(122) | f(123) | f(124) | f(125) | f(126) | f(127))

#if THC_WORDS == 32
#define FOR_EACH_WORD(M) WORDS_0_31(M)
#define OR_WORDS(f) (OR_0_15(f) | OR_16_31(f))
#elif THC_WORDS == 64
#define FOR_EACH_WORD(M) WORDS_0_31(M) WORDS_32_63(M)
#define OR_WORDS(f) ((OR_0_15(f) | OR_16_31(f)) | (OR_32_47(f) | OR_48_63(f)))
#elif THC_WORDS == 128
#define FOR_EACH_WORD(M) WORDS_0_31(M) WORDS_32_63(M) WORDS_64_127(M)
#define OR_WORDS(f) (((OR_0_15(f) | OR_16_31(f)) | (OR_32_47(f) | OR_48_63(f))) | \
                     ((OR_64_79(f) | OR_80_95(f)) | (OR_96_111(f) | OR_112_127(f))))
#else
#error "THC_WORDS must be 32, 64 or 128"
#endif

#endif
