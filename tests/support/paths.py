"""Where the repository's compiled programs and fixtures are, for every test package."""

from pathlib import Path

import contract

REPO = Path(__file__).resolve().parents[2]
P4_DIR = REPO / "p4"
BUILD = contract.BUILD_DIR  # p4c's outputs for p4/thc.p4
THC_JSON = contract.PROGRAM_JSON
THC_P4INFO = contract.PROGRAM_P4INFO
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_BUILD = FIXTURES / "p4" / "build"  # p4c's outputs for the engine's fixture programs
PACKET_IO = FIXTURES / "p4rt"  # packet_io.p4 and its p4c outputs
TOPOLOGIES = REPO / "topologies"
