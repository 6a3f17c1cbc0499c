"""Backward attribution: each recorded module call's gradient record, holding the gradient its
backward received (of its outputs) and the one it passed on (its own share of its inputs').

A call's own share of an input's gradient is what the autograd nodes created inside the call
that read the input pass to it: not the input's total gradient, which also holds other
consumers' shares. Autograd numbers nodes in creation order (per thread), so the nodes created
inside a call are those numbered from the counter's value at its pre-hook to its value at its
post-hook. The recorder notes both numbers per call and, when the outermost call returns,
`BackwardTaps.install` walks the new part of the graph ONCE for all of them: each node that reads
some call's input gets one hook, whatever the number of calls it serves (a layer and its first
child read the same input through the same node), and each output node one pre-hook. A walk per
call re-walked every child's nodes in each container around it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tinykit.numerics.summary import GRAD

if TYPE_CHECKING:
    import torch

    from tinykit.numerics.recorder import Recorder


def sequence_nr() -> int:
    """The number autograd gives the next node it creates on this thread."""
    return _sequence_getter()()


@functools.cache
def _sequence_getter() -> Callable[[], int]:
    import torch

    getter = getattr(torch._C._autograd, "_get_sequence_nr", None)
    if getter is not None:
        return getter

    def probe() -> int:  # an older torch has no getter: create a node and read its number
        with torch.enable_grad():
            node = (torch.zeros((), requires_grad=True) * 1).grad_fn
        assert node is not None
        return node._sequence_nr() + 1

    return probe


class CallBackward:
    """The backward of one module call: the gradient it received and the gradient it passed on.

    Its record is written when the last node that reads one of its inputs has run; a call with
    no input that requires grad (an embedding) gets a record per output gradient instead, with
    no input gradient.
    """

    __slots__ = (
        "rec",
        "name",
        "parent",
        "cls",
        "step",
        "lo",
        "hi",
        "out_names",
        "outs",
        "in_names",
        "in_edges",
        "grad_outs",
        "grad_ins",
        "consumers",
        "pending",
    )

    def __init__(
        self,
        rec: Recorder,
        name: str,
        parent: str,
        named_inputs: list[tuple[str, torch.Tensor]],
        named_outs: list[tuple[str, torch.Tensor]],
        cls: str,
        lo: int,
    ) -> None:
        self.rec, self.name, self.parent, self.cls = rec, name, parent, cls
        self.step = rec.step  # the step of the forward: a backward runs before the next one
        self.lo, self.hi = lo, sequence_nr()
        self.out_names = [f"grad {n}" for n, _ in named_outs]
        self.outs = [t for _, t in named_outs]
        grad_inputs = [(n, t) for n, t in named_inputs if t.requires_grad]
        self.in_names = [f"grad {n}" for n, _ in grad_inputs]
        # (node, output_nr) of each input, as the nodes that read it see it
        self.in_edges = [_edge(t) for _, t in grad_inputs]
        self.grad_outs: list[Any] = [None] * len(self.outs)
        self.grad_ins: list[Any] = [None] * len(grad_inputs)
        self.consumers = self.pending = 0

    def output_grad(self, i: int, grad: Any) -> None:
        """`grad` (detached) of output i has arrived."""
        self.grad_outs[i] = grad
        if not self.consumers:  # no input gradient to wait for: record this as it arrives
            label = self.name if len(self.grad_outs) == 1 else f"{self.name}[{i}]"
            self._write(label, [(self.out_names[i], grad)], [])

    def input_grad(self, i: int, grad: Any) -> None:
        """One consumer's (detached) share of the gradient of input i."""
        self.grad_ins[i] = grad if self.grad_ins[i] is None else self.grad_ins[i] + grad

    def consumer_done(self) -> None:
        self.pending -= 1
        if self.pending:
            return
        self._write(
            self.name,
            [(n, g) for n, g in zip(self.out_names, self.grad_outs, strict=True) if g is not None],
            [(n, g) for n, g in zip(self.in_names, self.grad_ins, strict=True) if g is not None],
        )
        # a second backward through a retained graph runs the same nodes again; and the
        # gradients go now, not with the graph
        self.pending = self.consumers
        self.grad_ins = [None] * len(self.grad_ins)
        self.grad_outs = [None] * len(self.grad_outs)

    def _write(
        self,
        label: str,
        grad_outs: list[tuple[str, torch.Tensor]],
        grad_ins: list[tuple[str, torch.Tensor]],
    ) -> None:
        rec = self.rec
        step, rec.step = rec.step, self.step  # recorded under its forward's step
        try:
            rec._add(
                rec._next_seq(),
                label,
                GRAD,
                raw=(grad_outs, grad_ins),
                parent=self.parent,
                cls=self.cls,
                inputs=rec.summaries(grad_outs),
                outputs=rec.summaries(grad_ins),
            )
        finally:
            rec.step = step


def _edge(t: torch.Tensor) -> tuple[Any, int]:
    node = t.grad_fn
    if node is not None:
        return node, t.output_nr
    from torch.autograd.graph import get_gradient_edge  # a leaf: its AccumulateGrad node

    edge = get_gradient_edge(t)
    return edge.node, edge.output_nr


class BackwardTaps:
    """The recorded calls of the forward in progress, until `install` hooks their backward."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.calls: list[CallBackward] = []

    def add(self, call: CallBackward) -> None:
        self.calls.append(call)

    def install(self) -> None:
        """Hook the backward of every call added since the last install (see the module doc)."""
        calls, self.calls = self.calls, []
        if not calls:
            return
        rec = self.rec
        # (id(node), output_nr) of an input -> [(call, index of the input in the call)]
        readers: dict[tuple[int, int], list[tuple[CallBackward, int]]] = {}
        # id(output node) -> (node, [(call, output index, output_nr)])
        out_nodes: dict[int, tuple[Any, list[tuple[CallBackward, int, int]]]] = {}
        floor = min(c.lo for c in calls)
        todo = []
        for call in calls:
            for i, (node, nr) in enumerate(call.in_edges):
                readers.setdefault((id(node), nr), []).append((call, i))
            for i, t in enumerate(call.outs):
                if not t.requires_grad:
                    continue
                node = t.grad_fn
                if node is None:  # a leaf returned as it is: a tensor hook
                    rec._hook(t.register_hook(_output_hook(call, i)))
                    continue
                out_nodes.setdefault(id(node), (node, []))[1].append((call, i, t.output_nr))
                todo.append(node)
        # Walk the nodes created by these calls (numbered from `floor` on), each once; a node
        # reading an input of a call that it was created inside is one of that call's consumers.
        taps: list[tuple[Any, list[tuple[int, CallBackward, int]]]] = []
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            nr_node = node._sequence_nr()
            mine: list[tuple[int, CallBackward, int]] | None = None
            for slot, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                for call, i in readers.get((id(nxt), nr), ()):
                    if call.lo <= nr_node < call.hi:
                        if mine is None:
                            mine = []
                        mine.append((slot, call, i))
                if nxt._sequence_nr() >= floor and id(nxt) not in seen:
                    todo.append(nxt)
            if mine is not None:
                taps.append((node, mine))
        for node, mine in taps:
            # the innermost call first (it ended first): a child's record before its parent's
            served = sorted(
                {id(call): call for _, call, _ in mine}.values(), key=operator.attrgetter("hi")
            )
            for call in served:
                call.consumers += 1
            rec._hook(node.register_hook(_consumer_hook(rec, mine, served)))
        for call in calls:
            call.pending = call.consumers
            # The hooks hold the call: were it to hold its outputs (and so their nodes), each
            # step's graph would be a cycle through C++ that no collector frees. (Not before
            # the walk: it matches nodes by id, so the ones it looks for must stay alive.)
            call.outs, call.in_edges = [], []
        for node, outs in out_nodes.values():
            rec._hook(node.register_prehook(_output_prehook(rec, outs)))


def _detached(grads: tuple[Any, ...]) -> list[Any]:
    return [None if g is None else g.detach() for g in grads]


def _output_hook(call: CallBackward, i: int):
    def hook(grad: torch.Tensor) -> None:
        if call.rec._open and grad is not None:
            call.output_grad(i, grad.detach())

    return hook


def _output_prehook(rec: Recorder, outs: list[tuple[CallBackward, int, int]]):
    def prehook(grad_outputs: tuple[Any, ...]) -> None:
        if not rec._open:
            return
        # detached once: the calls sharing this output (a block and its last child) then
        # share one tensor, which the detector reduces once
        grads = _detached(grad_outputs)
        for call, i, nr in outs:
            if grads[nr] is not None:
                call.output_grad(i, grads[nr])

    return prehook


def _consumer_hook(
    rec: Recorder, mine: list[tuple[int, CallBackward, int]], served: list[CallBackward]
):
    def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        if not rec._open:
            return
        grads = _detached(grad_inputs)
        for slot, call, i in mine:
            if grads[slot] is not None:
                call.input_grad(i, grads[slot])
        for call in served:
            call.consumer_done()

    return hook
