"""contract/__init__.py says what the P4 program fixes; these tests read p4/config.p4, p4/headers.p4, the
table declarations and the compiled P4Info, and fail when the contract module disagrees with any of them."""

import ast
import re

import pytest

import contract
from controller.p4info import load_p4info
from controller.pipeline import check_p4info
from tests.support import paths

CONFIG = (paths.P4_DIR / "config.p4").read_text()


def p4_const(name: str) -> int:
    """`const bit<N> NAME = V;` or `#define NAME V` in config.p4."""
    m = re.search(rf"const\s+bit<\d+>\s+{name}\s*=\s*(\w+)\s*;", CONFIG) or re.search(
        rf"#define\s+{name}\s+(\w+)", CONFIG
    )
    assert m, f"{name} is not defined in p4/config.p4"
    return int(m.group(1), 0)


def test_wire_constants_and_limits_match_config_p4():
    assert contract.THC_UDP_PORT == p4_const("THC_UDP_PORT")
    assert contract.THC_VERSION == p4_const("THC_VERSION")
    assert contract.MAX_WORKERS == p4_const("THC_MAX_WORKERS")
    assert contract.SLOTS == p4_const("THC_SLOTS") and contract.CELLS == p4_const("THC_CELLS")
    assert contract.EVENT_CELLS == p4_const("THC_EVENTS")
    assert contract.JOB_IDS == p4_const("THC_JOB_IDS") and contract.JOB_EVENT_CELLS == p4_const("THC_JOB_EVENTS")
    assert contract.WORDS == p4_const("THC_WORDS")
    for name in ("LANES_8", "LANES_16", "LANES_INT32"):
        assert getattr(contract, name) == p4_const(name)
    assert contract.NORM_WORDS == p4_const("NORM_WORDS")
    assert 20 + 8 + contract.THC_HEADER_BYTES == 20 + p4_const("THC_L4_BYTES")
    for name, value in contract.OP_NAMES.items():
        assert p4_const(f"OP_{value}") == name
    for name, value in contract.KIND_NAMES.items():
        assert p4_const(f"KIND_{value}") == name
    assert contract.BOOK_SLOTS == p4_const("THC_BOOK_SLOTS") and contract.BOOK_CELLS == p4_const("THC_BOOK_CELLS")
    assert contract.POOL_EPOCHS == p4_const("POOL_EPOCHS")
    assert (contract.LEASE_FALLBACK, contract.LEASE_CLAIMED) == (p4_const("LEASE_FALLBACK"), p4_const("LEASE_CLAIMED"))
    assert contract.CELLS - 1 <= contract.LEASE_CELL_MASK < contract.LEASE_CLAIMED  # a lease names any cell


def test_events_are_config_p4s_ev_constants_in_index_order():
    defined = {int(v): n for n, v in re.findall(r"const\s+bit<32>\s+EV_(\w+)\s*=\s*(\d+)\s*;", CONFIG)}
    assert [defined[i] for i in sorted(defined)] == list(contract.EVENTS)
    assert sorted(defined) == list(range(len(contract.EVENTS))) and len(contract.EVENTS) <= contract.EVENT_CELLS


def test_thc_header_layout_matches_headers_p4():
    headers = (paths.P4_DIR / "headers.p4").read_text()
    body = re.search(r"header\s+thc_t\s*\{(.*?)\}", headers, re.S).group(1)
    fields = tuple((name, int(bits)) for bits, name in re.findall(r"bit<(\d+)>\s+(\w+)\s*;", body))
    assert fields == contract.THC_HEADER_FIELDS
    assert sum(bits for _, bits in fields) == 8 * contract.THC_HEADER_BYTES


@pytest.mark.parametrize("variant", [None, 32, 64])
def test_every_table_and_action_of_the_contract_is_in_the_p4info(variant):
    path = paths.THC_P4INFO if variant is None else paths.BUILD / "variants" / f"thc_words{variant}.p4info.txtpb"
    p4info = load_p4info(path)
    words = check_p4info(p4info, str(path))  # names, keys, parameter orders and widths
    assert words == (variant or contract.WORDS)
    tables = {t.preamble.name: t for t in p4info.tables}
    actions = {a.preamble.name: a for a in p4info.actions}
    for spec in contract.TABLE_SPECS:
        assert tables[spec.name].size == spec.size, spec.name
        assert [(p.name, p.bitwidth) for p in actions[spec.action].params] == list(spec.params), spec.action
    registers = {r.preamble.name: r for r in p4info.registers}
    expected = {contract.SLOT_TAG, contract.SLOT_BITMAP, contract.SLOT_REMAINING, contract.SLOT_COUNT}
    expected |= {contract.acc_register(i) for i in range(words)}
    assert expected <= set(registers)
    book = {contract.SLOT_TAG, contract.SLOT_BITMAP, contract.SLOT_REMAINING, contract.SLOT_COUNT, contract.CELL_LEASE}
    assert {registers[name].size for name in book} == {contract.BOOK_CELLS}
    assert registers[contract.POOL_OWNER].size == contract.CELLS
    counters = {c.preamble.name: c for c in p4info.counters}
    assert counters[contract.POOL_CLAIMS].size == counters[contract.POOL_FREES].size == contract.POOL_EPOCHS
    assert {registers[contract.acc_register(i)].type_spec.bitstring.bit.bitwidth for i in range(words)} == {64}


def test_the_norm_payload_matches_headers_p4():
    """thc_norms_t is NORM_WORDS 64-bit words: NORMS_PER_REQUEST float32 lanes, the request, result and
    partial payload of NORM."""
    headers = (paths.P4_DIR / "headers.p4").read_text()
    assert re.search(r"#define\s+NORM_FIELD\(k\)\s+bit<64>\s+n##k;", headers)
    assert re.search(r"header\s+thc_norms_t\s*\{\s*FOR_EACH_NORM_WORD\(NORM_FIELD\)\s*\}", headers)
    unrolled = re.search(r"#define\s+FOR_EACH_NORM_WORD\(M\)\s+(.*)", CONFIG).group(1)
    assert re.findall(r"M\((\d+)\)", unrolled) == [str(k) for k in range(contract.NORM_WORDS)]
    assert contract.NORMS_PER_REQUEST == 2 * contract.NORM_WORDS == 16
    norm_bytes = contract.NORM_WORDS * contract.WORD_BYTES
    assert contract.request_payload_bytes(contract.OP_NORM, contract.LANES_INT32) == norm_bytes
    assert contract.result_payload_bytes(contract.OP_NORM) == norm_bytes
    assert contract.result_payload_bytes(contract.OP_NORM) - contract.release_payload_bytes(contract.OP_NORM) <= (
        contract.BMV2_HEADROOM
    )


@pytest.mark.parametrize("lane_bits", contract.THC_LANE_BITS)
def test_the_timeline_models_frames_as_the_contract_sizes_them(lane_bits):
    """planner.timeline sizes frames from the cell, the index bits and the lanes (so a profile can model
    another build); with the defaults, a frame is what the contract's payload sizes say."""
    from planner.timeline import INACost

    head = contract.FRAME_HEADER_BYTES
    thc = INACost(link_bps=1e9, workers=2, switch_pps=1e6, rtt_s=1e-5, lane_bits=lane_bits)
    assert thc.frame_bytes() == (
        head + contract.request_payload_bytes(contract.OP_THC, lane_bits),
        head + contract.result_payload_bytes(contract.OP_THC),
    )
    fix32 = INACost(link_bps=1e9, workers=2, switch_pps=1e6, rtt_s=1e-5, op="fix32")
    assert fix32.frame_bytes() == (
        head + contract.request_payload_bytes(contract.OP_FIX32, contract.LANES_INT32),
        head + contract.result_payload_bytes(contract.OP_FIX32),
    )
    assert thc.norm_bytes == contract.request_payload_bytes(contract.OP_NORM, contract.LANES_INT32)


def test_a_request_and_a_result_fit_the_mtu():
    result = contract.result_payload_bytes(contract.OP_THC)
    assert result == contract.WORDS * contract.WORD_BYTES
    assert 20 + 8 + contract.THC_HEADER_BYTES + result <= contract.MTU
    for lanes in contract.THC_LANE_BITS:
        thc = contract.request_payload_bytes(contract.OP_THC, lanes)
        assert thc >= contract.per_request(lanes) // 2 and 20 + 8 + contract.THC_HEADER_BYTES + thc <= contract.MTU
        assert result - thc <= contract.BMV2_HEADROOM  # simple_switch's headroom for the result
    for op in (contract.OP_THC, contract.OP_FIX32):
        assert result - contract.release_payload_bytes(op) <= contract.BMV2_HEADROOM
    assert contract.per_request(contract.LANES_8) == 1024 and contract.per_request(contract.LANES_INT32) == 256


def p4_names_spelled(path) -> list[int]:
    """Lines of `path` whose string literals (not docstrings or comments) spell a P4 object's name."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and re.search(r"\b(ThcIngress|ThcEgress)\.\w", node.value)
        }
    )


def test_a_p4_name_is_spelled_only_in_the_contract():
    """Every package, bench and test names the program's tables, actions, registers and counters through
    contract/__init__.py."""
    spelled = []
    for folder in ("controller", "host_agent", "topologies", "bench", "tests", "thc", "emulator"):
        for path in (paths.REPO / folder).rglob("*.py"):
            if path.name == "contract.py" or "fixtures" in path.parts:
                continue
            spelled += [f"{path.relative_to(paths.REPO)}:{n}" for n in p4_names_spelled(path)]
    assert spelled == []


def test_the_readme_cells_table_frames_what_the_parser_reads():
    """p4/README.md's Cells table is what a worker written from the text alone frames: its request and result
    sizes must be the contract's (the parser's), padding included, or every such request is MALFORMED."""
    readme = (paths.P4_DIR / "README.md").read_text()
    section = readme.split("## Cells", 1)[1].split("\n## ", 1)[0]
    ops = {
        "THC, n·g ≤ 255": (contract.OP_THC, contract.LANES_8),
        "THC, n·g ≤ 65535": (contract.OP_THC, contract.LANES_16),
        "FIX32": (contract.OP_FIX32, contract.LANES_INT32),
        "NORM": (contract.OP_NORM, contract.LANES_INT32),
    }
    sizes = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ops:
            sizes[cells[0]] = tuple(int(c.removesuffix(" bytes").replace(",", "")) for c in cells[3:5])
    assert sorted(sizes) == sorted(ops), "the Cells table lost a row"
    for row, (op, lanes) in ops.items():
        expected = (
            contract.FRAME_HEADER_BYTES + contract.request_payload_bytes(op, lanes),
            contract.FRAME_HEADER_BYTES + contract.result_payload_bytes(op),
        )
        assert sizes[row] == expected, f"p4/README.md, Cells, {row}: {sizes[row]} bytes, the parser's {expected}"
    assert f"`PAD16_BYTES` = {contract.PAD16_BYTES} bytes of padding" in section
