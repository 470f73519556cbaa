"""An argparse parser whose usage errors are one line, as every other error of the CLIs is, and the
argument types that check a value's range where it is read (thc-ctl, thc-run and thc-worker share them).

argparse prints the whole usage block (8 lines for `thc-ctl table install`) above its message; the
message alone says what is wrong, and ``--help`` is named for the rest:

    thc-ctl: error: argument --bits: invalid int value: 'four' (see `thc-ctl table install --help`)
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

LARGEST = 1e9  # no figure these CLIs take (seconds, Mbit/s, rates, a learning rate) means anything larger
LARGEST_INT = 2**63 - 1  # no count, id or seed they take is wider than a machine word


def _finite_number(what: str, zero_allowed: bool, negative_allowed: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if abs(value) > LARGEST:
            raise argparse.ArgumentTypeError(f"{text!r}: too large (at most {LARGEST:g})")
        low_ok = True if negative_allowed else (0 <= value if zero_allowed else 0 < value)
        if not low_ok or value != value:  # NaN
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    return parse


def finite_number(text: str) -> float:
    """argparse type: any finite number within +-1e9 (what OneLineParser makes of type=float)."""
    return _finite_number("a finite number", zero_allowed=True, negative_allowed=True)(text)


def positive_number(unit: str = ""):
    """argparse type: a finite number > 0; `unit` ("seconds") names what it counts in the error."""
    return _finite_number(f"a positive number of {unit}" if unit else "a positive number", zero_allowed=False)


def non_negative_number(unit: str = ""):
    """argparse type: a finite number >= 0; `unit` names what it counts in the error."""
    return _finite_number(f"a number of {unit} >= 0" if unit else "a number >= 0", zero_allowed=True)


def number_in(lo: float, hi: float, what: str = "", below_hi: bool = False):
    """argparse type: a finite number in lo..hi (below_hi: hi itself excluded, e.g. a loss probability of 1
    would never let a round finish); `what` names it in the error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what or 'a number'}") from None
        if not (lo <= value and (value < hi if below_hi else value <= hi)):  # NaN fails
            raise argparse.ArgumentTypeError(
                f"{text!r}: must be {lo:g}..{hi:g}{' (not ' + format(hi, 'g') + ')' if below_hi else ''}"
            )
        return value

    return parse


def fraction(what: str, example: str):
    """argparse type: a number in (0, 1] (an accuracy, a share of coordinates): 0 would mean nothing at all;
    `what` and `example` ("an accuracy", "0.9") say what it is in the error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if not 0 < value <= 1:  # NaN fails
            raise argparse.ArgumentTypeError(f"{text}: {what} in (0, 1], like {example}")
        return value

    return parse


def host_port(lowest_port: int = 1, example: str = "127.0.0.1:50051"):
    """argparse type: HOST:PORT with the port in lowest_port..65535 (a server's 0: any free port); `unix:PATH`
    as it is (gRPC takes both). A port gRPC would wrap round (99999 binds 34463) is refused."""

    def parse(text: str) -> str:
        if text.startswith("unix:"):
            return text
        host, colon, port = text.strip().rpartition(":")
        if not colon or not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT, like {example}")
        if not lowest_port <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"{text!r}: port {port} is outside {lowest_port}..65535")
        return f"{host}:{int(port)}"

    return parse


def names_in(choices, placed=()):
    """argparse type: comma-separated names, each one of `choices` and none twice, given back as written; a
    name in `placed` may carry ':WHERE' (thc-run's ps modes name their placement: thc-ps:colocated4)."""
    choices = tuple(choices)

    def parse(text: str) -> str:
        names = [name.strip() for name in text.split(",")]
        bases = [name.partition(":")[0] if name.partition(":")[0] in placed else name for name in names]
        unknown = [name for name, base in zip(names, bases) if base not in choices]
        if not all(names) or unknown or len(set(names)) != len(names):
            why = f"unknown {', '.join(map(repr, unknown))}" if unknown else "a name empty or twice"
            raise argparse.ArgumentTypeError(f"{text!r}: {why}; choose from {', '.join(choices)}")
        return text

    return parse


def listed(item):
    """argparse type: comma-separated values, each checked by the argparse type `item`; gives the text back
    as written (the command splits it where it always has)."""

    def parse(text: str) -> str:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated values, none empty")
        for part in parts:
            item(part)
        return text

    return parse


def int_in(lo: int, hi: int | None = None, why: str = ""):
    """argparse type: an integer in lo..hi (hi None: what a machine word holds); the message says the range
    and why."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
        if hi is None and value > LARGEST_INT:
            raise argparse.ArgumentTypeError(f"{text}: too large (at most {LARGEST_INT:,})")
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{value}: must be {bound}{why}")
        return value

    return parse


def input_file(text: str) -> str:
    """argparse type: a file the command will read: it must be there now, so a typo fails before anything
    starts (a rendezvous, a switch, a run), not after. Gives the text back as written."""
    path = Path(text)
    if not path.is_file():
        missing = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {missing}")
    return text


def input_path(text: str) -> Path:
    """input_file as a Path."""
    return Path(input_file(text))


def output_file(text: str) -> Path:
    """argparse type: a file the command will write: its folder must exist and it must not be a folder, so
    a typo fails before anything is installed or computed, not after."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file in it")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: there is no folder {str(path.parent)!r} (create it first)")
    return path


def _file_in_the_way(path: Path) -> Path | None:
    """The file standing where one of path's folders would have to be made, if any (its nearest existing
    ancestor, when that is not a folder)."""
    existing = next((parent for parent in path.parents if parent.exists()), None)
    return None if existing is None or existing.is_dir() else existing


def folder(text: str) -> Path:
    """argparse type: a folder the command will create or fill: refused at once if a file of that name is
    there, or a file stands where one of its parents would be made."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder: name a folder")
    if (blocker := _file_in_the_way(path)) is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {str(blocker)!r} is a file, so no folder can be made there")
    return path


def created_file(text: str) -> Path:
    """argparse type: a file the command will write, making its folders as needed: refused at once if it is
    a folder, or a file stands where one of its folders would be made (a write that fails only at the end of
    a run loses the run)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file in it")
    if (blocker := _file_in_the_way(path)) is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {str(blocker)!r} is a file, so no folder can be made there")
    return path


whole_number = int_in(-LARGEST_INT - 1)  # argparse type: an integer a machine word holds (type=int, below)


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser with one-line errors ``<tool>: error: <message> (see `<prog> --help`)``, exit 2.

    tool: the program's own name (prog of the top-level parser); subparsers inherit the class and get
    theirs from the parser that made them.
    """

    def __init__(self, *args, tool: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool or self.prog.split()[0]
        # type=int and type=float read as whole_number and finite_number (argument groups share this
        # registry): NaN, infinities and numbers no machine word holds get one line, not a failure deep
        # in the run.
        self.register("type", int, whole_number)
        self.register("type", float, finite_number)

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", functools.partial(type(self), tool=self.tool))
        return super().add_subparsers(**kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.tool}: error: {message} (see `{self.prog} --help`)\n")
