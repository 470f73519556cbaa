"""Baseline compressors behind the same three-phase interface as THC (see :mod:`thc.interface`)."""

from .dense import FP16, NoCompression
from .fixed_point import FixedPoint32, fixed_point_scale
from .qsgd import QSGD
from .terngrad import TernGrad
from .topk import TopK

__all__ = ["NoCompression", "FP16", "FixedPoint32", "fixed_point_scale", "TopK", "QSGD", "TernGrad"]
