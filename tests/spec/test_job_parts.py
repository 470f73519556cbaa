"""The job description carries every part of the codec an ablation switches (spec/job.py): the transform
and the quantizer beside bits, granularity, clip, table and error feedback. Each is refused in one line
naming the field when the switch or the codec cannot run it, survives the file, reaches the workers' codec
and the switch's table, and has its option in thc-run, thc-ctl and thc-worker (add_job_options)."""

import argparse
import random

import pytest

from controller.jobs import choose_key
from spec.job import KEYS, NO_KEY, TERNGRAD_OPTIONS, JobSpec, JobSpecError, add_job_options, job_key, spec_from_options
from tests.controller.test_cli_errors import assert_one_line, job_add
from thc.config import THCConfig

TERN = dict(quantizer="terngrad", bits=2, granularity=2, table="uniform", transform=False)


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(argv)


def test_every_part_survives_the_file_and_reaches_the_codec(tmp_path):
    spec = JobSpec(
        job_id=3, workers=8, bits=3, granularity=20, clip=1 / 64, table="uniform", error_feedback=True, transform=False
    )
    spec.save(tmp_path / "job.json")
    assert JobSpec.load(tmp_path / "job.json") == spec
    codec = dict(bits=3, granularity=20, clip=1 / 64, table="uniform", chunk=2048, error_feedback=True)
    assert spec.thc_config() == THCConfig(**codec, transform=False)
    assert "no transform, error feedback" in spec.describe()


def test_terngrad_is_three_levels_whose_sums_of_32_workers_fit_8_bit_lanes():
    spec = JobSpec(job_id=1, workers=32, **TERN)
    assert spec.table_values() == [0, 1, 1, 2] and spec.thc_config().quantizer == "terngrad"
    assert (spec.lane_bits, spec.coords_per_request) == (8, 1024)
    assert JobSpec(job_id=1, workers=32).lane_bits == 16  # THC's g = 30: n g = 960
    assert "TernGrad, no transform" in spec.describe()


def test_a_description_written_before_the_parts_is_thc_with_its_transform():
    data = JobSpec(job_id=1, workers=4).to_dict()
    del data["transform"], data["quantizer"]
    assert JobSpec.from_dict(data) == JobSpec(job_id=1, workers=4)


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"transform": "no"}, "job field 'transform' = 'no': must be true or false"),
        ({"quantizer": "qsgd"}, "job field 'quantizer' = 'qsgd': use one of thc, terngrad"),
        ({"quantizer": "terngrad"}, "job field 'bits' = 4: the terngrad quantizer's three levels"),
        ({**TERN, "granularity": 4}, "job field 'granularity' = 4"),
        ({**TERN, "table": "optimal"}, "job field 'table' = 'optimal'"),
        ({**TERN, "transform": True}, "job field 'transform' = True"),
        ({"bits": 2, "granularity": 2}, "4 levels, so g must be at least 3"),  # THC's indices need their own values
    ],
)
def test_a_part_that_cannot_run_is_refused_naming_its_field(fields, says):
    with pytest.raises(JobSpecError) as caught:
        JobSpec(job_id=1, workers=4, **fields)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_options_describe_every_part():
    args = options("--bits", "3", "--table", "uniform", "--error-feedback", "--no-transform")
    want = JobSpec(job_id=1, workers=4, bits=3, table="uniform", error_feedback=True, transform=False)
    assert spec_from_options(args, 1, 4) == want
    assert spec_from_options(options(*TERNGRAD_OPTIONS.split()), 1, 4) == JobSpec(job_id=1, workers=4, **TERN)
    assert spec_from_options(options(), 1, 4) == JobSpec(job_id=1, workers=4)


def test_thc_ctl_checks_the_parts_before_it_connects(tmp_path):
    status, _, err = job_add(tmp_path, "--quantizer", "terngrad")
    assert_one_line(status, err, "job field 'bits' = 4", TERNGRAD_OPTIONS)
    status, _, err = job_add(tmp_path, *TERNGRAD_OPTIONS.split())
    assert status == 1 and "no P4Runtime server answers" in err  # a valid description gets as far as the switch


def test_a_job_left_to_its_defaults_has_the_codecs_thc_parameters():
    """bits, g, clip and the table kind have one home (thc.config.THCConfig): a job's defaults are those."""
    job, codec = JobSpec(job_id=1, workers=4).thc_config(), THCConfig()
    assert (job.bits, job.granularity, job.clip, job.table) == (codec.bits, codec.granularity, codec.clip, codec.table)
    assert job.chunk == codec.chunk == options().chunk  # one chunk default, for the codec and every job
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    assert parser.parse_args([]).bits == codec.bits


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
