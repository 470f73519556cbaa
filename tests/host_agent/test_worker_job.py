"""thc-worker takes the whole job: `--job TICKET` (as `thc-ctl job add --save FILE` writes it: the description
and the switch's grant), trusted as it is, or, without a file, the job options; it compresses with the
description's codec and refuses, in one line, a flag that would describe the ticket's job again."""

import json

import pytest

from contract.job import JobSpec, spec_from_options
from contract.ticket import Grant, Ticket
from host_agent import worker
from thc.config import THCConfig

SWITCH = ["--mode", "thc", "--iface", "lo", "--service-ip", "127.0.0.1", "--service-mac", "02:00:00:00:00:01"]


def parsed(*argv: str, rank: int = 1, world: int = 4):
    """thc-worker's options, and the job options among them."""
    parser = worker.build_parser()
    argv = [*SWITCH, "--rank", str(rank), "--world-size", str(world), "--master-addr", "10.0.0.1", *argv]
    return parser.parse_args(argv), worker.given_options(parser, argv)


@pytest.fixture
def saved(tmp_path):
    spec = JobSpec(5, 4, THCConfig(bits=3, granularity=40, chunk=4096, seed=9), window=64, slots=128, key=0xBEEF)
    ticket = Ticket(spec, Grant(key=0xBEEF, epoch=12, slot_base=256, n_slots=128))
    path = tmp_path / "job.json"
    ticket.save(path)
    return ticket, path


def test_the_ticket_is_the_job(saved):
    ticket, path = saved
    args, given = parsed("--job", str(path))
    got = worker.job_ticket(args, given)
    assert got == ticket and got.spec.key == 0xBEEF and got.grant.epoch == 12
    assert got.spec.codec.bits == 3 and got.spec.codec.chunk == 4096 and got.spec.codec.seed == 9
    args.spec = got.spec
    assert len(worker.probe_codec(args).table.values) == 8  # the description's 3-bit table, not a default


def test_without_a_file_the_options_describe_the_job():
    args, given = parsed("--job-id", "7", "--bits", "2", "--thc-seed", "11", "--seed", "3", "--key", "0x10", world=3)
    ticket = worker.job_ticket(args, given)
    spec = ticket.spec
    assert (spec.job_id, spec.workers, spec.codec.bits, spec.codec.seed, spec.key) == (7, 3, 2, 11, 0x10)
    assert ticket.grant is None and args.seed == 3  # no grant; --seed stays the model's
    args, given = parsed(world=2)
    assert worker.job_ticket(args, given) == Ticket(JobSpec(job_id=1, workers=2))


@pytest.mark.parametrize(
    "argv, says",
    [
        (("--job-id", "5"), "drop --job-id: the ticket {path} holds the job's id"),
        (("--key", "0xBEEF"), "drop --key: the ticket {path} holds the job's key"),
        (("--granularity", "40"), "drop --granularity: the ticket {path} holds the job's granularity"),
        (("--thc-seed", "9"), "drop --thc-seed: the ticket {path} holds the job's seed"),
        (("--no-transform",), "drop --no-transform: the ticket {path} holds the job's transform"),
        (("--window", "64", "--key", "0x1"), "drop --key: the ticket"),  # whatever the value, the first named
    ],
)
def test_a_job_flag_beside_a_ticket_is_refused_in_one_line(saved, capsys, argv, says):
    """The ticket holds the job: a flag that describes it again is refused whether or not it agrees."""
    _, path = saved
    args, given = parsed("--job", str(path), *argv)
    with pytest.raises(ValueError, match="^drop --"):
        worker.job_ticket(args, given)
    rank = ["--rank", "1", "--world-size", "4", "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, "--job", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-worker: ") and says.format(path=path) in err and "\n" not in err


def test_a_world_other_than_the_tickets_workers_is_refused_in_one_line(saved, capsys):
    _, path = saved
    rank = ["--rank", "1", "--world-size", "3", "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, "--job", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path} is a ticket for job 5's 4 workers, but this worker's world has 3" in err and "\n" not in err


def test_a_description_alone_is_a_ticket_without_a_grant_keyed_as_it_says(tmp_path):
    """A file of a description alone (what --save wrote before tickets, and the ps modes' job.json) is the
    job with the key it holds."""
    path = tmp_path / "job.json"
    JobSpec(5, 4, window=64, key=0x1D).save(path)
    args, given = parsed("--job", str(path))
    assert worker.job_ticket(args, given) == Ticket(JobSpec(5, 4, window=64, key=0x1D))


JOB = {"job_id": 5, "workers": 4}
GRANT = {"key": 9, "epoch": 2, "slot_base": 0, "n_slots": 256, "pool": None}


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "not JSON"),
        (json.dumps({"job_id": 5}), "field 'workers' is missing"),
        (json.dumps({"job_id": 5, "workers": 4, "lanes": 8}), "unknown field 'lanes'"),
        (json.dumps({"job_id": 5, "workers": 4, "granularity": 300}), "'granularity' = 300"),
        (json.dumps({"job": JOB}), "part 'grant' is missing"),
        (json.dumps({"job": {**JOB, "key": 3}, "grant": GRANT}), "the job's key is the grant's"),
        (json.dumps({"job": JOB, "grant": {**GRANT, "epoch": 0}}), "grant field 'epoch' = 0: must be an integer"),
        (json.dumps({"job": JOB, "grant": {**GRANT, "n_slots": 64}}), "granted 64 slots, but its description asks"),
        (json.dumps({"job": JOB, "grant": {**GRANT, "pool": [0, 64, 0]}}), "grant field 'pool' is null or {base"),
    ],
)
def test_a_malformed_description_says_what_is_wrong(tmp_path, capsys, content, says):
    path = tmp_path / "job.json"
    path.write_text(content)
    rank = ["--rank", "0", "--world-size", "4", "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, "--job", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(path) in err and says in err and "\n" not in err


def test_a_ticket_holds_what_the_options_made(tmp_path):
    """thc-ctl job add --save writes what spec_from_options made of its options, with the switch's grant; a
    worker given the ticket alone runs that job."""
    path = tmp_path / "job.json"
    options = ["--bits", "3", "--granularity", "40", "--thc-seed", "9", "--window", "64", "--clip", "1/64"]
    made = spec_from_options(parsed(*options)[0], 5, 4)
    Ticket(made.replace(key=0xBEEF), Grant(key=0xBEEF, epoch=1, slot_base=0, n_slots=made.slots)).save(path)
    args, given = parsed("--job", str(path))
    assert worker.job_ticket(args, given).spec == made.replace(key=0xBEEF) == Ticket.load(path).spec
