"""What every layer agrees on: the P4 program's contract (`contract`) and the description of a job
(`job`). The switch's program fixes the first; `thc-run` or `thc-ctl` makes the second once, and both the
switch's entries and the workers' options are derived from it."""
