"""Logging of thc-switch, in BMv2's shape.

BMv2 (`--log-console`, `--log-file`, `-L`) writes lines like
`[15:17:01.123] [bmv2] [D] [thread 4242] Table 'MyIngress.ipv4_lpm': hit with handle 0`.
The software switch logs through Python loggers under "emulator" (the engine's per-packet lines on
"emulator.trace", P4Runtime requests on "emulator.p4runtime", ports on "emulator.ports") and this
module routes them to the console and/or a file in the same shape. With no sink configured the
"emulator" logger is switched off entirely, so `isEnabledFor()` guards on the packet path cost
nothing.
"""

import logging
import threading
import time

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

LEVELS = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,
}
_LETTER = {
    TRACE: "T",
    logging.DEBUG: "D",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "C",
}
ROOT = "emulator"
REQUESTS = "emulator.p4runtime.requests"


class BMv2Formatter(logging.Formatter):
    """`[HH:MM:SS.mmm] [thc-switch] [L] [thread N] message`."""

    def __init__(self, name: str = "thc-switch"):
        super().__init__()
        self.name = name

    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = (
            f"[{clock}.{int(record.msecs):03d}] [{self.name}] [{_LETTER.get(record.levelno, 'I')}] "
            f"[thread {threading.get_native_id()}] {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(
    level: str = "trace",
    console: bool = False,
    log_file: str | None = None,
    requests_file: str | None = None,
    console_stream=None,
) -> list:
    """Route the emulator's loggers; returns the handlers made (closed by `shutdown`)."""
    root = logging.getLogger(ROOT)
    root.propagate = False
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handlers = []
    if console:
        handlers.append(logging.StreamHandler(console_stream))
    if log_file:
        handlers.append(logging.FileHandler(log_file, mode="w"))
    for handler in handlers:
        handler.setFormatter(BMv2Formatter())
        root.addHandler(handler)
    root.setLevel(LEVELS[level] if handlers else LEVELS["off"])

    requests = logging.getLogger(REQUESTS)
    for handler in list(requests.handlers):
        requests.removeHandler(handler)
    if requests_file:
        dump = logging.FileHandler(requests_file, mode="w")
        dump.setFormatter(logging.Formatter("[%(asctime)s] %(message)s"))
        requests.addHandler(dump)
        requests.setLevel(logging.DEBUG)
        requests.propagate = False
        handlers.append(dump)
    else:
        requests.setLevel(logging.NOTSET)
        requests.propagate = True
    return handlers


def shutdown(handlers) -> None:
    for handler in handlers:
        handler.flush()
        handler.close()
    for name in (ROOT, REQUESTS):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if handler in handlers:
                logger.removeHandler(handler)
