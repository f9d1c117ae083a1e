"""One registry for every model: build a model by name for a task, as norms are built by name.

Usage::

    from graphnorm.models import available_models, build_model, register_model

    @register_model("sage")
    class Sage(nn.Module):
        def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 64, norm: str = "none"): ...
        def forward(self, x, edge_index, batch=None): ...

    model = build_model("sage", task, hidden_channels=32, norm="pairnorm")

A model may also declare what it asks of a run config, in its own file, through its registration:
``check_config(config)`` raises a one-line ``ValueError`` for a combination of ``RunConfig`` keys the model cannot run
(config validation calls it for that model); ``token_rows=True`` says it always hands its norms graph-token rows
(else a run has them only through ``virtual_node`` at graph level: :meth:`ModelSpec.has_token_rows`); ``own_keys``
maps ``RunConfig`` keys only this model uses to the error another model's run that sets them gets.

A model is built from the task's description, never from a run config: :func:`build_model` fills the constructor's
*task keywords* (:data:`TASK_KEYWORDS`: ``in_channels``, ``out_channels``, ``atom_encoder``, ``atom_feature_dims``,
``bond_feature_dims``) from the task, each only when the constructor has a parameter of that name; every other
keyword is checked against the constructor's signature (unknown: ``ValueError`` listing the valid ones).

The forward convention (:func:`model_outputs`, the one adapter from a batch to a model call):

* ``inputs="pyg"`` (the default): ``model(x, edge_index, batch=batch)`` (plus ``batch_size=`` when the forward takes
  it), returning ``[num_nodes, out]`` at node level or ``[num_graphs, out]`` at graph level (``batch`` is ``None`` on
  a single node-level graph), PyG's own convention;
* ``inputs="graphormer"``: ``model(batch)`` on the padded, preprocessed batches of
  :mod:`graphnorm.data.graphormer_loaders` (shortest paths, edge paths, degrees).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn
from torch_geometric.data import Data

INPUTS = ("pyg", "graphormer")
LEVELS = ("node", "graph")


def task_keywords(task: Any) -> dict[str, Any]:
    """What a model may take from the task's description: feature widths and kinds and the output size."""
    return {
        "in_channels": task.num_features,
        "out_channels": task.num_outputs,
        "atom_encoder": task.atom_encoder,
        "atom_feature_dims": task.atom_feature_dims,
        "bond_feature_dims": task.bond_feature_dims,
    }


TASK_KEYWORDS = ("in_channels", "out_channels", "atom_encoder", "atom_feature_dims", "bond_feature_dims")


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its factory (a class or function), the levels it predicts at, its input kind and its
    declared config rules (module docstring). ``config`` below is a :class:`graphnorm.config.RunConfig`."""

    name: str
    factory: Callable[..., nn.Module]
    levels: tuple[str, ...]
    inputs: str
    check_config: Callable[[Any], None] | None = None
    token_rows: bool = False
    own_keys: Mapping[str, str] = field(default_factory=dict)

    def has_token_rows(self, config: Any) -> bool:
        """Whether this model hands its norms graph-token rows in the run ``config``: always (``token_rows``), or
        through a virtual node on a graph-level dataset."""
        return self.token_rows or (config.virtual_node is True and not config.is_node_level)

    def parameters(self) -> dict[str, inspect.Parameter]:
        target = self.factory.__init__ if inspect.isclass(self.factory) else self.factory
        parameters = dict(inspect.signature(target).parameters)
        parameters.pop("self", None)
        return {k: p for k, p in parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    def keywords(self) -> list[str]:
        """The keywords a user passes (the constructor's parameters except the task keywords)."""
        return [name for name in self.parameters() if name not in TASK_KEYWORDS]


_MODELS: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    levels: tuple[str, ...] = LEVELS,
    inputs: str = "pyg",
    *,
    check_config: Callable[[Any], None] | None = None,
    token_rows: bool = False,
    own_keys: Mapping[str, str] | None = None,
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: register a model class (or a function returning a module) under a lower-case ``name``.
    ``levels``: the task levels it predicts at; ``inputs``: how it is called; ``check_config``, ``token_rows``,
    ``own_keys``: what it asks of a run config (see the module docstring)."""
    if not isinstance(name, str) or name != name.lower() or not name:
        raise ValueError(f"model names are non-empty lower-case strings, got {name!r}")
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels must be a non-empty subset of {LEVELS}, got {levels!r}")

    def decorator(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _MODELS and _MODELS[name].factory is not factory:
            raise ValueError(f"model name {name!r} is already registered to {_MODELS[name].factory.__name__}")
        _MODELS[name] = ModelSpec(name, factory, tuple(levels), inputs, check_config, token_rows, dict(own_keys or {}))
        return factory

    return decorator


def available_models() -> list[str]:
    """Sorted names of every registered model."""
    return sorted(_MODELS)


def model_spec(name: str) -> ModelSpec:
    """The registration of ``name`` (case-insensitive); ``ValueError`` listing the choices if unknown."""
    if not isinstance(name, str) or name.lower() not in _MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(available_models())}")
    return _MODELS[name.lower()]


def check_model_keywords(name: str, keywords: dict[str, Any]) -> None:
    """``ValueError`` for a keyword the model does not take or one that comes from the task."""
    spec = model_spec(name)
    from_task = sorted(set(keywords) & set(TASK_KEYWORDS) & set(spec.parameters()))
    if from_task:
        raise ValueError(f"keyword(s) {from_task} of model {spec.name!r} come from the task; do not pass them")
    unknown = sorted(set(keywords) - set(spec.keywords()))
    if unknown:
        raise ValueError(
            f"unknown keyword(s) {unknown} for model {spec.name!r}; valid keywords: {', '.join(spec.keywords())}"
        )


def build_model(name: str, task: Any, **kwargs: Any) -> nn.Module:
    """Model ``name`` for ``task`` (anything with ``level``, ``num_features``, ``num_outputs``, ``atom_encoder``,
    ``atom_feature_dims``, ``bond_feature_dims``, e.g. a :class:`graphnorm.data.GraphTask`); ``kwargs`` are the
    model's own keywords, checked against its signature."""
    spec = model_spec(name)
    if task.level not in spec.levels:
        raise ValueError(f"model {spec.name!r} predicts at the {'/'.join(spec.levels)} level; the task is {task.level}")
    check_model_keywords(spec.name, kwargs)
    accepted = spec.parameters()
    from_task = {key: value for key, value in task_keywords(task).items() if key in accepted}
    return spec.factory(**from_task, **kwargs)


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    parameters = inspect.signature(function).parameters
    return name in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def model_outputs(model: nn.Module, data: Any) -> Tensor:
    """Call ``model`` on a batch by the forward convention (module docstring): a PyG ``Data``/``Batch`` as
    ``(x, edge_index, batch=[, batch_size=])``, any other batch object (Graphormer's) whole."""
    if not isinstance(data, Data):
        return model(data)
    batch = getattr(data, "batch", None)
    if batch is None:
        return model(data.x, data.edge_index)
    if takes_keyword(model.forward, "batch_size"):
        return model(data.x, data.edge_index, batch=batch, batch_size=data.num_graphs)
    return model(data.x, data.edge_index, batch=batch)
