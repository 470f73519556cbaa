"""Errors of the software switch engine.

Loading a program either succeeds completely or raises LoadError (UnsupportedConstruct for a valid
BMv2 construct this engine does not execute), so a program never runs with a silent difference from
BMv2. Control-plane calls raise EntryError; its `code` is the google.rpc code name a P4Runtime server
should answer with.
"""


class EmulatorError(Exception):
    """Base class of the engine's errors."""


class LoadError(EmulatorError):
    """The BMv2 JSON cannot be loaded (malformed, wrong version, dangling reference)."""


class UnsupportedConstruct(LoadError):
    """The BMv2 JSON uses a construct the engine does not execute; the message names it and where."""


class EntryError(EmulatorError, ValueError):
    """A control-plane request was refused: which object and why is in the message.

    `code` is one of INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED,
    PERMISSION_DENIED (the google.rpc canonical code names).
    """

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT"):
        super().__init__(message)
        self.code = code


class PacketError(EmulatorError):
    """A packet could not be processed (a P4 assert failed, a bad stack index...); it is dropped."""
