"""Clusters in one process, without Mininet or root: workers as threads (ddp_cluster), switches as
in-process targets programmed in contract terms (switches), and a leaf-spine fabric of them joined by a
packet loop (leaf_spine). The tests and the benchmarks share them."""
