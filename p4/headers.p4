/* Headers and metadata. Byte layout: README.md, "Packet formats". */
#ifndef THC_HEADERS_P4
#define THC_HEADERS_P4

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;
typedef bit<32> ip4Addr_t;

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

header ipv4_t {
    bit<4>    version;
    bit<4>    ihl;
    bit<8>    diffserv;
    bit<16>   totalLen;
    bit<16>   identification;
    bit<3>    flags;
    bit<13>   fragOffset;
    bit<8>    ttl;
    bit<8>    protocol;
    bit<16>   hdrChecksum;
    ip4Addr_t srcAddr;
    ip4Addr_t dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header thc_t {
    bit<8>  version;
    bit<4>  op;
    bit<4>  kind;
    bit<8>  job_id;
    bit<8>  worker_id;
    bit<16> slot;
    bit<8>  count;
    bit<8>  lane_bits;
    bit<32> round;
    bit<32> value;
    bit<32> key;
}

/*
 * THC requests: 4-bit table indices, first coordinate in the high nibble. Word k of the cell takes its
 * indices from q<k>: eight of them for 8-bit lanes, four for 16-bit lanes.
 */
#define IDX8_FIELD(k) bit<32> q##k;
header thc_idx8_t { FOR_EACH_WORD(IDX8_FIELD) }
#define IDX16_FIELD(k) bit<16> q##k;
header thc_idx16_t { FOR_EACH_WORD(IDX16_FIELD) }

/*
 * A cell's words: results (THC sums in lane_bits-wide lanes, or FIX32 int32 sums), FIX32 requests (two
 * int32 per word) and a leaf's PARTIAL. Lanes in coordinate order, the first in the high bits.
 */
#define WORD_FIELD(k) bit<64> v##k;
header thc_words_t { FOR_EACH_WORD(WORD_FIELD) }

/*
 * NORM requests, results and partials: NORM_WORDS words of two float32 norms (non-negative, as bit
 * patterns), the first norm in the high bits; unused lanes 0.
 */
#define NORM_FIELD(k) bit<64> n##k;
header thc_norms_t { FOR_EACH_NORM_WORD(NORM_FIELD) }

/*
 * Padding, read and thrown away. simple_switch gives a received packet 512 bytes of headroom
 * (PacketBuffer(len + 512) in simple_switch.cpp), so a result may be at most 512 bytes longer than the
 * packet that makes it: a request with 16-bit lanes (318 bytes) carries 256 bytes of padding after its
 * indices, and a THC or FIX32 RELEASE (62 bytes) carries 512, so that their 1,086-byte results fit.
 */
#define PAD_FIELD(k) bit<64> z##k;
header thc_pad_t { WORDS_0_31(PAD_FIELD) }

struct headers_t {
    ethernet_t  ethernet;
    ipv4_t      ipv4;
    udp_t       udp;
    thc_t       thc;
    thc_idx8_t  thc_idx8;
    thc_idx16_t thc_idx16;
    thc_words_t thc_words;
    thc_norms_t thc_norms;
    thc_pad_t   thc_pad_a;
    thc_pad_t   thc_pad_b;
}

#define W_FIELD(k) bit<64> w##k;
struct metadata_t {
    bit<32> event;         /* index into thc_events */
    bit<1>  drop;
    bit<1>  serve;         /* a THC request addressed to this switch's service address */
    /* the job, from the jobs table */
    bit<8>  n_workers;
    bit<16> slot_base;
    bit<16> n_slots;
    bit<16> mcast_grp;
    bit<32> worker_mask;
    bit<8>  lane_bits;
    bit<16> epoch;
    bit<32> key;
    bit<16> last_epoch;    /* jobs' default action's parameter: the controller's mark, read by no one here */
    /* the job's lookup table (index_lookup.values): V[j] is byte j % 8 of values_lo (j < 8) or values_hi */
    bit<64> values_lo;
    bit<64> values_hi;
    bit<32> index_mask;    /* index bits a table of 2^b entries never uses, in every nibble */
    bit<32> stray_bits;    /* the request's indices OR-ed together, masked with index_mask */
    /* the slot cell */
    bit<32> my_bit;
    bit<32> cell;
    bit<52> tag;           /* the cell's slot_tag: epoch, op, round */
    bit<32> bitmap;
    bit<8>  remaining;
    bit<8>  count;         /* contributions summed in the cell's use (the result's count) */
    bit<1>  first;
    bit<1>  dup;           /* answer from the cell (read the sums) instead of adding */
    bit<1>  late;          /* a contribution to a released use */
    bit<1>  release;       /* a RELEASE that completes the use */
    bit<1>  release_up;    /* leaf: a RELEASE of a use it completed, for the spine (which may still wait) */
    bit<1>  query;         /* a QUERY: answered with the cell's bitmap and remaining, nothing read or written */
    /* the shared pool (README.md, "Shared pool"): a pool job's use claims a cell of sums as it starts */
    bit<1>  pool;          /* the job takes its cells from the pool (slot_state.pool) */
    bit<16> pool_base;     /* the pool: cells pool_base .. pool_base + pool_cells - 1 of the sums */
    bit<16> pool_cells;    /* a power of two, or 0: no pool cell at all, every use falls back */
    bit<16> ring_offset;   /* where the job's ring of uses starts in the pool */
    bit<32> acc_cell;      /* the cell of sums: meta.cell for a static job, the use's pool cell for a pool job */
    bit<32> candidate;     /* the pool cell a new use of (slot, round) claims */
    bit<32> owner;         /* pool_owner[candidate] when probed: epoch ++ bookkeeping cell of its use, 0 free */
    bit<16> owner_epoch;   /* its epoch, the key of pool_live */
    bit<1>  owner_live;    /* that epoch is a pool job's on this switch: its use holds the cell */
    bit<16> lease;         /* cell_lease of the bookkeeping cell */
    bit<1>  fallback;      /* the use has no pool cell: answer FALLBACK */
    bit<1>  taken;         /* ... decided by this request (its first) */
    bit<1>  sparse;        /* a fallback server's job: any later round may start a bookkeeping cell's next use */
    bit<1>  ack;           /* an ACK: recorded in slot_acks, nothing summed or answered */
    bit<32> acks;          /* slot_acks of the bookkeeping cell: workers that said they have its use's result */
    /* aggregation */
    bit<64> keep;          /* 0 on the first packet of a use (write), all ones after (add) */
    bit<64> tmp;
    bit<32> hi;            /* NORM: a word's high lane's max */
    bit<32> lo;            /* NORM: its low lane's max */
    bit<1>  rewrite_result;
    /* two-level aggregation (README.md, "Two-level aggregation") */
    bit<1>  leaf;          /* this switch is a leaf of the job: completed sums go up as a PARTIAL */
    bit<8>  leaf_id;       /* the leaf's worker id in the spine's job */
    bit<32> spine_addr;    /* the spine's service address */
    bit<1>  down;          /* a spine's result to this leaf: multicast to the local workers */
    bit<1>  up;            /* a PARTIAL leaves for the spine: route it with ipv4_lpm */
    bit<8>  weight;        /* contributions a packet carries: 1, or a PARTIAL's count */
    FOR_EACH_WORD(W_FIELD) /* per word: the looked-up lanes, then the running sums */
}

#endif
