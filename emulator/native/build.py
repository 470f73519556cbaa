"""Compile C sources into a cached shared object with the system C compiler (Debian's gcc).

One place for every native piece (the generated switch programs, the port loop): the sources and
flags are hashed, the object lives under `$THC_NATIVE_CACHE` (default `~/.cache/thc-native`) as
`<name>-<hash>.so`, is built in a temporary directory and renamed into place atomically, so
concurrent processes never load a half-written file.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BASE_FLAGS = ["-O2", "-g", "-fPIC", "-shared", "-pthread", "-Wall", "-Wno-unused-label", "-Wno-unused-function"]


class NativeBuildError(RuntimeError):
    """The C compiler is missing or failed; the message says what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("THC_NATIVE_CACHE") or Path.home() / ".cache" / "thc-native")


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc and not shutil.which(cc):
        cc = None
    if not cc:
        raise NativeBuildError(
            "no C compiler found: the native backend compiles its C at load time "
            "(install Debian's gcc: apt-get install gcc, or run with --backend python)"
        )
    return cc


def build_shared(files: dict[str, str], name: str, extra_flags: list[str] | None = None) -> Path:
    """Compile `files` (file name -> C text; every `.c` file is compiled, the others are headers
    they include) into `<cache>/<name>-<hash>.so` and return its path, reusing a cached build."""
    flags = BASE_FLAGS + list(extra_flags or [])
    cc = compiler()
    h = hashlib.sha256()
    for part in [cc, *flags, *sorted(files)]:
        h.update(part.encode() + b"\0")
    for fname in sorted(files):
        h.update(files[fname].encode() + b"\0")
    target = cache_dir() / f"{name}-{h.hexdigest()[:20]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=target.parent) as tmp:
        for fname, text in files.items():
            Path(tmp, fname).write_text(text)
        sources = [str(Path(tmp, f)) for f in sorted(files) if f.endswith(".c")]
        out = Path(tmp, "lib.so")
        proc = subprocess.run([cc, *flags, "-o", str(out), *sources], capture_output=True, text=True)
        if proc.returncode != 0:
            raise NativeBuildError(f"{cc} failed building {name}:\n{proc.stderr[-4000:]}")
        os.replace(out, target)
    return target
