"""`python -m thc`'s errors are one line naming the option and where help is, not argparse's usage block."""

import pytest

from thc.cli import main


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["table", "--clip", "2"],
            ["argument --clip/-p", "strictly between 0 and 1", "see `python -m thc table --help`"],
        ),
        (["table", "--bits", "four"], ["argument --bits/-b", "'four'"]),
        (["nmse", "--data", "images"], ["argument --data", "invalid choice: 'images'"]),
        (["table", "--bits", "9"], ["bits=9 out of range", "1 to 8"]),
    ],
)
def test_errors_are_one_line_with_a_non_zero_exit(capsys, argv, words):
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors exit
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("python -m thc: error: "), err
    for word in words:
        assert word in err, err
