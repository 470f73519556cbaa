"""The P4 program's control-plane contract (p4/README.md), in one place.

Names, widths and limits that the controller relies on. `check_p4info` compares a P4Info with them, so
that a switch running another program (or an older build) is reported by the first missing or different
object instead of failing later with an opaque P4Runtime error.
"""
from dataclasses import dataclass

from p4.config.v1 import p4info_pb2

from controller.errors import PipelineMismatch

# Tables and actions (P4Runtime names).
IPV4_LPM = "ThcIngress.forwarding.ipv4_lpm"
IPV4_FORWARD = "ThcIngress.forwarding.ipv4_forward"
FORWARDING_DROP = "ThcIngress.forwarding.drop"
SERVICE_ADDR = "ThcIngress.job_check.service_addr"
SERVE = "ThcIngress.job_check.serve"
JOBS = "ThcIngress.job_check.jobs"
SET_JOB = "ThcIngress.job_check.set_job"
RESULT_DST = "ThcEgress.result_dst"
SET_RESULT_DST = "ThcEgress.set_result_dst"
LUT_PREFIX = "ThcIngress.index_lookup.lut_"
SET_W_PREFIX = "ThcIngress.index_lookup.set_w_"
THC_EVENTS = "ThcIngress.thc_events"


def lut_table(lane: int) -> str:
    return f"{LUT_PREFIX}{lane}"


def lut_action(lane: int) -> str:
    return f"{SET_W_PREFIX}{lane}"


def lut_field(lane: int) -> str:
    return f"hdr.thc_idx.p{lane}"


# Compile-time limits (p4/config.p4).
SLOTS = 1024               # slots shared by all jobs
MAX_WORKERS = 32           # worker ids 0..31: the bitmap is 32 bits
MAX_BITS = 4               # bits per index: two indices per byte
SUM_LANE_MAX = 0xFFFF      # each coordinate's sum lives in a 16-bit lane: n * g <= 65535
RESULT8_MAX = 0xFF         # 8-bit result lanes carry sums up to 255
JOB_ID_MAX = 0xFF          # hdr.thc.job_id is 8 bits
EPOCH_MAX = 0xFFFF         # epochs are 1..65535, never 0

# Events counted in ThcIngress.thc_events, by index.
EVENTS = (
    "CONSUMED", "COMPLETED", "RETX_ANSWERED", "DROP_UNKNOWN_JOB", "DROP_FOREIGN_WORKER",
    "DROP_SLOT_RANGE", "DROP_STALE_ROUND", "DROP_DUPLICATE", "DROP_BAD_INDEX", "DROP_MALFORMED",
    "DROP_BAD_OP", "FORWARDED", "DROP_NO_ROUTE", "DROP_NOT_IPV4",
)

_EXACT = p4info_pb2.MatchField.EXACT
_LPM = p4info_pb2.MatchField.LPM


@dataclass(frozen=True)
class TableSpec:
    name: str
    keys: tuple[tuple[str, int, int], ...]          # (field name, bitwidth, match type)
    action: str
    params: tuple[tuple[str, int], ...]             # (param name, bitwidth)


def table_specs(lanes: int) -> list[TableSpec]:
    """Every table the controller writes, with its key and the action it installs."""
    specs = [
        TableSpec(IPV4_LPM, (("hdr.ipv4.dstAddr", 32, _LPM),), IPV4_FORWARD, (("dstAddr", 48), ("port", 9))),
        TableSpec(SERVICE_ADDR, (("hdr.ipv4.dstAddr", 32, _EXACT),), SERVE, ()),
        TableSpec(JOBS, (("hdr.thc.job_id", 8, _EXACT),), SET_JOB,
                  (("n_workers", 8), ("slot_base", 16), ("n_slots", 16), ("mcast_grp", 16),
                   ("worker_mask", 32), ("lane_bits", 8), ("epoch", 16))),
        TableSpec(RESULT_DST, (("hdr.thc.job_id", 8, _EXACT), ("standard_metadata.egress_rid", 16, _EXACT)),
                  SET_RESULT_DST, (("dmac", 48), ("dip", 32))),
    ]
    specs += [TableSpec(lut_table(i), ((lut_field(i), 8, _EXACT),), lut_action(i), (("w", 32),))
              for i in range(lanes)]
    return specs


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
    for spec in table_specs(max(lanes, 1)):        # the lanes come last: name the plain tables first
        table = tables.get(spec.name)
        if table is None:
            raise PipelineMismatch(f"{where} has no table '{spec.name}': {hint}")
        fields = {mf.name: mf for mf in table.match_fields}
        for name, width, match_type in spec.keys:
            mf = fields.get(name)
            if mf is None or mf.bitwidth != width or mf.match_type != match_type:
                raise PipelineMismatch(
                    f"{where}: table '{spec.name}' has no {width}-bit "
                    f"{p4info_pb2.MatchField.MatchType.Name(match_type).lower()} key '{name}': {hint}")
        action = actions.get(spec.action)
        if action is None or action.preamble.id not in {ref.id for ref in table.action_refs}:
            raise PipelineMismatch(f"{where}: table '{spec.name}' has no action '{spec.action}': {hint}")
        params = {p.name: p.bitwidth for p in action.params}
        for name, width in spec.params:
            if params.get(name) != width:
                raise PipelineMismatch(
                    f"{where}: action '{spec.action}' has no {width}-bit parameter '{name}': {hint}")
    counters = {c.preamble.name: c for c in p4info.counters}
    events = counters.get(THC_EVENTS)
    if events is None or events.size < len(EVENTS):
        raise PipelineMismatch(f"{where} has no counter '{THC_EVENTS}' with {len(EVENTS)} cells: {hint}")
    return lanes
