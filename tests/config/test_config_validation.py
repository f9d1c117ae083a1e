"""RunConfig.validate: the type and range of every key, norm and model keywords, and norm/model compatibility,
all checked before any work, each failure a one-line ``ValueError`` naming the key."""

from __future__ import annotations

import math
import re

import pytest
import torch
import yaml
from torch_geometric.data import Batch, Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from graphnorm.cli import main
from graphnorm.config import RunConfig, unsupported_norm_reason
from graphnorm.models.gcn import DeepGCN
from graphnorm.norms import available_norms
from graphnorm.norms.contranorm import NeighborsNotExcludedWarning

ZINC_VN = {"dataset": "zinc", "virtual_node": True}
GRAPHORMER = {"dataset": "zinc", "model": "graphormer", "hidden_channels": 32, "num_heads": 4}


def rejection(values: dict) -> str:
    """The message of the ``ValueError`` that ``from_dict(values)`` raises (checked to be one line)."""
    with pytest.raises(ValueError) as caught:
        RunConfig.from_dict(values)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"num_layers": "four"}, r"^num_layers must be an integer, got 'four'$"),
        ({"num_layers": "4"}, r"^num_layers must be an integer, got '4' \(a quoted number is a string"),
        ({"lr": "5e-4"}, r"^lr must be a finite number, got '5e-4' \(YAML reads 5e-4 as a string: write 5\.0e-4\)$"),
        ({"weight_decay": "1E-5"}, r"write 1\.0E-5\)$"),
        ({"lr": "1e5"}, r"write 1\.0e\+5\)$"),
        ({"lr": "2.5e3"}, r"write 2\.5e\+3\)$"),
        ({"lr": "0.01"}, r"^lr must be a finite number, got '0\.01' \(a quoted number is a string"),
        ({"epochs": None}, r"^epochs must be an integer, got None$"),
        ({"num_layers": 2.5}, r"^num_layers must be an integer, got 2\.5$"),
        ({"num_layers": 2.0}, r"^num_layers must be an integer, got 2\.0 \(write 2\)$"),
        ({"num_layers": True}, r"^num_layers must be an integer, got True \(true/false is not a number\)$"),
        ({"lr": True}, r"^lr must be a finite number, got True"),
        ({"seed": "abc"}, r"^seed must be an integer, got 'abc'$"),
        ({"seed": -1}, r"^seed must be in \[0, 2\*\*32 - 1\]"),
        ({"seed": 2**32}, r"^seed must be in \[0, 2\*\*32 - 1\]"),
        ({"epochs": 10**30}, r"^epochs must be at most 2\*\*63 - 1"),
        ({"hidden_channels": 2**31}, r"^hidden_channels must be <= 65536 \(a guard against typos\), got 2147483648$"),
        ({"num_layers": 10**5}, r"^num_layers must be <= 10000"),
        ({"lr": math.nan}, r"^lr must be a finite number, got nan$"),
        ({"lr": math.inf}, r"^lr must be a finite number, got inf$"),
        ({"weight_decay": math.nan}, r"^weight_decay must be a finite number, got nan$"),
        ({"grad_clip": -math.inf}, r"^grad_clip must be a finite number"),
        ({"dropout": "0.5"}, r"^dropout must be a finite number"),
        ({"data_root": 5}, r"^data_root must be a string or null, got 5$"),
        ({"data_root": ""}, r"^data_root must be a non-empty path or null"),
        ({"hidden_channels": None}, r"^hidden_channels must be an integer, got None$"),
        ({"dataset": ["cora"]}, r"^dataset must be a string, got \['cora'\]$"),
        ({"norm": None}, r"^norm must be a string, got None$"),
        ({"norm": 3}, r"^norm must be a string, got 3$"),
        ({"residual": "yes"}, r"^residual must be true or false, got 'yes'$"),
        ({"norm_kwargs": None}, r"^norm_kwargs must be a mapping, got None$"),
        ({"norm_kwargs": {1: 2}}, r"^norm_kwargs must be a mapping with string keys, got \{1: 2\}$"),
        ({"model_kwargs": ["init"]}, r"^model_kwargs must be a mapping, got \['init'\]$"),
        ({"probe_graphs": 0.5}, r"^probe_graphs must be an integer"),
        ({"dataset": "zinc", "limit_graphs": 2.5}, r"^limit_graphs must be an integer or null, got 2\.5$"),
        ({"dataset": "zinc", "batch_size": True}, r"^batch_size must be an integer, got True"),
        ({"dataset": "zinc", "ema_decay": math.nan}, r"^ema_decay must be a finite number or null, got nan$"),
        ({"dataset": "zinc", "max_train_minutes": math.inf}, r"^max_train_minutes must be a finite number or null"),
        ({"dataset": "zinc", "checkpoint_dir": 7}, r"^checkpoint_dir must be a string or null, got 7$"),
        (
            {"dataset": "córa"},
            r"^dataset must be one of actor, citeseer, cora, cornell, csbm, molhiv, smiles, texas, wisconsin, zinc; "
            r"got 'córa'$",
        ),
        ({"device": "tpu"}, r"^device must be one of cpu, cuda, auto"),
        ({"lr": "x" * 500}, r"^lr must be a finite number, got 'x{60,80}\.\.\.$"),
        ({"model": "graphormer", "dataset": "cora"}, r"model='graphormer'.*graph-level dataset.*'cora'"),
    ],
)
def test_wrong_type_or_range_is_one_line_naming_the_key(values: dict, message: str) -> None:
    assert re.search(message, rejection(values)), rejection(values)


@pytest.mark.parametrize(
    "values",
    [
        {"lr": 1},  # an int where a float is expected is fine
        {"weight_decay": 0, "grad_clip": 1, "dropout": 0},
        {"dataset": "zinc", "max_train_minutes": 5, "ema_decay": 0.5},
        {"seed": 2**32 - 1},
        {"norm": "PairNorm", "norm_kwargs": {"mode": "PN-SI", "scale": 2}},
        {"norm": "contranorm", "norm_kwargs": {"dense_max_nodes": None, "tau": 1}},
        {"model_kwargs": {"init": "kipf"}},
        {**GRAPHORMER, "model_kwargs": {"ffn_channels": 8, "pre_ln": False, "attention_dropout": 0}},
    ],
)
def test_valid_values_are_accepted_unchanged(values: dict) -> None:
    config = RunConfig.from_dict(values)
    assert {key: getattr(config, key) for key in values} == values


def test_int_given_for_a_float_is_not_converted() -> None:
    """Accepted as given (not coerced to 1.0), so a config's record and run id are what its YAML says."""
    assert type(RunConfig.from_dict({"lr": 1}).lr) is int


def test_train_reports_the_yaml_string_trap_too(tmp_path, capsys) -> None:
    """``graphnorm train`` validates through ``RunConfig.from_dict``: the 5e-4 hint is not only the sweep's."""
    path = tmp_path / "run.yaml"
    path.write_text("dataset: cora\nlr: 5e-4\n")
    assert yaml.safe_load(path.read_text())["lr"] == "5e-4"  # the trap itself
    assert main(["train", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        "graphnorm train: error: lr must be a finite number, got '5e-4' (YAML reads 5e-4 as a string: write 5.0e-4)"
    )


def test_cuda_without_cuda_is_rejected_before_any_work() -> None:
    if torch.cuda.is_available():
        assert RunConfig.from_dict({"device": "cuda"}).device == "cuda"
    else:
        message = rejection({"device": "cuda"})
        assert message.startswith("device='cuda' but CUDA is not available"), message
    # A driver that only plans runs for other machines (a SLURM sweep) can skip the check.
    RunConfig(device="cuda").validate(check_device=False)
    assert RunConfig.from_dict({"device": "cuda"}, check_device=False).device == "cuda"


@pytest.mark.parametrize(
    ("norm", "norm_kwargs", "detail"),
    [
        ("pairnorm", {"mode": "XX"}, "mode"),
        ("pairnorm", {"scale": -1}, "scale"),
        ("contranorm", {"scale": "big"}, "scale"),
        ("contranorm", {"tau": -1}, "tau"),
        ("contranorm", {"exclude_neighbors": "no"}, "exclude_neighbors"),
        ("contranorm", {"dense_max_nodes": -3}, "dense_max_nodes"),
        ("nodenorm", {"p": 0}, "p"),
        ("diffgroupnorm", {"groups": 0}, "groups"),
        ("diffgroupnorm", {"groups": 10**12}, None),  # accepted: built on the meta device, nothing allocated
        ("layernorm", {"mode": "nope"}, "mode"),
        ("batchnorm", {"eps": "x"}, "eps"),
        ("batchnorm", {"affine": "yes"}, "affine"),
        ("batchnorm", {"momentum": 2}, "momentum"),
        ("learnable_scaler", {"init": "zeros?"}, "init"),
        ("adanorm", {"C": "x"}, "C"),
        ("rmsnorm", {"p": 2}, "p"),
        ("graphnorm", {"eps": -1}, "eps"),
        ("instancenorm", {"eps": math.nan}, "eps"),
        ("sepnorm", {"token_norm": "nosuch"}, "nosuch"),
        ("sepnorm", {"token_norm": {"a": [1]}}, "token_norm"),
        ("sepnorm", {"node_kwargs": {"scael": 1}}, "scael"),
    ],
)
def test_invalid_norm_kwargs_values_are_rejected_at_validation(norm: str, norm_kwargs: dict, detail: str | None):
    values = {**(ZINC_VN if norm == "sepnorm" else {}), "norm": norm, "norm_kwargs": norm_kwargs}
    if detail is None:
        RunConfig.from_dict(values)
        return
    message = rejection(values)
    assert message.startswith(
        f"norm_kwargs for norm '{norm}' (hidden_channels=64) are invalid: "
    ) or message.startswith(f"norm_kwargs.{detail} "), message
    assert detail in message, message


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model_kwargs": {"init": "nope"}}, r"^model_kwargs for model 'gcn' are invalid: init must be one of"),
        ({"model_kwargs": {"init": 3}}, r"^model_kwargs\.init must be a string, got 3$"),
        ({**GRAPHORMER, "model_kwargs": {"ffn_channels": "x"}}, r"^model_kwargs\.ffn_channels must be an integer"),
        ({**GRAPHORMER, "model_kwargs": {"max_distance": -1}}, r"invalid: max_distance must be a positive integer"),
        ({**GRAPHORMER, "model_kwargs": {"max_degree": 0}}, r"invalid: max_degree must be a positive integer"),
        ({**GRAPHORMER, "model_kwargs": {"multi_hop_max_dist": 0}}, r"invalid: multi_hop_max_dist must be"),
        ({**GRAPHORMER, "model_kwargs": {"pre_ln": "no"}}, r"^model_kwargs\.pre_ln must be true or false, got 'no'$"),
        ({**GRAPHORMER, "model_kwargs": {"attention_dropout": 2.0}}, r"invalid: attention_dropout must be in \[0, 1\)"),
        ({**GRAPHORMER, "model_kwargs": {"activation_dropout": math.nan}}, r"^model_kwargs\.activation_dropout must"),
        ({**GRAPHORMER, "model_kwargs": {"ffn_channels": 2**20}}, r"^model_kwargs\.ffn_channels must be <= 65536"),
        ({**GRAPHORMER, "num_heads": "2"}, r"^num_heads must be an integer, got '2'"),
    ],
)
def test_invalid_model_kwargs_values_are_rejected_at_validation(values: dict, message: str) -> None:
    assert re.search(message, rejection(values)), rejection(values)


# --- which norms can run on which model ----------------------------------------------------------------------
def random_graphs(num_graphs: int) -> Batch:
    graphs = []
    for seed in range(num_graphs):
        torch.manual_seed(seed)
        n = 5 + seed
        edge_index = to_undirected(erdos_renyi_graph(n, 0.4), num_nodes=n)
        graphs.append(Data(x=torch.randint(0, 28, (n, 1)), edge_index=edge_index, num_nodes=n))
    return Batch.from_data_list(graphs)


def gcn_forward_error(config: RunConfig) -> str | None:
    """Run the config's GCN once, as training builds it, on a tiny graph of its level; the error, if any (the
    suite turns warnings into errors, so a ContraNorm left without edges, which would change form, counts)."""
    graph_level = not config.is_node_level
    model = DeepGCN(
        in_channels=28 if graph_level else 6,
        hidden_channels=config.hidden_channels,
        out_channels=1,
        num_layers=config.num_layers,
        norm=config.norm,
        norm_kwargs=config.norm_kwargs,
        readout=config.readout if graph_level else None,
        virtual_node=config.virtual_node,
        atom_encoder="zinc" if graph_level else None,
    )
    batch = random_graphs(3)
    try:
        if graph_level:
            model(batch.x, batch.edge_index, batch.batch, batch.num_graphs).sum().backward()
        else:
            model(torch.randn(batch.num_nodes, 6), batch.edge_index).sum().backward()
    except (ValueError, NeighborsNotExcludedWarning) as e:  # the warning: a ContraNorm changing form without edges
        return str(e)
    return None


CONTEXTS = {
    "node-level gcn": {"dataset": "cora"},
    "graph-level gcn": {"dataset": "zinc"},
    "graph-level gcn, virtual node": {"dataset": "zinc", "virtual_node": True},
}


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize(
    ("norm", "norm_kwargs"),
    [(norm, {}) for norm in available_norms()]
    + [("sepnorm", {"token_norm": "contranorm"}), ("sepnorm", {"node_norm": "contranorm"})]
    + [("sepnorm", {"token_norm": "contranorm", "token_kwargs": {"exclude_neighbors": False}})],
)
def test_unsupported_norm_reason_is_given_exactly_when_the_model_cannot_run_the_norm(
    context: str, norm: str, norm_kwargs: dict
) -> None:
    config = RunConfig(**CONTEXTS[context], norm=norm, norm_kwargs=norm_kwargs, num_layers=2, hidden_channels=8)
    reason = unsupported_norm_reason(config)
    error = gcn_forward_error(config)
    assert (reason is None) == (error is None), (reason, error)
    if reason is not None:
        assert rejection(config.to_dict()) == reason


def test_unsupported_norm_reason_messages_and_graphormer() -> None:
    sepnorm_on_cora = RunConfig(norm="sepnorm")
    assert unsupported_norm_reason(sepnorm_on_cora) == (
        "sepnorm needs graph-token rows: use model=graphormer, or model=gcn with virtual_node=true on a "
        "graph-level dataset"
    )
    for norm in available_norms():  # Graphormer hands every norm token_mask and edges (see test_graphormer.py)
        assert unsupported_norm_reason(RunConfig(**GRAPHORMER, norm=norm)) is None
    # Works on configs a sweep has not validated yet (it filters norm: all with it), with the norm in any case.
    assert unsupported_norm_reason(RunConfig(norm="SepNorm", norm_kwargs=None)) is not None  # type: ignore[arg-type]


# --- from_dict never fails with a TypeError/KeyError ----------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({1: 2, "x": 3}, r"^unknown config key\(s\) \[1, 'x'\]"),
        (None, r"^a run config must be a mapping of RunConfig keys, got None$"),
        (["dataset"], r"^a run config must be a mapping"),
    ],
)
def test_from_dict_rejects_junk_with_value_errors(values, message: str) -> None:
    assert re.search(message, rejection(values)), rejection(values)
