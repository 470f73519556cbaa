"""Beyond one machine, as docs/multi-host.md writes it: separate machines (a network namespace per host and one for
the switch, veths between them, no Mininet; tests/support/machines.py), the page's controller commands
run verbatim on the switch's machine with topologies/star4.json as mine.json, each host prepared as the
page says, and the workers started on their hosts by torchrun --nnodes 4 --node-rank R (torchrun's
static rendezvous: a c10d TCPStore on node 0 at --master-addr, so rank R is node R, the job's worker R).
The worker's interface is its own eth0 and the service MAC comes from its neighbour table. Training
reaches the model's target with the same parameters on every rank: through the DDP hook (thc-worker) and
through the "thc" torch.distributed backend (a user's script, DDP without a hook).

Root only (namespaces); marked slow: two trainings of four workers and a switch on the machine's cores."""

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from controller.topology import Topology
from tests.support import docs, paths
from tests.support.machines import Machines, host_setup

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip netns"),
]

BIN = Path(sys.executable).parent  # the page's commands find thc-ctl, thc-switch and torchrun here

# docs/multi-host.md's commands, read from its marked blocks (tests/support/docs.py): an edit there that
# breaks one fails here. tests/test_docs.py checks the same blocks without root.
SWITCH = docs.tested_block("multi-host-switch").strip()
CONTROLLER = docs.tested_block("multi-host-controller")
WORKER = docs.tested_block("multi-host-worker")
BACKEND = docs.tested_block("multi-host-backend")
HOST_H1 = docs.tested_block("multi-host-h1")


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """star4's five machines, the hosts prepared and the switch up; each test programs it with the page's
    controller commands (job add: a fresh run)."""
    cwd = tmp_path_factory.mktemp("multi-host")
    shutil.copy(paths.REPO / "topologies" / "star4.json", cwd / "mine.json")
    topo = Topology.load(cwd / "mine.json")
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    started = time.monotonic()
    with Machines(topo) as m:
        m.cwd, m.env, m.topo = cwd, env, topo
        switch = m.launch("s1", SWITCH, cwd / "s1.log", cwd=cwd, env=env)
        _wait_for_line(cwd / "s1.log", "thc-switch ready", switch)
        shown = [docs.words(line) for line in docs.command_lines(HOST_H1)]  # the page shows h1's
        assert shown == [docs.words(line) for line in host_setup(topo, "h1")]
        for host in topo.workers:
            for line in host_setup(topo, host):
                m.sh(host, line)
        print(f"\nmachines up, switch ready: {time.monotonic() - started:.1f} s")
        yield m
        ending = time.monotonic()
    print(f"\nmulti-host: {time.monotonic() - started:.1f} s in all, {time.monotonic() - ending:.1f} s to tear down")


def _wait_for_line(log: Path, text: str, process, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        assert process.poll() is None, log.read_text()[-2000:]
        time.sleep(0.1)
    raise AssertionError(f"no '{text}' in {log} after {seconds} s:\n{log.read_text()[-2000:]}")


def add_job(m) -> None:
    """The page's controller commands: the pipeline, routes, and the job (a fresh run of it)."""
    started = time.monotonic()
    m.sh("s1", "set -e\n" + CONTROLLER, cwd=m.cwd, env=m.env)  # verbatim, on the switch's machine
    print(f"\ncontroller commands: {time.monotonic() - started:.1f} s")


def on_every_host(m, command: str, env: dict, timeout: float = 900) -> float:
    """``command`` on each worker host with R = its node rank; the seconds until all are done."""
    started = time.monotonic()
    runs = []
    for host in m.topo.workers:
        line = f"R={m.topo.worker_id(host)}; {command}"
        runs.append((host, m.launch(host, line, m.cwd / f"{host}.log", cwd=m.cwd, env=env)))
    for host, run in runs:
        code = run.wait(timeout)
        assert code == 0, f"{host} exited {code}:\n" + (m.cwd / f"{host}.log").read_text()[-3000:]
    return time.monotonic() - started


def train_on_every_host(m, command: str) -> list[dict]:
    """A fresh run of the job, ``command`` on every host, and each rank's record (its --result)."""
    add_job(m)
    seconds = on_every_host(m, command, m.env)
    records = [json.loads((m.cwd / "logs" / f"rank{r}.json").read_text()) for r in range(4)]
    print(f"\n{records[0]['mode']} on four hosts: {seconds:.1f} s")
    return records


@pytest.fixture(scope="module")
def readme_run(machines) -> list[dict]:
    """The page's workers, trained once for the tests below."""
    return train_on_every_host(machines, WORKER)


def test_the_readme_commands_train_through_the_switch_with_torchrun_on_four_hosts(machines, readme_run):
    records = readme_run
    assert [r["rank"] for r in records] == [0, 1, 2, 3] and all(r["world_size"] == 4 for r in records)
    assert len({r["parameter_sha256"] for r in records}) == 1  # one model on every rank
    assert all(r["final_metric"] >= r["target"] for r in records)
    m = machines
    stats = json.loads(m.sh("s1", "thc-ctl stats --topology mine.json --job 1 --json", cwd=m.cwd, env=m.env).stdout)
    events = stats["jobs"]["1"]
    requests = records[0]["aggregator"]["requests"]
    assert requests > 0 and all(r["aggregator"]["requests"] == requests for r in records)
    # every request of the run was summed by the switch: once completed, three contributions consumed before
    assert events["COMPLETED"]["packets"] == requests and events["CONSUMED"]["packets"] == 3 * requests


def test_thc_worker_on_the_thc_backend_trains_bit_for_bit_as_the_readmes_hook(machines, readme_run):
    """DDP without a hook on the "thc" process group: DDP divides by n = 4 and sums, the backend sums n
    times THC's average; both scalings are exact, so the same parameters as the hook's, bit for bit."""
    assert "--mode thc " in WORKER
    records = train_on_every_host(machines, WORKER.replace("--mode thc ", "--mode thc-backend "))
    assert {r["parameter_sha256"] for r in records} == {readme_run[0]["parameter_sha256"]}
    assert all(r["aggregator"]["requests"] == readme_run[0]["aggregator"]["requests"] for r in records)


def test_the_thc_backend_trains_a_script_without_a_hook_under_torchrun(machines):
    m = machines
    add_job(m)  # a new run: a fresh epoch and key
    shutil.copy(paths.REPO / "tests" / "support" / "thc_backend_user.py", m.cwd / "train.py")
    results = m.cwd / "backend"
    results.mkdir()
    seconds = on_every_host(m, BACKEND, dict(m.env, RESULT_DIR=str(results)))
    records = [json.loads((results / f"rank{r}.json").read_text()) for r in range(4)]
    assert all(r["backend"] == "thc" and r["gathered"] == [0.0, 1.0, 2.0, 3.0] for r in records)
    assert all("all_reduce of ReduceOp.MAX" in r["max_refused"] for r in records)
    assert len({r["parameter_sha256"] for r in records}) == 1
    assert all(r["final_metric"] >= r["target"] for r in records)
    assert all(r["switch"]["results"] > 0 for r in records)
    print(f"\nbackend workers: {seconds:.1f} s")
