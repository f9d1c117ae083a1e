"""graphnorm norms inside another library's model (a *host*: PyG's ``GCN``, ``GAT``, ``GraphSAGE``, ``GIN``,
``GPSConv``, or any ``nn.Module``): the edges a host does not hand its norms, and one instance at several positions.

PyG hosts call their norms as ``norm(x, batch, batch_size)`` (``BasicGNN``) or ``norm(x, batch=batch)``
(``GPSConv``): never with ``edge_index``. :func:`pass_edge_index` is the one call that fixes that: a forward pre-hook
on the host reads the ``edge_index`` of each forward call and every graphnorm norm inside receives it for the
duration of that call. It also unties norm instances that sit at several positions (:func:`untie_norms`): PyG's
``GPSConv(channels, conv, norm=module)`` makes one instance its ``norm1``, ``norm2`` and ``norm3``.

Every norm's ``forward`` (:class:`~graphnorm.norms.base.NormBase`) warns at its first call with
:class:`SharedNormWarning` when the instance sits at several positions of the model being run
(:func:`warn_if_shared`), and takes the handed ``edge_index`` when the call has none (:func:`handed_edge_index`).
"""

from __future__ import annotations

import copy
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "pass_edge_index",
    "untie_norms",
    "EdgeIndexHooks",
    "SharedNormWarning",
    "UntiedAfterBackwardWarning",
    "handed_edge_index",
    "outermost_modules",
    "warn_if_shared",
]

# Set on a norm instance (plain attributes, not state): the hand-off it reads, and whether its positions were checked.
HANDOFF_ATTRIBUTE = "_graphnorm_edge_handoff"
CHECKED_ATTRIBUTE = "_graphnorm_positions_checked"


class SharedNormWarning(UserWarning):
    """One graphnorm norm instance with parameters or statistics sits at several positions of a model: the
    positions share them."""


class UntiedAfterBackwardWarning(UserWarning):
    """:func:`untie_norms` (or :func:`pass_edge_index`) made copies in a model that has been through a backward: an
    optimizer built before holds the old parameters, not the copies', which it then never updates."""


def is_graphnorm_norm(module: Any) -> bool:
    """Whether ``module`` is an instance of a registered norm class (``register_norm`` sets ``registry_name``)."""
    return isinstance(module, nn.Module) and hasattr(type(module), "registry_name")


def outermost_modules(model: nn.Module, matches: Callable[[nn.Module], bool]) -> list[tuple[str, nn.Module]]:
    """``(attribute path, module)`` of the modules of ``model`` that ``matches``, in module order, without looking
    inside a matching one (SepNorm's inner norms, GPSConv's inner conv); each module once; ``model`` itself (named
    by its class) when it matches."""
    if matches(model):
        return [(type(model).__name__.lower(), model)]
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            if child is None or id(child) in seen:
                continue
            seen.add(id(child))
            path = f"{prefix}.{name}" if prefix else name
            if matches(child):
                found.append((path, child))
            else:
                visit(path, child)

    visit("", model)
    return found


def _norm_positions(model: nn.Module) -> dict[int, list[str]]:
    """``id(norm) -> [attribute paths]`` of every graphnorm norm of ``model`` reached at more than one path."""
    paths: dict[int, list[str]] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        if is_graphnorm_norm(module):
            paths.setdefault(id(module), []).append(path)
    return {key: found for key, found in paths.items() if len(found) > 1}


def untie_norms(model: nn.Module) -> list[str]:
    """Give every position of ``model`` that holds an already-seen graphnorm norm instance its own deep copy (the
    first position keeps the instance); returns the attribute paths that got a copy.

    Call it before building the optimizer: the copies' parameters are new tensors, which an optimizer built
    earlier does not hold, so it would never update them. Whether an optimizer holds the model's parameters cannot be
    read from the model; when copies are made in a model whose parameters have gradients (it has been through a
    backward, so it is likely being trained), an :class:`UntiedAfterBackwardWarning` names them: then build the
    optimizer again, or give it the copies' parameters (``optimizer.add_param_group``, with
    ``model.get_submodule(path).parameters()`` for each returned path). A copy starts from the instance's current
    parameters and statistics.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"untie_norms: model must be a torch.nn.Module (the model whose norms to untie), got {type(model).__name__}"
        )
    replaced: list[str] = []
    for paths in _norm_positions(model).values():
        for path in paths[1:]:
            parent_path, _, attribute = path.rpartition(".")
            parent = model.get_submodule(parent_path)
            setattr(parent, attribute, copy.deepcopy(getattr(parent, attribute)))
            replaced.append(path)
    if replaced and any(parameter.grad is not None for parameter in model.parameters()):
        warnings.warn(
            f"untie_norms: gave {', '.join(map(repr, replaced))} of {type(model).__name__} their own norm copies after "
            "a backward (the model's parameters have gradients): an optimizer built before this call does not hold "
            "the copies' parameters and never updates them; build the optimizer after untie_norms / pass_edge_index, "
            "or add them with optimizer.add_param_group",
            UntiedAfterBackwardWarning,
            stacklevel=2,
        )
    return replaced


class _HandoffState:
    """What a host's hooks hand its norms: a stack of ``(edge_index, num_nodes)``, one entry per running forward
    call of the host (pushed by its pre-hook, popped by its forward hook, which runs also on error).

    The norms and the host's hooks (bound methods) reference the same object, so ``copy.deepcopy(model)`` copies it
    once for both: the copy's norms read the copy's forward calls.
    """

    def __init__(self) -> None:
        self.stack: list[tuple[Tensor, int | None] | None] = []

    def before_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        try:
            entry = _edges_of_call(module, args, kwargs)
        except (TypeError, ValueError):
            self.stack.append(None)  # torch runs the always-called forward hook after a failed pre-hook too
            raise
        self.stack.append(entry)

    def after_forward(self, _module: nn.Module, _args: tuple, _kwargs: dict, _output: Any) -> None:
        if self.stack:
            self.stack.pop()

    def current(self) -> tuple[Tensor, int | None] | None:
        return self.stack[-1] if self.stack else None


def _edges_of_call(module: nn.Module, args: tuple, kwargs: dict) -> tuple[Tensor, int | None]:
    """``(edge_index [2, E], num_nodes)`` of one host forward call: its second positional argument when the first is
    the feature tensor, its ``edge_index`` (or ``adj_t``) keyword, or a ``Data``/``Batch`` argument's fields."""
    first = args[0] if args else kwargs.get("x")
    if isinstance(first, Tensor):
        edges = args[1] if len(args) > 1 else kwargs.get("edge_index", kwargs.get("adj_t"))
        if edges is not None:
            return _as_edge_index(edges, module), first.size(0)
    for value in (*args, *kwargs.values()):
        edges = getattr(value, "edge_index", None)
        if not isinstance(value, Tensor) and isinstance(edges, Tensor):
            return _as_edge_index(edges, module), getattr(value, "num_nodes", None)
    raise ValueError(
        f"pass_edge_index: {type(module).__name__}.forward got no edge_index: it looks for the second positional "
        "argument (after the features), the keyword edge_index (or adj_t), or an argument with .edge_index (a PyG "
        "Data or Batch)"
    )


def _as_edge_index(edges: Any, module: nn.Module) -> Tensor:
    """A dense ``[2, E]`` edge list; a sparse adjacency (PyG's transposed ``adj_t``) becomes its ``(source, target)``
    pairs."""
    if isinstance(edges, Tensor) and edges.layout == torch.strided:
        if edges.dim() != 2 or edges.size(0) != 2:
            raise ValueError(
                f"pass_edge_index: {type(module).__name__}.forward got edge_index of shape {tuple(edges.shape)} "
                "(read from its second positional argument or edge_index keyword); expected [2, num_edges]"
            )
        return edges
    from torch_geometric.utils import to_edge_index

    try:
        target_source, _ = to_edge_index(edges)  # adj_t[target, source]
    except (TypeError, ValueError, AttributeError, RuntimeError) as error:
        raise TypeError(
            f"pass_edge_index: {type(module).__name__}.forward got edge_index of type {type(edges).__name__}; "
            "expected a [2, num_edges] tensor or a sparse adjacency"
        ) from error
    return target_source.flip(0)


class EdgeIndexHooks:
    """The handle :func:`pass_edge_index` returns: ``remove()`` takes the hooks off the host and the hand-off off
    its norms (copies made by the untying stay). Also a context manager that removes on exit."""

    def __init__(self, model: nn.Module, norms: list[nn.Module], state: _HandoffState, handles: list) -> None:
        self.model = model
        self.norms = norms
        self.untied: list[str] = []
        self._state = state
        self._handles = handles

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for norm in self.norms:
            if norm.__dict__.get(HANDOFF_ATTRIBUTE) is self._state:
                del norm.__dict__[HANDOFF_ATTRIBUTE]

    def __enter__(self) -> EdgeIndexHooks:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.remove()


EdgeIndexHandoff = EdgeIndexHooks  # its name in 0.1.0, still importable


def pass_edge_index(model: nn.Module) -> EdgeIndexHooks:
    """Let ``model``'s forward hand its ``edge_index`` to every graphnorm norm inside, and give every position of a
    repeated norm instance its own copy. Call it once, after building the model and before building the optimizer.

    Usage::

        model = torch_geometric.nn.models.GCN(1433, 64, num_layers=16, out_channels=7,
                                              norm=build_norm("contranorm", 64))
        pass_edge_index(model)          # ContraNorm now leaves each node's neighbours out of its negatives
        optimizer = torch.optim.Adam(model.parameters())

    At every forward call of ``model`` the ``edge_index`` is read from its arguments (the second positional one
    after the feature tensor, the keyword ``edge_index`` or ``adj_t``, or a ``Data``/``Batch`` argument's
    ``.edge_index``) together with the number of nodes; a norm called without ``edge_index`` on that many rows
    receives it, for the duration of that call only (nested calls each see their own). A norm called on other rows
    (e.g. a subset) receives nothing; ContraNorm's neighbour-excluding form raises there. Mini-batches stay per
    graph: the norms still take ``batch`` from the host's call. Nothing global is changed: the state lives on the
    model's hooks and norms, and is copied with ``copy.deepcopy(model)``.

    Returns:
        An :class:`EdgeIndexHooks`; its ``remove()`` undoes the hand-off (not the untying), its ``untied`` lists
        the positions that got their own copy.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``model`` contains no graphnorm norm, or its norms already receive a hand-off (remove it first);
            at forward, a call whose ``edge_index`` cannot be found.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"pass_edge_index: model must be a torch.nn.Module, got {type(model).__name__}")
    untied = untie_norms(model)
    norms = [norm for _, norm in outermost_modules(model, is_graphnorm_norm)]
    if not norms:
        raise ValueError(
            f"pass_edge_index: {type(model).__name__} contains no graphnorm norm (build them with "
            "graphnorm.norms.build_norm and pass them as the host's norm=)"
        )
    if any(HANDOFF_ATTRIBUTE in norm.__dict__ for norm in norms):
        raise ValueError(
            f"pass_edge_index: the norms of {type(model).__name__} already receive edge_index (from an earlier "
            "pass_edge_index, or the model this one was copied from); call remove() on that handle first"
        )
    state = _HandoffState()
    for norm in norms:
        norm.__dict__[HANDOFF_ATTRIBUTE] = state
    handles = [
        model.register_forward_pre_hook(state.before_forward, with_kwargs=True),
        model.register_forward_hook(state.after_forward, with_kwargs=True, always_call=True),
    ]
    handoff = EdgeIndexHooks(model, norms, state, handles)
    handoff.untied = untied
    return handoff


def handed_edge_index(norm: nn.Module, x: Any) -> Tensor | None:
    """The host's ``edge_index`` for a call of ``norm`` on ``x`` without one, under :func:`pass_edge_index`; None when
    nothing is handed, or when ``x``'s rows are not the host's nodes.

    Raises:
        ValueError: the rows are not the host's nodes and ``norm`` cannot run without edges (``needs_edge_index``).
    """
    handoff = norm.__dict__.get(HANDOFF_ATTRIBUTE)
    if handoff is None or handoff.current() is None:
        return None
    edge_index, num_nodes = handoff.current()
    rows = x.size(0) if isinstance(x, Tensor) else None
    if num_nodes is not None and rows != num_nodes:
        if getattr(norm, "needs_edge_index", False):
            raise ValueError(
                f"{type(norm).registry_name}: pass_edge_index handed the edges of {num_nodes} nodes, but this norm "
                f"got {rows} rows (not the host's nodes); call it with edge_index= for its rows"
            )
        return None
    return edge_index


def _has_state(norm: nn.Module) -> bool:
    """Whether ``norm`` holds parameters or buffers (running statistics)."""
    return any(True for _ in norm.parameters()) or any(True for _ in norm.buffers())


def _running_modules(norm: nn.Module) -> list[nn.Module]:
    """The ``nn.Module``s whose calls are on the stack, outermost first, ``norm`` left out. Read from the callers'
    ``self``: a module has no link to its parents, but its callers are running it."""
    callers: list[nn.Module] = []
    frame = sys._getframe(2)
    while frame is not None:
        caller = frame.f_locals.get("self")
        if isinstance(caller, nn.Module) and caller is not norm and all(caller is not c for c in callers):
            callers.append(caller)
        frame = frame.f_back
    return callers[::-1]


def warn_if_shared(norm: nn.Module) -> None:
    """:class:`SharedNormWarning` naming the positions when ``norm`` sits at several positions of the running model
    (the outermost running module that contains it) and has parameters or statistics to share (a stateless norm at
    several positions computes what copies would)."""
    if torch.compiler.is_compiling() or not _has_state(norm):
        return
    for root in _running_modules(norm):
        paths = [path for path, module in root.named_modules(remove_duplicate=False) if module is norm]
        if paths:
            break
    else:
        return
    if len(paths) < 2:
        return
    parents = {path.rpartition(".")[0] for path in paths}
    where = type(root).__name__
    if len(parents) == 1 and next(iter(parents)):
        parent = next(iter(parents))
        where = f"{type(root.get_submodule(parent)).__name__} at {parent!r}"
    warnings.warn(
        f"one {type(norm).__name__} instance is at {len(paths)} positions of {where}: {', '.join(paths)}; they share "
        "one set of parameters and statistics. Build one norm per position, or call "
        "graphnorm.norms.pass_edge_index(model) before building the optimizer (it gives each position its own copy)",
        SharedNormWarning,
        stacklevel=4,
    )
