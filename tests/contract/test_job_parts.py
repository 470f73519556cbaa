"""The job description is the workers' codec (a THCConfig, every part an ablation switches: the transform
and the quantizer beside bits, granularity, clip, table and error feedback) and the switch's framing
(contract/job.py). Each part is refused in one line naming the field when the switch or the codec cannot run
it, survives the file, reaches the workers' codec and the switch's table, and has its option in thc-run,
thc-ctl and thc-worker (add_job_options)."""

import argparse
import json
import random
from dataclasses import fields

import pytest

from contract.job import (
    CODEC_FIELDS,
    KEYS,
    NO_KEY,
    TERNGRAD_OPTIONS,
    JobSpec,
    JobSpecError,
    add_job_options,
    job_key,
    spec_from_options,
)
from controller.jobs import choose_key
from tests.controller.test_cli_errors import assert_one_line, job_add
from thc.config import THCConfig
from thc.errors import ConfigError

TERN_FIELDS = dict(quantizer="terngrad", bits=2, granularity=2, table="uniform", transform=False)
TERN = THCConfig(**TERN_FIELDS)


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(argv)


def test_every_part_survives_the_file_and_reaches_the_codec(tmp_path):
    codec = THCConfig(bits=3, granularity=20, clip=1 / 64, table="uniform", error_feedback=True, transform=False)
    spec = JobSpec(job_id=3, workers=8, codec=codec)
    spec.save(tmp_path / "job.json")
    assert JobSpec.load(tmp_path / "job.json") == spec
    assert spec.codec is codec and spec.codec.chunk == 2048
    assert "no transform, error feedback" in spec.describe()


def test_terngrad_is_three_levels_whose_sums_of_32_workers_fit_8_bit_lanes():
    spec = JobSpec(job_id=1, workers=32, codec=TERN)
    assert spec.table_values() == [0, 1, 1, 2] and spec.codec.quantizer == "terngrad"
    assert (spec.lane_bits, spec.coords_per_request) == (8, 1024)
    assert JobSpec(job_id=1, workers=32).lane_bits == 16  # THC's g = 30: n g = 960
    assert "TernGrad, no transform" in spec.describe()


def test_a_description_written_before_the_parts_is_thc_with_its_transform():
    data = JobSpec(job_id=1, workers=4).to_dict()
    del data["transform"], data["quantizer"]
    assert JobSpec.from_dict(data) == JobSpec(job_id=1, workers=4)


@pytest.mark.parametrize(
    "fields, field, says",
    [
        ({"transform": "no"}, "transform", "job.json: field 'transform': transform='no' must be True or False"),
        (
            {"quantizer": "qsgd"},
            "quantizer",
            "field 'quantizer': quantizer 'qsgd' unknown: use one of thc, terngrad",
        ),
        ({"quantizer": "terngrad"}, "bits", "field 'bits': bits=4: the terngrad quantizer needs bits=2, granularity=2"),
        ({**TERN_FIELDS, "granularity": 4}, "granularity", "field 'granularity': granularity=4"),
        ({**TERN_FIELDS, "table": "optimal"}, "table", "field 'table': table='optimal'"),
        ({**TERN_FIELDS, "transform": True}, "transform", "field 'transform': transform=True"),
        ({"clip": "1/0"}, "clip", "field 'clip': clip probability '1/0' is not a number"),
        ({"seed": 2**64}, "seed", "field 'seed': seed=18446744073709551616 must be an integer from 0 to 2**64-1"),
        (
            {"bits": 5},
            "bits",
            "job field 'bits' = 5: must be an integer from 1 to 4",
        ),  # the codec's 8 bits, the switch's 4
        ({"granularity": 256}, "granularity", "job field 'granularity' = 256: must be an integer from 1 to 255"),
        (
            {"bits": 2, "granularity": 2},
            "granularity",
            "4 levels, so g must be at least 3",
        ),  # THC's indices need their own values
        ({"window": 0}, "window", "job field 'window' = 0"),
        ({"bitz": 3}, "bitz", "job.json: unknown field 'bitz' (fields: bits, chunk, clip"),
    ],
)
def test_a_field_that_cannot_run_is_refused_in_one_line_naming_it(fields, field, says):
    """One family of errors (JobSpecError is a ConfigError), each naming its field, whichever of the codec
    and the switch refuses it."""
    data = {**JobSpec(job_id=1, workers=4).to_dict(), **fields}
    with pytest.raises(ConfigError) as caught:
        JobSpec.from_dict(data, "job.json")
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, JobSpecError) and caught.value.field == field


def test_the_codec_checks_its_own_fields_once_and_the_job_only_what_needs_the_switch():
    with pytest.raises(ConfigError, match="chunk=3 must be a power of two") as caught:
        JobSpec(job_id=1, workers=4, codec=THCConfig(chunk=3))
    assert caught.value.field == "chunk" and not isinstance(caught.value, JobSpecError)  # THCConfig's own
    with pytest.raises(JobSpecError, match="8 levels, so g must be at least 7") as caught:  # needs b and g
        JobSpec(job_id=1, workers=4, codec=THCConfig(bits=3, granularity=6))
    assert caught.value.field == "granularity"
    assert not {"bits", "granularity", "clip", "table", "chunk", "seed"} & {f.name for f in fields(JobSpec)}


def test_a_saved_file_is_flat_stable_and_round_trips(tmp_path):
    """A description's file (JobSpec.save, and a ticket's "job" part: contract/ticket.py) is flat: the
    codec's fields beside the framing, clip as a fraction, in one order."""
    spec = JobSpec(job_id=7, workers=3, codec=THCConfig(bits=3, seed=2**64 - 1, quantizer="thc"), window=64, key=9)
    spec.save(tmp_path / "job.json")
    text = (tmp_path / "job.json").read_text()
    assert list(json.loads(text)) == ["job_id", "workers", *CODEC_FIELDS, "window", "slots", "words", "key"]
    assert '"clip": "1/32"' in text and '"seed": 18446744073709551615' in text
    again = JobSpec.load(tmp_path / "job.json")
    assert again == spec and again.replace(key=10) != spec and again.replace(bits=2, granularity=3).codec.bits == 2
    again.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text


def test_the_options_describe_every_part():
    args = options("--bits", "3", "--table", "uniform", "--error-feedback", "--no-transform")
    want = JobSpec(1, 4, THCConfig(bits=3, table="uniform", error_feedback=True, transform=False))
    assert spec_from_options(args, 1, 4) == want
    assert spec_from_options(options(*TERNGRAD_OPTIONS.split()), 1, 4) == JobSpec(job_id=1, workers=4, codec=TERN)
    assert spec_from_options(options(), 1, 4) == JobSpec(job_id=1, workers=4)


def test_thc_ctl_checks_the_parts_before_it_connects(tmp_path):
    status, _, err = job_add(tmp_path, "--quantizer", "terngrad")
    assert_one_line(status, err, "field 'bits': bits=4: the terngrad quantizer needs", TERNGRAD_OPTIONS)
    status, _, err = job_add(tmp_path, *TERNGRAD_OPTIONS.split())
    assert status == 1 and "no P4Runtime server answers" in err  # a valid description gets as far as the switch


def test_a_job_left_to_its_defaults_has_the_codecs_thc_parameters():
    """bits, g, clip and the table kind have one home (thc.config.THCConfig): a job's defaults are those."""
    assert JobSpec(job_id=1, workers=4).codec == THCConfig()
    assert THCConfig().chunk == options().chunk  # one chunk default, for the codec and every job
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    assert parser.parse_args([]).bits == THCConfig().bits


def test_a_key_is_one_range_for_the_description_thc_ctl_the_controller_and_thc_worker():
    """KEYS, or NO_KEY in a description that has none yet: the same numbers wherever a key is taken."""
    assert JobSpec(job_id=1, workers=2, key=KEYS[-1]).key == KEYS[-1] and JobSpec(job_id=1, workers=2).key == NO_KEY
    with pytest.raises(JobSpecError, match="key"):
        JobSpec(job_id=1, workers=2, key=KEYS[-1] + 1)
    assert job_key(hex(KEYS[-1])) == KEYS[-1] and job_key(str(KEYS[0])) == KEYS[0]
    for outside in (str(NO_KEY), str(KEYS[-1] + 1), "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="a job key is 1..2"):
            job_key(outside)
    assert choose_key(random.Random("keys")) in KEYS
