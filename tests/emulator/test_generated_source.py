"""The engine's generated Python reads like its P4: P4 names and source lines in comments, readable
bindings, lines that tracebacks can show, and `thc-switch --dump-generated` to read it."""

import linecache
import subprocess
import sys

import contract
from emulator.switch import SoftwareSwitch
from tests.support import paths


def test_generated_source_names_fields_tables_and_p4_lines():
    source = SoftwareSwitch.from_json(paths.THC_JSON).generated_source
    jobs = contract.JOBS
    assert f"_exact_{jobs.replace('.', '_')}.get(F[" in source  # tables bound by their P4 names
    assert f"# table {jobs}: job_check.p4:" in source  # with the P4 line they come from
    assert "thc.job_id" in source and "ipv4.$valid$" in source  # every F[i] named where it is used
    unnamed = [
        line for line in source.splitlines() if "F[" in line and not line.lstrip().startswith("#") and "#" not in line
    ]
    assert unnamed == []


def test_tracebacks_through_generated_code_show_its_lines():
    sw = SoftwareSwitch.from_json(paths.THC_JSON)
    ingress = sw._prog.fns["ingress"]
    filename = ingress.__code__.co_filename
    assert filename.startswith("<bmv2 program")
    line = linecache.getline(filename, ingress.__code__.co_firstlineno)
    assert line.strip() == "def ingress(F):"


def test_thc_switch_dumps_the_generated_source(tmp_path):
    out = tmp_path / "thc_generated.py"
    done = subprocess.run(
        [sys.executable, "-m", "emulator", "--dump-generated", str(out), str(paths.THC_JSON)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "def ingress(F):" in text and "def egress(F" in text
    compile(text, str(out), "exec")  # a file you can read and run
    refused = subprocess.run(
        [sys.executable, "-m", "emulator", "--dump-generated", str(out), "--no-p4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and refused.stderr.strip() == "thc-switch: --dump-generated needs PROGRAM.json"
