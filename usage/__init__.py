"""How the command-line tools read their arguments: one-line usage errors and argument types that check a
value's range where it is read (`args`). Every package's CLI may use it; it imports nothing of the project."""
