"""The run ledger removes exactly what it recorded: processes it started (never a recycled pid),
interfaces it created (never one re-created under the same name), and survives a crash on disk."""

import subprocess
import sys

from topologies.ledger import InterfaceEntry, Ledger, ProcessEntry, interface_index, process_start_time


def sleeper(ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('ready', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_teardown_stops_recorded_processes_and_retires_the_file(tmp_path):
    ledger = Ledger(tmp_path / "run-state.json")
    polite, stubborn = sleeper(), sleeper(ignore_term=True)
    ledger.add_process(polite.pid, "polite")
    ledger.add_process(stubborn.pid, "stubborn")
    reloaded = Ledger.load(tmp_path / "run-state.json")  # what `thc-run --stop` would read
    assert [p.role for p in reloaded.live_processes()] == ["polite", "stubborn"]
    reloaded.teardown(grace=0.5, report=lambda message: None)
    # gone, including the one that ignores SIGTERM (escalated to SIGKILL); the ledger reaped them
    assert process_start_time(polite.pid) is None and process_start_time(stubborn.pid) is None
    assert not (tmp_path / "run-state.json").exists()
    assert Ledger.load(tmp_path / "run-state.removed.json").processes[0].role == "polite"


def test_a_recycled_pid_is_never_signalled(tmp_path):
    other = sleeper()
    try:
        ledger = Ledger(tmp_path / "run-state.json")
        # same pid, different start time: a process that merely reuses a pid we once recorded
        ledger.processes.append(ProcessEntry(other.pid, process_start_time(other.pid) + 1, "recycled"))
        assert ledger.live_processes() == []
        ledger.teardown(grace=0.5, report=lambda message: None)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_process_that_already_exited_is_not_recorded(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    ledger = Ledger(tmp_path / "run-state.json")
    ledger.add_process(proc.pid, "gone")
    assert ledger.processes == []


def test_an_interface_recreated_under_the_same_name_is_not_ours():
    index = interface_index("lo")
    assert index is not None
    ledger = Ledger.__new__(Ledger)
    ledger.interfaces = [InterfaceEntry("lo", index + 1000), InterfaceEntry("thc-absent0", 7)]
    assert ledger.live_interfaces() == []


def test_owner_alive_tells_a_running_run_from_a_crashed_one(tmp_path):
    ledger = Ledger(tmp_path / "run-state.json")
    ledger.save()
    assert Ledger.load(tmp_path / "run-state.json").owner_alive()  # we wrote it and we are running
    crashed = subprocess.Popen([sys.executable, "-c", "pass"])
    crashed.wait()
    ledger.owner_pid, ledger.owner_start_time = crashed.pid, 12345
    ledger.save()
    assert not Ledger.load(tmp_path / "run-state.json").owner_alive()
