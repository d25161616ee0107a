"""Captured decoding: a decode step recorded once as a CUDA graph and replayed for every new token.

A decode step of a small model is a hundred or so small kernels, and batch-1 decoding on a GPU spends its
time launching them from Python: the GPU waits on the host. A CUDA graph records the kernels of one step
once; a replay launches them all with one call (as gpt-fast does, through torch.compile's
"reduce-overhead" mode; here with `torch.cuda.CUDAGraph` directly, so that nothing need be compiled; with
`DecodeGraphs(model, compile=True)` the step goes through torch.compile first, for fewer, fused kernels).

A graph replays the very kernels on the very addresses it recorded, so the step it records must have fixed
shapes and read nothing on the host:
    - the self-attention keys/values live in `FixedKVCache`s: preallocated buffers, the new position a
      device tensor; attention reads every slot, a key-padding mask hides those not written yet;
    - the inputs (the newest token, its position, the mask) are buffers the step itself advances;
    - no row leaves the batch: a row that has stopped goes on decoding, and its tokens are ignored;
    - a sampled token is drawn by the exponential race (`sampling.race`), which takes the same draws as
      `torch.multinomial` but reads nothing on the host.
The host reads the produced tokens every `sync_every` steps to stream them and to see whether every row
has stopped (at most sync_every - 1 steps run after that). Prefill, and steps that force a token, run
eagerly, outside the graph. Beam search keeps K rows per sentence at fixed places; its step reorders the
caches in place (`FixedKVCache.reorder`) inside the graph, and the search itself stays on the host.

On the CPU there is nothing to capture: the same fixed-shape step runs eagerly, which is what the tests
compare with the dynamic path (the same tokens).

    capture_problem(model, use_cache)       why a model's step cannot be captured (None: it can)
    use_capture(capture, model, use_cache)  whether to take the captured path: None = on CUDA when possible
    StepGraph(step, device)                 runs `step`: eagerly for its first calls, then captured, replayed
    DecodeGraphs(model)                     the fixed buffers and graphs per shape, kept across calls by
                                            whoever holds the model (as `layout.DecodingLayout`)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import nn

from tformer.data.device import device_of
from tformer.errors import UserError
from tformer.nn.attention import Attention
from tformer.nn.kernels.exact import ExactAttention

WARMUP = 2  # eager calls before the capture: cuBLAS handles and workspaces are made outside the graph
KEPT = 4  # shapes whose buffers and graphs a DecodeGraphs keeps (the least recently used goes first)
SYNC_EVERY = 8  # captured steps between two reads of the tokens on the host


def capture_problem(model: nn.Module, *, use_cache: bool = True) -> str | None:
    """Why the model's decode step cannot run with fixed shapes, in a few words; None when it can: every
    self-attention layer exact (a preallocated key/value cache read whole) and without ALiBi (which needs the
    query's index on the host)."""
    if not use_cache:
        return "it decodes with a key/value cache only (use_cache=False was given)"
    decoder = getattr(model, "decoder", None)
    if decoder is None or not hasattr(decoder, "layers"):
        return f"{type(model).__name__} has no decoder stack"
    for i, layer in enumerate(decoder.layers):
        mixer = layer.mixer
        if not isinstance(mixer, Attention):
            return f"layer {i} mixes with {type(mixer).__name__}, not attention"
        if not isinstance(mixer.kernel, ExactAttention):
            return f"layer {i} uses {type(mixer.kernel).__name__}; only exact attention (sdpa, eager) is captured"
        if mixer.alibi is not None:
            return "ALiBi biases scores by the query's index, which a fixed-shape step does not know on the host"
    return None


def use_capture(capture: bool | None, model: nn.Module, *, use_cache: bool = True) -> bool:
    """capture False: the dynamic path; True: the fixed-shape path (captured on CUDA, eager on the CPU), a
    UserError if the model cannot take it; None: the fixed-shape path where it pays, on CUDA, when possible."""
    if capture is False or (capture is None and device_of(model).type != "cuda"):
        return False
    problem = capture_problem(model, use_cache=use_cache)
    if capture is None:
        return problem is None
    if problem is not None:
        raise UserError(f"captured decoding is not possible: {problem}; decode with capture off")
    return True


class StepGraph:
    """Runs `step` (no arguments; it reads and writes only buffers that outlive it). On CUDA: the first
    `warmup` calls run eagerly on a side stream (real steps, whose results count), the next one records the
    step as a CUDA graph and replays it, and every later call replays it. Elsewhere, or with `record` False:
    every call runs `step`. `generator`: a seeded generator the step draws from, whose state the graph then
    advances at each replay. `compile`: the step goes through torch.compile first (fused kernels, fewer of
    them in the graph; the first call compiles, which takes a while)."""

    def __init__(self, step: Callable[[], None], device: torch.device, *, generator: torch.Generator | None = None,
                 record: bool = True, compile: bool = False, warmup: int = WARMUP) -> None:
        self.step = torch.compile(step, dynamic=False) if compile else step
        self.device, self.generator, self.warmup = device, generator, warmup
        self.record = record and device.type == "cuda"
        self.graph: Any = None
        self.calls = 0

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self) -> None:
        if not self.record:
            self.step()
        elif self.graph is not None:
            self.graph.replay()
        elif self.calls < self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self.step()
            torch.cuda.current_stream(self.device).wait_stream(side)
        else:
            graph = torch.cuda.CUDAGraph()
            if self.generator is not None:
                graph.register_generator_state(self.generator)
            # thread_local: other threads of the process (a server's) may use the GPU meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.step()  # recorded, not run
            self.graph = graph
            graph.replay()
        self.calls += 1


class DecodeGraphs:
    """The fixed-shape buffers and captured steps of one model, per shape and settings (a key the decoder
    makes), made on first use and kept for later calls: the `KEPT` most recently used. They stay valid while
    the model's parameters stay where they are (changed in place is fine: a graph reads them by address);
    moving the model (`.to`, a new dtype) drops them. `sync_every`: steps between two reads of the tokens on
    the host (1: every step; more: fewer waits, up to sync_every - 1 wasted steps at the end); None:
    `SYNC_EVERY` on CUDA, 1 elsewhere (where nothing runs ahead of the host, so a wasted step is all cost)."""

    def __init__(self, model: nn.Module, *, sync_every: int | None = None, record: bool = True,
                 compile: bool = False) -> None:
        if sync_every is not None and sync_every < 1:
            raise UserError(f"sync_every={sync_every} must be >= 1")
        self.model = model
        self._sync_every = sync_every
        self.record, self.compile = record, compile  # StepGraph's: False runs the fixed-shape steps eagerly
        self._kept: OrderedDict[Hashable, Any] = OrderedDict()
        self._where: tuple = ()

    @property
    def sync_every(self) -> int:
        if self._sync_every is not None:
            return self._sync_every
        return SYNC_EVERY if device_of(self.model).type == "cuda" else 1

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The state kept for `key`, made by `make()` when there is none."""
        where = tuple(p.data_ptr() for p in self.model.parameters())
        if where != self._where:  # the model moved: its graphs read memory it no longer uses
            self._kept.clear()
            self._where = where
        if key not in self._kept:
            self._kept[key] = make()
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return self._kept[key]

    def clear(self) -> None:
        self._kept.clear()

    def check(self, model: nn.Module) -> None:
        if self.model is not model:
            raise ValueError("these decode graphs belong to another model; make them with DecodeGraphs(model)")

    def step_graph(self, step: Callable[[], None], *, generator: torch.Generator | None = None) -> StepGraph:
        """A StepGraph for `step` with this holder's settings."""
        return StepGraph(step, device_of(self.model), generator=generator, record=self.record, compile=self.compile)


def bucket(length: int, *, cap: int, step: int = 64) -> int:
    """`length` rounded up to a multiple of `step`, at most `cap`: calls of nearby lengths share buffers
    and a graph (attention reads every slot, so the bucket is not much longer than the need)."""
    return min(-(-length // step) * step, cap)


__all__ = ["DecodeGraphs", "StepGraph", "bucket", "capture_problem", "use_capture"]
