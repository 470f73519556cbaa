"""A pool job's uses that the switch answered FALLBACK for (p4/README.md, "Shared pool") go to a fallback
server: a parameter server (the THC program on a software switch, host_agent/sharded.py) holding the same
job and key, installed to accept any later round of a slot, since it sees only the uses that fell back.

The switch decides a use's fate at its first request, so every worker of the use sends to the server,
which sums all n exactly, and its result names the same (job, slot, round): the worker takes it in as the
switch's, and loss there is recovered as anywhere. Once an operation is complete the worker ACKs its last
use of every slot the switch aggregated, so the switch gives those cells back without waiting for the
slot's next round (host_agent/README.md, "Uses that fall back").
"""

from __future__ import annotations

import numpy as np

from host_agent import wire

_DST_MAC = slice(0, 6)
_IP_CHECKSUM = slice(wire.ETH_LEN + 10, wire.ETH_LEN + 12)
_DST_IP = slice(wire.ETH_LEN + 16, wire.ETH_LEN + 20)


class PoolFallback:
    """Sends the requests of uses that fell back to the fallback server, and counts them."""

    def __init__(self, server: wire.Endpoint):
        self.server = server
        self._mac = np.frombuffer(wire.mac_bytes(server.mac), np.uint8)
        self._ip = np.frombuffer(wire.ip_bytes(server.ip), np.uint8)
        self.uses: set[int] = set()  # request numbers of this worker's uses that fell back
        self.answers = 0  # FALLBACK answers taken in (a use may get several: retransmissions)
        self.sent = 0  # requests sent to the server
        self.acks = 0  # ACKs sent to the switch

    @property
    def fallbacks(self) -> int:
        return len(self.uses)

    def redirect(self, frames: np.ndarray) -> np.ndarray:
        """Copies of request frames (one a row) addressed to the server: destination MAC and IPv4 address,
        and the IPv4 checksum for them."""
        out = frames.copy()
        out[:, _DST_MAC] = self._mac
        out[:, _DST_IP] = self._ip
        out[:, _IP_CHECKSUM] = 0
        for row in out:
            header = row[wire.ETH_LEN : wire.ETH_LEN + wire.IPV4_LEN].tobytes()
            row[_IP_CHECKSUM] = np.frombuffer(wire.ipv4_checksum(header).to_bytes(2, "big"), np.uint8)
        return out

    def on_fallbacks(self, protocol, batch: wire.ResultBatch) -> None:
        """FALLBACK answers to `protocol`'s requests: send each named request, still unanswered in an
        operation in flight, to the server at once."""
        ours = batch.valid & (batch.job_id == protocol.job_id) & (batch.key == protocol.key)
        self.answers += int(np.count_nonzero(ours))
        for slot, round_ in zip(batch.slot[ours].tolist(), batch.round[ours].tolist()):
            q = round_ * protocol.window + slot
            for op in protocol.in_flight:
                i = q - op.q0
                if 0 <= i < op.n and not op.done[i]:
                    self.uses.add(q)
                    protocol.sender.control(self.redirect(op.frames[i : i + 1]))
                    self.sent += 1
                    break
        protocol.sender.flush()

    def on_finish(self, protocol, op) -> None:
        """`op` of `protocol` is complete: ACK its last use of each slot that the switch aggregated."""
        last = op.q0 + np.arange(max(0, op.n - protocol.window), op.n)
        q = np.array([x for x in last.tolist() if x not in self.uses], np.int64)
        if q.size:
            protocol.sender.control(protocol.header_frames(op, q, wire.KIND_ACK))
            protocol.sender.flush()
            self.acks += int(q.size)

    def stats(self) -> dict:
        return {
            "pool_fallbacks": self.fallbacks,
            "fallback_answers": self.answers,
            "fallback_sent": self.sent,
            "pool_acks": self.acks,
        }
