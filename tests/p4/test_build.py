"""The committed p4c outputs belong to the committed P4 sources, and carry the names of p4/README.md.

Where p4c is installed (P4C, default p4c-bm2-ss, as in the Makefiles), the sources are compiled again into
a temporary folder and every file must equal the committed one byte for byte; elsewhere the stamp of
source hashes is what notices a build older than its sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

import contract
from tests.support import paths
from tests.support.toolchain import unless_installed

P4_DIR = paths.P4_DIR
BUILD = P4_DIR / "build"


def _stamp_entries() -> dict[str, str]:
    entries = {}
    for line in (BUILD / "STAMP").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        digest, name = line.split(maxsplit=1)
        entries[name.strip()] = digest
    return entries


def test_stamp_matches_sources():
    stamped = _stamp_entries()
    sources = sorted(p.name for p in P4_DIR.glob("*.p4"))
    assert sorted(stamped) == sources, "p4/build/STAMP lists other files than p4/*.p4: run `make p4`"
    for name in sources:
        digest = hashlib.sha256((P4_DIR / name).read_bytes()).hexdigest()
        assert stamped[name] == digest, f"p4/{name} changed after p4/build/ was compiled: run `make p4`"


def test_stamp_names_the_compiler():
    first = (BUILD / "STAMP").read_text().splitlines()[0]
    assert first.startswith("# p4c:") and len(first) > len("# p4c:") + 1


@pytest.fixture(scope="module")
def p4info() -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Parse((BUILD / "thc.p4info.txtpb").read_text(), info)
    return info


def test_p4info_has_the_contract_tables(p4info):
    tables = {t.preamble.name: t for t in p4info.tables}
    expected = {
        contract.IPV4_LPM: [("hdr.ipv4.dstAddr", 32)],
        contract.SERVICE_ADDR: [("hdr.ipv4.dstAddr", 32)],
        contract.JOBS: [("hdr.thc.job_id", 8)],
        contract.RESULT_DST: [("hdr.thc.job_id", 8), ("standard_metadata.egress_rid", 16)],
        contract.VALUES: [("hdr.thc.job_id", 8)],
    }
    for name, keys in expected.items():
        assert name in tables, f"{name} missing from the P4Info"
        assert [(m.name, m.bitwidth) for m in tables[name].match_fields] == keys


def test_p4info_has_the_contract_actions(p4info):
    actions = {a.preamble.name: [(p.name, p.bitwidth) for p in a.params] for a in p4info.actions}
    assert actions[contract.SET_JOB] == list(contract.SET_JOB_PARAMS)  # the compiled program is the contract's
    assert actions[contract.IPV4_FORWARD] == [("dstAddr", 48), ("port", 9)]
    assert actions[contract.SET_RESULT_DST] == [("dmac", 48), ("dip", 32)]
    assert actions[contract.SET_VALUES] == [("values_lo", 64), ("values_hi", 64), ("index_mask", 32)]


def test_p4info_has_the_event_counter(p4info):
    counters = {c.preamble.name: c for c in p4info.counters}
    assert counters[contract.THC_EVENTS].size == contract.EVENT_CELLS >= len(contract.EVENTS)
    assert counters[contract.THC_JOB_EVENTS].size == contract.JOB_EVENT_CELLS


def test_bmv2_json_is_a_p4c_v1model_program():
    program = json.loads((BUILD / "thc.json").read_text())
    assert program["__meta__"]["version"][0] == 2
    names = {r["name"] for r in program["register_arrays"]}
    assert contract.SLOT_TAG in names
    widths = {r["name"]: r["bitwidth"] for r in program["register_arrays"]}
    assert widths[contract.SLOT_TAG] == 52  # epoch << 36 | op << 32 | round
    assert {contract.acc_register(i) for i in range(contract.WORDS)} <= names
    assert {widths[contract.acc_register(i)] for i in range(contract.WORDS)} == {64}
    headers = {h["name"]: h["header_type"] for h in program["headers"]}
    types = {t["name"]: t["fields"] for t in program["header_types"]}
    assert sum(f[1] for f in types[headers["thc_words"]]) == 64 * contract.WORDS
    assert sum(f[1] for f in types[headers["thc_idx8"]]) == 4 * contract.per_request(contract.LANES_8)


P4C = os.environ.get("P4C", "p4c-bm2-ss")


def _differing(ours: Path, committed: Path) -> list[str]:
    names = sorted({p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file()})
    committed_names = sorted({p.relative_to(committed).as_posix() for p in committed.rglob("*") if p.is_file()})
    assert names == committed_names, f"p4c wrote {names}, p4/build/ holds {committed_names}"
    return [name for name in names if (ours / name).read_bytes() != (committed / name).read_bytes()]


@pytest.mark.p4c
@pytest.mark.slow
@unless_installed(shutil.which(P4C), f"{P4C} (p4c's BMv2 backend)")
def test_p4c_compiles_the_sources_into_exactly_the_committed_build(tmp_path):
    """p4/Makefile's own recipe (the program and its 32- and 64-word variants, the JSON compacted, the
    P4Info renamed, the STAMP written) run into a temporary folder: every file byte-identical to p4/build/.

    Nothing is normalised, because nothing here legitimately differs: the recipe runs in p4/ and names
    the sources relatively (thc.p4), so source_info holds `aggregator.p4`, not an absolute path of this
    clone, and the output folder appears in no output. A difference is a committed build that is not what
    the sources compile to (or another p4c version: the message names both)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(P4_DIR), f"P4C={P4C}", f"BUILD={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=1200,  # a guard against hanging the suite: a compile takes about 20 s
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    differing = _differing(tmp_path, BUILD)
    ours = (tmp_path / "STAMP").read_text().splitlines()[0]
    committed = (BUILD / "STAMP").read_text().splitlines()[0]
    assert not differing, (
        f"p4c's output differs from p4/build/ in {differing} (committed with {committed!r}, this is {ours!r}): "
        "run `make p4` and commit p4/build/"
    )
