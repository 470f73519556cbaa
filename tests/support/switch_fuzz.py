"""The native backend's fuzz campaign over the fixture programs, shared by the sanitized child and the
check that its frames do not depend on where the repository lives.

Each program's generator is seeded from the program's stem, never its path: the same frames, entries
and sessions in every checkout, so a test gives the same verdict in any folder.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from tests.support import sanitizers
from tests.support.frames import guided_frames, mutate, random_entries, random_value_sets


def fuzz_program(path: str | Path, frames: int, *, sanitize: bool, digest=None) -> int:
    """Random entries, groups, sessions, value sets and CRC parameters, then `frames` fuzzed frames
    through the native backend; each frame goes into `digest` (a hashlib object) when given."""
    stem = Path(path).stem
    cfg = json.loads(Path(path).read_text())
    sw = SoftwareSwitch.from_json(cfg, backend="native", sanitize=sanitize)
    rng = random.Random(stem)
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
        sw.set_crc_parameters(
            name,
            rng.getrandbits(width) | 1,
            rng.getrandbits(width),
            rng.getrandbits(width),
            rng.random() < 0.5,
            rng.random() < 0.5,
        )
    seeds = guided_frames(cfg, 200, rng, value_sets=value_sets)
    for i in range(frames):
        sanitizers.progress(stem, i)
        r = rng.random()
        if r < 0.6:
            frame = mutate(rng.choice(seeds), rng)
        elif r < 0.95:
            frame = rng.randbytes(rng.randint(0, 120))
        else:
            frame = rng.randbytes(rng.randint(0, 9000))
        port = rng.randrange(8)
        if digest is not None:
            digest.update(port.to_bytes(1, "big") + len(frame).to_bytes(4, "big") + frame)
        sw.process(port, frame)
        if i % 500 == 0:
            sw.digests()  # and the digest queue drained now and then
    sw.close()
    return frames


def frames_digest(paths: list[str | Path], frames: int) -> str:
    """The sha256 of every frame `fuzz_program` sends through `paths` (unsanitized)."""
    digest = hashlib.sha256()
    for path in paths:
        fuzz_program(path, frames, sanitize=False, digest=digest)
    return digest.hexdigest()
