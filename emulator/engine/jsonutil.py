"""Small helpers to read BMv2 JSON and to say where in it a problem is."""

from emulator.errors import LoadError, UnsupportedConstruct


def source_of(obj) -> str:
    """'file:line: fragment' from a JSON object's source_info, or '' when it has none."""
    if not isinstance(obj, dict):
        return ""
    si = obj.get("source_info")
    if not isinstance(si, dict):
        return ""
    frag = si.get("source_fragment")
    loc = f"{si.get('filename', '?')}:{si.get('line', '?')}"
    return f"{loc}: {frag}" if frag else loc


def where(path: str, obj=None) -> str:
    """A JSON path plus the P4 source location when the JSON gives one."""
    src = source_of(obj)
    return f"{path} ({src})" if src else path


def unsupported(what: str, path: str, obj=None) -> UnsupportedConstruct:
    return UnsupportedConstruct(f"unsupported {what} at {where(path, obj)}")


def malformed(what: str, path: str, obj=None) -> LoadError:
    return LoadError(f"malformed BMv2 JSON: {what} at {where(path, obj)}")


def hexstr(value, path: str = "?") -> int:
    """Value of a BMv2 hexstr ('0x0a', '-0x1'); plain JSON integers are accepted as well."""
    if isinstance(value, bool):
        raise malformed(f"expected a hex string, got {value!r}", path)
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise malformed(f"expected a hex string, got {value!r}", path)
    text = value.strip()
    negative = text.startswith("-")
    if negative:
        text = text[1:]
    try:
        number = int(text, 16)
    except ValueError:
        raise malformed(f"bad hex string {value!r}", path) from None
    return -number if negative else number


def hexstr_bytes(value: str, path: str = "?") -> int:
    """Number of bytes a hexstr spells out (BMv2 compares byte-padded keys)."""
    text = value[1:] if value.startswith("-") else value
    if text.startswith(("0x", "0X")):
        text = text[2:]
    if not text:
        raise malformed(f"empty hex string {value!r}", path)
    return (len(text) + 1) // 2
