"""The P4Runtime gRPC servicer: RPC-level checks, batching, and error reporting.

Entity work lives in `entities`, primary election in `arbitration`, the pipeline in `device`. Every
request is logged in one line at info on logger "emulator.p4runtime" (the full request at debug), the
server-side counterpart of p4lang/tutorials' `sN-p4runtime-requests.txt`.
"""

import importlib.metadata
import logging
import threading

import grpc
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from emulator.p4rt import direct_entries, entities, extern_entities, packet_io, value_sets
from emulator.p4rt.arbitration import Arbitrator, Session, election_id_of
from emulator.p4rt.errors import (
    FAILED_PRECONDITION,
    INTERNAL,
    INVALID_ARGUMENT,
    PERMISSION_DENIED,
    UNIMPLEMENTED,
    P4RTError,
    abort,
    abort_with_details,
)

log = logging.getLogger("emulator.p4runtime")
request_log = logging.getLogger("emulator.p4runtime.requests")

READ_CHUNK = 1000  # entities per ReadResponse message, to stay far below gRPC's 4 MB default


def api_version() -> str:
    """The P4Runtime version of the protobuf bindings this server is built on."""
    try:
        return importlib.metadata.version("p4runtime")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "1.4.1"


_WRITERS = {
    "table_entry": entities.write_table_entry,
    "counter_entry": entities.write_counter_entry,
    "direct_counter_entry": direct_entries.write_direct_counter_entry,
    "register_entry": entities.write_register_entry,
    "packet_replication_engine_entry": entities.write_pre_entry,
    "value_set_entry": value_sets.write_value_set_entry,
    "digest_entry": entities.write_digest_entry,
    "meter_entry": extern_entities.write_meter_entry,
    "direct_meter_entry": direct_entries.write_direct_meter_entry,
    "action_profile_member": extern_entities.write_action_profile_member,
    "action_profile_group": extern_entities.write_action_profile_group,
}
_READERS = {
    "table_entry": entities.read_table_entries,
    "counter_entry": entities.read_counter_entries,
    "direct_counter_entry": direct_entries.read_direct_counter_entries,
    "register_entry": entities.read_register_entries,
    "packet_replication_engine_entry": entities.read_pre_entries,
    "value_set_entry": value_sets.read_value_set_entries,
    "digest_entry": entities.read_digest_entries,
    "meter_entry": extern_entities.read_meter_entries,
    "direct_meter_entry": direct_entries.read_direct_meter_entries,
    "action_profile_member": extern_entities.read_action_profile_members,
    "action_profile_group": extern_entities.read_action_profile_groups,
}
_UPDATE_NAMES = {
    p4runtime_pb2.Update.INSERT: "INSERT",
    p4runtime_pb2.Update.MODIFY: "MODIFY",
    p4runtime_pb2.Update.DELETE: "DELETE",
}
_CLOSE = object()


def _describe(pipe, entity) -> str:
    """`kind name` of an Entity for the request log, e.g. "table_entry MyIngress.ipv4_lpm"."""
    kind = entity.WhichOneof("entity")
    if kind is None:
        return "(empty entity)"
    label = _entity_label(pipe, kind, getattr(entity, kind))
    return f"{kind} {label}" if label else kind


def _entity_label(pipe, kind, entity) -> str:
    """Short name of what an entity touches."""
    binding = pipe.binding if pipe else None
    try:
        if kind == "table_entry":
            t = binding.tables.get(entity.table_id) if binding else None
            name = t.name if t else f"table id {entity.table_id}" if entity.table_id else "all tables"
            return f"{name}{' (default)' if entity.is_default_action else ''}"
        if kind == "counter_entry":
            c = binding.counters.get(entity.counter_id) if binding else None
            return c.name if c else "all counters" if not entity.counter_id else f"counter id {entity.counter_id}"
        if kind == "register_entry":
            r = binding.registers.get(entity.register_id) if binding else None
            return r.name if r else "all registers" if not entity.register_id else f"register id {entity.register_id}"
        if kind == "packet_replication_engine_entry" and entity.HasField("multicast_group_entry"):
            return f"multicast group {entity.multicast_group_entry.multicast_group_id}"
        if kind == "packet_replication_engine_entry" and entity.HasField("clone_session_entry"):
            return f"clone session {entity.clone_session_entry.session_id}"
        if kind == "digest_entry":
            d = binding.digests.get(entity.digest_id) if binding else None
            return d.name if d else "all digests" if not entity.digest_id else f"digest id {entity.digest_id}"
    except AttributeError:
        pass
    return ""


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device, packet_out_sink=None):
        """`packet_out_sink(port, frame)` injects a frame into the data plane (the CPU port)."""
        self.device = device
        self.arbitrator = Arbitrator([device.device_id])
        self.packet_out_sink = packet_out_sink

    # ------------------------------------------------------------ Write

    def Write(self, request, context):
        self._log_request(
            "Write",
            request,
            lambda: ", ".join(
                f"{_UPDATE_NAMES.get(u.type, u.type)} {_describe(self.device.pipeline, u.entity)}"
                for u in request.updates
            ),
        )
        try:
            self.device.check_device_id(request.device_id)
            eid = election_id_of(request.election_id, request.HasField("election_id"))
            if not self.arbitrator.is_primary(request.device_id, request.role, eid):
                raise P4RTError(
                    PERMISSION_DENIED,
                    "Write refused: this client is not the primary (open a StreamChannel with the highest election id)",
                )
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise P4RTError(UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        except P4RTError as err:
            log.info("Write refused: %s", err)
            abort(context, err.code, err.message)
        errors = []
        with self.device.lock:
            try:
                pipe = self.device.require_pipeline()
            except P4RTError as err:
                abort(context, err.code, err.message)
            for update in request.updates:
                errors.append(self._apply(pipe, update))
        failed = [e for e in errors if e is not None]
        if failed:
            for e in failed:
                log.info("Write error: %s", e)
            abort_with_details(context, f"{len(failed)} of {len(errors)} updates failed", errors)
        return p4runtime_pb2.WriteResponse()

    def _apply(self, pipe, update):
        kind = update.entity.WhichOneof("entity")
        writer = _WRITERS.get(kind)
        try:
            if kind is None:
                raise P4RTError(INVALID_ARGUMENT, "update has no entity")
            if writer is None:
                raise P4RTError(UNIMPLEMENTED, f"writing {kind} is not supported by the software switch")
            writer(pipe, update.type, getattr(update.entity, kind))
            return None
        except P4RTError as err:
            return err
        except Exception as exc:  # an engine bug must not kill the RPC thread silently
            log.exception("Write of %s failed inside the engine", kind)
            return P4RTError(INTERNAL, f"{kind}: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------ Read

    def Read(self, request, context):
        self._log_request(
            "Read", request, lambda: ", ".join(_describe(self.device.pipeline, e) for e in request.entities)
        )
        responses, errors = [p4runtime_pb2.ReadResponse()], []

        def new_entity(kind):
            def new():
                if len(responses[-1].entities) >= READ_CHUNK:
                    responses.append(p4runtime_pb2.ReadResponse())
                return getattr(responses[-1].entities.add(), kind)

            return new

        with self.device.lock:
            try:
                self.device.check_device_id(request.device_id)
                pipe = self.device.require_pipeline()
            except P4RTError as err:
                abort(context, err.code, err.message)
            for entity in request.entities:
                kind = entity.WhichOneof("entity")
                try:
                    if kind is None:
                        raise P4RTError(INVALID_ARGUMENT, "read request has an empty entity")
                    reader = _READERS.get(kind)
                    if reader is None:
                        raise P4RTError(UNIMPLEMENTED, f"reading {kind} is not supported by the software switch")
                    reader(pipe, getattr(entity, kind), new_entity(kind))
                    errors.append(None)
                except P4RTError as err:
                    errors.append(err)
                except Exception as exc:
                    log.exception("Read of %s failed inside the engine", kind)
                    errors.append(P4RTError(INTERNAL, f"{kind}: {type(exc).__name__}: {exc}"))
        for response in responses:
            if len(response.entities):
                yield response
        failed = [e for e in errors if e is not None]
        if failed:
            log.info("Read error: %s", "; ".join(str(e) for e in failed))
            if len(errors) == 1:  # one request: its own code, as BMv2 answers (readable in p4runtime-shell)
                abort(context, failed[0].code, failed[0].message)
            abort_with_details(context, f"{len(failed)} of {len(errors)} read requests failed", errors)

    # ------------------------------------------------------------ pipeline config

    def SetForwardingPipelineConfig(self, request, context):
        action = p4runtime_pb2.SetForwardingPipelineConfigRequest.Action.Name(request.action)
        self._log_request(
            "SetForwardingPipelineConfig",
            request,
            lambda: (
                f"{action}, P4Info with {len(request.config.p4info.tables)} tables, "
                f"{len(request.config.p4_device_config)} bytes of device config"
            ),
            dump=False,
        )
        try:
            self.device.check_device_id(request.device_id)
            eid = election_id_of(request.election_id, request.HasField("election_id"))
            if not self.arbitrator.is_primary(request.device_id, request.role, eid):
                raise P4RTError(PERMISSION_DENIED, "SetForwardingPipelineConfig refused: not the primary client")
            self.device.set_pipeline(request.action, request.config)
        except P4RTError as err:
            log.info("SetForwardingPipelineConfig %s refused: %s", action, err)
            abort(context, err.code, err.message)
        log.info("SetForwardingPipelineConfig %s done", action)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        kind = p4runtime_pb2.GetForwardingPipelineConfigRequest.ResponseType.Name(request.response_type)
        self._log_request("GetForwardingPipelineConfig", request, lambda: kind)
        try:
            self.device.check_device_id(request.device_id)
            return self.device.get_pipeline(request.response_type)
        except P4RTError as err:
            abort(context, err.code, err.message)

    def Capabilities(self, request, context):
        self._log_request("Capabilities", request, lambda: "")
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api_version())

    # ------------------------------------------------------------ StreamChannel

    def StreamChannel(self, request_iterator, context):
        session = Session(context.peer())
        context.add_callback(lambda: session.outbox.put(_CLOSE))
        reader = threading.Thread(
            target=self._read_stream, args=(request_iterator, session), name="p4rt-stream", daemon=True
        )
        reader.start()
        try:
            while True:
                item = session.outbox.get()
                if item is _CLOSE:
                    return
                if isinstance(item, P4RTError):
                    abort(context, item.code, item.message)
                yield item
        finally:
            self.arbitrator.remove(session)
            log.info("StreamChannel closed (%s)", session.peer)

    def _read_stream(self, request_iterator, session):
        try:
            for message in request_iterator:
                kind = message.WhichOneof("update")
                if kind == "arbitration":
                    log.info(
                        "StreamChannel arbitration from %s: device %d, role '%s', election id %d",
                        session.peer,
                        message.arbitration.device_id,
                        message.arbitration.role.name,
                        election_id_of(message.arbitration.election_id, message.arbitration.HasField("election_id")),
                    )
                    try:
                        self.arbitrator.update(session, message.arbitration)
                    except P4RTError as err:
                        log.info("StreamChannel arbitration refused: %s", err)
                        session.outbox.put(err)  # ends the stream with that status
                        return
                elif kind == "packet":
                    self._packet_out(session, message.packet)
                elif kind == "digest_ack":
                    self._digest_ack(message.digest_ack)
                else:
                    self._stream_error(session, UNIMPLEMENTED, f"stream message '{kind}' is not supported")
        except grpc.RpcError:
            pass  # the client went away
        finally:
            session.outbox.put(_CLOSE)

    def _stream_error(self, session, code, message, packet=None):
        msg = p4runtime_pb2.StreamMessageResponse()
        msg.error.canonical_code = code
        msg.error.message = message
        if packet is not None:
            msg.error.packet_out.packet_out.CopyFrom(packet)
        session.send(msg)

    def _packet_out(self, session, packet):
        device = self.device
        primary = self.arbitrator.primary_session(device.device_id, session.role or "")
        if primary is not session:
            self._stream_error(session, PERMISSION_DENIED, "PacketOut refused: not the primary client", packet)
            return
        if device.cpu_port is None or self.packet_out_sink is None:
            self._stream_error(
                session, FAILED_PRECONDITION, "PacketOut needs a CPU port (start thc-switch with --cpu-port)", packet
            )
            return
        pipe = device.pipeline
        fields = pipe.binding.packet_out if pipe is not None and pipe.binding is not None else ()
        try:
            frame = packet_io.frame_from_packet_out(fields, packet)
        except P4RTError as err:
            self._stream_error(session, err.code, err.message, packet)
            return
        self.packet_out_sink(device.cpu_port, frame)

    def _digest_ack(self, ack):
        with self.device.lock:
            pipe = self.device.pipeline
            if pipe is not None and pipe.digests is not None:
                pipe.digests.ack(ack)

    def send_to_primary(self, message) -> bool:
        """Queue a stream message (a DigestList) for the primary controller, if there is one."""
        primary = self.arbitrator.primary_session(self.device.device_id)
        return primary is not None and primary.send(message)

    def packet_in(self, frame: bytes) -> bool:
        """Send a frame the program sent to the CPU port to the primary controller, if any."""
        primary = self.arbitrator.primary_session(self.device.device_id)
        pipe = self.device.pipeline
        if primary is None or pipe is None:
            return False
        fields = pipe.binding.packet_in if pipe.binding is not None else ()
        msg = packet_io.packet_in_from_frame(fields, frame)
        if msg is None:
            return False
        return primary.send(p4runtime_pb2.StreamMessageResponse(packet=msg))

    # ------------------------------------------------------------ logging

    def _log_request(self, rpc, request, summary, dump=True):
        if log.isEnabledFor(logging.INFO):
            log.info("P4Runtime %s: %s", rpc, summary())
        if dump and request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("[%s]\n%s", rpc, text_format.MessageToString(request))


class DigestPump:
    """A thread that turns the engine's digest samples into DigestList messages for the primary.

    The engine wakes it when a sample is queued (set_digest_listener); it also wakes for the
    DigestManager's timers (max_timeout_ns, ack_timeout_ns) and at least every POLL seconds, which
    is how it notices a newly committed pipeline.
    """

    POLL = 0.1

    def __init__(self, device, send):
        self.device = device
        self.send = send
        self.wake = threading.Event()
        self._stopping = False
        self._engine = None
        self._thread = threading.Thread(target=self._run, name="p4rt-digests", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self.wake.set()
        self._thread.join()

    def _run(self):
        while not self._stopping:
            self.wake.clear()
            timeout = self.POLL
            try:
                timeout = min(timeout, self._pump())
            except Exception:  # noqa: BLE001 - the pump must outlive a bad sample
                log.exception("digest pump")
            self.wake.wait(timeout)

    def _pump(self) -> float:
        pipe = self.device.pipeline
        if pipe is None or pipe.digests is None or not pipe.digests.by_id:
            return self.POLL
        engine = pipe.engine
        if engine is not self._engine and hasattr(engine, "set_digest_listener"):
            engine.set_digest_listener(self.wake.set)
            self._engine = engine
        messages = []
        with self.device.lock:
            for name, values in engine.digests() if hasattr(engine, "digests") else ():
                messages += pipe.digests.learn(name, values)
            messages += pipe.digests.poll()
            deadline = pipe.digests.next_deadline()
        for message in messages:
            if not self.send(message):
                log.info(
                    "DigestList %d of digest %d dropped: no primary controller",
                    message.digest.list_id,
                    message.digest.digest_id,
                )
        return self.POLL if deadline is None else deadline / 1e9
