"""One registry for every model: build a model by name for a task, as norms are built by name.

:func:`register_model` registers a model class (what it asks of a run config included), :func:`build_model` builds
one from the task's description and the model's own keywords, and :func:`forward_adapter` is the one adapter from a
batch to a model call (used by the trainer, ``predict`` and :class:`graphnorm.analysis.CollapseProbe`). The built-in
models register themselves in their own files (:mod:`graphnorm.models`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from graphnorm.checks import check_choice, check_name

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
    declared config rules (:func:`register_model`). ``config`` below is a :class:`graphnorm.config.RunConfig`."""

    name: str
    factory: Callable[..., nn.Module]
    levels: tuple[str, ...]
    inputs: str
    check_config: Callable[[Any], None] | None = None
    token_rows: bool = False
    own_keys: Mapping[str, str] = field(default_factory=dict)
    virtual_node_rows: bool = True
    last_layer: Mapping[str, str] = field(default_factory=dict)  # level -> what the probe's last layer is

    def has_token_rows(self, config: Any) -> bool:
        """Whether this model hands its norms graph-token rows in the run ``config``: always (``token_rows``), or
        through a virtual node on a graph-level dataset when its virtual node is a row (``virtual_node_rows``)."""
        virtual_rows = self.virtual_node_rows and config.virtual_node is True and not config.is_node_level
        return self.token_rows or virtual_rows

    def parameters(self) -> dict[str, inspect.Parameter]:
        """The constructor's (or factory function's) named parameters, without ``self``, ``*args``, ``**kwargs``."""
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
    virtual_node_rows: bool = True,
    last_layer: str | Mapping[str, str] | None = None,
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: register a model class (or a function returning a module) under ``name``
    (:data:`graphnorm.checks.NAME_PATTERN`: a lower-case letter, then a-z, 0-9 and _)::

        @register_model("sage")
        class Sage(nn.Module):
            def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 64, norm: str = "none"): ...
            def forward(self, x, edge_index, batch=None): ...

        model = build_model("sage", task, hidden_channels=32, norm="pairnorm")

    Args:
        levels: the task levels it predicts at (``"node"``, ``"graph"``).
        inputs: how it is called (:func:`forward_adapter`): ``"pyg"`` or ``"graphormer"``.
        check_config: ``check_config(config)`` raises a one-line ``ValueError`` for a combination of ``RunConfig``
            keys the model cannot run (config validation calls it for that model).
        token_rows: the model always hands its norms graph-token rows (else a run has them only through
            ``virtual_node`` at graph level: :meth:`ModelSpec.has_token_rows`).
        own_keys: ``RunConfig`` keys only this model uses, mapped to the error that another model's run setting
            them gets.
        virtual_node_rows: ``False`` when the model's virtual node is no row of the norms' input (OGB's GIN).
        last_layer: what the collapse probe's last layer of the model is, for reports (one text, or one per level).

    Raises:
        ValueError: a name outside the pattern or taken by another factory, an unknown ``inputs`` or level.
    """
    check_name(name, "model name")
    check_choice(inputs, INPUTS, "inputs")
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels must be a non-empty subset of {LEVELS}, got {levels!r}")

    def decorator(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _MODELS and _MODELS[name].factory is not factory:
            raise ValueError(f"model name {name!r} is already registered to {_MODELS[name].factory.__name__}")
        last = dict.fromkeys(levels, last_layer) if isinstance(last_layer, str) else dict(last_layer or {})
        _MODELS[name] = ModelSpec(
            name,
            factory,
            tuple(levels),
            inputs,
            check_config,
            token_rows,
            dict(own_keys or {}),
            virtual_node_rows,
            last,
        )
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
    ``atom_feature_dims``, ``bond_feature_dims``, e.g. a :class:`graphnorm.data.GraphTask`).

    A model is built from the task's description, never from a run config: the constructor's task keywords
    (:data:`TASK_KEYWORDS`) are filled from the task, each only when the constructor has a parameter of that name.
    ``kwargs`` are the model's own keywords, checked against its signature (:func:`check_model_keywords`:
    ``ValueError`` listing the valid ones)."""
    spec = model_spec(name)
    if task.level not in spec.levels:
        raise ValueError(f"model {spec.name!r} predicts at the {'/'.join(spec.levels)} level; the task is {task.level}")
    check_model_keywords(spec.name, kwargs)
    accepted = spec.parameters()
    from_task = {key: value for key, value in task_keywords(task).items() if key in accepted}
    return spec.factory(**from_task, **kwargs)


BATCH_KEYWORDS = ("batch", "batch_size", "edge_attr")  # what the PyG call passes beyond (x, edge_index), when taken
ForwardCall = Callable[[nn.Module, Any], Any]
_ADAPTERS: weakref.WeakKeyDictionary[type, ForwardCall] = weakref.WeakKeyDictionary()  # by model class


def forward_adapter(model: nn.Module) -> ForwardCall:
    """``call(model, data)``: ``model`` run on a batch by the forward convention; the forward's signature is read
    once per model class.

    * ``inputs="pyg"`` (the default): PyG's ``model(x, edge_index[, batch=][, batch_size=])``, returning
      ``[num_nodes, out]`` at node level or ``[num_graphs, out]`` at graph level. ``batch`` (the batch vector,
      ``None`` for one graph), ``batch_size`` (the number of graphs) and ``edge_attr`` (edge features, e.g. OGB's
      bond features) go only to a forward that takes them (by name, or ``**kwargs``), and only when the batch has
      them, unless the forward requires them. So ``forward(x, edge_index)``, ``forward(x, edge_index, batch=None)``
      and ``forward(x, edge_index, batch)`` all work at either level.
    * ``inputs="graphormer"``: ``model(batch)`` on the padded, preprocessed batches of
      :mod:`graphnorm.data.graphormer_preprocess` (shortest paths, edge paths, degrees), for any instance of a class
      registered so.

    Raises:
        TypeError: naming the signature, when the forward does not follow the convention.
    """
    own_forward = "forward" in vars(model)  # an instance-level forward: not the class's
    if not own_forward and type(model) in _ADAPTERS:
        return _ADAPTERS[type(model)]
    call = _whole_batch_call if _takes_whole_batch(model) else _pyg_call(model)
    if not own_forward:
        _ADAPTERS[type(model)] = call
    return call


def model_outputs(model: nn.Module, data: Any) -> Tensor:
    """``model`` on one batch by the forward convention: :func:`forward_adapter`'s call."""
    return forward_adapter(model)(model, data)


def _takes_whole_batch(model: nn.Module) -> bool:
    """Whether ``model`` is an instance of a model class registered with ``inputs`` other than ``"pyg"``."""
    return any(
        spec.inputs != "pyg" and inspect.isclass(spec.factory) and isinstance(model, spec.factory)
        for spec in _MODELS.values()
    )


def _whole_batch_call(model: nn.Module, data: Any) -> Any:
    """The call of a model registered with ``inputs="graphormer"``: the whole batch."""
    return model(data)


def _pyg_call(model: nn.Module) -> ForwardCall:
    """The PyG call for ``model``'s forward: (x, edge_index) by position, then the batch keywords it takes."""
    signature = inspect.signature(model.forward)
    parameters = list(signature.parameters.values())
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = {p.kind for p in parameters} & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    required = {p.name for p in parameters if p.default is p.empty and p.kind not in variadic}
    by_keyword = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    taken = [name for name in BATCH_KEYWORDS if inspect.Parameter.VAR_KEYWORD in variadic or name in by_keyword]
    needed = [name for name in taken if name in required]
    if (len(positional) < 2 and inspect.Parameter.VAR_POSITIONAL not in variadic) or (
        required - set(positional[:2]) - set(taken)
    ):
        raise TypeError(
            f"{type(model).__name__}.forward{signature} does not follow PyG's forward(x, edge_index, batch=None, "
            "...), graphnorm's forward convention: model(x, edge_index[, batch=][, batch_size=]), other arguments "
            "with defaults. CollapseProbe also takes forward=callable(model, data) running the model on data, e.g. "
            "forward=lambda model, data: model(data)"
        )

    def call(model: nn.Module, data: Any) -> Any:
        x, edge_index = getattr(data, "x", None), getattr(data, "edge_index", None)
        if x is None or edge_index is None:
            raise TypeError(
                f"{type(model).__name__} is called as model(data.x, data.edge_index, ...), but the data "
                f"({type(data).__name__}) has no x or edge_index; CollapseProbe takes forward=callable(model, data)"
            )
        batch = getattr(data, "batch", None)
        values = {
            "batch": batch,
            "batch_size": None if batch is None else getattr(data, "num_graphs", None),
            "edge_attr": getattr(data, "edge_attr", None),
        }
        keywords = {name: values[name] for name in taken if values[name] is not None or name in needed}
        return model(x, edge_index, **keywords)

    return call
