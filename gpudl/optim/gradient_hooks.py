"""Which parameters of the flat buffers hold a gradient to apply: marked by a hook when
backward writes into their gradient slot, forgotten by ``zero_grad``.

Book section: *Chapter 4, "Multi-tensor: one launch for the whole model"*.

``zero_grad`` zeroes the flat gradient buffer in place rather than setting the gradients to
``None`` (so that backward accumulates into it again); torch would then skip a parameter that
backward leaves alone, as its gradient is ``None``. :class:`WrittenGradients` keeps that
distinction: :meth:`~WrittenGradients.watch` registers a post-accumulate hook on a parameter
(``register_post_accumulate_grad_hook``), which marks it each time backward writes its
gradient; the step updates marked parameters only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpudl.checks import check_instance, check_tensor

__all__ = ["WrittenGradients"]


class WrittenGradients:
    """The parameters (by ``id``) whose gradient backward, or a step adopting a new gradient
    tensor, has written since the last :meth:`clear`."""

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def watch(self, params: Sequence[torch.Tensor]) -> None:
        """Mark each of ``params`` whenever backward accumulates its gradient."""
        check_instance("params", params, Sequence)
        for i, p in enumerate(params):
            check_tensor(f"params[{i}]", p)
        ids = self._ids  # the hook holds the set, not this object
        for p in params:
            p.register_post_accumulate_grad_hook(lambda q: ids.add(id(q)))

    def mark(self, param: torch.Tensor) -> None:
        """Count ``param``'s gradient as written (a new gradient tensor, adopted)."""
        self._ids.add(id(check_tensor("param", param)))

    def __contains__(self, param: object) -> bool:
        return id(param) in self._ids

    def all_of(self, ids: frozenset[int]) -> bool:
        """Has every parameter in ``ids`` (the ``id()`` of each) a written gradient? One set
        operation, no Python per parameter."""
        check_instance("ids", ids, frozenset)
        return ids <= self._ids

    def clear(self) -> None:
        """Forget every mark (``zero_grad(set_to_none=True)``)."""
        self._ids.clear()
