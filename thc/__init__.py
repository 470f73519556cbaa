"""THC (Tensor Homomorphic Compression, NSDI'24): the compression maths of the testbed. No networking here.

from thc import THCConfig, THCCompressor, make_table, Table

The names below are imported when first used (PEP 562), so `import thc.config` (a job's description, a
command line's --help) does not pay for torch.
"""

import importlib

_WHERE = {
    "THCCompressor": ".compressor",
    "THCPrepared": ".compressor",
    "THCConfig": ".config",
    "THCError": ".errors",
    "Bits": ".interface",
    "Compressor": ".interface",
    "Prepared": ".interface",
    "Table": ".tables",
    "make_table": ".tables",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'thc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
