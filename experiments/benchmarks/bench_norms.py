"""Per-graph element-wise norms on a large mini-batch, against PyG/torch and the ``x.clone()`` floor.

    python -m experiments.benchmarks.bench_norms [--quick] [--out DIR]

Each norm of ``CASES`` timed forward and forward + backward against its PyG / torch counterpart with the same
semantics (target ratio <= 1.0) and against ``x.clone()`` of the same tensor, one read and one write: the
memory-bandwidth floor (target <= 4). Interleaved rounds, median; peak memory of one forward + backward call.
Protocol (sizes, the gradient call): ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch_geometric.nn.norm as pyg_norm
from torch import Tensor, nn

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from graphnorm.norms import build_norm

FWD_TARGET = 1.0  # ours / PyG (or torch) counterpart
CLONE_TARGET = 4.0  # ours / x.clone()


@dataclass
class NormCase:
    """One of our norms and the reference it is compared with (``None``: only the clone floor)."""

    label: str
    ours: Callable[[int], nn.Module]
    reference_label: str | None
    reference: Callable[[int], nn.Module] | None
    reference_takes_batch: bool = True
    needs_token_mask: bool = False


class SepNormReference(nn.Module):
    """SepNorm written by hand with torch modules: BatchNorm1d over the token rows, F.layer_norm over the others.

    What a user would write without SepNorm; the comparison shows the cost of SepNorm's checks and registry plumbing.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.token_norm = nn.BatchNorm1d(channels)
        self.node_norm = nn.LayerNorm(channels)

    def forward(self, x: Tensor, token_mask: Tensor) -> Tensor:
        out = torch.empty_like(x)
        out[token_mask] = self.token_norm(x[token_mask])
        out[~token_mask] = self.node_norm(x[~token_mask])
        return out


CASES: list[NormCase] = [
    NormCase(
        "pairnorm (PN)",
        lambda d: build_norm("pairnorm", d, mode="PN"),
        "PyG PairNorm",
        lambda d: pyg_norm.PairNorm(scale_individually=False),
    ),
    NormCase(
        "pairnorm (PN-SI)",
        lambda d: build_norm("pairnorm", d, mode="PN-SI"),
        "PyG PairNorm(scale_individually)",
        lambda d: pyg_norm.PairNorm(scale_individually=True),
    ),
    NormCase(
        "rmsnorm",
        lambda d: build_norm("rmsnorm", d),
        "torch.nn.RMSNorm",
        lambda d: nn.RMSNorm(d),
        reference_takes_batch=False,
    ),
    NormCase(
        "layernorm (node)",
        lambda d: build_norm("layernorm", d, mode="node"),
        "PyG LayerNorm(mode='node')",
        lambda d: pyg_norm.LayerNorm(d, mode="node"),
    ),
    NormCase(
        "layernorm (node)",
        lambda d: build_norm("layernorm", d, mode="node"),
        "torch.nn.LayerNorm",
        lambda d: nn.LayerNorm(d),
        reference_takes_batch=False,
    ),
    NormCase(
        "layernorm (graph)",
        lambda d: build_norm("layernorm", d, mode="graph"),
        "PyG LayerNorm(mode='graph')",
        lambda d: pyg_norm.LayerNorm(d, mode="graph"),
    ),
    NormCase(
        "graphnorm",
        lambda d: build_norm("graphnorm", d),
        "PyG GraphNorm",
        lambda d: pyg_norm.GraphNorm(d),
    ),
    NormCase(
        "instancenorm",
        lambda d: build_norm("instancenorm", d),
        "PyG InstanceNorm",
        lambda d: pyg_norm.InstanceNorm(d),
    ),
    NormCase(
        "sepnorm (batchnorm / layernorm)",
        lambda d: build_norm("sepnorm", d),
        "hand-written masked BatchNorm1d + LayerNorm",
        SepNormReference,
        needs_token_mask=True,
    ),
]


def make_batch(num_graphs: int, min_nodes: int, max_nodes: int, channels: int, seed: int = 0) -> dict[str, Tensor]:
    """Random features for ``num_graphs`` graphs with sizes uniform in ``[min_nodes, max_nodes]``.

    Returns ``x`` [N, channels], a sorted ``batch`` [N], ``token_mask`` [N] (the first row of every graph) and
    the output gradient ``grad`` [N, channels].
    """
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(min_nodes, max_nodes + 1, (num_graphs,), generator=generator)
    batch = torch.repeat_interleave(torch.arange(num_graphs), sizes)  # [N]
    num_nodes = int(sizes.sum())
    x = torch.randn(num_nodes, channels, generator=generator)
    token_mask = torch.zeros(num_nodes, dtype=torch.bool)
    token_mask[torch.cumsum(sizes, 0) - sizes] = True  # first row of each graph
    grad = torch.randn(num_nodes, channels, generator=generator)
    return {"x": x, "batch": batch, "token_mask": token_mask, "grad": grad}


def _call(module: nn.Module, case: NormCase, is_ours: bool, tensors: dict[str, Tensor], x: Tensor) -> Tensor:
    batch, graphs = tensors["batch"], int(tensors["num_graphs"])
    if is_ours:
        token_mask = tensors["token_mask"] if case.needs_token_mask else None
        return module(x, batch=batch, batch_size=graphs, token_mask=token_mask)
    if case.needs_token_mask:
        return module(x, tensors["token_mask"])
    if case.reference_takes_batch:
        return module(x, batch, graphs)
    return module(x)


def forward_fn(module: nn.Module, case: NormCase, is_ours: bool, tensors: dict[str, Tensor]) -> Callable[[], None]:
    x = tensors["x"]

    def run() -> None:
        with torch.no_grad():
            _call(module, case, is_ours, tensors, x)

    return run


def forward_backward_fn(
    module: nn.Module, case: NormCase, is_ours: bool, tensors: dict[str, Tensor]
) -> Callable[[], None]:
    x = tensors["x"].detach().requires_grad_(True)
    inputs = [x] + [p for p in module.parameters() if p.requires_grad]
    grad = tensors["grad"]

    def run() -> None:
        out = _call(module, case, is_ours, tensors, x)
        torch.autograd.grad(out, inputs, grad)

    return run


def clone_fns(tensors: dict[str, Tensor]) -> tuple[Callable[[], None], Callable[[], None]]:
    """The floor: ``x.clone()`` forward, and forward+backward (the clone's backward passes the gradient on)."""
    x = tensors["x"]
    x_grad = x.detach().requires_grad_(True)
    grad = tensors["grad"]

    def forward() -> None:
        with torch.no_grad():
            x.clone()

    def forward_backward() -> None:
        torch.autograd.grad(x_grad.clone(), [x_grad], grad)

    return forward, forward_backward


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    """Time every case; returns the report section (markdown tables, targets)."""
    if quick:
        num_graphs, min_nodes, max_nodes, channels = 64, 3, 12, 16
    else:
        num_graphs, min_nodes, max_nodes, channels = 8000, 5, 45, 128
    repeats, min_seconds = _common.round_settings(quick, repeats)
    tensors = make_batch(num_graphs, min_nodes, max_nodes, channels)
    tensors["num_graphs"] = torch.tensor(num_graphs)
    num_nodes = tensors["x"].size(0)

    clone_fwd, clone_fb = clone_fns(tensors)
    rows: list[dict] = []
    targets: list[common.Target] = []
    for case in CASES:
        torch.manual_seed(0)
        ours = case.ours(channels)
        reference = case.reference(channels) if case.reference is not None else None
        for module in (ours, reference):
            if module is not None:
                module.train()
        candidates_fwd = {"ours": forward_fn(ours, case, True, tensors), "clone": clone_fwd}
        candidates_fb = {"ours": forward_backward_fn(ours, case, True, tensors), "clone": clone_fb}
        if reference is not None:
            candidates_fwd["reference"] = forward_fn(reference, case, False, tensors)
            candidates_fb["reference"] = forward_backward_fn(reference, case, False, tensors)
        fwd = _common.time_interleaved(candidates_fwd, repeats=repeats, min_seconds=min_seconds)
        fb = _common.time_interleaved(candidates_fb, repeats=repeats, min_seconds=min_seconds)
        mem_ours = _common.peak_memory(candidates_fb["ours"])
        mem_ref = _common.peak_memory(candidates_fb["reference"]) if reference is not None else None
        row = {
            "norm": case.label,
            "reference": case.reference_label or "-",
            "fwd ours (ms)": fwd["ours"] * 1e3,
            "fwd ref (ms)": fwd["reference"] * 1e3 if reference is not None else None,
            "fwd / ref": fwd["ours"] / fwd["reference"] if reference is not None else None,
            "fwd / clone": fwd["ours"] / fwd["clone"],
            "fwd+bwd ours (ms)": fb["ours"] * 1e3,
            "fwd+bwd / ref": fb["ours"] / fb["reference"] if reference is not None else None,
            "fwd+bwd / clone": fb["ours"] / fb["clone"],
            "peak MB ours": _common.megabytes(mem_ours),
            "peak MB ref": _common.megabytes(mem_ref),
        }
        rows.append(row)
        print(common.format_row(row), flush=True)
        if reference is not None:
            # the <= 1.0 target is against PyG/torch; a hand-written reference (SepNorm) is only reported
            has_target = not case.needs_token_mask
            targets.append(
                common.Target(
                    f"{case.label} fwd vs {case.reference_label}",
                    f"<= {FWD_TARGET}" if has_target else "reported (no PyG counterpart)",
                    row["fwd / ref"],
                    row["fwd / ref"] <= FWD_TARGET if has_target else None,
                )
            )
        targets.append(
            common.Target(
                f"{case.label} fwd vs x.clone()",
                f"<= {CLONE_TARGET}",
                row["fwd / clone"],
                row["fwd / clone"] <= CLONE_TARGET,
            )
        )
    clone_ms = _common.time_interleaved({"clone": clone_fwd}, repeats=repeats, min_seconds=min_seconds)["clone"] * 1e3
    setup = (
        f"{num_nodes} nodes in {num_graphs} graphs (sizes {min_nodes}..{max_nodes}), d = {channels}, float32, "
        f"train mode, {repeats} interleaved rounds, median; x.clone() forward takes {clone_ms:.2f} ms."
    )
    return common.table_report("norms", "3. Per-graph element-wise norms", setup, rows, targets)


def main(argv: list[str] | None = None) -> None:
    common.bench_main(run, __doc__, argv, out_help="write the report section as markdown here")


if __name__ == "__main__":
    main()
