"""One P4Runtime connection to one switch, with errors a user can act on.

Why not p4runtime-shell's `setup()`/`client`: its client is one global per process, `setup()` calls
`sys.exit` on errors, and its entities write one update per RPC (a lookup table is 8192 entries, each a
round trip through the pure-Python protobuf it pins). The runner programs several switches from one process, and the
CLI must answer an unreachable switch or a rejected entry with one line, not an exit from inside a
library. So this module talks to the `p4runtime_pb2_grpc` stub directly: one object per switch, batched
Writes, exceptions instead of exits. P4Info handling stays p4runtime-shell's (controller/p4info.py).

The connection is opened lazily: reads need no arbitration (any client may read), writes first become
primary on the StreamChannel, which stays open until `close()` as P4Runtime requires.
"""

import queue
import threading

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.errors import ControlError, NotPrimary, PipelineMismatch, SwitchUnreachable, WriteRejected

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a BMv2 JSON with its P4Info can be many MB
UPDATES_PER_WRITE = 2048  # ~100 kB per WriteRequest at most
RPC_TIMEOUT = 60.0  # seconds: no call may hang forever on a wedged switch
SHOWN_FAILURES = 5  # rejected updates quoted in an error message


def parse_election_id(text: str) -> tuple[int, int]:
    """ "HIGH,LOW" (p4runtime-shell's form) or one integer LOW."""
    try:
        parts = [int(p, 0) for p in str(text).split(",")]
    except ValueError:
        raise ControlError(f"election id {text!r}: expected LOW or HIGH,LOW (integers)") from None
    if len(parts) == 1:
        parts = [0] + parts
    if len(parts) != 2 or not all(0 <= p < 2**64 for p in parts):
        raise ControlError(f"election id {text!r}: expected LOW or HIGH,LOW (64-bit integers)")
    if parts == [0, 0]:
        raise ControlError("election id 0 is reserved: use 1 or more")
    return parts[0], parts[1]


class SwitchConnection:
    """A P4Runtime client for one device at `grpc_addr`; use as a context manager or call close()."""

    def __init__(
        self,
        grpc_addr: str,
        device_id: int = 0,
        election_id: tuple[int, int] = (0, 1),
        connect_timeout: float = 5.0,
        label: str | None = None,
    ):
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = election_id
        self.connect_timeout = connect_timeout
        self.name = label
        self.label = f"{label + ' ' if label else ''}({grpc_addr}, device {device_id})"
        self._channel = None
        self._stub = None
        self._requests = None
        self._responses = None
        self._stream = None
        self._reader = None
        self.primary = False

    # ---- lifecycle ------------------------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def connect(self) -> None:
        """Open the channel and wait until the server answers (raise SwitchUnreachable if it does not)."""
        if self._stub is not None:
            return
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        channel = grpc.insecure_channel(self.grpc_addr, options=options)
        try:
            grpc.channel_ready_future(channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise SwitchUnreachable(
                f"{self.name + ': ' if self.name else ''}no P4Runtime server answers at {self.grpc_addr} "
                f"(waited {self.connect_timeout:g} s): "
                "check that the switch is running and that its gRPC address is this one "
                "(thc-switch --grpc-server-addr / simple_switch_grpc -- --grpc-server-addr)"
            ) from None
        self._channel = channel
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)

    def become_primary(self) -> None:
        """Arbitrate on the StreamChannel; raise NotPrimary if another controller outranks us."""
        if self.primary:
            return
        self.connect()
        self._requests = queue.Queue()
        self._responses = queue.Queue()

        def requests():
            while True:
                item = self._requests.get()
                if item is None:
                    return
                yield item

        self._stream = self._stub.StreamChannel(requests())

        def read_stream():
            try:
                for response in self._stream:
                    if response.HasField("arbitration"):
                        self._responses.put(response)
            except grpc.RpcError as exc:
                self._responses.put(exc)

        self._reader = threading.Thread(target=read_stream, name=f"p4rt-stream {self.grpc_addr}", daemon=True)
        self._reader.start()
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        request.arbitration.election_id.high, request.arbitration.election_id.low = self.election_id
        self._requests.put(request)
        try:
            answer = self._responses.get(timeout=self.connect_timeout)
        except queue.Empty:
            raise ControlError(
                f"{self.label}: no answer to the P4Runtime arbitration within {self.connect_timeout:g} s"
            ) from None
        if isinstance(answer, grpc.RpcError):
            raise self._rpc_error(answer, "arbitration")
        status = answer.arbitration.status
        if status.code != code_pb2.OK:
            raise NotPrimary(self._not_primary_message(answer.arbitration))
        self.primary = True

    def _not_primary_message(self, arbitration) -> str:
        """What the switch answered, in its terms: a primary exists (ALREADY_EXISTS), or none does
        (NOT_FOUND: the primary has gone, but the switch keeps the highest election id it has seen)."""
        held = arbitration.election_id
        theirs, ours = f"{held.high},{held.low}", f"{self.election_id[0]},{self.election_id[1]}"
        said = f"{code_pb2.Code.Name(arbitration.status.code)}"
        if arbitration.status.message:
            said += f" '{arbitration.status.message}'"
        if arbitration.status.code == code_pb2.ALREADY_EXISTS:
            return (
                f"{self.label}: not primary (switch answered {said}): another controller holds election id "
                f"{theirs} and ours is {ours}; pass a higher --election-id (or stop the other controller)"
            )
        if arbitration.status.code == code_pb2.NOT_FOUND and arbitration.HasField("election_id"):
            return (
                f"{self.label}: not primary (switch answered {said}): no controller is primary now; the "
                f"highest election id the switch has seen is {theirs} (a controller that may have gone), "
                f"ours is {ours}; pass --election-id {theirs} or higher to become primary"
            )
        return (
            f"{self.label}: not primary (switch answered {said}), with election id {ours}; pass a higher --election-id"
        )

    def close(self) -> None:
        if self._requests is not None:
            self._requests.put(None)
        if self._stream is not None:
            self._stream.cancel()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = self._stream = self._reader = self._requests = None
        self.primary = False

    # ---- RPCs -----------------------------------------------------------------------------------

    def get_p4info(self) -> p4info_pb2.P4Info | None:
        """The P4Info of the running pipeline, or None if the switch has none."""
        self.connect()
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE
        )
        try:
            reply = self._stub.GetForwardingPipelineConfig(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise self._rpc_error(exc, "reading the pipeline") from None
        if not reply.config.HasField("p4info") or not reply.config.p4info.tables:
            return None
        return reply.config.p4info

    def require_p4info(self) -> p4info_pb2.P4Info:
        p4info = self.get_p4info()
        if p4info is None:
            raise PipelineMismatch(
                f"{self.label} runs no P4 program: push one with `thc-ctl push` "
                "(or check --device-id: the switch answers for another device)"
            )
        return p4info

    def set_pipeline(self, p4info: p4info_pb2.P4Info, device_config: bytes) -> None:
        self.become_primary()
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        request.election_id.high, request.election_id.low = self.election_id
        request.config.p4info.CopyFrom(p4info)
        request.config.p4_device_config = device_config
        try:
            self._stub.SetForwardingPipelineConfig(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as exc:
            raise self._rpc_error(exc, "setting the pipeline") from None

    def write(self, updates: list, describe=None) -> None:
        """Send `updates` (Update messages) in as few WriteRequests as the size limit allows; stop at the
        first refusal.

        `describe(update) -> str` names a rejected update in the error message.
        """
        self.become_primary()
        for start in range(0, len(updates), UPDATES_PER_WRITE):
            chunk = updates[start : start + UPDATES_PER_WRITE]
            try:
                self._stub.Write(self.write_request(chunk), timeout=RPC_TIMEOUT)
            except grpc.RpcError as exc:
                raise self._write_error(exc, chunk, start, len(updates), describe) from None

    def write_request(self, updates: list) -> p4runtime_pb2.WriteRequest:
        """The WriteRequest message `write` would send (for dry runs)."""
        request = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        request.election_id.high, request.election_id.low = self.election_id
        request.updates.extend(updates)
        return request

    def read(self, entities: list) -> list:
        """All entities matching `entities` (wildcards allowed), in one ReadRequest."""
        self.connect()
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        request.entities.extend(entities)
        found = []
        try:
            for reply in self._stub.Read(request, timeout=RPC_TIMEOUT):
                found.extend(reply.entities)
        except grpc.RpcError as exc:
            raise self._rpc_error(exc, "reading") from None
        return found

    # ---- errors ---------------------------------------------------------------------------------

    def _rpc_error(self, exc: grpc.RpcError, what: str) -> ControlError:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            return SwitchUnreachable(f"{self.label}: lost the P4Runtime server during {what}: {details}")
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return NotPrimary(
                f"{self.label}: {what} refused, not primary ({details}): another controller "
                "with a higher election id took over; pass a higher --election-id"
            )
        if what == "arbitration" and "election" in details.lower():
            return NotPrimary(
                f"{self.label}: arbitration refused: {details}: another controller (a running "
                "thc-run?) uses election id "
                f"{self.election_id[0]},{self.election_id[1]}; pass another --election-id "
                "(a higher one takes over as primary while this command runs)"
            )
        if code == grpc.StatusCode.FAILED_PRECONDITION and "pipeline" in details.lower():
            return PipelineMismatch(
                f"{self.label} runs no P4 program ({details}): push one with `thc-ctl push` (or check --device-id)"
            )
        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION) and "device" in details.lower():
            return ControlError(f"{self.label}: {what} refused: {details}: check --device-id")
        if code == grpc.StatusCode.UNKNOWN:
            failures = _detail_errors(exc)
            if failures:
                details = "; ".join(f"{code_pb2.Code.Name(e.canonical_code)}: {e.message}" for _, e in failures)
        return ControlError(f"{self.label}: {what} failed: {code.name}: {details}")

    def _write_error(self, exc, chunk, offset, total, describe) -> ControlError:
        if exc.code() != grpc.StatusCode.UNKNOWN:
            return self._rpc_error(exc, "writing")
        failures = []
        for index, error in _detail_errors(exc):
            what = f"update {offset + index}"
            if describe and index < len(chunk):
                what = describe(chunk[index])
            failures.append((offset + index, what, f"{code_pb2.Code.Name(error.canonical_code)}: {error.message}"))
        if not failures:
            return ControlError(f"{self.label}: write failed: {exc.details()}")
        quoted = "; ".join(f"{what}: {err}" for _, what, err in failures[:SHOWN_FAILURES])
        more = f" (and {len(failures) - SHOWN_FAILURES} more)" if len(failures) > SHOWN_FAILURES else ""
        return WriteRejected(f"{self.label} rejected {len(failures)} of {total} updates: {quoted}{more}", failures)


def _detail_errors(exc: grpc.RpcError) -> list[tuple[int, p4runtime_pb2.Error]]:
    """(index, p4.v1.Error) of every failed update in a Write's `grpc-status-details-bin`.

    Not p4runtime-shell's P4RuntimeErrorIterator: in 0.0.6 it loops forever when an OK detail precedes
    an error (its `continue` skips the index increment), which is exactly what a batch looks like.
    """
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
            errors = []
            for index, detail in enumerate(status.details):
                error = p4runtime_pb2.Error()
                if detail.Unpack(error) and error.canonical_code != code_pb2.OK:
                    errors.append((index, error))
            return errors
    return []
