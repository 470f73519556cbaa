"""A timeline model of one data-parallel training step: buckets, cost models per path, and a simulator.

Espresso-style (EuroSys'23, §4.3): every DDP bucket becomes ready at some point of the backward pass; its
encoding, communication and decoding are laid out on a timeline with the overlap DDP allows, and the
iteration time of any per-bucket strategy follows. The communication costs cover the paths this testbed
has: in-network aggregation through the P4 switch (THC table values or FIX32 fixed point), ring all-reduce
(α-β, 2(n−1)/n of the bytes per direction) and all-gather for compressors whose payloads cannot be summed.

The packet facts the in-network cost needs are parameters, so a profile can model another build; their
defaults are the P4 program's, read from ``contract``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import contract
from thc.limits import DEFAULT_CHUNK, PAPER_CHUNK
from thc.modes import FIX32, THC

__all__ = [
    "Bucket",
    "StepProfile",
    "LinearCost",
    "INACost",
    "RingCost",
    "MeasuredCost",
    "AllGatherCost",
    "Mode",
    "Segment",
    "Timeline",
    "simulate",
    "Progress",
    "advance",
    "finish",
]

# The default build's cell (contract.WORDS 64-bit words): a request carries what a cell holds (1,024
# coordinates in 8-bit lanes, 512 in 16-bit lanes, 256 int32), and a result is the cell.
CELL_BYTES = contract.WORDS * contract.WORD_BYTES


@dataclass(frozen=True)
class Bucket:
    """One DDP bucket: ``index`` as DDP numbers them (0 is ready first, next to the output layer), its
    gradient coordinates, and when its last gradient is ready, in seconds after the backward pass starts."""

    index: int
    numel: int
    ready_s: float


@dataclass(frozen=True)
class StepProfile:
    """What one step computes, without communication: forward, backward (buckets' ready times inside it),
    optimizer. ``name`` says where the figures come from (a model on this machine, a profile file)."""

    buckets: tuple[Bucket, ...]
    forward_s: float
    backward_s: float
    optimizer_s: float = 0.0
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "buckets", tuple(sorted(self.buckets, key=lambda b: (b.ready_s, b.index))))

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def parameters(self) -> int:
        return sum(b.numel for b in self.buckets)


@dataclass(frozen=True)
class LinearCost:
    """A time that grows with the number of coordinates: ``base_s + numel · per_coord_s`` (a profiled
    compression or decompression time; Espresso's are of this shape, deterministic given the size)."""

    base_s: float = 0.0
    per_coord_s: float = 0.0

    def seconds(self, numel: int) -> float:
        return self.base_s + numel * self.per_coord_s if numel else 0.0


def _chunk_packets(numel: int, chunk: int, per_packet: int, pad_to_power_of_two: bool) -> tuple[int, int]:
    """(chunks, packets) of ``numel`` coordinates cut into chunks (THC pads the last to a power of two),
    each chunk in packets of ``per_packet``: arithmetic, not a list (a VGG bucket has thousands of chunks)."""
    full, rest = divmod(numel, chunk)
    packets = full * math.ceil(chunk / per_packet)
    if rest:
        last = 1 << (rest - 1).bit_length() if pad_to_power_of_two else rest
        packets += math.ceil(last / per_packet)
    return full + (1 if rest else 0), packets


@dataclass(frozen=True)
class INACost:
    """One bucket through the aggregating switch (THC or FIX32), per operation as the host agent runs it.

    A norm round (one norm per chunk, ``norms_per_packet`` a request), then the data requests: each worker
    sends P packets with a window of ``window`` in flight; the switch answers each slot once all n have
    arrived. The transfer is
    bounded by the slowest of: the worker's link up (requests) or down (results), the switch's packet
    rate over n·P requests, and one round trip per window; one round trip of latency is added per
    operation. ``switch_pps`` is requests (of all workers) the switch turns into results per second.
    """

    link_bps: float
    workers: int
    switch_pps: float
    rtt_s: float
    window: int = 64
    op: str = THC  # THC (4-bit indices in, lane_bits out) or FIX32 (int32 words)
    cell_bytes: int = CELL_BYTES
    coords_per_packet: int | None = None  # None: the lanes one cell holds (cell_bytes * 8 / lane bits)
    fix32_coords_per_packet: int | None = None  # None: cell_bytes / 4
    header_bytes: int = contract.FRAME_HEADER_BYTES  # Ethernet, IPv4, UDP and THC
    index_bits: int = contract.MAX_BITS
    lane_bits: int | None = None  # None: 8 if n·g ≤ 255, else 16, as the controller chooses
    granularity: int = 30
    chunk: int = DEFAULT_CHUNK  # THC's Hadamard chunk (thc-worker --chunk)
    fix32_chunk: int = PAPER_CHUNK  # ddp.aggregator_hooks.FixedPointHookState's
    norms_per_packet: int = contract.NORMS_PER_REQUEST
    norm_bytes: int = contract.NORM_PAYLOAD_BYTES  # a NORM request's and result's payload

    def __post_init__(self):
        if self.op not in (THC, FIX32):
            raise ValueError(f"INACost op must be {THC!r} or {FIX32!r}, not {self.op!r}")

    def lanes(self) -> int:
        if self.lane_bits is not None:
            return self.lane_bits
        return 8 if self.workers * self.granularity <= 255 else 16

    def thc_per_packet(self) -> int:
        return self.coords_per_packet or self.cell_bytes * 8 // self.lanes()

    def fix32_per_packet(self) -> int:
        return self.fix32_coords_per_packet or self.cell_bytes // 4

    def packets(self, numel: int) -> tuple[int, int]:
        """(norm requests, data requests) one worker sends for ``numel`` coordinates."""
        if self.op == THC:
            chunks, data = _chunk_packets(numel, self.chunk, self.thc_per_packet(), True)
        else:
            chunks, data = _chunk_packets(numel, self.fix32_chunk, self.fix32_per_packet(), False)
        return math.ceil(chunks / self.norms_per_packet), data

    def frame_bytes(self) -> tuple[int, int]:
        """(request, result) bytes on the wire of one data packet."""
        if self.op == THC:
            k = self.thc_per_packet()
            pad = contract.PAD16_BYTES if self.lanes() == contract.LANES_16 else 0
            return self.header_bytes + k * self.index_bits // 8 + pad, self.header_bytes + k * self.lanes() // 8
        size = self.header_bytes + 4 * self.fix32_per_packet()
        return size, size

    def _operation(self, packets: int, up: int, down: int) -> float:
        if packets == 0:
            return 0.0
        link = packets * max(up, down) * 8 / self.link_bps
        switch = self.workers * packets / self.switch_pps
        windows = (math.ceil(packets / self.window) - 1) * self.rtt_s
        return self.rtt_s + max(link, switch, windows)

    def seconds(self, numel: int) -> float:
        norms, data = self.packets(numel)
        up, down = self.frame_bytes()
        norm = self.header_bytes + self.norm_bytes
        return self._operation(norms, norm, norm) + self._operation(data, up, down)

    def bytes_per_worker(self, numel: int) -> tuple[int, int]:
        """(sent, received) bytes of one worker for ``numel`` coordinates."""
        norms, data = self.packets(numel)
        up, down = self.frame_bytes()
        norm = self.header_bytes + self.norm_bytes
        return norms * norm + data * up, norms * norm + data * down


@dataclass(frozen=True)
class RingCost:
    """Ring all-reduce of ``bytes_per_coord``-byte values among n workers (Thakur et al.; NCCL-tests):
    2(n−1) steps of latency α and 2(n−1)/n of the bytes through each worker's link per direction.
    ``efficiency``: payload share of the link (TCP/IP headers, ACKs); ``max_Bps``: a host-side ceiling on
    the bytes per second one worker moves, whatever the link (None: none)."""

    link_bps: float
    workers: int
    alpha_s: float
    bytes_per_coord: float = 4.0
    efficiency: float = 1.0
    max_Bps: float | None = None

    def bandwidth_Bps(self) -> float:
        rate = self.link_bps / 8 * self.efficiency
        return min(rate, self.max_Bps) if self.max_Bps else rate

    def seconds(self, numel: int) -> float:
        n = self.workers
        if n <= 1 or numel == 0:
            return 0.0
        volume = 2 * (n - 1) / n * numel * self.bytes_per_coord
        return 2 * (n - 1) * self.alpha_s + volume / self.bandwidth_Bps()


@dataclass(frozen=True)
class AllGatherCost:
    """Ring all-gather of a compressed payload (``bytes_per_coord`` of the bucket's coordinates per worker,
    e.g. TopK values + indices): n−1 steps, each worker receives the other n−1 payloads. For compressors
    whose payloads cannot be summed, so every worker decodes n of them."""

    link_bps: float
    workers: int
    alpha_s: float
    bytes_per_coord: float
    efficiency: float = 1.0

    def seconds(self, numel: int) -> float:
        n = self.workers
        if n <= 1 or numel == 0:
            return 0.0
        return (n - 1) * self.alpha_s + (n - 1) * numel * self.bytes_per_coord / (self.link_bps / 8 * self.efficiency)


@dataclass(frozen=True)
class MeasuredCost:
    """A time measured at a few sizes (``points``: (coordinates, seconds) pairs): piecewise linear between
    them, along the nearest segment beyond them, never below the smallest measured time (an aggregation
    always costs at least its round trips). For costs the testbed measures rather than derives."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self):
        pts = tuple(sorted((int(n), float(t)) for n, t in self.points))
        if not pts or len({n for n, _ in pts}) != len(pts):
            raise ValueError("MeasuredCost needs points at distinct sizes")
        object.__setattr__(self, "points", pts)

    def seconds(self, numel: int) -> float:
        if numel == 0:
            return 0.0
        pts = self.points
        if len(pts) == 1:
            return pts[0][1]
        k = next((i for i in range(1, len(pts) - 1) if numel <= pts[i][0]), len(pts) - 1)
        (n0, t0), (n1, t1) = pts[k - 1], pts[k]
        return max(t0 + (t1 - t0) * (numel - n0) / (n1 - n0), min(t for _, t in pts))


@dataclass(frozen=True)
class Mode:
    """One way to aggregate a bucket: encode on the compute thread, communicate on the network, decode.

    ``blocking``: the hook runs synchronously on the thread that runs the backward pass (this testbed's
    THC and FIX32 hooks wait for the switch's results before returning), so the backward pass stops until
    the bucket is decoded; otherwise only the encoding delays it (DDP's asynchronous all-reduce).

    ``early`` and ``sums_at`` (costs, or None) describe a pipelined round (ddp.aggregator_hooks's THC hook through the
    switch): ``early`` is the first part of the communication (preparation and the norm round), which may
    start while the previous bucket's sums are out if that bucket's mode is pipelined too; ``sums_at`` is
    when, counted from the start of this mode's own round, its sums go out (from then on the next
    pipelined bucket's early part may run). Both are parts of ``comm``, not additions to it."""

    name: str
    comm: object  # anything with seconds(numel)
    encode: LinearCost = LinearCost()
    decode: LinearCost = LinearCost()
    blocking: bool = False
    label: str = ""
    early: object | None = None
    sums_at: object | None = None

    def __post_init__(self):
        if (self.early is None) != (self.sums_at is None):
            raise ValueError(f"mode {self.name!r}: a pipelined round needs both early and sums_at")

    def comm_s(self, numel: int) -> float:
        return self.comm.seconds(numel)

    def pipeline_s(self, numel: int) -> tuple[float, float] | None:
        """(early part, when the sums go out) of a round of ``numel`` coordinates, each within the round;
        None for a mode that is not pipelined."""
        if self.early is None:
            return None
        comm = self.comm_s(numel)
        early = min(self.early.seconds(numel), comm)
        return early, min(max(self.sums_at.seconds(numel), early), comm)


@dataclass(frozen=True)
class Segment:
    lane: str  # "compute", "encode", "network", "decode"
    what: str  # "forward", "backward", "optimizer", or the bucket's "b<index> <mode>"
    start_s: float
    end_s: float


@dataclass
class Timeline:
    """The simulated step: its segments, when each bucket was done, and the iteration time."""

    iteration_s: float
    backward_end_s: float
    bucket_done_s: dict[int, float]
    segments: list[Segment] = field(default_factory=list)
    plan: dict[int, str] = field(default_factory=dict)

    @property
    def exposed_comm_s(self) -> float:
        """Time the step waits for aggregation after its own computation."""
        compute = sum(s.end_s - s.start_s for s in self.segments if s.lane == "compute")
        return self.iteration_s - compute


@dataclass(frozen=True)
class Progress:
    """What the rest of a step depends on after some buckets' hooks have run: how far blocking work and
    encodings have pushed the backward pass back (``delay``), when the network is free, when the last
    bucket so far was decoded, and from when the next bucket's early part may run (``early_from``: the
    last bucket's sums going out if its mode is pipelined, else ``net_free``; None: from the start).
    Every later time grows with each of the four, so a state no larger in all four is at least as good
    (the planner prunes on this)."""

    delay: float = 0.0
    net_free: float = 0.0
    last_done: float = 0.0
    early_from: float | None = None

    def pipeline_from(self) -> float:
        return self.net_free if self.early_from is None else self.early_from


def advance(
    state: Progress,
    called_s: float,
    encode_s: float,
    comm_s: float,
    decode_s: float,
    blocking: bool,
    pipeline: tuple[float, float] | None = None,
):
    """One bucket's hook called at ``called_s``: (encode end, communication start, its end, decode end, the
    state after it). DDP's rules: the encoding runs on the compute thread; communications use the network
    one at a time in hook order; decoding follows; a blocking mode holds the compute thread until decoded.
    A pipelined round (``pipeline``: its early part and when its sums go out, Mode.pipeline_s) starts its
    early part once the previous pipelined bucket's sums are out and the rest once the network is free."""
    enc_end = called_s + encode_s
    if pipeline is None:
        comm_start = max(enc_end, state.net_free)
        comm_end = comm_start + comm_s
        next_from = comm_end
    else:
        early_s, sums_at_s = pipeline
        comm_start = max(enc_end, state.pipeline_from())
        rest_start = max(comm_start + early_s, state.net_free)
        comm_end = rest_start + comm_s - early_s
        next_from = rest_start + sums_at_s - early_s
    dec_end = comm_end + decode_s
    held = dec_end if blocking else enc_end
    after = Progress(state.delay + (held - called_s), comm_end, max(state.last_done, dec_end), next_from)
    return enc_end, comm_start, comm_end, dec_end, after


def finish(profile: StepProfile, state: Progress) -> tuple[float, float, float]:
    """(end of the backward pass, when every bucket is in, end of the step) after the last bucket."""
    backward_end = profile.forward_s + profile.backward_s + state.delay
    synced = max(backward_end, state.last_done)
    return backward_end, synced, synced + profile.optimizer_s


def simulate(profile: StepProfile, plan: Mapping[int, Mode] | Sequence[Mode] | Mode) -> Timeline:
    """The step's timeline when bucket i goes through ``plan[i]`` (a Mode for all buckets, a sequence in
    bucket order, or a mapping from bucket index).

    Rules (DDP's; ``advance``): a bucket's hook is called when its gradient is ready; its encoding delays
    the rest of the backward pass; communications queue on the network in hook order (a pipelined round's
    early part may overlap the previous pipelined round's sums); decoding follows;
    a blocking mode holds the compute thread until it has decoded. The optimizer runs once the backward
    pass and every bucket are done.
    """
    modes = _modes_by_bucket(profile, plan)
    segments = [Segment("compute", "forward", 0.0, profile.forward_s)]
    t0 = profile.forward_s
    state = Progress(net_free=t0)
    cursor = t0  # where the compute thread is
    done: dict[int, float] = {}
    for b in profile.buckets:
        mode = modes[b.index]
        called = t0 + b.ready_s + state.delay
        if called > cursor:
            segments.append(Segment("compute", "backward", cursor, called))
        tag = f"b{b.index} {mode.name}"
        enc, comm, dec = mode.encode.seconds(b.numel), mode.comm_s(b.numel), mode.decode.seconds(b.numel)
        pipeline = mode.pipeline_s(b.numel)
        enc_end, comm_start, comm_end, dec_end, state = advance(state, called, enc, comm, dec, mode.blocking, pipeline)
        if enc_end > called:
            segments.append(Segment("encode", tag, called, enc_end))
        if pipeline is None:
            segments.append(Segment("network", tag, comm_start, comm_end))
        else:  # the early part, then the rest once the network is free (the early part may overlap the last)
            segments.append(Segment("network", f"b{b.index} early {mode.name}", comm_start, comm_start + pipeline[0]))
            segments.append(Segment("network", tag, comm_end - (comm - pipeline[0]), comm_end))
        if dec_end > comm_end:
            segments.append(Segment("decode", tag, comm_end, dec_end))
        done[b.index] = dec_end
        cursor = dec_end if mode.blocking else enc_end
    backward_end, synced, end = finish(profile, state)
    if backward_end > cursor:
        segments.append(Segment("compute", "backward", cursor, backward_end))
    if profile.optimizer_s:
        segments.append(Segment("compute", "optimizer", synced, end))
    return Timeline(end, backward_end, done, segments, {i: m.name for i, m in modes.items()})


def _modes_by_bucket(profile: StepProfile, plan) -> dict[int, Mode]:
    indices = sorted(b.index for b in profile.buckets)
    if isinstance(plan, Mode):
        return {i: plan for i in indices}
    if isinstance(plan, Mapping):
        missing = [i for i in indices if i not in plan]
        if missing:
            raise ValueError(f"the plan has no mode for bucket(s) {missing}")
        return {i: plan[i] for i in indices}
    plan = list(plan)
    if len(plan) != len(indices):
        raise ValueError(f"the plan has {len(plan)} modes for {len(indices)} buckets")
    return dict(zip(indices, plan))
