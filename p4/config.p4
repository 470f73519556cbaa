/* Compile-time limits and codes of the THC aggregation program (see README.md, the contract). */
#ifndef THC_CONFIG_P4
#define THC_CONFIG_P4

/* Index bytes per THC request; each byte carries two 4-bit indices, so K = 2 * THC_PAIRS coordinates. */
#ifndef THC_PAIRS
#define THC_PAIRS 32
#endif

#define THC_SLOTS 1024          /* slots shared by all jobs */
#define THC_CELLS 2048          /* two cells per slot: the shadow copy */
#define THC_EVENTS 32           /* cells of the thc_events counter: 21 events, room for more */
#define THC_JOB_IDS 256         /* hdr.thc.job_id is 8 bits */
#define THC_JOB_EVENTS 8192     /* thc_job_events: THC_EVENTS cells per job id (job_id * 32 + event) */

const bit<16> THC_UDP_PORT = 21576;   /* 0x5448, "TH" */
const bit<8>  THC_VERSION  = 1;
const bit<8>  THC_MAX_WORKERS = 32;   /* the worker bitmap is 32 bits */

const bit<4> OP_NORM  = 1;
const bit<4> OP_THC   = 2;
const bit<4> OP_FIX32 = 3;

const bit<4> KIND_REQUEST     = 0;
const bit<4> KIND_RESULT      = 1;
const bit<4> KIND_RESULT_RETX = 2;
const bit<4> KIND_RELEASE     = 3;   /* worker -> switch: complete the slot's use with what it has */
const bit<4> KIND_PARTIAL     = 4;   /* leaf -> spine: a leaf's sums (16-bit lanes) and their count */

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

/* Bytes after the IPv4 header: UDP (8) + THC header (16) + payload. */
#define THC_L4_BYTES 24
#define RESULT8_BYTES  (2 * THC_PAIRS)
#define RESULT16_BYTES (4 * THC_PAIRS)
#define FIX32_BYTES    (4 * THC_PAIRS)

/*
 * P4 has no loops: per-lane code is written once as a macro M(i, a, b) and unrolled here for every
 * pair i, which carries coordinates a = 2i and b = 2i + 1.
 */
#define PAIRS_0_15(M) \
    M(0, 0, 1) M(1, 2, 3) M(2, 4, 5) M(3, 6, 7) M(4, 8, 9) M(5, 10, 11) M(6, 12, 13) M(7, 14, 15) \
    M(8, 16, 17) M(9, 18, 19) M(10, 20, 21) M(11, 22, 23) M(12, 24, 25) M(13, 26, 27) M(14, 28, 29) \
    M(15, 30, 31)
#define PAIRS_16_31(M) \
    M(16, 32, 33) M(17, 34, 35) M(18, 36, 37) M(19, 38, 39) M(20, 40, 41) M(21, 42, 43) M(22, 44, 45) \
    M(23, 46, 47) M(24, 48, 49) M(25, 50, 51) M(26, 52, 53) M(27, 54, 55) M(28, 56, 57) M(29, 58, 59) \
    M(30, 60, 61) M(31, 62, 63)
#define PAIRS_32_63(M) \
    M(32, 64, 65) M(33, 66, 67) M(34, 68, 69) M(35, 70, 71) M(36, 72, 73) M(37, 74, 75) M(38, 76, 77) \
    M(39, 78, 79) M(40, 80, 81) M(41, 82, 83) M(42, 84, 85) M(43, 86, 87) M(44, 88, 89) M(45, 90, 91) \
    M(46, 92, 93) M(47, 94, 95) M(48, 96, 97) M(49, 98, 99) M(50, 100, 101) M(51, 102, 103) \
    M(52, 104, 105) M(53, 106, 107) M(54, 108, 109) M(55, 110, 111) M(56, 112, 113) M(57, 114, 115) \
    M(58, 116, 117) M(59, 118, 119) M(60, 120, 121) M(61, 122, 123) M(62, 124, 125) M(63, 126, 127)

#if THC_PAIRS == 16
#define FOR_EACH_PAIR(M) PAIRS_0_15(M)
#elif THC_PAIRS == 32
#define FOR_EACH_PAIR(M) PAIRS_0_15(M) PAIRS_16_31(M)
#elif THC_PAIRS == 64
#define FOR_EACH_PAIR(M) PAIRS_0_15(M) PAIRS_16_31(M) PAIRS_32_63(M)
#else
#error "THC_PAIRS must be 16, 32 or 64"
#endif

#endif
