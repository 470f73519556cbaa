"""The data flow is visible in the imports (DEVELOPERS.md): thc knows nothing of packets, the switch knows
nothing of THC, no two packages import each other, however indirectly, and no product package imports the
harness of doubles built around it."""

import ast

import pytest

from tests.support import paths

PACKAGES = (
    "usage",
    "thc",
    "ddp",
    "native_build",
    "emulator",
    "contract",
    "controller",
    "host_agent",
    "planner",
    "topologies",
    "harness",
    "bench",
)

# What each package may import of the others. Anything else is a layering mistake.
ALLOWED = {
    "usage": set(),  # how every CLI reads its arguments (one-line errors, checked types): imports nothing
    "thc": {"native_build"},  # the maths: no packets, no switch; its native codec is C built at run time
    "native_build": set(),  # compiles C at run time for the switch and the workers alike: imports nothing
    "ddp": {"thc"},  # DDP's hooks, a plan's hook and the all-reduce sums on the codec: no packets, any aggregator
    "emulator": {"native_build"},  # the switch runs any P4 program: it knows nothing of THC
    "contract": {"thc"},  # the P4 program's contract and a job's description (its THC config and table)
    "controller": {"contract", "thc"},  # programs the switch
    # workers: they learn their job from its description alone
    "host_agent": {"contract", "thc", "ddp", "native_build"},
    # the timeline model and planner, with the step's profile on this machine (the workloads, DDP's buckets)
    "planner": {"contract", "thc", "ddp", "host_agent"},
    # the runner brings everything up
    "topologies": {"contract", "thc", "ddp", "controller", "host_agent", "planner", "emulator", "native_build"},
    # the doubles and in-process rigs: above the product, which never imports them
    "harness": {"contract", "thc", "ddp", "controller", "host_agent", "emulator", "native_build"},
    "bench": set(PACKAGES) - {"bench"},  # benchmarks drive any layer, the doubles too
}  # and none imports the tests: their harnesses live in harness/
ALLOWED = {package: allowed | ({"usage"} if package != "usage" else set()) for package, allowed in ALLOWED.items()}


def imports_of(package: str) -> dict[str, set[str]]:
    """module path -> the project packages it imports (at any depth of the file, lazily or not)."""
    out = {}
    for path in (paths.REPO / package).rglob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {n.split(".")[0] for n in names if n.split(".")[0] in (*PACKAGES, "tests")}
        out[str(path.relative_to(paths.REPO))] = found - {package}
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_its_layer_allows(package):
    wrong = {
        module: sorted(found - ALLOWED[package])
        for module, found in imports_of(package).items()
        if found - ALLOWED[package]
    }
    assert wrong == {}


def test_the_package_graph_has_no_circle():
    graph = {p: set().union(*imports_of(p).values()) for p in PACKAGES}
    seen, done = set(), set()

    def visit(node, trail):
        assert node not in trail, f"import circle: {' -> '.join([*trail, node])}"
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, [*trail, node])
        done.add(node)

    for package in PACKAGES:
        visit(package, [])
    seen |= done
    assert seen == set(PACKAGES)
