"""CollapseProbe: the collapse metrics of the representation after every layer of a model, as a tidy table.

Any ``nn.Module`` that contains graphnorm norms or PyG message-passing layers works as it is:
``CollapseProbe(model).probe(data)``; the class docstring says which layers and rows it measures and how it calls the
model. :func:`probe_records` is the one call a training run makes, :func:`evaluation_sample` the fixed graph sample of
a graph-level probe. The metrics are computed by :mod:`graphnorm.analysis.collapse` (definitions in
:mod:`graphnorm.analysis.metrics`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from graphnorm.analysis.collapse import (
    PRECISIONS,
    LayerStream,
    collapse_records_layers,
)
from graphnorm.checks import check_choice, same_values
from graphnorm.models.registry import forward_adapter
from graphnorm.norms import available_norms, norm_class
from graphnorm.norms.other_models import outermost_modules
from graphnorm.threads import single_thread

__all__ = [
    "CollapseProbe",
    "probe_records",
    "evaluation_sample",
    "graphnorm_norms",
    "message_passing_layers",
    "default_forward",
    "TABLE_COLUMNS",
    "WATCH_AT",
]

TABLE_COLUMNS = ["layer", "layer_name", "rows", "metric", "stat", "value"]
WATCH_AT = ("output", "input")  # rows leaving / entering a watched layer
CONTEXT_KEYS = ("batch", "token_mask", "edge_index")

LayerSpec = Sequence[nn.Module] | Sequence[tuple[str, nn.Module]] | nn.ModuleList
RowContext = dict[str, Tensor | None]  # the rows of a layer: batch, token_mask, edge_index (each may be None)


def _first_tensor(values: Any) -> Tensor:
    """Layers may return tuples (e.g. (x, attention)); the representation is the first tensor."""
    if isinstance(values, Tensor):
        return values
    if isinstance(values, (tuple, list)):
        for item in values:
            if isinstance(item, Tensor):
                return item
    raise TypeError(f"CollapseProbe: a watched layer gave {type(values).__name__}, not a tensor")


def graphnorm_norms(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every graphnorm norm in ``model`` (instances of the classes registered in
    :mod:`graphnorm.norms`, at the time of the call), in module order, named by attribute path; only the outermost
    norm of a nesting (a SepNorm, not the token and node norms inside it); each module once."""
    classes = tuple(norm_class(name) for name in available_norms())
    return outermost_modules(model, lambda module: isinstance(module, classes))


def _named_layers(model: nn.Module, layers: LayerSpec | None) -> tuple[list[tuple[str, nn.Module]], bool]:
    """The layers to watch and whether they are the norms found in ``model`` (then uncalled ones are left out)."""
    if layers is not None:
        named = [
            item if isinstance(item, tuple) else (f"{type(item).__name__.lower()}{index}", item)
            for index, item in enumerate(layers, start=1)
        ]
        if not named:
            raise ValueError("CollapseProbe: layers is empty; pass the modules to watch, or leave it out")
        return named, False
    if hasattr(model, "collapse_layers"):
        named = list(model.collapse_layers())
        if not named:
            raise ValueError(f"CollapseProbe: {type(model).__name__}.collapse_layers() is empty")
        return named, False
    norms = graphnorm_norms(model)
    if norms:
        return norms, True
    convs = message_passing_layers(model)
    if not convs:
        raise ValueError(
            f"CollapseProbe: {type(model).__name__} contains no graphnorm norm (a module of graphnorm.norms, e.g. from "
            "build_norm), no PyG message-passing layer and has no collapse_layers(); pass layers=[...] (modules or "
            "(name, module) pairs, e.g. layers=model.blocks)"
        )
    return convs, True


def message_passing_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every top-level message-passing layer of ``model``, in module order, named by attribute
    path: PyG ``MessagePassing`` modules and ``GPSConv`` layers (whole: their inner conv is not listed), none nested
    inside another listed layer; each module once."""
    from torch_geometric.nn import GPSConv, MessagePassing

    return outermost_modules(model, lambda module: isinstance(module, (MessagePassing, GPSConv)))


def default_forward(model: nn.Module) -> Callable[[nn.Module, Any], Any]:
    """How the probe runs ``model`` without ``forward=``: ``model(data)`` when ``forward`` takes one batch object (one
    required parameter, and no ``edge_index`` parameter); else :func:`graphnorm.models.forward_adapter`'s call, as
    the trainer's (PyG's ``model(x, edge_index[, batch=][, batch_size=])``, or the whole batch for a model
    registered so).

    Raises:
        TypeError: the forward fits neither, naming its signature and ``forward=``.
    """
    if _takes_one_batch(model):
        return _whole_batch
    return forward_adapter(model)


def _takes_one_batch(model: nn.Module) -> bool:
    """Whether ``model.forward`` has exactly one required parameter, which may be given by position, and no
    ``edge_index`` parameter (PyG's ``forward(x, edge_index=None)`` takes the features first)."""
    parameters = inspect.signature(model.forward).parameters
    required = [
        p for p in parameters.values() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return (
        len(required) == 1
        and required[0].kind in (required[0].POSITIONAL_ONLY, required[0].POSITIONAL_OR_KEYWORD)
        and "edge_index" not in parameters
    )


def _whole_batch(model: nn.Module, data: Any) -> Any:
    """``model(data)``: a forward that takes the batch object; a ``TypeError`` or ``AttributeError`` in it (the
    forward wanted something else, e.g. the features alone) says what the probe called and how to change it."""
    try:
        return model(data)
    except (TypeError, AttributeError) as error:
        raise TypeError(
            f"CollapseProbe called {type(model).__name__}(data) with the {type(data).__name__} (its forward takes "
            f"one argument) and it failed: {error}. If the forward takes something else, pass forward=callable(model, "
            "data), e.g. forward=lambda model, data: model(data.x)"
        ) from error


_FORWARD_SIGNATURES: dict[type, inspect.Signature] = {}


def _norm_context(module: nn.Module, args: tuple, kwargs: dict) -> RowContext:
    """``batch``, ``token_mask`` and ``edge_index`` of one norm call, given by position or keyword."""
    cls = type(module)
    if cls not in _FORWARD_SIGNATURES:
        _FORWARD_SIGNATURES[cls] = inspect.signature(cls.forward)
    parameters = _FORWARD_SIGNATURES[cls].parameters
    if len(args) <= 1 and all(key in parameters for key in CONTEXT_KEYS):
        # x alone by position: binding would put the context keywords where they are (a shortcut, called per norm)
        return {key: value if isinstance(value := kwargs.get(key), Tensor) else None for key in CONTEXT_KEYS}
    try:
        arguments = _FORWARD_SIGNATURES[cls].bind_partial(module, *args, **kwargs).arguments
    except TypeError:
        arguments = kwargs
    return {key: arguments.get(key) if isinstance(arguments.get(key), Tensor) else None for key in CONTEXT_KEYS}


def _same_context(first: RowContext, second: RowContext) -> bool:
    """Whether two contexts describe the same rows: the same (or equal) batch, token mask and edges."""
    return all(same_values(first[key], second[key]) for key in CONTEXT_KEYS)


def _one_graph(context: RowContext) -> bool:
    """Whether the rows form one graph: no batch vector and no token rows."""
    token_mask = context["token_mask"]
    return context["batch"] is None and (token_mask is None or not bool(token_mask.any()))


@dataclass
class _RowGroup:
    """Watched layers over the same rows (one context): streamed (one graph) or kept for the batched path."""

    context: RowContext
    stream: LayerStream | None
    streamed: set[int] = field(default_factory=set)  # positions measured by the stream
    outputs: dict[int, Tensor] = field(default_factory=dict)  # position -> output (kept path)


@dataclass
class _Pass:
    """What one forward pass shows the probe: the rows of every norm call, and each watched layer's rows."""

    data: Any
    names: list[str]  # of the watched layers, by position
    stream: bool  # measure one-graph layers in their hooks
    num_singular_values: int
    cone_tol_deg: float
    precision: str  # of the collapse metrics (graphnorm.analysis.collapse.PRECISIONS)
    background: bool  # streams measure full chunks on a second thread while the forward goes on
    buffer_pool: dict  # the probe's row buffers, reused by every pass
    norm_calls: list[tuple[int, RowContext]] = field(default_factory=list)  # (rows, context) in call order
    latest: dict[int, RowContext] = field(default_factory=dict)  # rows -> context of the latest norm call on them
    groups: list[_RowGroup] = field(default_factory=list)
    group_of: dict[int, _RowGroup] = field(default_factory=dict)  # position -> its group (the last call's)
    pending: dict[int, tuple[Tensor, int]] = field(default_factory=dict)  # position -> (output, norm calls before)
    data_fields: dict[str, Any] = field(init=False)  # data's num_nodes, batch and edge_index, read once

    def __post_init__(self) -> None:
        self.data_fields = {key: getattr(self.data, key, None) for key in ("num_nodes", "batch", "edge_index")}

    def on_norm_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Record the rows and keywords of one norm call (a forward pre-hook)."""
        rows = _first_tensor(args if args else tuple(kwargs.values())).size(0)
        context = _norm_context(module, args, kwargs)
        self.norm_calls.append((rows, context))
        self.latest[rows] = context

    def on_layer(self, position: int, x: Tensor, resolve_now: bool) -> None:
        """Layer ``position``'s rows; measured or kept at once when their context is known (or ``resolve_now``:
        the model has no norm calls to wait for), else kept until the pass ends."""
        if x.dim() != 2:
            raise ValueError(
                f"CollapseProbe: layer {self.names[position]!r} gave a tensor of shape {tuple(x.shape)}, expected "
                "[rows, d]"
            )
        self.pending.pop(position, None)
        previous = self.group_of.pop(position, None)
        if previous is not None:
            previous.outputs.pop(position, None)
        context = self.latest.get(x.size(0))
        if context is None and not resolve_now:
            self.pending[position] = (x.clone(), len(self.norm_calls))
            return
        self._add(position, x, self._completed(context, x.size(0), self.names[position]))

    def finish(self) -> None:
        """Give the kept layers the context of the first norm call on their rows after them (else ``data``'s)."""
        for position, (x, calls_before) in sorted(self.pending.items()):
            later = [context for rows, context in self.norm_calls[calls_before:] if rows == x.size(0)]
            context = self._completed(later[0] if later else None, x.size(0), self.names[position])
            self._add(position, x, context, owned=True)
        self.pending.clear()

    def _completed(self, context: RowContext | None, rows: int, name: str | None = None) -> RowContext:
        """``context`` with what it lacks taken from ``data`` when the rows are ``data``'s nodes."""
        num_nodes = self.data_fields["num_nodes"]
        if rows != num_nodes:
            if context is None:
                raise ValueError(
                    f"CollapseProbe: layer {name!r} outputs {rows} rows, but data has {num_nodes} nodes and no "
                    f"graphnorm norm of the forward pass saw {rows} rows: which graph each row is in is unknown"
                )
            return context
        context = dict(context or dict.fromkeys(CONTEXT_KEYS))
        for key in ("batch", "edge_index"):
            if context[key] is None:
                context[key] = self.data_fields[key]
        return context

    def _add(self, position: int, x: Tensor, context: RowContext, owned: bool = False) -> None:
        """Measure ``x`` in the stream of its rows (one graph) or keep it (a copy unless ``owned``)."""
        group = next((g for g in self.groups if _same_context(g.context, context)), None)
        if group is None:
            stream = None
            if self.stream and _one_graph(context):
                stream = LayerStream(
                    context["edge_index"],
                    self.num_singular_values,
                    self.cone_tol_deg,
                    precision=self.precision,
                    background=self.background,
                    buffer_pool=self.buffer_pool,
                    expected_layers=len(self.names),
                )
            group = _RowGroup(context, stream)
            self.groups.append(group)
        self.group_of[position] = group
        if group.stream is not None:
            group.stream.add(position, x)
            group.streamed.add(position)
        else:
            group.outputs[position] = x if owned else x.clone()

    def close(self) -> None:
        """Stop the streams' second threads (a pass that ends early)."""
        for group in self.groups:
            if group.stream is not None:
                group.stream.close()


class CollapseProbe:
    """Collapse metrics after every watched layer of ``model``.

    Which layers: ``layers`` if given; else ``model.collapse_layers()`` when the model has it (graphnorm's models
    do); else every graphnorm norm of the model (an instance of a registered norm class), in module order, named by
    its attribute path (``norms.0``), only the outermost of a nesting (a SepNorm, not its inner norms), leaving out
    a norm the forward pass does not call; else, in a model without graphnorm norms, every top-level
    message-passing layer (:func:`message_passing_layers`: PyG ``MessagePassing`` modules such as
    ``BasicGNN.convs``, and ``GPSConv`` layers as a whole), likewise.

    Which rows: graphnorm norms are called as ``norm(x, batch=, batch_size=, edge_index=, token_mask=)``, so the
    probe reads the keywords of every (outermost) norm call of the pass: ``token_mask`` marks graph-token rows
    (``rows="token"``), ``batch`` the graph of each row (per-graph statistics), ``edge_index`` the edges of the edge
    metrics. A watched layer with n output rows takes the keywords of the latest norm call on n rows before its
    output (for a watched norm, its own call), else of the first one after it (e.g. an input embedding). A keyword
    the norm did not get is taken from ``data`` (``data.batch``, ``data.edge_index``) when the rows are ``data``'s
    nodes; a layer on n rows with no norm call on n rows is measured over ``data``'s nodes (an error if n is not
    their number). So a PyG model needs nothing more, and extra rows (DeepGCN's virtual nodes, Graphormer's graph
    token) are described by the norms' calls.

    How: one forward pass in eval mode under ``torch.no_grad()`` on one thread, with hooks on the watched layers
    and pre-hooks on the norms (the model's mode is restored afterwards, also on error). A layer whose rows form one
    graph is copied in its hook, while its output is in cache, into a :class:`~graphnorm.analysis.collapse.LayerStream`,
    which measures every few layers and keeps only their records (on a second thread while the forward goes on, when
    ``background``); other layers are copied and measured together by
    :func:`~graphnorm.analysis.collapse.collapse_records_layers`. Either way the records equal
    :func:`~graphnorm.analysis.collapse.collapse_records` called per layer. Graph-level data is one PyG ``Batch``
    (:func:`evaluation_sample`): per-graph mean and std, the pooled rows, and token rows as one set.

    Args:
        model: any ``nn.Module`` containing graphnorm norms or PyG message-passing layers, or one with
            ``collapse_layers()``, or any module with ``layers`` given.
        layers: modules to watch, or (name, module) pairs; default ``model.collapse_layers()`` when the model has
            it, else every (outermost) graphnorm norm in module order, else every top-level message-passing layer.
        forward: ``forward(model, data)`` running the model; default :func:`default_forward`: as the trainer,
            ``model(data.x, data.edge_index[, batch=][, batch_size=])``, or ``model(data)`` for a model registered
            with ``inputs="graphormer"`` or whose ``forward`` takes one batch object (``TypeError`` here when the
            model's forward fits none; then pass e.g. ``forward=lambda model, data: model(data.x, data.adj)``).
        at: ``"output"`` (default) measures the rows a watched layer returns, ``"input"`` the rows it receives
            (its first tensor argument).
        num_singular_values: normalized spectrum entries stored as metrics ``sv_000``... (0: none).
        cone_tol_deg: certified accuracy of the cone angle in degrees.
        precision: ``"float64"`` (default, the reference) or ``"float32"``: how the rows are kept while measured
            (:func:`~graphnorm.analysis.collapse.collapse_records`); every sum accumulates in float64 either way.
        split: optional label (e.g. "val") added to every record as ``split``.
        background: measure the one-graph layers on a second thread while the forward pass runs, so the probe costs
            about the longer of the two instead of their sum; default (None): when torch may use two or more
            threads (``torch.get_num_threads()``), i.e. the process has a core to spare. A sweep worker given one
            thread measures on its own thread. The records are the same either way.

    ``probe(data)`` returns a DataFrame with columns layer (1-based position among the recorded layers), layer_name,
    rows ("node"/"token"), metric, stat, value; ``probe_records(data)`` the same as a list of dicts. After a call,
    ``last_timing`` holds ``forward_s`` (the forward pass, with the per-layer measurements its hooks make for one
    graph) and ``metrics_s`` (the rest), and ``last_contexts`` the ``{batch, token_mask, edge_index}`` each recorded
    layer was measured with.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: LayerSpec | None = None,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        at: str = "output",
        num_singular_values: int = 16,
        cone_tol_deg: float = 1e-3,
        split: str | None = None,
        precision: str = "float64",
        background: bool | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"CollapseProbe: model must be a torch.nn.Module, got {type(model).__name__}")
        if at not in WATCH_AT:
            raise ValueError(f"CollapseProbe: at must be one of {WATCH_AT}, got {at!r}")
        named, self._found_norms = _named_layers(model, layers)
        for name, module in named:
            if not isinstance(module, nn.Module):
                raise TypeError(f"CollapseProbe: layer {name!r} is a {type(module).__name__}, not an nn.Module")
        self.model = model
        self.layers: list[tuple[str, nn.Module]] = named
        self.forward = forward or default_forward(model)
        self.at = at
        self.num_singular_values = num_singular_values
        self.cone_tol_deg = cone_tol_deg
        self.precision = check_choice(precision, PRECISIONS, "precision", "CollapseProbe")
        self.split = split
        if background is not None and not isinstance(background, bool):
            raise TypeError(f"CollapseProbe: background must be True, False or None, got {background!r}")
        self.background = background
        self._norms = [module for _, module in graphnorm_norms(model)]  # whose calls describe the rows
        self.last_timing: dict[str, float] = {}
        self.last_contexts: list[RowContext] = []
        self._pool: dict = {}  # row buffers kept between probes (graphnorm.analysis.collapse.LayerStream)

    def capture(self, data: Any) -> list[Tensor]:
        """One forward pass in eval mode without grad; the rows of every recorded layer (its last call)."""
        run = self._run(data, stream=False)
        recorded = self._recorded(run)
        return [run.group_of[position].outputs[position] for position in recorded]

    def _run(self, data: Any, stream: bool) -> _Pass:
        """One forward pass in eval mode without grad, on one thread, with hooks on the norms (their keywords) and
        the watched layers (their rows); hooks removed and the mode restored, also on error."""
        names = [name for name, _ in self.layers]
        # Read before single_thread() sets one thread: two or more mean the process may use a second core.
        background = self.background if self.background is not None else torch.get_num_threads() >= 2
        run = _Pass(
            data, names, stream, self.num_singular_values, self.cone_tol_deg, self.precision, background, self._pool
        )
        handles = [
            module.register_forward_pre_hook(
                lambda m, args, kwargs: run.on_norm_call(m, args, kwargs), with_kwargs=True
            )
            for module in self._norms
        ]
        handles += [self._watch(module, position, run) for position, (_, module) in enumerate(self.layers)]
        was_training = self.model.training
        # A model already in eval mode throughout is left alone (no walk over its modules, twice, on every probe).
        switch_mode = any(module.training for module in self.model.modules())
        try:
            if switch_mode:
                self.model.eval()
            with torch.no_grad(), single_thread():
                self.forward(self.model, data)
                run.finish()
        except BaseException:
            run.close()
            raise
        finally:
            for handle in handles:
                handle.remove()
            if switch_mode:
                self.model.train(was_training)
        return run

    def _watch(self, module: nn.Module, position: int, run: _Pass) -> torch.utils.hooks.RemovableHandle:
        """The hook handing layer ``position``'s output (or input, ``at="input"``) to ``run``."""
        resolve_now = not self._norms  # no norm call will describe the rows: they are data's nodes

        def on_input(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            run.on_layer(position, _first_tensor(tuple(args) + tuple(kwargs.values())).detach(), resolve_now)

        def on_output(_module: nn.Module, _args: Any, output: Any) -> None:
            run.on_layer(position, _first_tensor(output).detach(), resolve_now)

        if self.at == "input":
            return module.register_forward_pre_hook(on_input, with_kwargs=True)
        return module.register_forward_hook(on_output)

    def _recorded(self, run: _Pass) -> list[int]:
        """Positions of the layers the pass called; an error for a named layer it did not call."""
        missing = [name for position, (name, _) in enumerate(self.layers) if position not in run.group_of]
        if missing and not self._found_norms:
            raise RuntimeError(f"CollapseProbe: layers {missing} were not called in the forward pass")
        recorded = sorted(run.group_of)
        if not recorded:
            raise RuntimeError(
                f"CollapseProbe: none of the layers it found ({', '.join(name for name, _ in self.layers)}) was called "
                "in the forward pass"
            )
        self.last_contexts = [run.group_of[position].context for position in recorded]
        return recorded

    def _measure(self, run: _Pass) -> dict[int, list[dict]]:
        """Records of every recorded layer by position: streams read out, kept layers measured by rows."""
        per_position: dict[int, list[dict]] = {}
        for group in run.groups:
            if group.stream is not None:
                streamed = zip(sorted(group.streamed), group.stream.records())
                per_position.update((p, records) for p, records in streamed if run.group_of.get(p) is group)
            elif group.outputs:
                positions = sorted(group.outputs)
                measured = collapse_records_layers(
                    [group.outputs[position] for position in positions],
                    **group.context,
                    num_singular_values=self.num_singular_values,
                    cone_tol_deg=self.cone_tol_deg,
                    precision=self.precision,
                )
                per_position.update(zip(positions, measured))
        return per_position

    def probe_records(self, data: Any) -> list[dict]:
        """Tidy records ``{layer, layer_name, rows, metric, stat, value[, split]}`` for every recorded layer."""
        start = time.perf_counter()
        run = self._run(data, stream=True)
        captured = time.perf_counter()
        try:
            recorded = self._recorded(run)
            per_position = self._measure(run)
        finally:
            run.close()
        extra = {} if self.split is None else {"split": self.split}
        records = [
            {"layer": layer, "layer_name": self.layers[position][0], **record, **extra}
            for layer, position in enumerate(recorded, start=1)
            for record in per_position[position]
        ]
        self.last_timing = {"forward_s": captured - start, "metrics_s": time.perf_counter() - captured}
        return records

    def probe(self, data: Any) -> pd.DataFrame:
        """:meth:`probe_records` as a DataFrame (columns :data:`TABLE_COLUMNS` [+ split])."""
        records = self.probe_records(data)
        columns = TABLE_COLUMNS + (["split"] if self.split is not None else [])
        return pd.DataFrame.from_records(records, columns=columns)


def probe_records(
    model: nn.Module,
    data: Any,
    layers: LayerSpec | None = None,
    num_singular_values: int = 16,
    split: str | None = None,
    forward: Callable[[nn.Module, Any], Any] | None = None,
    at: str = "output",
    precision: str = "float64",
) -> list[dict]:
    """Records for a run's ``record["layers"]`` (keys layer, layer_name, rows, metric, value, stat[, split]),
    JSON-serializable (plain floats; NaN where a metric is undefined). Call at the end of training with the
    evaluation data (node level: the whole graph; graph level: :func:`evaluation_sample`)."""
    probe = CollapseProbe(
        model,
        layers=layers,
        forward=forward,
        at=at,
        num_singular_values=num_singular_values,
        split=split,
        precision=precision,
    )
    return probe.probe_records(data)


def evaluation_sample(dataset: Sequence[Any], num_graphs: int = 64, seed: int = 0) -> Any:
    """A fixed sample of up to ``num_graphs`` graphs of ``dataset`` (e.g. the validation split) as one PyG
    ``Batch``: the same graphs in the same order for a given (dataset, num_graphs, seed)."""
    from torch_geometric.data import Batch

    if num_graphs < 1:
        raise ValueError(f"evaluation_sample: num_graphs must be >= 1, got {num_graphs}")
    if len(dataset) == 0:
        raise ValueError("evaluation_sample: the dataset is empty")
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(len(dataset), generator=generator)[: min(num_graphs, len(dataset))].sort().values
    return Batch.from_data_list([dataset[int(i)] for i in chosen])
