"""`log_msg` format strings, read the way BMv2's core `log_msg` primitive reads them.

BMv2 (src/bm_sim/core/primitives.cpp) replaces each `{...}` (a `{` not preceded by a backslash, up
to the next `}` not preceded by one) with the next argument in decimal, looking for `{` from the
format's second character on and again one character past each replacement, then turns `\\{` and
`\\}` into `{` and `}`. So `"{}"` alone is not a placeholder and `"{}{}"` holds one. Where the
placeholders found and the arguments differ in number (or a `{` has no `}`), simple_switch logs an
error and exits; the engine logs the same error instead of the message and goes on.

The scan depends only on the format and the number of arguments, so it runs once, at load time.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class LogFormat:
    pieces: tuple  # the text around the arguments: nargs + 1 pieces
    error: str | None = None  # what BMv2 logs (before exiting) when the format cannot take the arguments

    def render(self, values) -> str:
        out = [self.pieces[0]]
        for value, piece in zip(values, self.pieces[1:]):
            out.append(str(value))
            out.append(piece)
        return "".join(out)


def parse_log_format(fmt: str, nargs: int, prim=None) -> LogFormat:
    """BMv2's scan of `fmt` for `nargs` arguments; `prim` (the primitive's JSON) names the call in errors."""
    info = prim.get("source_info") if isinstance(prim, dict) else None
    context = f"{info.get('filename')}({info.get('line')})" if isinstance(info, dict) else "[no source available]"
    mark = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in fmt)  # stands for one argument
    text, start, found = fmt, 0, 0
    while (start := text.find("{", start + 1)) >= 0:
        if text[start - 1] == "\\":
            continue
        end = text.find("}", start)
        while end >= 0 and text[end - 1] == "\\":
            end = text.find("}", end + 1)
        if end < 0:
            return LogFormat((), f'No matching "}}" in call to log_msg(): {context}.')
        if found < nargs:
            text = text[:start] + mark + text[end + 1 :]
            start += len(mark)  # BMv2 resumes one character past the replacement
        else:
            start = end
        found += 1
    if found != nargs:
        return LogFormat(
            (),
            "Not enough arguments for format string in call to log_msg(). "
            f"Format string expected ({found}) argument(s) but go ({nargs}): {context}.",
        )
    text = text.replace("\\{", "{").replace("\\}", "}")
    return LogFormat(tuple(text.split(mark)))
