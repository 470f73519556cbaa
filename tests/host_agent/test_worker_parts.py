"""thc-worker's options for the codec's parts (--no-transform, --quantizer) and its terngrad-switch mode:
the mode runs TernGrad on the job's framing, and a worker refuses, in one line, a ticket or an option that is
not what its mode runs (host_agent.worker.job_ticket)."""

import pytest

from contract.job import TERNGRAD_OPTIONS, JobSpec
from host_agent import worker
from tests.host_agent.test_worker_job import SWITCH, parsed
from thc.config import THCConfig

TERN = THCConfig(quantizer="terngrad", bits=2, granularity=2, table="uniform", transform=False)


def described(*argv: str, mode: str = "thc") -> JobSpec:
    args, given = parsed("--mode", mode, *argv)
    return worker.job_ticket(args, given).spec


def test_the_options_switch_the_parts_off():
    want = JobSpec(job_id=1, workers=4, codec=THCConfig(transform=False, error_feedback=True))
    assert described("--no-transform", "--error-feedback") == want
    assert described(*TERNGRAD_OPTIONS.split()) == JobSpec(job_id=1, workers=4, codec=TERN)


def test_the_terngrad_switch_mode_runs_terngrad_on_the_jobs_framing():
    spec = described("--window", "64", mode="terngrad-switch")
    assert spec == JobSpec(job_id=1, workers=4, codec=TERN, window=64)
    assert described("--bits", "2", mode="terngrad-switch") == spec.replace(window=256)  # agrees: fine
    assert "terngrad-switch" in worker.SWITCH_MODES and "terngrad-switch" in worker.FAILOVER_MODES


@pytest.fixture
def files(tmp_path):
    thc, tern = JobSpec(job_id=5, workers=4, key=7), JobSpec(job_id=6, workers=4, codec=TERN, key=8)
    thc.save(tmp_path / "thc.json")
    tern.save(tmp_path / "tern.json")
    return tmp_path, thc, tern


def test_a_description_is_the_codec_it_names(files):
    where, _, tern = files
    args, given = parsed("--mode", "terngrad-switch", "--job", str(where / "tern.json"))
    assert worker.job_ticket(args, given).spec == tern
    args, given = parsed("--job", str(where / "tern.json"))  # thc runs the job's own codec
    args.spec = worker.job_ticket(args, given).spec
    assert worker.probe_codec(args).name == "TernGrad-switch"


@pytest.mark.parametrize(
    "argv, says",
    [
        (("--mode", "terngrad-switch", "--bits", "4"), "--mode terngrad-switch runs bits = 2, not --bits 4"),
        (("--mode", "terngrad-switch", "--job", "thc.json"), "--mode terngrad-switch runs terngrad, but the ticket"),
        (("--job", "thc.json", "--no-transform"), "drop --no-transform: the ticket"),
        (("--job", "thc.json", "--quantizer", "terngrad"), "drop --quantizer: the ticket"),
        (("--job", "tern.json", "--error-feedback"), "drop --error-feedback: the ticket"),
    ],
)
def test_a_description_or_option_the_mode_does_not_run_is_refused_in_one_line(files, capsys, argv, says):
    where = files[0]
    argv = [str(where / a) if a.endswith(".json") else a for a in argv]
    rank = ["--rank", "1", "--world-size", "4", "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-worker: ") and says in err and "\n" not in err
