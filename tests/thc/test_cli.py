"""The command line: ``python -m thc table`` and ``python -m thc nmse``."""

import subprocess
import sys

import pytest

from thc.cli import build_parser, main


def test_table_prints_the_reference_line(capsys):
    assert main(["table", "--bits", "4", "--granularity", "30", "--clip", "1/32"]) == 0
    assert capsys.readouterr().out == "0 3 5 7 9 11 13 14 16 17 19 21 23 25 27 30\n"


def test_uniform_table_and_stats(capsys):
    assert main(["table", "-b", "2", "-g", "6", "-p", "0.03125", "--kind", "uniform", "--stats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "0 2 4 6" and "rounding_variance=" in lines[1] and "clipping_error=0.007267" in lines[1]


def test_bad_values_exit_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["table", "--bits", "9"])
    assert exit_.value.code == 2 and "argument --bits/-b: bits=9" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["table", "--clip", "1.5"])
    assert "strictly between 0 and 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command,options",
    [
        ("table", ["--bits", "--granularity", "--clip", "--kind", "--stats"]),
        (
            "nmse",
            [
                "--workers",
                "--dim",
                "--trials",
                "--data",
                "--seed",
                "--compressors",
                "--bits",
                "--granularity",
                "--clip",
                "--chunk",
                "--error-feedback",
                "--topk-ratio",
                "--qsgd-bits",
                "--qsgd-bucket",
            ],
        ),
    ],
)
def test_help_explains_every_option(command, options, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help"
    for option in options:
        assert option in text


def test_nmse_prints_one_line_per_compressor(capsys):
    assert main(["nmse", "--workers", "2", "--dim", "2048", "--trials", "1", "--compressors", "thc,fp16,fixed32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# n=2 workers, d=2048")
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"THC-optimal", "fp16", "int32"}
    assert 0.005 < float(rows["THC-optimal"][-2]) < 0.02  # ~0.0203 / 2


def test_gradients_that_would_not_fit_are_refused_before_any_is_made(capsys):
    """Each of --workers, --dim and --trials alone is in range; together they would need 16 GiB and swap,
    or hang, before printing anything."""
    with pytest.raises(SystemExit) as exit_:
        main(["nmse", "--workers", "4096", "--dim", "1048576", "--trials", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert "--workers 4096 x --dim 1048576 x --trials 1" in err and "make one smaller" in err


def test_unknown_compressor(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["nmse", "--compressors", "gzip", "--dim", "16", "--trials", "1"])
    assert exit_.value.code == 2 and "argument --compressors: 'gzip': unknown 'gzip'" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "thc", "table", "--bits", "2", "--granularity", "6"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "0 2 4 6"
