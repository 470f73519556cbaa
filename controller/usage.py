"""An argparse parser whose usage errors are one line, as every other error of thc-ctl and thc-run is.

argparse prints the whole usage block (8 lines for `thc-ctl table install`) above its message; the
message alone says what is wrong, and ``--help`` is named for the rest:

    thc-ctl: error: argument --bits: invalid int value: 'four' (see `thc-ctl table install --help`)
"""

from __future__ import annotations

import argparse
import functools


def positive_number(unit: str = ""):
    """argparse type: a finite number > 0; `unit` ("seconds") names what it counts in the error."""
    what = f"a positive number of {unit}" if unit else "a positive number"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    return parse


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
