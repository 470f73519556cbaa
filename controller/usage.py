"""An argparse parser whose usage errors are one line, as every other error of thc-ctl and thc-run is.

argparse prints the whole usage block (8 lines for `thc-ctl table install`) above its message; the
message alone says what is wrong, and ``--help`` is named for the rest:

    thc-ctl: error: argument --bits: invalid int value: 'four' (see `thc-ctl table install --help`)
"""

from __future__ import annotations

import argparse
import functools


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
