"""Bad input against the native backend: any length, any content, never a crash.

The quick test sends every frame length from 0 to 9,000 bytes through every program. The slow one
builds the generated C with AddressSanitizer and UBSan and runs 100,000 fuzzed frames in a child
Python (the sanitizer runtime must be preloaded), which must end cleanly with no report.
"""

import json
import random
import shutil

import pytest

from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from native_build import NativeBuildError
from tests.emulator.test_native_parity import PROGRAMS
from tests.support import sanitizers, switch_fuzz
from tests.support.frames import random_entries

MAX_LEN = 9000
FUZZ_BUDGET = 900  # seconds for the sanitized child's builds and 100,000 frames: about twice a loaded run's


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
import json, sys
from tests.support.switch_fuzz import fuzz_program
paths, per_program = json.loads(sys.argv[1]), int(sys.argv[2])
print("fuzzed", sum(fuzz_program(path, per_program, sanitize=True) for path in paths))
"""


def test_the_fuzzed_frames_are_the_same_in_every_folder(tmp_path):
    """The campaign is seeded from program names: copies of the programs in two folders get the same frames."""
    copies = []
    for folder in ("a", "b/deeper"):
        (tmp_path / folder).mkdir(parents=True)
        copies.append([shutil.copy(p, tmp_path / folder / p.name) for p in PROGRAMS])
    assert switch_fuzz.frames_digest(copies[0], 300) == switch_fuzz.frames_digest(copies[1], 300)


CANARY_CHILD = r"""
import ctypes, sys
from emulator.native.build import build_native
from emulator.native.library import SANITIZED_FLAGS
source = "#include <stdlib.h>\nint canary(int i) { char *p = malloc(8); p[i] = 1; int v = p[i]; free(p); return v; }\n"
lib = ctypes.CDLL(str(build_native([source], "canary", extra_flags=SANITIZED_FLAGS)))
print("returned", lib.canary(int(sys.argv[1])))
"""


def test_the_sanitized_build_reports_a_heap_overflow(tmp_path):
    """The flags the fuzz campaign builds with (SANITIZED_FLAGS, at -O0) do catch a write past a heap
    block: without this, a campaign under a build that checks nothing would pass as clean."""
    proc = sanitizers.run_sanitized(CANARY_CHILD, "8", cache=tmp_path / "cache", timeout=120)
    assert proc.returncode == 99 and "heap-buffer-overflow" in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    within = sanitizers.run_sanitized(CANARY_CHILD, "7", cache=tmp_path / "cache", timeout=120)
    assert within.returncode == 0 and "returned 1" in within.stdout, within.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(FUZZ_BUDGET + 120)  # pytest's global 600 s would cut a loaded run short
def test_100000_fuzzed_frames_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    paths = [str(p) for p in PROGRAMS]
    per_program = -(-100_000 // len(paths))
    proc = sanitizers.run_sanitized(
        FUZZ_CHILD, json.dumps(paths), str(per_program), cache=tmp_path / "cache", timeout=FUZZ_BUDGET
    )
    sanitizers.assert_clean(proc, per_program * len(paths))
