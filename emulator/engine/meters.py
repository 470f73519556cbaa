"""Meters: two-rate three-colour token buckets exactly as BMv2 runs them (src/bm_sim/meters.cpp).

A meter's buckets (committed, then peak) are checked peak first; the first without enough tokens gives the
packet its colour (RED 2, YELLOW 1), else GREEN 0; an unconfigured meter is GREEN. Refill is computed from one
time origin, trunc(micros_since_origin * info_rate), as BMv2 does rather than per interval, and rates over
P4Runtime go through PI's double conversion both ways, so colours and reads answer what BMv2 answers. Time
comes from the switch's clock (`MeterClock.now`), which tests inject. emulator/README.md, "Packet semantics",
Meters, has the details."""

from emulator.errors import EntryError

GREEN, YELLOW, RED = 0, 1, 2


class MeterClock:
    """The switch's clock as meters see it: `now()` is microseconds since the switch started."""

    def __init__(self):
        self.now = lambda: 0


class _Rate:
    __slots__ = ("info_rate", "burst", "tokens", "tokens_last", "color")

    def __init__(self, info_rate: float, burst: int, color: int):
        self.info_rate = info_rate  # tokens per microsecond
        self.burst = burst
        self.tokens = burst
        self.tokens_last = 0
        self.color = color


class Meter:
    __slots__ = ("rates",)

    def __init__(self):
        self.rates = None  # None = unconfigured; else [_Rate], checked in this order (peak first)

    def configure(self, configs) -> None:
        """`configs`: [(info_rate per microsecond, burst)] in P4 order (committed, peak)."""
        rates = [_Rate(rate, burst, i + 1) for i, (rate, burst) in enumerate(configs)]
        rates.reverse()
        self.rates = rates

    def execute(self, now_us: int, amount: int) -> int:
        rates = self.rates
        if rates is None:
            return GREEN
        for r in rates:
            since = int(now_us * r.info_rate)
            if since > r.tokens_last:  # BMv2 asserts time never goes back; a test clock might
                r.tokens = min(r.tokens + since - r.tokens_last, r.burst)
                r.tokens_last = since
            if r.tokens < amount:
                return r.color
            r.tokens -= amount
        return GREEN


class MeterArray:
    """An indirect meter array (`meter`), or the per-entry meters of a table (`direct_meter`, indexed
    by BMv2's entry handle: a new entry that reuses a deleted entry's handle finds its configuration,
    as in BMv2)."""

    def __init__(self, name: str, unit: str, rate_count: int, size: int, clock: MeterClock, table=None):
        self.name = name
        self.unit = unit  # "packets" | "bytes"
        self.rate_count = rate_count
        self.size = size
        self.clock = clock
        self.table = table  # the table of a direct meter, else None
        self.by_bytes = unit == "bytes"
        self.meters = [Meter() for _ in range(size)]

    def execute(self, index: int, ingress_length: int) -> int:
        """The colour of one packet (the caller checked the index)."""
        return self.meters[index].execute(self.clock.now(), ingress_length if self.by_bytes else 1)

    def resize(self, size: int) -> None:
        self.size = size
        self.meters = [Meter() for _ in range(size)]

    # ------------------------------------------------------------------ control plane
    def _index(self, index) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.size:
            raise EntryError(f"meter '{self.name}': index {index!r} outside 0..{self.size - 1}")
        return index

    def check_config(self, config):
        """[(rate per second, burst)] as PI converts it for BMv2; raises EntryError."""
        if len(config) != self.rate_count:
            raise EntryError(f"meter '{self.name}': {self.rate_count} (rate, burst) pairs expected")
        out = []
        for rate, burst in config:
            for what, v, top in (("rate", rate, 2**64 - 1), ("burst", burst, 2**32 - 1)):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= top:
                    raise EntryError(f"meter '{self.name}': {what} {v!r} outside 0..{top}")
            out.append((rate / 1000000.0, burst))
        for (low, _), (high, _) in zip(out, out[1:]):
            if low > high:  # Meter::set_rate's INVALID_INFO_RATE_VALUE
                raise EntryError(f"meter '{self.name}': the committed rate exceeds the peak rate")
        return out

    def set_config(self, index, config) -> None:
        """`config`: None to reset (unconfigured), else [(rate per second, burst)] (committed, peak)."""
        i = self._index(index)
        if config is None:
            self.meters[i].rates = None
        else:
            self.meters[i].configure(self.check_config(config))

    def get_config(self, index):
        """[(rate per second, burst)] (committed, peak) as PI reads it back, or None if unconfigured."""
        rates = self.meters[self._index(index)].rates
        if rates is None:
            return None
        return [(min(int(r.info_rate * 1000000.0), 2**64 - 1), r.burst) for r in reversed(rates)]

    def reset(self) -> None:
        for m in self.meters:
            m.rates = None
