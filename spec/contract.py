"""What the P4 program (p4/) fixes, in one place: names, parameter orders, limits, the THC header layout.

p4/README.md is the contract in prose; this module is the same contract for code. The controller, the host
agents, the topology model, the benchmarks and the tests import it instead of retyping a name or a limit,
and tests/p4/test_contract.py parses p4/config.p4, p4/headers.p4 and the compiled P4Info and fails when
they disagree with it. `check_p4info` compares a switch's P4Info with it at run time, so a switch running
another program (or an older build) is reported by the first missing or different object instead of
failing later with an opaque P4Runtime error.
"""

import struct
from dataclasses import dataclass

from p4.config.v1 import p4info_pb2

from controller.errors import PipelineMismatch

# ---- wire format (config.p4, headers.p4) ---------------------------------------------------------

THC_UDP_PORT = 21576  # 0x5448, "TH": UDP destination port of requests and results
THC_VERSION = 1

OP_NORM, OP_THC, OP_FIX32 = 1, 2, 3
KIND_REQUEST, KIND_RESULT, KIND_RESULT_RETX, KIND_RELEASE, KIND_PARTIAL = 0, 1, 2, 3, 4
OP_NAMES = {OP_NORM: "NORM", OP_THC: "THC", OP_FIX32: "FIX32"}
KIND_NAMES = {
    KIND_REQUEST: "REQUEST",
    KIND_RESULT: "RESULT",
    KIND_RESULT_RETX: "RESULT_RETX",
    KIND_RELEASE: "RELEASE",
    KIND_PARTIAL: "PARTIAL",
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
)
THC_HEADER = struct.Struct("!BBBBHBBII")  # the same 16 bytes, op/kind packed in one byte
THC_HEADER_BYTES = THC_HEADER.size

THC_PAIRS = 32  # index bytes per THC request in the default build (-DTHC_PAIRS=16|64: variants)
THC_PAIRS_VARIANTS = (16, 32, 64)
RESULT_LANE_BITS = (8, 16)  # THC result lanes, chosen per job
FIX32_LANE_BITS = 32

# ---- compile-time limits (config.p4 and the table sizes) -----------------------------------------

SLOTS = 1024  # THC_SLOTS: slots shared by all jobs
CELLS = 2 * SLOTS  # THC_CELLS: two cells per slot (the shadow copy)
MAX_WORKERS = 32  # THC_MAX_WORKERS: worker ids 0..31, the bitmap is 32 bits
MAX_BITS = 4  # bits per index: two indices per byte
SUM_LANE_MAX = 0xFFFF  # each coordinate's sum lives in a 16-bit lane: n * g <= 65535
RESULT8_MAX = 0xFF  # 8-bit result lanes carry sums up to 255
JOB_ID_MAX = 0xFF  # hdr.thc.job_id is 8 bits
EPOCH_MAX = 0xFFFF  # epochs are 1..65535, never 0
JOBS_CAPACITY = 64  # size of the jobs table
EVENT_CELLS = 32  # THC_EVENTS: cells of the thc_events counter (room for more events)
JOB_IDS = JOB_ID_MAX + 1  # THC_JOB_IDS
JOB_EVENT_CELLS = JOB_IDS * EVENT_CELLS  # THC_JOB_EVENTS: thc_job_events, cell job_id * EVENT_CELLS + event

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
BAD_INDEX = "ThcIngress.index_lookup.bad_index"  # every lookup lane's default action
RESULT_DST = "ThcEgress.result_dst"
SET_RESULT_DST = "ThcEgress.set_result_dst"
LUT_PREFIX = "ThcIngress.index_lookup.lut_"
SET_W_PREFIX = "ThcIngress.index_lookup.set_w_"
THC_EVENTS = "ThcIngress.thc_events"
THC_JOB_EVENTS = "ThcIngress.thc_job_events"

SLOT_TAG = "ThcIngress.slot_state.slot_tag"
SLOT_BITMAP = "ThcIngress.slot_state.slot_bitmap"
SLOT_REMAINING = "ThcIngress.slot_state.slot_remaining"
SLOT_COUNT = "ThcIngress.slot_state.slot_count"
ACC_PREFIX = "ThcIngress.aggregator.acc_"
NORM_MAX = "ThcIngress.aggregator.norm_max"

# set_job's parameters, in the action's order, with their widths.
SET_JOB_PARAMS = (
    ("n_workers", 8),
    ("slot_base", 16),
    ("n_slots", 16),
    ("mcast_grp", 16),
    ("worker_mask", 32),
    ("lane_bits", 8),
    ("epoch", 16),
)


def lut_table(lane: int) -> str:
    return f"{LUT_PREFIX}{lane}"


def lut_action(lane: int) -> str:
    return f"{SET_W_PREFIX}{lane}"


def lut_field(lane: int) -> str:
    return f"hdr.thc_idx.p{lane}"


def acc_register(lane: int) -> str:
    return f"{ACC_PREFIX}{lane}"


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


def table_specs(lanes: int = THC_PAIRS) -> list[TableSpec]:
    """Every table the controller writes, with its key and the action it installs."""
    specs = [
        TableSpec(IPV4_LPM, (("hdr.ipv4.dstAddr", 32, _LPM),), IPV4_FORWARD, (("dstAddr", 48), ("port", 9)), 1024),
        TableSpec(SERVICE_ADDR, (("hdr.ipv4.dstAddr", 32, _EXACT),), SERVE, (), 16),
        TableSpec(JOBS, (("hdr.thc.job_id", 8, _EXACT),), SET_JOB, SET_JOB_PARAMS, JOBS_CAPACITY),
        TableSpec(UPLINK, (("hdr.thc.job_id", 8, _EXACT),), TO_SPINE, (("leaf_id", 8), ("spine_addr", 32)), 64),
        TableSpec(
            RESULT_DST,
            (("hdr.thc.job_id", 8, _EXACT), ("standard_metadata.egress_rid", 16, _EXACT)),
            SET_RESULT_DST,
            (("dmac", 48), ("dip", 32)),
            2048,
        ),
    ]
    specs += [
        TableSpec(lut_table(i), ((lut_field(i), 8, _EXACT),), lut_action(i), (("w", 32),), 256) for i in range(lanes)
    ]
    return specs


def table_spec(name: str, lanes: int = THC_PAIRS) -> TableSpec:
    for spec in table_specs(lanes):
        if spec.name == name:
            return spec
    raise KeyError(f"'{name}' is not a table of the THC program's contract")


def lane_count(p4info: p4info_pb2.P4Info) -> int:
    """Number of lookup lanes (THC_PAIRS): lut_0 .. lut_{n-1} present in the P4Info."""
    names = {t.preamble.name for t in p4info.tables}
    lanes = 0
    while lut_table(lanes) in names:
        lanes += 1
    return lanes


def check_p4info(p4info: p4info_pb2.P4Info, where: str) -> int:
    """Raise PipelineMismatch naming the first contract object `p4info` lacks; return the lane count.

    `where` says whose P4Info it is ("the switch s1", "p4/build/thc.p4info.txtpb").
    """
    tables = {t.preamble.name: t for t in p4info.tables}
    actions = {a.preamble.name: a for a in p4info.actions}
    hint = "it is not the THC program of p4/ (push it with `thc-ctl push`)"
    if not tables:
        raise PipelineMismatch(f"{where} has no P4 program: push one with `thc-ctl push`")
    lanes = lane_count(p4info)
    for spec in table_specs(max(lanes, 1)):  # the lanes come last: name the plain tables first
        table = tables.get(spec.name)
        if table is None:
            raise PipelineMismatch(f"{where} has no table '{spec.name}': {hint}")
        fields = {mf.name: mf for mf in table.match_fields}
        for name, width, match_type in spec.keys:
            mf = fields.get(name)
            if mf is None or mf.bitwidth != width or mf.match_type != match_type:
                raise PipelineMismatch(
                    f"{where}: table '{spec.name}' has no {width}-bit "
                    f"{p4info_pb2.MatchField.MatchType.Name(match_type).lower()} key '{name}': {hint}"
                )
        action = actions.get(spec.action)
        if action is None or action.preamble.id not in {ref.id for ref in table.action_refs}:
            raise PipelineMismatch(f"{where}: table '{spec.name}' has no action '{spec.action}': {hint}")
        params = {p.name: p.bitwidth for p in action.params}
        for name, width in spec.params:
            if params.get(name) != width:
                raise PipelineMismatch(f"{where}: action '{spec.action}' has no {width}-bit parameter '{name}': {hint}")
    counters = {c.preamble.name: c for c in p4info.counters}
    events = counters.get(THC_EVENTS)
    if events is None or events.size < len(EVENTS):
        raise PipelineMismatch(f"{where} has no counter '{THC_EVENTS}' with {len(EVENTS)} cells: {hint}")
    job_events = counters.get(THC_JOB_EVENTS)
    if job_events is None or job_events.size != JOB_EVENT_CELLS:
        raise PipelineMismatch(f"{where} has no counter '{THC_JOB_EVENTS}' with {JOB_EVENT_CELLS} cells: {hint}")
    return lanes
