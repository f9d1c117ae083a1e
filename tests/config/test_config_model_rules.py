"""The rules a model lays on a run config, declared by the model's own file through its registration: every message,
word for word, for each built-in model; a model registered in user code brings its own rules; config.py names no
model (the rules reach it through :func:`graphnorm.models.model_spec`)."""

from __future__ import annotations

import pytest
from torch import Tensor, nn

from graphnorm.config import RunConfig, unsupported_norm_reason
from graphnorm.models import model_spec, register_model
from graphnorm.models.registry import _MODELS

GRAPHORMER = {"dataset": "zinc", "model": "graphormer", "hidden_channels": 32, "num_heads": 4}


def rejection(values: dict) -> str:
    with pytest.raises(ValueError) as caught:
        RunConfig.from_dict(values)
    return str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # keys only Graphormer uses, set for another model
        ({"dataset": "zinc", "max_nodes": 30}, "max_nodes and drop_large_graphs are for model='graphormer'"),
        (
            {"dataset": "zinc", "max_nodes": 30, "drop_large_graphs": True},
            "max_nodes and drop_large_graphs are for model='graphormer'",
        ),
        (
            {"dataset": "zinc", "bucket_batches": 4},
            "bucket_batches groups graphs by size against Graphormer's padding: set model=graphormer",
        ),
        (
            {"dataset": "zinc", "attention_bias_lr_scale": 2.0},
            "attention_bias_lr_scale is for model=graphormer with scheduler=polynomial",
        ),
        # Graphormer's own rules
        (
            {**GRAPHORMER, "attention_bias_lr_scale": 2.0},
            "attention_bias_lr_scale is for model=graphormer with scheduler=polynomial",
        ),
        ({**GRAPHORMER, "num_heads": 5}, "num_heads=5 must divide hidden_channels=32"),
        (
            {**GRAPHORMER, "dataset": "cora"},
            "model='graphormer' predicts per graph: use a graph-level dataset (molhiv, smiles, zinc), not "
            "dataset='cora'",
        ),
        (
            {**GRAPHORMER, "readout": "sum"},
            "model='graphormer' reads out its own virtual graph token: leave virtual_node and readout",
        ),
        (
            {**GRAPHORMER, "virtual_node": True},
            "model='graphormer' reads out its own virtual graph token: leave virtual_node and readout",
        ),
        ({**GRAPHORMER, "drop_large_graphs": True}, "drop_large_graphs needs max_nodes"),
        # GCNII's
        (
            {"model": "gcnii", "residual": True},
            "residual=True is a DeepGCN option; model='gcnii' has its own layer: leave residual at False",
        ),
        (
            {"model": "gcnii", "shared_layernorm": True},
            "shared_layernorm=True is a DeepGCN option; model='gcnii' has its own layer: leave shared_layernorm at "
            "False",
        ),
        (
            {"model": "gcnii", "dataset": "zinc", "readout": "virtual", "virtual_node": False},
            "model='gcnii' reads out with readout=mean or sum, not 'virtual'",
        ),
        # GAT's
        (
            {"model": "gat", "adjacency": "row"},
            "adjacency='row' is a DeepGCN option: model='gat' weighs neighbours by attention; leave adjacency at 'sym'",
        ),
        (
            {"model": "gat", "hidden_channels": 30},
            "num_heads=4 must divide hidden_channels=30 for model='gat' (its heads are concatenated), or set "
            "model_kwargs concat: false",
        ),
        # model_kwargs checked by building the model on the meta device, for each model
        ({"model_kwargs": {"init": "nope"}}, "model_kwargs for model 'gcn' are invalid: init must be one of"),
        ({"model": "gat", "model_kwargs": {"output_heads": 0}}, "model_kwargs for model 'gat' are invalid:"),
        ({"model": "gcnii", "model_kwargs": {"alpha": 1.5}}, "model_kwargs for model 'gcnii' are invalid:"),
        (
            {**GRAPHORMER, "model_kwargs": {"max_distance": -1}},
            "model_kwargs for model 'graphormer' are invalid: max_distance must be a positive integer, got -1",
        ),
    ],
)
def test_model_rules_keep_their_messages(values: dict, message: str) -> None:
    assert rejection(values).startswith(message), rejection(values)


@pytest.mark.parametrize(
    "values",
    [
        {**GRAPHORMER, "max_nodes": 30, "drop_large_graphs": True, "bucket_batches": 4},
        {
            **GRAPHORMER,
            "attention_bias_lr_scale": 2.0,
            "scheduler": "polynomial",
            "optimizer": "adamw",
            "warmup_steps": 2,
        },
        {**GRAPHORMER, "model_kwargs": {"ffn_channels": 8}},
        {"model": "gat", "hidden_channels": 30, "model_kwargs": {"concat": False}},
        {"model": "gcnii", "dataset": "zinc", "readout": "sum"},
    ],
)
def test_configs_that_keep_the_rules_pass(values: dict) -> None:
    RunConfig.from_dict(values)


def test_token_rows_are_declared_by_the_model() -> None:
    assert model_spec("graphormer").has_token_rows(RunConfig(**GRAPHORMER))
    for name in ("gcn", "gat"):
        assert not model_spec(name).has_token_rows(RunConfig(model=name, dataset="zinc"))
        assert model_spec(name).has_token_rows(RunConfig(model=name, dataset="zinc", virtual_node=True))
        assert not model_spec(name).has_token_rows(RunConfig(model=name, virtual_node=True))  # node level: none
    assert unsupported_norm_reason(RunConfig(**GRAPHORMER, norm="sepnorm")) is None
    assert unsupported_norm_reason(RunConfig(model="gat", dataset="zinc", virtual_node=True, norm="sepnorm")) is None


class TokenFree(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 8, width_limit: int = 99) -> None:
        super().__init__()
        if hidden_channels > width_limit:
            raise ValueError(f"hidden_channels={hidden_channels} exceeds width_limit={width_limit}")
        self.lin = nn.Linear(in_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        return self.lin(x)


def test_a_user_model_brings_its_own_config_rules() -> None:
    def check_config(config: RunConfig) -> None:
        if config.hidden_channels % 2:
            raise ValueError(f"model='toy_even' wants an even width, got hidden_channels={config.hidden_channels}")

    register_model("toy_even", levels=("node",), check_config=check_config)(TokenFree)
    try:
        RunConfig.from_dict({"model": "toy_even", "hidden_channels": 8})
        assert rejection({"model": "toy_even", "hidden_channels": 7}) == (
            "model='toy_even' wants an even width, got hidden_channels=7"
        )
        # a model's level is checked for any model, in the same words
        assert rejection({"model": "toy_even", "dataset": "zinc"}).startswith(
            "model='toy_even' predicts per node: use a node-level dataset (actor, citeseer, cora"
        )
        # its keywords are checked on the meta device with the config's width
        message = rejection({"model": "toy_even", "hidden_channels": 8, "model_kwargs": {"width_limit": 4}})
        assert message == ("model_kwargs for model 'toy_even' are invalid: hidden_channels=8 exceeds width_limit=4"), (
            message
        )
        assert unsupported_norm_reason(RunConfig(model="toy_even", norm="sepnorm")) is not None
    finally:
        _MODELS.pop("toy_even")
