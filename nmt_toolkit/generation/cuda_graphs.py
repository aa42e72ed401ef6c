"""CUDA graphs of the static-shape search's step (generation/static_search.py): recorded once per shape, replayed.

Why graphs. A beam step of a Transformer decoder is some hundreds of small kernels; on a GPU the host takes
longer to launch them than the device takes to run them (the profile in docs/benchmarks.md). A CUDA graph
launches the whole recorded step at once. The static-shape search makes that possible: its step reads and writes only buffers
allocated before capture and takes its position from a device tensor, so one recording serves every step
of every batch of the same shape.

Why ``torch.cuda.CUDAGraph`` and not ``torch.compile(mode="reduce-overhead")``. The step is already
static-shaped and keeps its state in its own buffers, which is all that mode needs from it to use CUDA
graphs; on top it would run inductor for every shape (rows, source width, window) — many seconds each for a
6-layer decoder, with a few dozen shapes per test set — and generate kernels at run time. A plain capture
costs about one step per shape, needs nothing beyond torch, and the same step function runs eagerly on
the CPU, where the tests compare it with the dynamic search. Fusing the step's element-wise kernels is what
compile would add; that is left for when measurements show the graph replay to be bandwidth-bound.

How (as torch documents it): a plan's first recordable step runs eagerly on a side stream (a real step of
the search, which also initialises cuBLAS workspaces and the like outside any capture); after that, a shape
met for the first time is captured (capture records and runs nothing) and replayed at once, and replayed
from then on. A new shape thus costs about one eager step (the capture's host work) plus instantiating the
graph. The graphs of one plan share a memory pool: they run one after another, and nothing allocated
inside a step outlives it.
"""
from __future__ import annotations

from typing import Callable, Hashable

import torch


class StepGraphs:
    """The recorded steps of one set of buffers (one plan of the static search), one graph per key."""

    def __init__(self, device: torch.device):
        self.device = device
        self.graphs: dict = {}
        self.warm = False
        self.pool = torch.cuda.graph_pool_handle()
        self.captures = 0

    def run(self, key: Hashable, step: Callable[[], None]) -> None:
        """Run ``step`` once: replayed from the graph of ``key`` (recorded now if new), or eagerly (warm-up)."""
        graph = self.graphs.get(key)
        if graph is None:
            if not self.warm:
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    step()
                torch.cuda.current_stream(self.device).wait_stream(side)
                self.warm = True
                return
            graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA calls (a training run's batch prefetcher pinning memory while
            # --eval-bleu decodes) neither break this capture nor fail themselves
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                step()
            self.graphs[key] = graph
            self.captures += 1
        graph.replay()
