"""A switch's port loop (emulator.ports.PortLoop or the native loop) run on a thread for a test, and a
packet-in callback that records what reached the controller."""

import contextlib
import threading


@contextlib.contextmanager
def serving(loop):
    """run() on a thread for the block; stopped, joined and closed after it."""
    runner = threading.Thread(target=loop.run)
    runner.start()
    try:
        yield loop
    finally:
        loop.stop()
        runner.join(60)  # a guard against hanging the suite, not a timing assertion
        assert not runner.is_alive(), "run() did not return after stop()"
        loop.close()


class PacketIns:
    """A packet_in callback: keeps each frame sent to the controller (`frames`) and sets `arrived`."""

    def __init__(self):
        self.frames = []
        self.arrived = threading.Event()

    def __call__(self, frame) -> bool:
        self.frames.append(frame)
        self.arrived.set()
        return True
