"""Compile C at run time into a cached shared object for ctypes: the one build step of the switch's native
backend (emulator/native), the worker's batched socket helper (host_agent/native), THC's codec
(thc/native) and the benchmarks' C.

    from native_build import build_shared
    lib = ctypes.CDLL(str(build_shared([Path("fastio.c")], "host_fastio", flags=("-O2", "-Wall"))))

A top-level package because both emulator and host_agent build C and neither may import the other; it imports
nothing of the project. A source is a `Path` (compiled where it lies, so its #includes and debug information
work) or a `str` of C text. The object is cached under `$THC_NATIVE_CACHE` (default `~/.cache/thc-native`)
by the sha256 of everything that goes into it (sources, flags, compiler, headers), so it is rebuilt only when
one changed, and renamed into place, so concurrent builders never load half a file."""

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

SHARED_FLAGS = ("-fPIC", "-shared")  # what makes an object ctypes can load; every build has them
SANITIZER_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")  # tests' ASan and UBSan builds
NATIVE_ENV = "THC_NATIVE"  # "0": the numpy reference and Python I/O; "1": a failed build raises; unset: C if it builds


def native_off(environ=os.environ) -> bool:
    """Whether `environ` turns the project's C off (the workers' codec is then numpy's)."""
    return environ.get(NATIVE_ENV) == "0"


def address_of(array) -> int:
    """Where a numpy array's data starts, for a C call: through ctypes' view of the buffer when the array
    is writable and C-contiguous (a third of what `array.ctypes.data` costs), else numpy's interface."""
    flags = array.flags
    if flags.writeable and flags.c_contiguous and array.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.__array_interface__["data"][0]


def load_switched(build: Callable[[], Path], errors: tuple[type[Exception], ...], notice: str) -> ctypes.CDLL | None:
    """A built library loaded as `$THC_NATIVE` says: "0" skips it (None); "1" lets a failure to build or load
    it raise; otherwise a failure prints `notice: <why>` once on stderr and returns None, and the caller
    takes its own fallback. `errors`: what `build` raises when it cannot build."""
    mode = os.environ.get(NATIVE_ENV, "")
    if mode == "0":
        return None
    try:
        return ctypes.CDLL(str(build()))
    except (*errors, OSError) as exc:
        if mode == "1":
            raise
        print(f"{notice}: {exc}", file=sys.stderr)
        return None


class NativeBuildError(Exception):
    """No C compiler, or the compiler rejected the sources (its output is in the message)."""


class CompilerMissing(NativeBuildError):
    """No C compiler runs here (none found, or it does not start): what to install is in the message.

    The one NativeBuildError that is about the machine, not the sources: the tests skip on it and fail on
    any other (a compiler that rejects the project's C)."""


def cache_dir() -> Path:
    return Path(os.environ.get("THC_NATIVE_CACHE") or Path.home() / ".cache" / "thc-native")


def find_compiler() -> list[str]:
    """`$CC` if set, else cc or gcc from PATH, as an argv prefix."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    for name in ("cc", "gcc"):
        path = shutil.which(name)
        if path:
            return [path]
    raise CompilerMissing(
        "no C compiler found (looked for $CC, cc, gcc): install the Debian package gcc (apt-get install gcc)"
    )


def check_compiler() -> list[str]:
    """The compiler's argv once it has answered `--version`; CompilerMissing where none runs."""
    compiler = find_compiler()
    _compiler_identity(compiler)
    return compiler


def _compiler_identity(compiler: list[str]) -> bytes:
    try:
        return subprocess.run([*compiler, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompilerMissing(
            f"C compiler {compiler[0]} does not run ({exc}): install the Debian package gcc (apt-get install gcc) "
            "or point $CC at a working compiler"
        ) from None


def build_shared(
    sources: list[Path | str],
    name: str,
    flags: list[str] | tuple[str, ...] = ("-O2", "-Wall"),
    include_dirs: list[Path] | tuple[Path, ...] = (),
) -> Path:
    """Compile `sources` (Paths or C text) with SHARED_FLAGS + `flags` into `<cache>/<name>-<hash>.so`."""
    return _build(sources, name, [*SHARED_FLAGS, *flags], include_dirs, ".so")


def build_executable(
    sources: list[Path | str],
    name: str,
    flags: list[str] | tuple[str, ...] = ("-O2", "-Wall"),
    include_dirs: list[Path] | tuple[Path, ...] = (),
) -> Path:
    """Compile `sources` into a program `<cache>/<name>-<hash>` (a benchmark's helper process)."""
    return _build(sources, name, list(flags), include_dirs, "")


def _build(sources, name, flags, include_dirs, suffix) -> Path:
    compiler = find_compiler()
    argv_flags = [*flags, *(f"-I{d}" for d in include_dirs)]
    digest = hashlib.sha256()
    for part in (_compiler_identity(compiler), " ".join([*compiler, *argv_flags]).encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    texts = []
    for source in sources:
        text = source.read_bytes() if isinstance(source, Path) else source.encode()
        texts.append(text)
        digest.update(len(text).to_bytes(8, "little") + text)
    for directory in include_dirs:
        for header in sorted(Path(directory).glob("*.h")):
            digest.update(header.name.encode() + b"\0" + header.read_bytes())
    target_dir = cache_dir()
    target = target_dir / f"{name}-{digest.hexdigest()[:20]}{suffix}"
    if target.exists():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=target_dir) as scratch:
        files = []
        for index, (source, text) in enumerate(zip(sources, texts)):
            if isinstance(source, Path):
                files.append(str(source.resolve()))
            else:
                path = Path(scratch) / f"source{index}.c"
                path.write_bytes(text)
                files.append(str(path))
        partial = Path(scratch) / f"out{suffix}"
        done = subprocess.run([*compiler, *argv_flags, "-o", str(partial), *files], capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(
                f"compiling {name} failed ({' '.join(compiler)} exit {done.returncode}):\n{done.stderr.strip()}"
            )
        os.replace(partial, target)
    return target
