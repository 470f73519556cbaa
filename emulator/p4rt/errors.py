"""Errors of the P4Runtime service and their wire form.

Handlers raise `P4RTError(code, message)` (`engine_error` makes one of an engine refusal); the
servicer turns it into a gRPC status. A Write (or a batched Read) with failing updates answers gRPC
UNKNOWN with a `google.rpc.Status` in the `grpc-status-details-bin` trailer carrying one
`p4.v1.Error` per update, OK for the ones that succeeded, as the P4Runtime spec requires and
p4runtime-shell parses.
"""

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

OK = code_pb2.OK
UNKNOWN = code_pb2.UNKNOWN
INVALID_ARGUMENT = code_pb2.INVALID_ARGUMENT
NOT_FOUND = code_pb2.NOT_FOUND
ALREADY_EXISTS = code_pb2.ALREADY_EXISTS
PERMISSION_DENIED = code_pb2.PERMISSION_DENIED
RESOURCE_EXHAUSTED = code_pb2.RESOURCE_EXHAUSTED
FAILED_PRECONDITION = code_pb2.FAILED_PRECONDITION
OUT_OF_RANGE = code_pb2.OUT_OF_RANGE
UNIMPLEMENTED = code_pb2.UNIMPLEMENTED
INTERNAL = code_pb2.INTERNAL

# google.rpc codes and grpc.StatusCode share numbers.
_GRPC_CODE = {c.value[0]: c for c in grpc.StatusCode}


def code_name(code: int) -> str:
    return code_pb2.Code.Name(code)


class P4RTError(Exception):
    """A failure with a canonical code (google.rpc.Code) and a message for the user."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self):
        return f"{code_name(self.code)}: {self.message}"


def modify_only(update_type: int, what: str, kind: str) -> None:
    """Entries that live as long as the program (counters, registers, meters, value sets) are only
    modified: PI's server refuses INSERT and DELETE of them with INVALID_ARGUMENT."""
    if update_type != p4runtime_pb2.Update.MODIFY:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: {kind} entries can only be modified")


def engine_error(exc: Exception, what: str) -> P4RTError:
    """Map an engine refusal to a canonical code.

    The engine's EntryError carries `code`, a google.rpc code name, which wins; without one (another
    engine) the message decides: "not found"/"no entry" -> NOT_FOUND, "exists" ->
    ALREADY_EXISTS, "full" -> RESOURCE_EXHAUSTED, anything else INVALID_ARGUMENT.
    """
    message = str(exc)
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        code = code_pb2.Code.Value(code.upper()) if code.upper() in code_pb2.Code.keys() else None
    if not isinstance(code, int):
        low = message.lower()
        if "not found" in low or "no entry" in low or "does not exist" in low or "no such" in low:
            code = NOT_FOUND
        elif "exist" in low or "duplicate" in low:
            code = ALREADY_EXISTS
        elif "full" in low or "capacity" in low:
            code = RESOURCE_EXHAUSTED
        else:
            code = INVALID_ARGUMENT
    subject = " ".join(what.split(" ")[:2])  # "table 'X'": the engine's messages often name it already
    return P4RTError(code, message if subject in message else f"{what}: {message}")


def abort(context: grpc.ServicerContext, code: int, message: str):
    """End the RPC with a plain status (RPC-wide errors, no per-update details)."""
    context.abort(_GRPC_CODE[code], message)


def abort_with_details(context: grpc.ServicerContext, message: str, per_item: list):
    """End the RPC with UNKNOWN and one p4.v1.Error per item (None meaning the item succeeded)."""
    status = status_pb2.Status(code=UNKNOWN, message=message)
    for err in per_item:
        p4_error = p4runtime_pb2.Error(canonical_code=OK)
        if err is not None:
            p4_error.canonical_code = err.code
            p4_error.message = err.message
        packed = any_pb2.Any()
        packed.Pack(p4_error)
        status.details.append(packed)
    context.abort_with_status(_RichStatus(status))


class _RichStatus(grpc.Status):
    """A grpc.Status whose trailing metadata carries the serialized google.rpc.Status."""

    def __init__(self, status: status_pb2.Status):
        self.code = _GRPC_CODE[status.code]
        self.details = status.message
        self.trailing_metadata = (("grpc-status-details-bin", status.SerializeToString()),)
