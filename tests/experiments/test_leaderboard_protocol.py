"""The leaderboard's protocol (experiments/leaderboard/protocol.yaml): the grid the issue asks for, one recipe per
task family, knobs tuned at a reference depth only, and sweep configs that graphnorm's sweeps accept."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard.protocol import (  # noqa: E402
    grid_sweep,
    knob_choices,
    load_protocol,
    runnable_norms,
    setting_config,
    tuning_sweep,
)
from analysis.leaderboard.run import tuned_norms  # noqa: E402
from graphnorm.config import config_run_id  # noqa: E402
from graphnorm.norms import available_norms  # noqa: E402
from graphnorm.sweep.grid import expand_grid  # noqa: E402


def test_the_full_grid_is_the_issue_grid():
    protocol = load_protocol("full")
    node, molecular = protocol.parts["node"], protocol.parts["molecular"]
    assert node.depths == [2, 4, 8, 16, 32, 64] and molecular.depths == [2, 4, 8, 16]
    assert set(node.hosts) == {"deepgcn", "deepgat", "gcnii"}
    assert {node.hosts[h]["model"] for h in node.hosts} == {"gcn", "gat", "gcnii"}
    datasets = {g.config["dataset"] for g in node.graphs.values()}
    assert datasets == {"cora", "citeseer", "actor", "cornell", "texas", "wisconsin", "csbm"}
    csbm = [g for g in node.graphs.values() if g.config["dataset"] == "csbm"]
    assert sorted(g.family for g in csbm) == ["heterophilic", "homophilic"]
    assert all(len(g.replicates) >= 5 for g in node.graphs.values())
    assert {g.config["dataset"] for g in molecular.graphs.values()} == {"zinc", "molhiv"}
    assert all(len(g.replicates) >= 3 for g in molecular.graphs.values())
    assert "gin" in {h.get("model") for h in molecular.hosts.values()}
    assert molecular.base["virtual_node"] is True


def test_one_recipe_per_family_and_the_knobs_only_per_norm():
    """Every host and graph of a family shares the family's training keys; only a norm's keywords vary by norm."""
    protocol = load_protocol("full")
    for part, host, graph in protocol.settings():
        config = setting_config(part, host, graph)
        for key in ("hidden_channels", "optimizer", "lr", "epochs", "patience", "dropout"):
            assert config[key] == part.base[key], (part.name, host, graph.name, key)
    for grid in protocol.knobs.values():
        assert set(grid) and all(isinstance(values, list) and values for values in grid.values())


def test_no_run_is_cut_by_a_clock():
    """A run's budget is in epochs: a time cap (``max_train_minutes``) would stop it at a step that depends on the
    machine's load, and re-running its cell would not give the recorded value."""
    for tier in ("full", "quick"):
        for part, host, graph in load_protocol(tier).settings():
            assert setting_config(part, host, graph).get("max_train_minutes") is None, (tier, host, graph.name)


def test_sweeps_expand_and_tune_at_the_reference_depth_only(data_root):
    protocol = load_protocol("quick")
    for part, host, graph in protocol.settings():
        norms, reasons = runnable_norms(setting_config(part, host, graph))
        assert "none" in norms and set(norms) | set(reasons) == set(available_norms())
        for norm in tuned_norms(protocol, part, host, graph):
            configs = expand_grid(tuning_sweep(protocol, part, host, graph, norm), log=None)
            assert {c.num_layers for c in configs} == {part.reference_depth}
            assert len(configs) == len(knob_choices(protocol, norm)) * min(
                part.tuning_replicates, len(graph.replicates)
            )
        configs = expand_grid(grid_sweep(part, host, graph, norms, {}), log=None)
        assert len(configs) == len(norms) * len(part.depths) * len(graph.replicates)


def test_the_deepest_depths_run_the_first_replicates_and_keep_their_ids():
    protocol = load_protocol("full")
    part = protocol.parts["node"]
    assert part.deep_depths == [32, 64] and part.deep_replicates == 3
    graph = part.graphs["texas"]
    sweep = grid_sweep(part, "deepgcn", graph, ["none", "pairnorm"], {})
    points = {(c.norm, c.num_layers, c.split) for c in expand_grid(sweep, log=None)}
    assert points == {
        (norm, depth, split)
        for norm in ("none", "pairnorm")
        for depth in part.depths
        for split in (graph.replicates[:3] if depth >= 32 else graph.replicates)
    }
    every = expand_grid({key: value for key, value in sweep.items() if key != "exclude"}, log=None)
    kept = {config_run_id(c) for c in expand_grid(sweep, log=None)}
    assert kept < {config_run_id(c) for c in every}  # the same runs as without the cut, fewer of them
    assert part.replicates_at(graph, 16) == graph.replicates and part.replicates_at(graph, 64) == graph.replicates[:3]


def test_the_quick_tier_runs_every_norm_somewhere():
    protocol = load_protocol("quick")
    ran = {n for part, host, graph in protocol.settings() for n in runnable_norms(setting_config(part, host, graph))[0]}
    assert ran == set(available_norms())
    assert {graph.family for _, _, graph in protocol.settings()} == {"homophilic", "heterophilic", "molecular"}
    assert all(len(part.depths) == 3 for part in protocol.parts.values())


def test_no_molecular_host_lets_a_norm_zero_its_mean_readout(data_root):
    """MeanSubtraction centers each graph's rows: a host that ends in it (with no activation after it) would give
    every graph the same prediction through its mean readout. Every molecular host of the full tier, at its
    shallowest depth, predicts different values for different ZINC graphs with it."""
    import torch
    from torch_geometric.loader import DataLoader

    from graphnorm.config import RunConfig, model_keywords
    from graphnorm.data import load_dataset
    from graphnorm.models import build_model, model_outputs

    torch.manual_seed(0)
    protocol = load_protocol("full")
    part = protocol.parts["molecular"]
    task = load_dataset("zinc", root=str(data_root))
    batch = next(iter(DataLoader(task.val, batch_size=8)))
    for host in part.hosts:
        keys = {**setting_config(part, host, part.graphs["zinc"]), "norm": "meansubtraction"}
        config = RunConfig(**{**keys, "num_layers": part.depths[0], "data_root": str(data_root)})
        model = build_model(config.model, task, **model_keywords(config, task.level)).eval()
        with torch.no_grad():
            out = model_outputs(model, batch)
        assert out.std() > 1e-3, (host, out.flatten())


def test_an_unknown_tier_or_graph_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="unknown tier"):
        load_protocol("huge")
    text = (REPO / "experiments" / "leaderboard" / "protocol.yaml").read_text()
    (tmp_path / "p.yaml").write_text(text.replace("          texas: {splits: [0]}", "          nowhere: {}"))
    with pytest.raises(ValueError, match="unknown graph 'nowhere'"):
        load_protocol("quick", tmp_path / "p.yaml")
