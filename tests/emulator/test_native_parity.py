"""The native backend against the Python one (the reference): the same frames, the same state.

For the THC program, its K-variants and every engine fixture program, 10,000 frames per program
(parser-guided, mutated and random, lengths 0 to 9,000 bytes) go through both backends, programmed
identically; every output frame (port and bytes), every register cell, counter and direct counter
and the statistics must be identical, before and after table writes and deletes.
"""

import random

import pytest

from emulator.errors import EmulatorError
from emulator.switch import CLONE_DIGEST_STAT_KEYS, STAT_KEYS, SoftwareSwitch
from tests.support.frames import guided_frames, mutate, random_entries, random_value_sets
from tests.support.paths import FIXTURE_BUILD, THC_JSON

# fixtures whose constructs only the Python backend runs (varbit fields): the native refusal is
# tested in test_engine_v1model_constructs instead
PYTHON_ONLY = {"varbit_options"}
PROGRAMS = (
    sorted(p for p in FIXTURE_BUILD.glob("*.json") if p.stem not in PYTHON_ONLY)
    + [THC_JSON]
    + sorted((THC_JSON.parent / "variants").glob("*.json"))
)
FRAMES = 10_000
# every statistic both backends keep
COMPARED_STATS = (*STAT_KEYS, *CLONE_DIGEST_STAT_KEYS)


def _load(path):
    import json

    return json.loads(path.read_text())


def _both(cfg):
    py = SoftwareSwitch.from_json(cfg, backend="python")
    nat = SoftwareSwitch.from_json(cfg, backend="native")
    assert type(nat).__name__ == "NativeSwitch"
    py.seed(2026)
    nat.seed(2026)  # P4's random draws the same numbers in both
    return py, nat


def _apply(switches, method, *args, **kw):
    """Call `method` on both; both must succeed, or both refuse with the same code. Only a refusal
    (EmulatorError) is compared: any other exception is a crash and fails the test, even in both."""
    outcomes = []
    for sw in switches:
        try:
            getattr(sw, method)(*args, **kw)
            outcomes.append("ok")
        except EmulatorError as exc:
            outcomes.append(getattr(exc, "code", type(exc).__name__))
    assert outcomes[0] == outcomes[1], f"{method}{args}: python {outcomes[0]}, native {outcomes[1]}"
    return outcomes[0] == "ok"


def _program(switches, rng, program):
    for table, keys, action, params, priority in random_entries(program, rng):
        _apply(switches, "table_add", table, keys, action, params, priority=priority)
    for gid in range(1, 5):
        ports = rng.sample(range(0, 8), rng.randint(0, 4))
        _apply(switches, "mc_group_set", gid, [(p, rng.randint(0, 3)) for p in ports])
    for sid in [*rng.sample(range(256), 16), 99]:  # mirror sessions (clone_mirror takes the id from the frame)
        port = rng.choice([None, rng.randrange(8)])
        _apply(switches, "mirroring_add", sid, egress_port=port, mgid=rng.randint(1, 5) if port is None else None)
    for name, reg in program.registers.items():
        for i in rng.sample(range(reg.size), min(reg.size, 8)):
            _apply(switches, "register_write", name, i, rng.getrandbits(reg.bitwidth))


def _state(sw, program):
    regs = {name: [sw.register_read(name, i) for i in range(r.size)] for name, r in program.registers.items()}
    ctrs = {
        name: [sw.counter_read(name, i) for i in range(c.size)]
        for name, c in program.counters.items()
        if not c.is_direct
    }
    direct = {}
    for name, c in program.counters.items():
        if c.is_direct:
            direct[name] = [
                sw.direct_counter_read(c.table, e.keys, priority=e.priority) for e in sw.table_entries(c.table)
            ]
    stats = {k: sw.stats[k] for k in COMPARED_STATS}
    return regs, ctrs, direct, stats


def _control_plane_state(switches, rng, program):
    """Value set members and custom CRC parameters, the same in both; the members (for guided
    frames to take the value set branches)."""
    value_sets = random_value_sets(program, rng)
    for name, members in value_sets.items():
        _apply(switches, "value_set_replace", name, members)
    for name, width in program.custom_crcs.items():
        params = (rng.getrandbits(width) | 1, rng.getrandbits(width), rng.getrandbits(width))
        _apply(switches, "set_crc_parameters", name, *params, rng.random() < 0.5, rng.random() < 0.5)
    return value_sets


def _frames(cfg, rng, count, value_sets=None):
    guided = guided_frames(cfg, count // 2, rng, value_sets=value_sets)
    frames = []
    for i in range(count):
        r = rng.random()
        if r < 0.45:
            frames.append(guided[i % len(guided)])
        elif r < 0.85:
            frames.append(mutate(rng.choice(guided), rng))
        elif r < 0.98:
            frames.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80))))
        else:
            frames.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9000))))
    return frames


def _run(switches, frames, rng, ports=8):
    py, nat = switches
    for k, frame in enumerate(frames):
        port = rng.randrange(ports)
        a, b = py.process(port, frame), nat.process(port, frame)
        assert a == b, f"frame {k} ({len(frame)} bytes, port {port}) {frame[:64].hex()}: python {a!r} native {b!r}"
        if py.program.digests:
            assert py.digests() == nat.digests(), f"frame {k}: digest samples differ"


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_native_matches_python_on_random_and_mutated_frames(path):
    cfg = _load(path)
    rng = random.Random(f"parity-{path.stem}")
    switches = _both(cfg)
    py, nat = switches
    program = py.program
    _program(switches, rng, program)
    value_sets = _control_plane_state(switches, rng, program)
    frames = _frames(cfg, rng, FRAMES, value_sets)
    half = len(frames) // 2
    _run(switches, frames[:half], rng)
    assert _state(py, program) == _state(nat, program)

    # table writes and deletes change both alike
    for name, t in program.tables.items():
        entries = py.table_entries(name) if not t.const_entries else []
        for e in entries[::2]:
            _apply(switches, "table_delete", name, e.keys, priority=e.priority)
        for e in entries[1::2]:
            action = rng.choice(t.actions)
            widths = program.actions[action].params
            _apply(switches, "table_modify", name, e.keys, action, [rng.getrandbits(w) for _, w in widths], e.priority)
    _program(switches, rng, program)
    _run(switches, frames[half:], rng)
    assert _state(py, program) == _state(nat, program)
    assert nat.stats["exceptions"] == py.stats["exceptions"]


def test_native_thc_job_matches_python_through_real_requests():
    """A real THC job (routes, job and its table, multicast) and worker requests of every op and kind,
    mutated."""
    from harness.switches import SoftwareTarget
    from tests.p4 import test_thc_pipeline as pipe

    rng = random.Random(7)
    targets = [SoftwareTarget("python"), SoftwareTarget("native")]
    for t in targets:
        t.add_service(pipe.ip_int(pipe.SERVICE[1]))
        for w in range(4):
            mac, ip = pipe.worker(w)
            t.add_route(pipe.ip_int(ip), 32, pipe.mac_int(mac), pipe.worker_port(w))
        pipe.set_job(t)
        t.set_group(pipe.GROUP, [(pipe.worker_port(w), w) for w in range(3)])
        for w in range(3):
            mac, ip = pipe.worker(w)
            t.add_result_dst(pipe.JOB, w, pipe.mac_int(mac), pipe.ip_int(ip))
        t.set_table(pipe.JOB, pipe.TABLE.values, 4)
    import numpy as np

    nrng = np.random.default_rng(3)
    seeds = []
    for rnd in range(6):
        for slot in range(4):
            for w in range(3):
                port = pipe.worker_port(w)
                idx = nrng.integers(0, 16, size=pipe.K8, dtype=np.uint8)
                seeds.append((port, pipe.thc_request(w, idx, slot=slot, round_=rnd)))
                norms = nrng.uniform(0, 2.0 ** nrng.integers(-126, 127), size=int(nrng.integers(1, pipe.NPR + 1)))
                seeds.append((port, pipe.norm_request(w, norms, slot=slot, round_=rnd)))
                if w == 1:
                    seeds.append((port, pipe.release(w, pipe.NORM, slot=slot, round_=rnd)))
                values = nrng.integers(-(2**31), 2**31, size=pipe.KFIX)
                seeds.append((port, pipe.fix32_request(w, values, slot=slot, round_=rnd)))
                if w == 0:
                    seeds.append((port, pipe.release(w, slot=slot, round_=rnd)))
    frames = list(seeds)
    for _ in range(3000):
        port, frame = rng.choice(seeds)
        frames.append((port, mutate(frame, rng) if rng.random() < 0.5 else frame))
    for k, (port, frame) in enumerate(frames):
        a, b = targets[0].send(port, frame), targets[1].send(port, frame)
        assert a == b, f"frame {k}: python {a!r} native {b!r}"
    assert targets[0].events() == targets[1].events()
    program = targets[0].sw.program
    assert _state(targets[0].sw, program) == _state(targets[1].sw, program)
