"""Failures a user can act on.

Every operation of the controller raises a ControlError (or a subclass) with a one-line message that says
what went wrong and what to check; the CLI prints it and exits 1, never a traceback. The subclasses let
callers (the topology runner, tests) tell the cases apart without parsing messages.
"""


class ControlError(Exception):
    """Something the user can fix: a bad argument, an unreachable switch, a rejected entry."""


class BadInput(ControlError):
    """An argument or file that cannot be used as given."""


class SwitchUnreachable(ControlError):
    """No P4Runtime server answers at the address (or it went away)."""


class NotPrimary(ControlError):
    """Another controller with a higher election id is the primary: writes are refused."""


class PipelineMismatch(ControlError):
    """The switch runs no P4 program, or one that is not the THC program this controller expects."""


class JobRefused(ControlError):
    """A job that the program cannot run: too many workers, sums that overflow, slots in use."""


class WriteRejected(ControlError):
    """The switch refused one or more updates of a Write; `failures` holds (index, description, error)."""

    def __init__(self, message: str, failures: list[tuple[int, str, str]]):
        super().__init__(message)
        self.failures = failures
