"""What the command-line tools share: one-line usage errors and argument types that check a value's range
where it is read (`args`), and where a run's figures came from (`provenance`: command, commit, date, load).
Every package's CLI may use it; it imports nothing of the project."""
