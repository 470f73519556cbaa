"""thc-worker takes the whole job description: `--job FILE` (as `thc-ctl job add --save FILE` writes it) or,
without a file, the job options; it compresses with the description's codec and refuses, in one line, a
description that is not its job's."""

import json

import pytest

from contract.job import JobSpec, spec_from_options
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
    path = tmp_path / "job.json"
    spec.save(path)
    return spec, path


def test_the_file_is_the_job(saved):
    spec, path = saved
    args, given = parsed("--job", str(path), "--window", "64")  # an option that agrees with the file is fine
    got = worker.job_description(args, given)
    assert got == spec and got.key == 0xBEEF
    assert got.codec.bits == 3 and got.codec.chunk == 4096 and got.codec.seed == 9
    args.spec = got
    assert len(worker.probe_codec(args).table.values) == 8  # the description's 3-bit table, not a default


def test_without_a_file_the_options_describe_the_job():
    args, given = parsed("--job-id", "7", "--bits", "2", "--thc-seed", "11", "--seed", "3", "--key", "0x10", world=3)
    spec = worker.job_description(args, given)
    assert (spec.job_id, spec.workers, spec.codec.bits, spec.codec.seed, spec.key) == (7, 3, 2, 11, 0x10)
    assert args.seed == 3  # --seed stays the model's
    args, given = parsed(world=2)
    assert worker.job_description(args, given) == JobSpec(job_id=1, workers=2)


@pytest.mark.parametrize(
    "argv, world, says",
    [
        ((), 3, "describes job 5 with workers = 4, not world size 3: the file is the job's"),
        (("--job-id", "6"), 4, "describes job 5 with job_id = 5, not --job-id 6"),
        (("--key", "0xBEEE"), 4, "with key = 0xbeef, not --key 0xbeee"),
        (("--granularity", "30"), 4, "with granularity = 40, not --granularity 30"),
        (("--thc-seed", "1"), 4, "with seed = 9, not --thc-seed 1"),
    ],
)
def test_a_description_that_is_not_this_workers_job_is_refused_in_one_line(saved, capsys, argv, world, says):
    _, path = saved
    args, given = parsed("--job", str(path), *argv, world=world)
    with pytest.raises(ValueError, match="describes job 5"):
        worker.job_description(args, given)
    rank = ["--rank", "1", "--world-size", str(world), "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, "--job", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-worker: ") and says in err and "\n" not in err


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "not JSON"),
        (json.dumps({"job_id": 5}), "field 'workers' is missing"),
        (json.dumps({"job_id": 5, "workers": 4, "lanes": 8}), "unknown field 'lanes'"),
        (json.dumps({"job_id": 5, "workers": 4, "granularity": 300}), "'granularity' = 300"),
    ],
)
def test_a_malformed_description_says_what_is_wrong(tmp_path, capsys, content, says):
    path = tmp_path / "job.json"
    path.write_text(content)
    rank = ["--rank", "0", "--world-size", "4", "--master-addr", "10.0.0.1"]
    assert worker.main([*SWITCH, *rank, "--job", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(path) in err and says in err and "\n" not in err


def test_the_options_a_file_was_made_from_agree_with_it(tmp_path):
    """thc-ctl job add --save writes what spec_from_options made of its options; a worker given the file
    and the same options (job id, world size, key and job options as flags) takes the file as it is."""
    path = tmp_path / "job.json"
    options = ["--bits", "3", "--granularity", "40", "--thc-seed", "9", "--window", "64", "--clip", "1/64"]
    made = spec_from_options(parsed(*options)[0], 5, 4, key=0xBEEF)
    made.save(path)
    args, given = parsed("--job", str(path), "--job-id", "5", "--key", "0xbeef", *options)
    assert worker.job_description(args, given) == made == JobSpec.load(path)
    args, given = parsed("--job", str(path), "--clip", "1/32")
    with pytest.raises(ValueError, match="with clip = 1/64, not --clip 1/32: the file is the job's") as caught:
        worker.job_description(args, given)
    assert caught.value.field == "clip"
