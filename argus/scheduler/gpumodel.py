"""GPU models: which nodes a task that names models may use.

A TaskSpec may name the GPU model its gang needs (``gpu_type: H100``, or a list of
acceptable ones); a node's model is what Ray labels it with, the ``accelerator_type:<model>``
resource (Ray sets it on GPU nodes; ``argus up --gpu-type`` and the node pool's
``gpu_type`` set it on logical GPUs). Every placement question the scheduler asks (fits
now, could ever fit, reservation, room to make, ETA) first narrows the nodes to the ones
whose model the task accepts; a task that names no model accepts every node.

Models match without regard to case ("h100" is H100): Ray's names are upper case, people's
not always.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

from argus.events.catalog import Demand

__all__ = ["ACCELERATOR_PREFIX", "allowed_nodes", "except_nodes", "gpu_type_of", "models_of", "models_present", "normalize", "wants"]

ACCELERATOR_PREFIX = "accelerator_type:"


def normalize(names: Sequence[str]) -> tuple[str, ...]:
    """A spec's models as a demand holds them: distinct, sorted, as written."""
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(name.casefold(), name)
    return tuple(sorted(seen.values(), key=str.casefold))


def gpu_type_of(resources: dict[str, float]) -> str:
    """A node's GPU model from its Ray resources ("" if it has no ``accelerator_type:``);
    of several (not expected), the first by name, so the answer is stable."""
    models = sorted(k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX))
    return models[0] if models else ""


@functools.lru_cache(maxsize=256)
def allowed_nodes(gpu_types: tuple[str, ...], node_types: tuple[str, ...]) -> frozenset[int] | None:
    """Indices of the nodes whose model is one of ``gpu_types``; None when the task names
    no model (every node). Asked per pass and shape, for the same few clusters: cached."""
    if not gpu_types:
        return None
    wanted = {g.casefold() for g in gpu_types}
    return frozenset(i for i, t in enumerate(node_types) if t.casefold() in wanted)


def except_nodes(allowed: frozenset[int] | None, n_nodes: int, avoid: frozenset[int]) -> frozenset[int] | None:
    """``allowed`` (None: all ``n_nodes`` nodes) without the nodes ``avoid`` names."""
    if not avoid:
        return allowed
    return frozenset(range(n_nodes) if allowed is None else allowed) - avoid


def models_of(d: Demand) -> str:
    """The models ``d`` accepts, as messages name them: "H100", "A100 or H100"; "" for any."""
    return " or ".join(d.gpu_types)


def wants(d: Demand) -> str:
    """The model part of a message: "needs H100", "needs A100 or H100"; "" for any model."""
    return f"needs {models_of(d)}" if d.gpu_types else ""


def models_present(node_types: Sequence[str]) -> str:
    """The models of a cluster's nodes, for messages: "A100 ×2, H100 ×1, unlabelled ×1"."""
    counts = Counter(t or "unlabelled" for t in node_types)
    return ", ".join(f"{model} ×{n}" for model, n in sorted(counts.items()))
