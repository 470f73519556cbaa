"""THC (Tensor Homomorphic Compression, NSDI'24): the compression maths of the testbed. No networking here.

from thc import THCConfig, THCCompressor, make_table, Table
"""

from .compressor import THCCompressor, THCPrepared
from .config import THCConfig
from .errors import THCError
from .interface import Bits, Compressor, Prepared
from .tables import Table, make_table

__all__ = [
    "THCConfig",
    "THCCompressor",
    "THCPrepared",
    "make_table",
    "Table",
    "THCError",
    "Compressor",
    "Prepared",
    "Bits",
]
