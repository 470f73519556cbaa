"""A stand-in for torch.distributed.GradBucket: what the DDP hooks use of it, for hook tests without DDP."""


class GradBucket:
    """One flat gradient buffer with its bucket index; `last` marks the backward pass's final bucket.
    `shapes`: the parameters' shapes the buffer holds in order (PowerSGD asks for them; default: one
    flat tensor)."""

    def __init__(self, tensor, index=0, last=True, shapes=None):
        self._buffer, self._index, self._last = tensor, index, last
        self._shapes = shapes if shapes is not None else [tuple(tensor.shape)]

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def gradients(self):
        out, start = [], 0
        for shape in self._shapes:
            size = 1
            for d in shape:
                size *= d
            out.append(self._buffer[start : start + size].view(shape))
            start += size
        return out
