"""The codec in PyTorch's data-parallel training: DDP communication hooks and the all-reduce sums.

Shaped like torch's ``ddp_comm_hooks``: each module a hook's state and its function. ``aggregator_hooks``
sums THC or FIX32 buckets through any aggregator (the switch's, parameter servers, gloo), ``gloo_hooks``
runs the modes that all-reduce over a process group, ``mixed`` runs a per-bucket plan with both, and
``allreduce`` sums one tensor for the switch's torch.distributed backend. The maths is thc's; the wire
is the aggregator's, so nothing here knows packets.
"""
