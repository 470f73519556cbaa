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


def _finite_number(what: str, zero_allowed: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if not (0 <= value if zero_allowed else 0 < value) or value == float("inf"):  # NaN fails both
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    return parse


def positive_number(unit: str = ""):
    """argparse type: a finite number > 0; `unit` ("seconds") names what it counts in the error."""
    return _finite_number(f"a positive number of {unit}" if unit else "a positive number", zero_allowed=False)


def non_negative_number(unit: str = ""):
    """argparse type: a finite number >= 0; `unit` names what it counts in the error."""
    return _finite_number(f"a number of {unit} >= 0" if unit else "a number >= 0", zero_allowed=True)


def int_in(lo: int, hi: int | None = None, why: str = ""):
    """argparse type: an integer in lo..hi (hi None: no upper bound); the message says the range and why."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{value}: must be {bound}{why}")
        return value

    return parse


def output_file(text: str) -> Path:
    """argparse type: a file the command will write: its folder must exist and it must not be a folder, so
    a typo fails before anything is installed or computed, not after."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file in it")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: there is no folder {str(path.parent)!r} (create it first)")
    return path


def folder(text: str) -> Path:
    """argparse type: a folder the command will create or fill: refused at once if a file of that name is there."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder: name a folder")
    return path


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser with one-line errors ``<tool>: error: <message> (see `<prog> --help`)``, exit 2.

    tool: the program's own name (prog of the top-level parser); subparsers inherit the class and get
    theirs from the parser that made them.
    """

    def __init__(self, *args, tool: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool or self.prog.split()[0]

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", functools.partial(type(self), tool=self.tool))
        return super().add_subparsers(**kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.tool}: error: {message} (see `{self.prog} --help`)\n")
