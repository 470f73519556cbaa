"""The context manager the runner's long-lived parts share: `with part:` starts it, and stops it on the way
out; a start that fails half-way is stopped too, so whatever it had set up is torn down."""

from __future__ import annotations


class StartStop:
    """Subclasses define start() and stop(); stop() must undo a partial start."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
