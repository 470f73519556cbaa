"""The one device a thc-switch serves: its engine and the pipeline config P4Runtime knows.

`Device.engine` is what the data plane runs; it is replaced as a whole when a new pipeline is
committed (fresh tables, registers and counters, as VERIFY_AND_COMMIT requires), so the port loop
just reads the attribute for each batch. P4Runtime requests hold `Device.lock` so that a Write and a
pipeline change never interleave.
"""

import json
import threading
from dataclasses import dataclass, field

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from emulator.errors import LoadError
from emulator.p4rt.binding import PipelineBinding, bind
from emulator.p4rt.digests import DigestManager
from emulator.p4rt.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, P4RTError

SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest


def _default_engine_factory(config):
    from emulator.switch import SoftwareSwitch

    return SoftwareSwitch.from_json(config)


@dataclass
class Pipeline:
    """A verified pipeline: the engine built from the JSON, plus what P4Runtime needs about it."""

    engine: object
    binding: PipelineBinding | None  # None when started from a JSON file without P4Info
    p4info: p4info_pb2.P4Info | None
    device_config: bytes
    cookie: int | None = None
    entry_metadata: dict = field(default_factory=dict)  # (table id, key identity) -> (metadata, controller_metadata)
    mc_group_extras: dict = field(default_factory=dict)  # group id -> (port given as bytes?, metadata)
    clone_sessions: dict = field(default_factory=dict)  # session id -> (CloneSessionEntry, ports as bytes?)
    digests: DigestManager | None = None  # DigestEntry configs and DigestList batching (needs P4Info)
    group_max_size: dict = field(default_factory=dict)  # (action profile id, group id) -> max_size given


class Device:
    def __init__(self, device_id: int = 0, cpu_port: int | None = None, engine_factory=None):
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.engine_factory = engine_factory or _default_engine_factory
        self.lock = threading.RLock()
        self.pipeline: Pipeline | None = None
        self.saved: Pipeline | None = None  # VERIFY_AND_SAVE'd, waiting for COMMIT
        self._commit_listeners = []

    @property
    def engine(self):
        pipe = self.pipeline
        return pipe.engine if pipe is not None else None

    def check_device_id(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise P4RTError(NOT_FOUND, f"unknown device id {device_id} (this switch is device {self.device_id})")

    def require_pipeline(self) -> Pipeline:
        pipe = self.pipeline
        if pipe is None or pipe.binding is None:
            raise P4RTError(
                FAILED_PRECONDITION, "no forwarding pipeline config set (SetForwardingPipelineConfig with P4Info first)"
            )
        return pipe

    # ------------------------------------------------------------ building pipelines

    def build(self, p4info, device_config: bytes, cookie: int | None = None) -> Pipeline:
        """Load the JSON into a fresh engine and bind the P4Info to it (VERIFY)."""
        if not device_config:
            raise P4RTError(INVALID_ARGUMENT, "p4_device_config is empty: expected the BMv2 JSON from p4c")
        try:
            document = json.loads(device_config)
        except (ValueError, UnicodeDecodeError) as exc:
            raise P4RTError(INVALID_ARGUMENT, f"p4_device_config is not BMv2 JSON: {exc}") from None
        try:
            engine = self.engine_factory(document)
        except LoadError as exc:
            raise P4RTError(INVALID_ARGUMENT, f"device config cannot be loaded: {exc}") from None
        except Exception as exc:  # malformed JSON the engine trips over: still the client's input
            raise P4RTError(INVALID_ARGUMENT, f"device config cannot be loaded: {type(exc).__name__}: {exc}") from None
        binding = bind(p4info, engine.program) if p4info is not None else None
        digests = DigestManager(binding) if binding is not None else None
        return Pipeline(engine, binding, p4info, bytes(device_config), cookie, digests=digests)

    def load_file(self, json_path: str, p4info_path: str | None = None) -> None:
        """Start-up load from the command line (the P4Info, if given, enables P4Runtime at once)."""
        with open(json_path, "rb") as f:
            device_config = f.read()
        p4info = None
        if p4info_path:
            from google.protobuf import text_format
            from google.protobuf.message import DecodeError

            p4info = p4info_pb2.P4Info()
            with open(p4info_path, "rb") as f:
                data = f.read()
            try:
                if p4info_path.endswith((".bin", ".pb")):
                    p4info.ParseFromString(data)
                else:
                    text_format.Parse(data.decode(), p4info, allow_unknown_field=True)
            except (DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
                kind = "binary" if p4info_path.endswith((".bin", ".pb")) else "text"
                raise P4RTError(
                    INVALID_ARGUMENT, f"{p4info_path} is not a P4Info ({kind} protobuf, as p4c writes it): {exc}"
                ) from None
        self.commit(self.build(p4info, device_config))

    def add_commit_listener(self, callback) -> None:
        """`callback()` runs after every commit (the data plane switches loops when the engine changes)."""
        self._commit_listeners.append(callback)

    def commit(self, pipeline: Pipeline) -> None:
        with self.lock:
            self.pipeline = pipeline
            self.saved = None
        for callback in self._commit_listeners:
            callback()

    def set_pipeline(self, action: int, config) -> None:
        """SetForwardingPipelineConfig's actions (VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT)."""
        has_config = config.HasField("p4info") or bool(config.p4_device_config)
        cookie = config.cookie.cookie if config.HasField("cookie") else None
        with self.lock:
            if action in (SetAction.VERIFY, SetAction.VERIFY_AND_SAVE, SetAction.VERIFY_AND_COMMIT):
                if not config.HasField("p4info"):
                    raise P4RTError(INVALID_ARGUMENT, "config.p4info is missing")
                pipeline = self.build(config.p4info, config.p4_device_config, cookie)
                if action == SetAction.VERIFY_AND_SAVE:
                    self.saved = pipeline
                elif action == SetAction.VERIFY_AND_COMMIT:
                    self.commit(pipeline)
            elif action == SetAction.COMMIT:
                if has_config:
                    raise P4RTError(INVALID_ARGUMENT, "COMMIT takes no config: it realizes the saved one")
                if self.saved is None:
                    raise P4RTError(NOT_FOUND, "COMMIT without a config saved by VERIFY_AND_SAVE")
                self.commit(self.saved)
            elif action == SetAction.RECONCILE_AND_COMMIT:
                raise P4RTError(UNIMPLEMENTED, "RECONCILE_AND_COMMIT is not supported; use VERIFY_AND_COMMIT")
            else:
                raise P4RTError(INVALID_ARGUMENT, "SetForwardingPipelineConfig needs an action")

    def get_pipeline(self, response_type: int) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
        response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        pipe = self.pipeline
        if pipe is None:
            return response  # config unset: nothing known yet
        config = response.config
        if response_type in (Get.ALL, Get.P4INFO_AND_COOKIE) and pipe.p4info is not None:
            config.p4info.CopyFrom(pipe.p4info)
        if response_type in (Get.ALL, Get.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = pipe.device_config
        if response_type not in (Get.ALL, Get.P4INFO_AND_COOKIE, Get.DEVICE_CONFIG_AND_COOKIE, Get.COOKIE_ONLY):
            raise P4RTError(INVALID_ARGUMENT, f"unknown response_type {response_type}")
        if pipe.cookie is not None:
            config.cookie.cookie = pipe.cookie
        else:
            config.SetInParent()
        return response
