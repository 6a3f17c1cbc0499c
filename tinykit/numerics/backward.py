"""Backward attribution: each recorded module call's gradient record, holding the gradient its
backward received (of its outputs) and the one it passed on (its own share of its inputs')."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from tinykit.numerics.record import Recorder


class ModuleBackward:
    """The backward of one module call: the gradient it received and the gradient it passed on.

    Output gradients come from tensor hooks on the outputs. Input gradients are this module's own
    contribution to the gradient of each input (not the input's total gradient, which also holds
    other consumers' shares): the autograd nodes created inside the call that consume an input
    get a node hook, and the record is written when the last of them has run. So a record whose
    output gradient matched and whose input gradient differs names the module whose backward is
    at fault. A module with no input that requires grad (an embedding) gets a record per output
    gradient instead, with no input gradient.
    """

    def __init__(
        self,
        rec: Recorder,
        name: str,
        parent: str,
        named_inputs: list[tuple[str, torch.Tensor]],
        named_outs: list[tuple[str, torch.Tensor]],
        cls: str = "",
    ) -> None:
        self.rec, self.name, self.parent, self.cls = rec, name, parent, cls
        self.out_names = [f"grad {n}" for n, _ in named_outs]
        grad_inputs = [(n, t) for n, t in named_inputs if t.requires_grad]
        self.in_names = [f"grad {n}" for n, _ in grad_inputs]
        outs = [t for _, t in named_outs]
        self.grad_outs: list[torch.Tensor | None] = [None] * len(outs)
        self.grad_ins: list[torch.Tensor | None] = []
        self.step = rec.step  # the step of the forward: a backward runs before the next one
        consumers = self._consumers([t for _, t in grad_inputs], outs)
        self.consumers = self.pending = len(consumers)
        for i, t in enumerate(outs):
            if t.requires_grad:
                rec._hook(t.register_hook(self._output_hook(i, len(outs))))
        for node, taps in consumers:
            rec._hook(node.register_hook(self._node_hook(taps)))

    def _consumers(
        self, inputs: list[torch.Tensor], outs: list[torch.Tensor]
    ) -> list[tuple[Any, list[tuple[int, int]]]]:
        """[(node made in this call, [(its next_functions slot, index of the input it reads)])]."""
        from torch.autograd.graph import get_gradient_edge

        self.grad_ins = [None] * len(inputs)
        edges: dict[tuple[int, int], tuple[int, Any]] = {}
        for i, t in enumerate(inputs):
            edge = get_gradient_edge(t)
            edges.setdefault((id(edge.node), edge.output_nr), (i, edge.node))
        if not edges:
            return []
        # Autograd numbers nodes in creation order, so the nodes made inside this call come after
        # every input's node: the walk stops at older ones instead of crossing the whole graph.
        # (AccumulateGrad nodes of leaf inputs carry no such number and have no inputs.)
        floor = max((n._sequence_nr() for _, n in edges.values() if n.next_functions), default=-1)
        found: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
        seen: set[int] = set()
        todo = []
        for t in outs:
            if not t.requires_grad:
                continue
            out_edge = get_gradient_edge(t)
            if (id(out_edge.node), out_edge.output_nr) not in edges:
                todo.append(out_edge.node)  # an output that is an input made no node of its own
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for slot, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                if (id(nxt), nr) in edges:
                    found.setdefault(id(node), (node, []))[1].append(
                        (slot, edges[(id(nxt), nr)][0])
                    )
                elif nxt.next_functions and nxt._sequence_nr() > floor:
                    todo.append(nxt)
        return list(found.values())

    def _output_hook(self, i: int, n: int):
        def hook(grad: torch.Tensor) -> None:
            if not self.rec._open:
                return
            self.grad_outs[i] = grad.detach()
            if not self.consumers:  # no input gradient to wait for: record this as it arrives
                label = self.name if n == 1 else f"{self.name}[{i}]"
                self._write(label, [(self.out_names[i], grad)], [])

        return hook

    def _node_hook(self, taps: list[tuple[int, int]]):
        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            if not self.rec._open:
                return
            for slot, i in taps:
                g = grad_inputs[slot]
                if g is not None:
                    g = g.detach()
                    self.grad_ins[i] = g if self.grad_ins[i] is None else self.grad_ins[i] + g
            self.pending -= 1
            if self.pending == 0:
                self._write(
                    self.name,
                    [
                        (n, g)
                        for n, g in zip(self.out_names, self.grad_outs, strict=True)
                        if g is not None
                    ],
                    [
                        (n, g)
                        for n, g in zip(self.in_names, self.grad_ins, strict=True)
                        if g is not None
                    ],
                )
                # a second backward through a retained graph runs the same nodes again
                self.pending = self.consumers
                self.grad_ins = [None] * len(self.grad_ins)

        return hook

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
                "grad",
                raw=(grad_outs, grad_ins),
                parent=self.parent,
                cls=self.cls,
                inputs=rec.summaries(grad_outs),
                outputs=rec.summaries(grad_ins),
            )
        finally:
            rec.step = step
