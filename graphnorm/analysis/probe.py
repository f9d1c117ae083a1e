"""CollapseProbe: the collapse metrics of the representation after every layer of a model, as a tidy table.

How it works. Forward hooks on the watched layers see each layer's output during one forward pass in eval mode
under ``torch.no_grad()`` on one thread (the model's train/eval mode is restored afterwards, also on error).
When the rows form one graph (node-level data, no token rows) each hook measures its layer at once with
:class:`graphnorm.analysis.collapse.LayerStream`, while the output is still in cache, and keeps only a small
summary (a d x d Gram matrix, the unit-row sum, both cones, the edge metrics); the spectra (one batched
eigendecomposition of the stacked Gram matrices) and the records are then computed for all layers together. So the
forward reuses its buffers instead of holding 64 layer outputs. Otherwise (batches of graphs, token rows) the
outputs are captured and :func:`graphnorm.analysis.collapse.collapse_records_layers` measures them (layers of
equal width stacked). Either way the records equal :func:`~graphnorm.analysis.collapse.collapse_records` called
per layer.

Which layers. graphnorm models expose ``collapse_layers() -> [(name, module)]`` and ``probe_context(data) ->
{batch, token_mask, edge_index}`` for the rows those layers output (e.g. DeepGCN's virtual-node rows as token
rows). Any other module works when given ``layers`` (a list of modules or (name, module) pairs, e.g. the
``convs`` of PyG's ``GCN``); then the rows are assumed to be ``data``'s nodes and the context is
``data.batch`` / ``data.edge_index``.

Graph-level data. Pass a fixed evaluation sample as one PyG ``Batch`` (see :func:`evaluation_sample`: the same
graphs, in the same order, for every model and epoch, so numbers are comparable). Metrics are computed per graph
on its own rows and summarized as mean and std over the sample's graphs, plus the "pooled" variant over all node
rows together; token rows are one set across graphs. See :mod:`graphnorm.analysis.collapse`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from graphnorm.analysis.collapse import LayerStream, collapse_records_layers, single_thread

__all__ = ["CollapseProbe", "probe_records", "evaluation_sample", "TABLE_COLUMNS"]

TABLE_COLUMNS = ["layer", "layer_name", "rows", "metric", "stat", "value"]

LayerSpec = Sequence[nn.Module] | Sequence[tuple[str, nn.Module]] | nn.ModuleList


def _first_tensor(output: Any) -> Tensor:
    """Layers may return tuples (e.g. (x, attention)); the representation is the first tensor."""
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, Tensor):
                return item
    raise TypeError(f"CollapseProbe: a watched layer returned {type(output).__name__}, not a tensor")


def _default_forward(model: nn.Module, data: Any) -> Any:
    """PyG-style call ``model(x, edge_index[, batch=, batch_size=])`` (DeepGCN, torch_geometric.nn.models)."""
    batch = getattr(data, "batch", None)
    if batch is None:
        return model(data.x, data.edge_index)
    return model(data.x, data.edge_index, batch=batch, batch_size=data.num_graphs)


class CollapseProbe:
    """Collapse metrics after every watched layer of ``model``.

    Args:
        model: a graphnorm model (``collapse_layers`` / ``probe_context``) or any module with ``layers`` given.
        layers: modules to watch, or (name, module) pairs; default ``model.collapse_layers()``.
        forward: ``forward(model, data)`` running the model; default the PyG call ``model(x, edge_index, ...)``.
        num_singular_values: normalized spectrum entries stored as metrics ``sv_000``... (0: none).
        cone_tol_deg: certified accuracy of the cone angle in degrees.
        split: optional label (e.g. "val") added to every record as ``split``.

    ``probe(data)`` returns a DataFrame with columns layer (1-based position in ``layers``), layer_name, rows
    ("node"/"token"), metric, stat, value; ``probe_records(data)`` the same as a list of dicts. The time of the
    last call is in ``last_timing``: ``forward_s`` (the forward pass, with the per-layer measurements its hooks
    make for one graph) and ``metrics_s`` (the rest).
    """

    def __init__(
        self,
        model: nn.Module,
        layers: LayerSpec | None = None,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        num_singular_values: int = 16,
        cone_tol_deg: float = 1e-3,
        split: str | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"CollapseProbe: model must be a torch.nn.Module, got {type(model).__name__}")
        if layers is None:
            if not hasattr(model, "collapse_layers"):
                raise ValueError(
                    f"CollapseProbe: {type(model).__name__} has no collapse_layers(); pass layers=[...] "
                    "(e.g. layers=model.convs for torch_geometric.nn.models.GCN)"
                )
            named = list(model.collapse_layers())
        else:
            named = [
                item if isinstance(item, tuple) else (f"{type(item).__name__.lower()}{index}", item)
                for index, item in enumerate(layers, start=1)
            ]
        if not named:
            raise ValueError("CollapseProbe: no layers to watch")
        for name, module in named:
            if not isinstance(module, nn.Module):
                raise TypeError(f"CollapseProbe: layer {name!r} is a {type(module).__name__}, not an nn.Module")
        self.model = model
        self.layers: list[tuple[str, nn.Module]] = named
        self.forward = forward or _default_forward
        self.num_singular_values = num_singular_values
        self.cone_tol_deg = cone_tol_deg
        self.split = split
        self.last_timing: dict[str, float] = {}

    def capture(self, data: Any) -> list[Tensor]:
        """One forward pass in eval mode without grad; the output of every watched layer (its last call)."""
        outputs: dict[int, Tensor] = {}
        self._run(data, outputs.__setitem__)
        return [outputs[i] for i in range(len(self.layers))]

    def _run(self, data: Any, on_output: Callable[[int, Tensor], None]) -> None:
        """One forward pass in eval mode without grad, on one thread, calling ``on_output(position, output)`` (0-based
        position in ``layers``) as each watched layer returns; hooks removed and the mode restored, also on error."""
        called: set[int] = set()
        handles = []
        for index, (_, module) in enumerate(self.layers):

            def hook(_module: nn.Module, _inputs: Any, output: Any, index: int = index) -> None:
                called.add(index)
                on_output(index, _first_tensor(output).detach())

            handles.append(module.register_forward_hook(hook))
        was_training = self.model.training
        try:
            self.model.eval()
            with torch.no_grad(), single_thread():
                self.forward(self.model, data)
        finally:
            for handle in handles:
                handle.remove()
            self.model.train(was_training)
        missing = [self.layers[i][0] for i in range(len(self.layers)) if i not in called]
        if missing:
            raise RuntimeError(f"CollapseProbe: layers {missing} were not called in the forward pass")

    def _context(self, data: Any) -> dict[str, Tensor | None]:
        if hasattr(self.model, "probe_context"):
            context = self.model.probe_context(data)
            return {key: context.get(key) for key in ("batch", "token_mask", "edge_index")}
        return {"batch": getattr(data, "batch", None), "token_mask": None, "edge_index": data.edge_index}

    def probe_records(self, data: Any) -> list[dict]:
        """Tidy records ``{layer, layer_name, rows, metric, stat, value[, split]}`` for every watched layer."""
        start = time.perf_counter()
        context = self._context(data)
        token_mask = context["token_mask"]
        if context["batch"] is None and (token_mask is None or not bool(token_mask.any())):
            # One graph: each layer is measured in its hook while its output is in cache (LayerStream).
            stream = LayerStream(context["edge_index"], self.num_singular_values, self.cone_tol_deg)
            self._run(data, lambda index, output: stream.add(index, self._checked(index, output, None)))
            captured = time.perf_counter()
            per_layer = stream.records()
        else:
            outputs = self.capture(data)
            captured = time.perf_counter()
            for index, output in enumerate(outputs):
                self._checked(index, output, context["batch"])
            if len({output.size(0) for output in outputs}) > 1:
                sizes = {name: output.size(0) for (name, _), output in zip(self.layers, outputs)}
                raise ValueError(f"CollapseProbe: watched layers output different numbers of rows: {sizes}")
            # Layers of equal width are measured in stacked passes; the context is built once.
            per_layer = collapse_records_layers(
                outputs,
                edge_index=context["edge_index"],
                batch=context["batch"],
                token_mask=token_mask,
                num_singular_values=self.num_singular_values,
                cone_tol_deg=self.cone_tol_deg,
            )
        extra = {} if self.split is None else {"split": self.split}
        records = [
            {"layer": position, "layer_name": name, **record, **extra}
            for position, ((name, _), layer_records) in enumerate(zip(self.layers, per_layer), start=1)
            for record in layer_records
        ]
        self.last_timing = {"forward_s": captured - start, "metrics_s": time.perf_counter() - captured}
        return records

    def _checked(self, index: int, output: Tensor, batch: Tensor | None) -> Tensor:
        """``output`` of layer ``index`` if it is [rows, d] over the rows of the probe context, else ValueError."""
        if output.dim() != 2 or (batch is not None and output.size(0) != batch.numel()):
            raise ValueError(
                f"CollapseProbe: layer {self.layers[index][0]!r} output has shape {tuple(output.shape)}, expected "
                "[rows, d] over the rows described by the probe context"
            )
        return output

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
) -> list[dict]:
    """Records for a run's ``record["layers"]`` (keys layer, layer_name, rows, metric, value, stat[, split]),
    JSON-serializable (plain floats; NaN where a metric is undefined). Call at the end of training with the
    evaluation data (node level: the whole graph; graph level: :func:`evaluation_sample`)."""
    probe = CollapseProbe(model, layers=layers, forward=forward, num_singular_values=num_singular_values, split=split)
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
