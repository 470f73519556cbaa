"""P4Runtime digests: DigestEntry configuration, DigestList batching and DigestListAck.

The semantics are PI's (proto/frontend/src/digest_mgr.cpp, what simple_switch_grpc runs), with the spec's
reading of `max_list_size` and exact timers instead of PI's periodic sweeps: emulator/README.md, "P4Runtime",
lists the rules and where PI differs; list ids count from 1 per digest, and DELETE forgets the configuration
and every pending sample. `DigestManager` has no thread and takes `now` (ns) from its clock, so
tests drive it exactly; the servicer's pump (service.DigestPump) feeds it the engine's samples and sends what
it returns."""

import time
from dataclasses import dataclass, field

from p4.v1 import p4runtime_pb2

from emulator.p4rt import bytestrings
from emulator.p4rt.errors import ALREADY_EXISTS, INVALID_ARGUMENT, NOT_FOUND, P4RTError

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE


@dataclass
class _Digest:
    id: int
    name: str
    shape: str  # "struct", "tuple" or "bitstring": how P4Info's type_spec wants the data
    config: object = None  # p4runtime_pb2.DigestEntry.Config, or None while not configured
    building: list = field(default_factory=list)  # values tuples of the list being built
    since: int = 0  # ns: first sample of the list being built
    next_list_id: int = 1
    in_flight: dict = field(default_factory=dict)  # list id -> (sent at ns, [values])
    cache: set = field(default_factory=set)  # samples suppressed until acked or timed out

    def reset(self):
        self.config = None
        self.building.clear()
        self.in_flight.clear()
        self.cache.clear()


class DigestManager:
    def __init__(self, binding, clock=time.monotonic_ns):
        """`binding.digests`: id -> DigestBinding (name, shape) of the pipeline's P4Info."""
        self.clock = clock
        self.by_id = {d.id: _Digest(d.id, d.name, d.shape) for d in binding.digests.values()}
        self.by_name = {d.name: d for d in self.by_id.values()}

    # ------------------------------------------------------------ configuration (Write / Read)
    def write(self, update_type, entry) -> None:
        digest = self.by_id.get(entry.digest_id)
        if digest is None:
            raise P4RTError(NOT_FOUND, f"{entry.digest_id} is not a valid digest id")
        if update_type == INSERT:
            if digest.config is not None:
                raise P4RTError(ALREADY_EXISTS, f"digest '{digest.name}' is already configured")
        elif update_type in (MODIFY, DELETE):
            if digest.config is None:
                raise P4RTError(NOT_FOUND, f"digest '{digest.name}' is not configured")
            if update_type == DELETE:
                digest.reset()
                return
        else:
            raise P4RTError(INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
        for what in ("max_timeout_ns", "ack_timeout_ns"):
            if getattr(entry.config, what) < 0:
                raise P4RTError(INVALID_ARGUMENT, f"digest '{digest.name}': {what} must not be negative")
        if entry.config.max_list_size < 0:
            raise P4RTError(INVALID_ARGUMENT, f"digest '{digest.name}': max_list_size must not be negative")
        config = p4runtime_pb2.DigestEntry.Config()
        config.CopyFrom(entry.config)
        digest.config = config

    def read(self, digest_id, new) -> None:
        if digest_id:
            digest = self.by_id.get(digest_id)
            if digest is None:
                raise P4RTError(NOT_FOUND, f"{digest_id} is not a valid digest id")
            if digest.config is None:
                raise P4RTError(NOT_FOUND, f"digest '{digest.name}' is not configured")
            chosen = [digest]
        else:
            chosen = [d for _, d in sorted(self.by_id.items()) if d.config is not None]
        for digest in chosen:
            entry = new()
            entry.digest_id = digest.id
            entry.config.CopyFrom(digest.config)

    # ------------------------------------------------------------ the data plane's samples
    def learn(self, name, values) -> list:
        """Take one sample of the digest named `name`; the DigestList messages now due."""
        digest = self.by_name.get(name)
        if digest is None or digest.config is None:
            return []
        config = digest.config
        if config.ack_timeout_ns > 0:
            if values in digest.cache:
                return []
            digest.cache.add(values)
        if not digest.building:
            digest.since = self.clock()
        digest.building.append(values)
        if config.max_timeout_ns == 0 or 0 < config.max_list_size <= len(digest.building):
            return [self._send(digest, self.clock())]
        return []

    def ack(self, ack) -> None:
        digest = self.by_id.get(ack.digest_id)
        if digest is None:
            return  # PI ignores acks of unknown digests and lists
        sent = digest.in_flight.pop(ack.list_id, None)
        if sent is not None:
            digest.cache.difference_update(sent[1])

    def poll(self) -> list:
        """Lists whose max_timeout passed (sent now) and acks that timed out (samples released)."""
        now, out = self.clock(), []
        for digest in self.by_id.values():
            config = digest.config
            if config is None:
                continue
            if digest.building and config.max_timeout_ns and now - digest.since >= config.max_timeout_ns:
                out.append(self._send(digest, now))
            if config.ack_timeout_ns:
                for list_id, (sent_at, samples) in list(digest.in_flight.items()):
                    if now - sent_at >= config.ack_timeout_ns:
                        del digest.in_flight[list_id]
                        digest.cache.difference_update(samples)
        return out

    def next_deadline(self) -> int | None:
        """ns until poll() has something to do, or None."""
        now, deadlines = self.clock(), []
        for digest in self.by_id.values():
            config = digest.config
            if config is None:
                continue
            if digest.building and config.max_timeout_ns:
                deadlines.append(digest.since + config.max_timeout_ns)
            if config.ack_timeout_ns:
                deadlines.extend(sent_at + config.ack_timeout_ns for sent_at, _ in digest.in_flight.values())
        return max(0, min(deadlines) - now) if deadlines else None

    def _send(self, digest, now) -> p4runtime_pb2.StreamMessageResponse:
        msg = p4runtime_pb2.StreamMessageResponse()
        lst = msg.digest
        lst.digest_id = digest.id
        lst.list_id = digest.next_list_id
        lst.timestamp = time.time_ns()
        for values in digest.building:
            _encode(digest.shape, values, lst.data.add())
        if digest.config.ack_timeout_ns:
            digest.in_flight[digest.next_list_id] = (now, list(digest.building))
        digest.next_list_id += 1
        digest.building = []
        return msg


def _encode(shape, values, data) -> None:
    if shape == "bitstring":
        data.bitstring = bytestrings.encode(values[0])
        return
    members = data.struct.members if shape == "struct" else data.tuple.members
    for v in values:
        members.add().bitstring = bytestrings.encode(v)
