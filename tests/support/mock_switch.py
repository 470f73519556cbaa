"""Test support for the controller tests (no tests here): the contract's P4Info and a mock switch.

`contract_p4info()` is the P4Info p4c writes for p4/thc.p4, built from the contract's names and widths
(p4/README.md), so the controller is tested before (and independently of) the compiled program.

`MockSwitch` is an in-process P4Runtime server in the style of p4runtime-shell's own tests
(p4runtime_sh/test.py): it records every request so that tests assert the exact protobufs sent, and it
keeps table entries and multicast groups so that what is written can be read back. It answers like
BMv2's PI server: INSERT of an existing key is ALREADY_EXISTS, MODIFY/DELETE of a missing one NOT_FOUND,
with one p4.v1.Error per update in grpc-status-details-bin.
"""

import threading
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

import contract

Update = p4runtime_pb2.Update


def contract_p4info(words: int = contract.WORDS, drop: set[str] = frozenset()) -> p4info_pb2.P4Info:
    """The THC program's P4Info (ids in p4c's style); names in `drop` are left out (to test mismatches)."""
    p4info = p4info_pb2.P4Info()
    p4info.pkg_info.arch = "v1model"
    ids = {}

    def action(name, params=()):
        if name in drop:
            return
        a = p4info.actions.add()
        a.preamble.id = 0x01000000 + len(p4info.actions)
        a.preamble.name = name
        a.preamble.alias = name.rsplit(".", 1)[-1]
        for i, (pname, width) in enumerate(params, 1):
            a.params.add(id=i, name=pname, bitwidth=width)
        ids[name] = a.preamble.id

    def table(name, keys, actions, default, size):
        if name in drop:
            return
        t = p4info.tables.add()
        t.preamble.id = 0x02000000 + len(p4info.tables)
        t.preamble.name = name
        t.preamble.alias = name.rsplit(".", 1)[-1]
        for i, (fname, width, kind) in enumerate(keys, 1):
            t.match_fields.add(id=i, name=fname, bitwidth=width, match_type=kind)
        for a in actions:
            if a in ids:
                t.action_refs.add(id=ids[a])
        t.const_default_action_id = 0
        t.size = size
        ids[name] = t.preamble.id

    exact, lpm = p4info_pb2.MatchField.EXACT, p4info_pb2.MatchField.LPM
    action("NoAction")
    action(contract.IPV4_FORWARD, [("dstAddr", 48), ("port", 9)])
    action(contract.FORWARDING_DROP)
    action(contract.SERVE)
    action(contract.SET_JOB, list(contract.SET_JOB_PARAMS))
    action(contract.UNKNOWN_JOB, list(contract.UNKNOWN_JOB_PARAMS))
    action(contract.BAD_INDEX)
    action(contract.SET_VALUES, list(contract.SET_VALUES_PARAMS))
    action(contract.SET_RESULT_DST, [("dmac", 48), ("dip", 32)])
    action(contract.TO_SPINE, [("leaf_id", 8), ("spine_addr", 32)])
    action(contract.USE_POOL, list(contract.USE_POOL_PARAMS))
    action(contract.OWNER_LIVE)
    action(contract.ANY_LATER_ROUND)
    table(
        contract.IPV4_LPM,
        [("hdr.ipv4.dstAddr", 32, lpm)],
        [contract.IPV4_FORWARD, contract.FORWARDING_DROP],
        contract.FORWARDING_DROP,
        1024,
    )
    table(contract.SERVICE_ADDR, [("hdr.ipv4.dstAddr", 32, exact)], [contract.SERVE, "NoAction"], "NoAction", 16)
    table(
        contract.JOBS,
        [("hdr.thc.job_id", 8, exact)],
        [contract.SET_JOB, contract.UNKNOWN_JOB],
        contract.UNKNOWN_JOB,
        64,
    )
    table(contract.UPLINK, [("hdr.thc.job_id", 8, exact)], [contract.TO_SPINE, "NoAction"], "NoAction", 64)
    table(
        contract.VALUES,
        [("hdr.thc.job_id", 8, exact)],
        [contract.SET_VALUES, contract.BAD_INDEX],
        contract.BAD_INDEX,
        contract.JOBS_CAPACITY,
    )
    for name, key, act in (
        (contract.POOL, ("hdr.thc.job_id", 8), contract.USE_POOL),
        (contract.POOL_LIVE, ("meta.owner_epoch", 16), contract.OWNER_LIVE),
        (contract.FALLBACK_ROUNDS, ("hdr.thc.job_id", 8), contract.ANY_LATER_ROUND),
    ):
        table(name, [(*key, exact)], [act, "NoAction"], "NoAction", contract.JOBS_CAPACITY)
    table(
        contract.RESULT_DST,
        [("hdr.thc.job_id", 8, exact), ("standard_metadata.egress_rid", 16, exact)],
        [contract.SET_RESULT_DST, "NoAction"],
        "NoAction",
        2048,
    )
    for k in range(words):
        name = contract.acc_register(k)
        if name not in drop:
            r = p4info.registers.add()
            r.preamble.id = 0x13000000 + k
            r.preamble.name = name
            r.type_spec.bitstring.bit.bitwidth = 64
            r.size = contract.CELLS
    if contract.THC_EVENTS not in drop:
        c = p4info.counters.add()
        c.preamble.id = 0x12000001
        c.preamble.name = contract.THC_EVENTS
        c.spec.unit = p4info_pb2.CounterSpec.BOTH
        c.size = contract.EVENT_CELLS
    if contract.THC_JOB_EVENTS not in drop:
        c = p4info.counters.add()
        c.preamble.id = 0x12000002
        c.preamble.name = contract.THC_JOB_EVENTS
        c.spec.unit = p4info_pb2.CounterSpec.BOTH
        c.size = contract.JOB_EVENT_CELLS
    for i, name in enumerate((contract.POOL_CLAIMS, contract.POOL_FREES)):
        if name not in drop:
            c = p4info.counters.add()
            c.preamble.id = 0x12000003 + i
            c.preamble.name = name
            c.spec.unit = p4info_pb2.CounterSpec.PACKETS
            c.size = contract.POOL_EPOCHS
    return p4info


def _key(entry: p4runtime_pb2.TableEntry):
    """Identity of a table entry: table, match (canonical bytes as sent), priority, default flag."""
    return (
        entry.table_id,
        tuple(sorted(fm.SerializeToString(deterministic=True) for fm in entry.match)),
        entry.priority,
        entry.is_default_action,
    )


class MockSwitch(p4runtime_pb2_grpc.P4RuntimeServicer):
    """A recording, stateful P4Runtime server for one device."""

    def __init__(self, p4info: p4info_pb2.P4Info | None = None, device_id: int = 0):
        self.device_id = device_id
        self.p4info = p4info
        self.device_config = b""
        self.lock = threading.Lock()
        self.writes: list[p4runtime_pb2.WriteRequest] = []
        self.reads: list[p4runtime_pb2.ReadRequest] = []
        self.pipelines: list[p4runtime_pb2.SetForwardingPipelineConfigRequest] = []
        self.entries: dict = {}  # _key -> TableEntry
        self.groups: dict[int, p4runtime_pb2.MulticastGroupEntry] = {}
        self.counters: dict[tuple[int, int], tuple[int, int]] = {}
        self.primary_election_id = None  # (high, low) of the primary; None: no controller yet
        self.reject = None  # callable(update) -> (code, message) | None
        self.server = None
        self.addr = None

    # ---- lifecycle ----

    def start(self) -> str:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.addr = f"127.0.0.1:{port}"
        return self.addr

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(None)

    # ---- helpers for tests ----

    def table_entries(self, table_id: int) -> list[p4runtime_pb2.TableEntry]:
        return [e for k, e in self.entries.items() if k[0] == table_id]

    def clear_log(self) -> None:
        self.writes.clear()
        self.reads.clear()
        self.pipelines.clear()

    # ---- P4Runtime ----

    def StreamChannel(self, request_iterator, context):
        for request in request_iterator:
            if request.HasField("arbitration"):
                arb = request.arbitration
                ours = (arb.election_id.high, arb.election_id.low)
                with self.lock:
                    if self.primary_election_id is None or ours >= self.primary_election_id:
                        self.primary_election_id = ours
                    primary = self.primary_election_id
                reply = p4runtime_pb2.StreamMessageResponse()
                reply.arbitration.device_id = arb.device_id
                reply.arbitration.election_id.high, reply.arbitration.election_id.low = primary
                reply.arbitration.status.code = code_pb2.OK if primary == ours else code_pb2.ALREADY_EXISTS
                yield reply

    def GetForwardingPipelineConfig(self, request, context):
        if self.p4info is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        reply = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        reply.config.p4info.CopyFrom(self.p4info)
        return reply

    def SetForwardingPipelineConfig(self, request, context):
        self.pipelines.append(request)
        with self.lock:
            self.p4info = request.config.p4info
            self.device_config = request.config.p4_device_config
            self.entries.clear()
            self.groups.clear()
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def Write(self, request, context):
        self.writes.append(request)
        if (request.election_id.high, request.election_id.low) != self.primary_election_id:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "Not primary")
        errors = []
        with self.lock:
            for update in request.updates:
                errors.append(self._apply(update))
        if any(code != code_pb2.OK for code, _ in errors):
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message="Write failure.")
            for code, message in errors:
                detail = any_pb2.Any()
                detail.Pack(p4runtime_pb2.Error(canonical_code=code, message=message))
                status.details.append(detail)
            context.abort_with_status(_Status(status))
        return p4runtime_pb2.WriteResponse()

    def _apply(self, update):
        if self.reject is not None:
            refusal = self.reject(update)
            if refusal is not None:
                return refusal
        which = update.entity.WhichOneof("entity")
        if which == "table_entry":
            entry = update.entity.table_entry
            key = _key(entry)
            exists = key in self.entries
            if update.type == Update.INSERT:
                if exists:
                    return code_pb2.ALREADY_EXISTS, "Match entry exists, use MODIFY if you wish to change action"
                self.entries[key] = entry
            elif update.type == Update.MODIFY:
                if not exists and not entry.is_default_action:
                    return code_pb2.NOT_FOUND, "Cannot find match entry"
                self.entries[key] = entry
            elif update.type == Update.DELETE:
                if not exists:
                    return code_pb2.NOT_FOUND, "Cannot find match entry"
                del self.entries[key]
            return code_pb2.OK, ""
        if which == "packet_replication_engine_entry":
            group = update.entity.packet_replication_engine_entry.multicast_group_entry
            gid = group.multicast_group_id
            if update.type == Update.INSERT and gid in self.groups:
                return code_pb2.ALREADY_EXISTS, "Multicast group already exists"
            if update.type in (Update.MODIFY, Update.DELETE) and gid not in self.groups:
                return code_pb2.NOT_FOUND, "Multicast group does not exist"
            if update.type == Update.DELETE:
                del self.groups[gid]
            else:
                self.groups[gid] = group
            return code_pb2.OK, ""
        return code_pb2.UNIMPLEMENTED, f"{which} not supported by the mock"

    def Read(self, request, context):
        self.reads.append(request)
        reply = p4runtime_pb2.ReadResponse()
        with self.lock:
            for wanted in request.entities:
                which = wanted.WhichOneof("entity")
                if which == "table_entry":
                    for entry in list(self.entries.values()):
                        same_table = wanted.table_entry.table_id in (0, entry.table_id)
                        if same_table and entry.is_default_action == wanted.table_entry.is_default_action:
                            reply.entities.add().table_entry.CopyFrom(entry)  # a default entry is read alone
                elif which == "packet_replication_engine_entry":
                    gid = wanted.packet_replication_engine_entry.multicast_group_entry.multicast_group_id
                    for group_id, group in sorted(self.groups.items()):
                        if gid in (0, group_id):
                            reply.entities.add().packet_replication_engine_entry.multicast_group_entry.CopyFrom(group)
                elif which == "counter_entry":
                    cid = wanted.counter_entry.counter_id
                    size = next(c.size for c in self.p4info.counters if c.preamble.id == cid)
                    one = wanted.counter_entry.HasField("index")
                    for index in [wanted.counter_entry.index.index] if one else range(size):
                        e = reply.entities.add().counter_entry
                        e.counter_id = cid
                        e.index.index = index
                        e.data.packet_count, e.data.byte_count = self.counters.get((cid, index), (0, 0))
        yield reply


class _Status(grpc.Status):
    def __init__(self, status: status_pb2.Status):
        self.code = grpc.StatusCode.UNKNOWN
        self.details = status.message
        self.trailing_metadata = (("grpc-status-details-bin", status.SerializeToString()),)
