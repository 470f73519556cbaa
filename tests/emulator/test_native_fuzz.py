"""Bad input against the native backend: any length, any content, never a crash.

The quick test sends every frame length from 0 to 9,000 bytes through every program. The slow one
builds the generated C with AddressSanitizer and UBSan and runs 100,000 fuzzed frames in a child
Python (the sanitizer runtime must be preloaded), which must end cleanly with no report.
"""

import json
import random

import pytest

from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from native_build import NativeBuildError
from tests.emulator.test_native_parity import PROGRAMS
from tests.support import sanitizers
from tests.support.frames import random_entries

MAX_LEN = 9000


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_every_length_from_0_to_9000_bytes_is_processed(path):
    sw = SoftwareSwitch.from_json(path, backend="native")
    rng = random.Random(path.stem)
    for table, keys, action, params, priority in random_entries(sw.program, rng):
        try:
            sw.table_add(table, keys, action, params, priority=priority)
        except EntryError:  # duplicates of random keys are refused, as they should be
            pass
    sw.mc_group_set(1, [(1, 0), (2, 1)])
    blob = bytes(rng.getrandbits(8) for _ in range(MAX_LEN))
    for n in range(MAX_LEN + 1):
        out = sw.process(rng.randrange(8), blob[:n])
        assert isinstance(out, list)
    assert sw.stats["packets_in"] == MAX_LEN + 1


def test_no_compiler_is_a_clear_error_and_auto_falls_back(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(NativeBuildError, match="gcc"):
        SoftwareSwitch.from_json(PROGRAMS[0], backend="native")
    with caplog.at_level("WARNING", logger="emulator.switch"):
        sw = SoftwareSwitch.from_json(PROGRAMS[0], backend="auto")
    assert type(sw) is SoftwareSwitch
    assert any("Python backend" in r.getMessage() for r in caplog.records)


FUZZ_CHILD = r"""
import json, random, sys
from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from tests.support.frames import guided_frames, mutate, random_entries, random_value_sets
paths, per_program = json.loads(sys.argv[1]), int(sys.argv[2])
total = 0
for path in paths:
    cfg = json.load(open(path))
    sw = SoftwareSwitch.from_json(cfg, backend="native", sanitize=True)
    rng = random.Random(path)
    for t, k, a, p, pr in random_entries(sw.program, rng):
        try:
            sw.table_add(t, k, a, p, priority=pr)
        except EntryError:  # duplicates of random keys
            pass
    sw.mc_group_set(1, [(1, 0), (2, 1), (3, 2)])
    for s in range(0, 256, 5):  # mirror sessions: clone_mirror takes the session id from the frame
        sw.mirroring_add(s, egress_port=s % 8, mgid=1 if s % 2 else None)
    sw.seed(rng.getrandbits(64))
    value_sets = random_value_sets(sw.program, rng)
    for name, members in value_sets.items():
        sw.value_set_replace(name, members)
    for name, width in sw.program.custom_crcs.items():
        sw.set_crc_parameters(name, rng.getrandbits(width) | 1, rng.getrandbits(width), rng.getrandbits(width),
                              rng.random() < 0.5, rng.random() < 0.5)
    seeds = guided_frames(cfg, 200, rng, value_sets=value_sets)
    for i in range(per_program):
        r = rng.random()
        if r < 0.6:
            frame = mutate(rng.choice(seeds), rng)
        elif r < 0.95:
            frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 120)))
        else:
            frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9000)))
        sw.process(rng.randrange(8), frame)
        if i % 500 == 0:
            sw.digests()  # and the digest queue drained now and then
        total += 1
    sw.close()
print("fuzzed", total)
"""


@pytest.mark.slow
@pytest.mark.timeout(3300)  # the sanitized child gets 3000 s; pytest's global 600 s would cut a loaded run short
def test_100000_fuzzed_frames_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    paths = [str(p) for p in PROGRAMS]
    per_program = -(-100_000 // len(paths))
    proc = sanitizers.run_sanitized(
        FUZZ_CHILD, json.dumps(paths), str(per_program), cache=tmp_path / "cache", timeout=3000
    )
    sanitizers.assert_clean(proc, per_program * len(paths))
