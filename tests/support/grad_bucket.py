"""A stand-in for torch.distributed.GradBucket: what the DDP hooks use of it, for hook tests without DDP."""


class GradBucket:
    """One flat gradient buffer with its bucket index; `last` marks the backward pass's final bucket."""

    def __init__(self, tensor, index=0, last=True):
        self._buffer, self._index, self._last = tensor, index, last

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._last
