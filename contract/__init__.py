"""What the P4 program (p4/) fixes, in one place: names, parameter orders, limits, the THC header layout.

p4/README.md is the contract in prose; this module is the same contract for code. The controller, the host
agents, the topology model, the benchmarks and the tests import it instead of retyping a name or a limit,
and tests/p4/test_contract.py parses p4/config.p4, p4/headers.p4 and the compiled P4Info and fails when
they disagree with it. The controller compares a switch's P4Info with it at run time
(controller/pipeline.py), so a switch running another program (or an older build) is reported by the
first missing or different object instead of failing later with an opaque P4Runtime error. The
package's other module, ``contract.job``, is the other thing every layer agrees on: a job's description.
"""

import struct
from dataclasses import dataclass
from pathlib import Path

from p4.config.v1 import p4info_pb2

# ---- wire format (config.p4, headers.p4) ---------------------------------------------------------

THC_UDP_PORT = 21576  # 0x5448, "TH": UDP destination port of requests and results
THC_VERSION = 3  # 3: NORM requests carry NORMS_PER_REQUEST norms (2: one, in the header's value)

OP_NORM, OP_THC, OP_FIX32 = 1, 2, 3
KIND_REQUEST, KIND_RESULT, KIND_RESULT_RETX, KIND_RELEASE, KIND_PARTIAL = 0, 1, 2, 3, 4
# A header-only QUERY (worker -> switch) asks what a cell holds of a use; the STATUS answer (switch -> the
# worker) carries the cell's worker bitmap in `value` and the contributions it still lacks in `count`.
KIND_QUERY, KIND_STATUS = 5, 6
# A header-only FALLBACK (switch -> the sender) says that a pool job's use has no pool cell: the worker
# aggregates that use elsewhere (p4/README.md, "Shared pool"). Every request, retransmission and query of the
# use gets it, so all workers of the use agree.
KIND_FALLBACK = 7
# A header-only ACK (worker -> switch) says that the worker has a pool job's use's result: once every worker
# of the job has acked a use, its pool cell goes back to the pool (p4/README.md, "Shared pool").
KIND_ACK = 8
OP_NAMES = {OP_NORM: "NORM", OP_THC: "THC", OP_FIX32: "FIX32"}
KIND_NAMES = {
    KIND_REQUEST: "REQUEST",
    KIND_RESULT: "RESULT",
    KIND_RESULT_RETX: "RESULT_RETX",
    KIND_RELEASE: "RELEASE",
    KIND_PARTIAL: "PARTIAL",
    KIND_QUERY: "QUERY",
    KIND_STATUS: "STATUS",
    KIND_FALLBACK: "FALLBACK",
    KIND_ACK: "ACK",
}

# header thc_t, in order: (field, bits). op and kind share byte 1 (op in the high nibble).
THC_HEADER_FIELDS = (
    ("version", 8),
    ("op", 4),
    ("kind", 4),
    ("job_id", 8),
    ("worker_id", 8),
    ("slot", 16),
    ("count", 8),
    ("lane_bits", 8),
    ("round", 32),
    ("value", 32),
    ("key", 32),
)
THC_HEADER = struct.Struct("!BBBBHBBIII")  # the same 20 bytes, op/kind packed in one byte
THC_HEADER_BYTES = THC_HEADER.size
FRAME_HEADER_BYTES = 14 + 20 + 8 + THC_HEADER_BYTES  # Ethernet, IPv4 (no options), UDP, THC: 62

# A packet's lane_bits: what its payload's lanes are (LANES_* in config.p4). NORM's are 32-bit too: float32
# bit patterns, each lane reduced with max.
LANES_8, LANES_16, LANES_INT32 = 8, 16, 32
THC_LANE_BITS = (LANES_8, LANES_16)  # THC sums: 8-bit lanes when n * g <= 255, else 16 (per job)

# A cell is WORDS 64-bit register words (THC_WORDS); a request carries what one cell holds.
WORD_BYTES = 8
WORDS = 128  # the default build: 1 KiB cells, the largest whose result frame fits a 1500-byte MTU
WORDS_VARIANTS = (32, 64, 128)  # p4/build/variants/thc_words{32,64}.json and the default build
MTU = 1500  # the links' MTU the default build is sized for

# A NORM request, result and partial carry NORM_WORDS words (thc_norms), two float32 norms a word, the first
# in the high bits; the switch keeps the lane-wise maxima in the cell's first NORM_WORDS words.
NORM_WORDS = 8
NORMS_PER_REQUEST = NORM_WORDS * (64 // LANES_INT32)  # 16
NORM_PAYLOAD_BYTES = NORM_WORDS * WORD_BYTES  # 64

# p4c's outputs for p4/thc.p4, committed (make p4 rebuilds them)
BUILD_DIR = Path(__file__).resolve().parents[1] / "p4" / "build"
PROGRAM_JSON = BUILD_DIR / "thc.json"
PROGRAM_P4INFO = BUILD_DIR / "thc.p4info.txtpb"


def lanes_per_word(lane_bits: int) -> int:
    """Coordinates (THC) or values (FIX32) one 64-bit word holds."""
    if lane_bits not in (LANES_8, LANES_16, LANES_INT32):
        raise ValueError(f"lane_bits={lane_bits}: the program's lanes are 8, 16 (THC) or 32 (FIX32) bits")
    return 64 // lane_bits


def per_request(lane_bits: int, words: int = WORDS) -> int:
    """Coordinates a THC request (8- or 16-bit lanes) or values a FIX32 request (32) carries."""
    return words * lanes_per_word(lane_bits)


# simple_switch gives a received packet 512 bytes of headroom (PacketBuffer(len + 512), simple_switch.cpp):
# a result may be at most that much longer than the packet that makes it. So a THC request with 16-bit lanes
# carries 256 bytes of padding after its indices and a THC or FIX32 RELEASE 512 (parser.p4's thc_pad_a/b).
BMV2_HEADROOM = 512
PAD16_BYTES = 256
RELEASE_PAD_BYTES = 512


def request_payload_bytes(op: int, lane_bits: int, words: int = WORDS) -> int:
    """Bytes after the THC header of a REQUEST: 4-bit indices for THC (and 16-bit lanes' padding), the
    words for FIX32, NORM_WORDS words of norms for NORM."""
    if op == OP_NORM:
        return NORM_PAYLOAD_BYTES
    if op == OP_THC:
        return per_request(lane_bits, words) // 2 + (PAD16_BYTES if lane_bits == LANES_16 else 0)
    if op == OP_FIX32:
        return words * WORD_BYTES
    raise ValueError(f"unknown THC op {op}")


def release_payload_bytes(op: int) -> int:
    """Bytes after the THC header of a RELEASE: padding for THC and FIX32 (their results carry a cell); none
    for NORM (its 64-byte result fits the headroom)."""
    return 0 if op == OP_NORM else RELEASE_PAD_BYTES


def result_payload_bytes(op: int, words: int = WORDS) -> int:
    """Bytes after the THC header of a RESULT, RESULT_RETX or PARTIAL: the cell's words (NORM: its
    NORM_WORDS words of maxima)."""
    return NORM_PAYLOAD_BYTES if op == OP_NORM else words * WORD_BYTES


# ---- compile-time limits (config.p4 and the table sizes) -----------------------------------------

SLOTS = 1024  # THC_SLOTS: slots shared by all jobs
CELLS = 2 * SLOTS  # THC_CELLS: two cells per slot (the shadow copy)
MAX_WORKERS = 32  # THC_MAX_WORKERS: worker ids 0..31, the bitmap is 32 bits
MAX_BITS = 4  # bits per index: two indices per byte
TABLE_VALUE_MAX = 0xFF  # table values are bytes of the job's value vector: g <= 255
SUM_LANE_MAX = 0xFFFF  # the widest sum lane is 16 bits: n * g <= 65535
LANE8_MAX = 0xFF  # 8-bit lanes carry sums up to 255
JOB_ID_MAX = 0xFF  # hdr.thc.job_id is 8 bits
KEY_MAX = 0xFFFFFFFF  # hdr.thc.key is 32 bits
EPOCH_MAX = 0xFFFF  # epochs are 1..65535, never 0
JOBS_CAPACITY = 64  # size of the jobs table
EVENT_CELLS = 32  # THC_EVENTS: cells of the thc_events counter (room for more events)
JOB_IDS = JOB_ID_MAX + 1  # THC_JOB_IDS
JOB_EVENT_CELLS = JOB_IDS * EVENT_CELLS  # THC_JOB_EVENTS: thc_job_events, cell job_id * EVENT_CELLS + event

# The shared pool (p4/README.md, "Shared pool"): a pool job keeps its bookkeeping (tag, bitmap, remaining,
# count, lease) in slots numbered from SLOTS on, and claims a cell of sums from the pool as each use starts.
BOOK_SLOTS = 4096  # THC_BOOK_SLOTS: static slots 0..SLOTS-1, pool jobs' slots SLOTS..BOOK_SLOTS-1
BOOK_CELLS = 2 * BOOK_SLOTS  # THC_BOOK_CELLS
POOL_SLOTS = BOOK_SLOTS - SLOTS  # slots pool jobs' windows share
LEASE_FALLBACK = 0x8000  # cell_lease: the use fell back
LEASE_CLAIMED = 0x4000  # cell_lease: the use holds pool cell lease & LEASE_CELL_MASK
LEASE_CELL_MASK = 0x0FFF
LEASE_FREED = 0  # cell_lease: the use is over (every worker has its result) and its pool cell went back
POOL_EPOCHS = EPOCH_MAX + 1  # cells of pool_claims and pool_frees, indexed by epoch

# ---- P4Runtime names -----------------------------------------------------------------------------

IPV4_LPM = "ThcIngress.forwarding.ipv4_lpm"
IPV4_FORWARD = "ThcIngress.forwarding.ipv4_forward"
FORWARDING_DROP = "ThcIngress.forwarding.drop"
SERVICE_ADDR = "ThcIngress.job_check.service_addr"
SERVE = "ThcIngress.job_check.serve"
JOBS = "ThcIngress.job_check.jobs"
SET_JOB = "ThcIngress.job_check.set_job"
UNKNOWN_JOB = "ThcIngress.job_check.unknown_job"  # jobs' default action
UPLINK = "ThcIngress.job_check.uplink"  # two-level aggregation: a leaf's way to the spine
TO_SPINE = "ThcIngress.job_check.to_spine"
VALUES = "ThcIngress.index_lookup.values"  # a job's lookup table, keyed by the job
SET_VALUES = "ThcIngress.index_lookup.set_values"
BAD_INDEX = "ThcIngress.index_lookup.bad_index"  # values' default action: the job has no table
RESULT_DST = "ThcEgress.result_dst"
SET_RESULT_DST = "ThcEgress.set_result_dst"
THC_EVENTS = "ThcIngress.thc_events"
THC_JOB_EVENTS = "ThcIngress.thc_job_events"

SLOT_TAG = "ThcIngress.slot_state.slot_tag"
SLOT_BITMAP = "ThcIngress.slot_state.slot_bitmap"
SLOT_REMAINING = "ThcIngress.slot_state.slot_remaining"
SLOT_COUNT = "ThcIngress.slot_state.slot_count"
CELL_LEASE = "ThcIngress.slot_state.cell_lease"  # pool jobs: where a use's sums are
SLOT_ACKS = "ThcIngress.slot_state.slot_acks"  # pool jobs: workers that acked a complete use's result
POOL_OWNER = "ThcIngress.slot_state.pool_owner"  # per cell of sums: epoch << 16 | bookkeeping cell, 0 free
POOL = "ThcIngress.slot_state.pool"  # the jobs that take their cells from the pool
USE_POOL = "ThcIngress.slot_state.use_pool"
POOL_LIVE = "ThcIngress.slot_state.pool_live"  # the pool jobs' epochs: a cell held by another epoch is free
OWNER_LIVE = "ThcIngress.slot_state.owner_live"
FALLBACK_ROUNDS = "ThcIngress.slot_state.fallback_rounds"  # on a fallback server: the jobs it serves
ANY_LATER_ROUND = "ThcIngress.slot_state.any_later_round"
POOL_CLAIMS = "ThcIngress.slot_state.pool_claims"  # per epoch: pool cells claimed
POOL_FREES = "ThcIngress.slot_state.pool_frees"  # per epoch: pool cells freed (acked, or by the run's next uses)
ACC_PREFIX = "ThcIngress.aggregator.acc_"

# set_job's parameters, in the action's order, with their widths.
SET_JOB_PARAMS = (
    ("n_workers", 8),
    ("slot_base", 16),
    ("n_slots", 16),
    ("mcast_grp", 16),
    ("worker_mask", 32),
    ("lane_bits", 8),
    ("epoch", 16),
    ("key", 32),
)

# jobs' default action keeps the last epoch the controller gave a job on the switch: epochs are never given
# twice while registers may hold their cells (a pipeline push clears both).
UNKNOWN_JOB_PARAMS = (("last_epoch", 16),)

# set_values' parameters: V[0..7] in values_lo, V[8..15] in values_hi (V[j] in bits 8(j % 8) + 7 .. 8(j % 8)),
# and the index bits a table of 2^b entries never uses, in each of eight nibbles.
SET_VALUES_PARAMS = (("values_lo", 64), ("values_hi", 64), ("index_mask", 32))

# use_pool's parameters: the pool's first cell of sums, its size (a power of two, or 0: every use falls back)
# and where the job's ring of uses starts in it.
USE_POOL_PARAMS = (("pool_base", 16), ("pool_cells", 16), ("ring_offset", 16))


def pool_cell(slot: int, round_: int, n_slots: int, pool_base: int, pool_cells: int, ring_offset: int) -> int:
    """The pool cell a pool job's use of (slot, round) claims (slot_state.p4's probe_pool): its request
    number q = round * n_slots + slot, from ring_offset on, around the pool."""
    q = (round_ * n_slots + slot) & 0xFFFFFFFF
    return pool_base + ((q + ring_offset) & (pool_cells - 1) & 0xFFFFFFFF)


def acc_register(word: int) -> str:
    return f"{ACC_PREFIX}{word}"


# Events counted in ThcIngress.thc_events, by index (config.p4's EV_* constants without the prefix).
EVENTS = (
    "CONSUMED",
    "COMPLETED",
    "RETX_ANSWERED",
    "DROP_UNKNOWN_JOB",
    "DROP_FOREIGN_WORKER",
    "DROP_SLOT_RANGE",
    "DROP_STALE_ROUND",
    "DROP_DUPLICATE",
    "DROP_BAD_INDEX",
    "DROP_MALFORMED",
    "DROP_BAD_OP",
    "FORWARDED",
    "DROP_NO_ROUTE",
    "DROP_NOT_IPV4",
    "DROP_OP_MISMATCH",
    "DROP_FAR_ROUND",
    "RELEASED",
    "LATE",
    "RELEASE_IGNORED",
    "PARTIAL_RESENT",
    "FANNED_OUT",
    "DROP_BAD_KEY",
    "DROP_LANE_MISMATCH",
    "RELEASE_UP",
    "QUERY_ANSWERED",
    "POOL_TAKEN",
    "POOL_FALLBACK",
    "POOL_ACK",
)
EVENT_INDEX = {name: i for i, name in enumerate(EVENTS)}


def job_event_cell(job_id: int, event: str) -> int:
    """The cell of thc_job_events that counts `event` for job `job_id`."""
    return job_id * EVENT_CELLS + EVENT_INDEX[event]


_EXACT = p4info_pb2.MatchField.EXACT
_LPM = p4info_pb2.MatchField.LPM


@dataclass(frozen=True)
class TableSpec:
    """A table the controller writes: its keys and the action it installs, both in the program's order."""

    name: str
    keys: tuple[tuple[str, int, int], ...]  # (field name, bitwidth, match type)
    action: str
    params: tuple[tuple[str, int], ...]  # (param name, bitwidth)
    size: int
    default_action: str | None = None  # a default action the controller writes, and its parameters
    default_params: tuple[tuple[str, int], ...] = ()


TABLE_SPECS = (
    TableSpec(IPV4_LPM, (("hdr.ipv4.dstAddr", 32, _LPM),), IPV4_FORWARD, (("dstAddr", 48), ("port", 9)), 1024),
    TableSpec(SERVICE_ADDR, (("hdr.ipv4.dstAddr", 32, _EXACT),), SERVE, (), 16),
    TableSpec(
        JOBS,
        (("hdr.thc.job_id", 8, _EXACT),),
        SET_JOB,
        SET_JOB_PARAMS,
        JOBS_CAPACITY,
        UNKNOWN_JOB,
        UNKNOWN_JOB_PARAMS,
    ),
    TableSpec(UPLINK, (("hdr.thc.job_id", 8, _EXACT),), TO_SPINE, (("leaf_id", 8), ("spine_addr", 32)), 64),
    TableSpec(VALUES, (("hdr.thc.job_id", 8, _EXACT),), SET_VALUES, SET_VALUES_PARAMS, JOBS_CAPACITY),
    TableSpec(POOL, (("hdr.thc.job_id", 8, _EXACT),), USE_POOL, USE_POOL_PARAMS, JOBS_CAPACITY),
    TableSpec(POOL_LIVE, (("meta.owner_epoch", 16, _EXACT),), OWNER_LIVE, (), JOBS_CAPACITY),
    TableSpec(FALLBACK_ROUNDS, (("hdr.thc.job_id", 8, _EXACT),), ANY_LATER_ROUND, (), JOBS_CAPACITY),
    TableSpec(
        RESULT_DST,
        (("hdr.thc.job_id", 8, _EXACT), ("standard_metadata.egress_rid", 16, _EXACT)),
        SET_RESULT_DST,
        (("dmac", 48), ("dip", 32)),
        2048,
    ),
)


def table_spec(name: str) -> TableSpec:
    for spec in TABLE_SPECS:
        if spec.name == name:
            return spec
    raise KeyError(f"'{name}' is not a table of the THC program's contract")


def cell_words(p4info: p4info_pb2.P4Info) -> int:
    """Register words per cell (THC_WORDS) of a compiled program: its acc_0 .. acc_{W-1} registers."""
    names = {r.preamble.name for r in p4info.registers}
    words = 0
    while acc_register(words) in names:
        words += 1
    return words
