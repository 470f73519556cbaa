"""A raw P4Runtime client and protobuf helpers, for tests that speak P4Runtime without p4runtime-shell."""

import contextlib
import glob
import os
import queue
import threading

import grpc
import pytest
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from tests.support.paths import FIXTURE_BUILD

SetReq = p4runtime_pb2.SetForwardingPipelineConfigRequest


class Controller:
    """A raw P4Runtime client: one channel, one StreamChannel, an election id."""

    def __init__(self, address, election_id=(0, 1), device_id=0, arbitrate=True):
        self.channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.election_id = election_id
        self.device_id = device_id
        self.requests = queue.Queue()
        self.responses = queue.Queue()
        self.stream = self.stub.StreamChannel(iter(self.requests.get, None))
        self.stream_status = None
        threading.Thread(target=self._pump, daemon=True).start()
        if arbitrate:
            self.arbitrate(election_id)

    def _pump(self):
        try:
            for message in self.stream:
                self.responses.put(message)
        except grpc.RpcError as err:
            self.stream_status = err
            self.responses.put(err)

    def arbitrate(self, election_id, device_id=None):
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id if device_id is None else device_id
        if election_id is not None:
            req.arbitration.election_id.high, req.arbitration.election_id.low = election_id
            self.election_id = election_id
        self.requests.put(req)
        return self.next_message()

    def next_message(self, timeout=10):
        return self.responses.get(timeout=timeout)

    def _stamp(self, req):
        req.device_id = self.device_id
        req.election_id.high, req.election_id.low = self.election_id
        return req

    def set_pipeline(self, action=SetReq.VERIFY_AND_COMMIT, p4info=None, device_config=b"", cookie=None):
        req = self._stamp(SetReq(action=action))
        if p4info is not None:
            req.config.p4info.CopyFrom(p4info)
        if device_config:
            req.config.p4_device_config = device_config
        if cookie is not None:
            req.config.cookie.cookie = cookie
        return self.stub.SetForwardingPipelineConfig(req)

    def write(self, *updates, atomicity=None):
        req = self._stamp(p4runtime_pb2.WriteRequest())
        req.updates.extend(updates)
        if atomicity is not None:
            req.atomicity = atomicity
        return self.stub.Write(req)

    def read(self, *entities):
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        for e in entities:
            req.entities.add().CopyFrom(e)
        return [e for resp in self.stub.Read(req) for e in resp.entities]

    def close(self):
        self.requests.put(None)
        self.channel.close()


def update(kind, type_=p4runtime_pb2.Update.INSERT, **entity):
    u = p4runtime_pb2.Update(type=type_)
    getattr(u.entity, kind).CopyFrom(entity["msg"])
    return u


def write_errors(err: grpc.RpcError):
    """The per-update p4.v1.Error list of a failed Write, as p4runtime-shell decodes it."""
    assert err.code() == grpc.StatusCode.UNKNOWN
    blob = dict(err.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(blob)
    out = []
    for detail in status.details:
        e = p4runtime_pb2.Error()
        assert detail.Unpack(e)
        out.append(e)
    return out


def entity(kind, msg):
    e = p4runtime_pb2.Entity()
    getattr(e, kind).CopyFrom(msg)
    return e


def compiled(name, where=FIXTURE_BUILD):
    """(p4info path, json path) of a fixture program; skips while it has not been compiled."""
    program = os.path.join(where, f"{name}.json")
    p4infos = sorted(glob.glob(os.path.join(where, f"{name}*p4info*")))
    if not os.path.exists(program) or not p4infos:
        pytest.skip(f"fixture program {name} is not compiled in {where}")
    return p4infos[0], program


@contextlib.contextmanager
def served_device(**device_options):
    """A software switch's Device behind an in-process P4Runtime server on a free loopback port;
    ``device.address`` is where the server listens. The server stops on exit."""
    from emulator.p4runtime_server import Device, P4RuntimeServer

    device = Device(device_id=0, **device_options)
    server = P4RuntimeServer(device)
    device.address = f"127.0.0.1:{server.start('127.0.0.1:0')}"
    try:
        yield device
    finally:
        server.stop(0)
