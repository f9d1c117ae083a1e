"""The leaderboard's protocol (``experiments/leaderboard/protocol.yaml``) read for one tier, and the sweep configs it
makes: per (host, graph) one tuning sweep per norm with knobs (every knob combination at the reference depth, on the
first replicates) and one grid sweep (every runnable norm x depth x replicate, the chosen knobs fixed).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphnorm.files import load_yaml_file

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = REPO / "experiments" / "leaderboard" / "protocol.yaml"
TIERS = ("quick", "full")
GRAPH_KEYS = ("family", "seeds", "splits", "norm_kwargs")  # a graph's keys that are not RunConfig keys
RUN_FN = "analysis.leaderboard.timed:run"  # graphnorm.train.run, with the run's CPU seconds in its record
METRIC_DIRECTION = {"acc": True, "rocauc": True, "mae": False}  # higher is better


@dataclass(frozen=True)
class Graph:
    """One graph of a part: its graph family (homophilic, heterophilic, molecular), the RunConfig keys that load it,
    its replicates (run seeds, or standard splits run with seed 0) and per-norm fixed keywords."""

    name: str
    family: str
    config: dict[str, Any]
    replicate_key: str  # "seed" or "split"
    replicates: list[int]
    norm_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Part:
    """A task family's protocol: its training recipe (``base``), hosts, graphs, depths and where knobs are tuned."""

    name: str
    base: dict[str, Any]
    hosts: dict[str, dict[str, Any]]
    graphs: dict[str, Graph]
    depths: list[int]
    reference_depth: int
    tuning_replicates: int
    deep_depths: list[int] = field(default_factory=list)  # these depths run only the first deep_replicates
    deep_replicates: int | None = None

    def replicates_at(self, graph: Graph, depth: int) -> list[int]:
        """The replicates ``graph`` runs at ``depth``: all, or the first ``deep_replicates`` at a deep depth."""
        if depth in self.deep_depths and self.deep_replicates is not None:
            return graph.replicates[: self.deep_replicates]
        return graph.replicates


@dataclass(frozen=True)
class Protocol:
    """The protocol of one tier: its parts, each norm's knob grid and fixed keywords."""

    tier: str
    parts: dict[str, Part]
    knobs: dict[str, dict[str, list[Any]]]
    norm_kwargs: dict[str, dict[str, Any]]
    source: Path = PROTOCOL
    norms: list[str] | None = None  # None: every registered norm

    def settings(self) -> list[tuple[Part, str, Graph]]:
        """Every (part, host, graph) of the tier, in the protocol's order."""
        return [
            (part, host, graph) for part in self.parts.values() for host in part.hosts for graph in part.graphs.values()
        ]


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` on top, mappings merged key by key (a copy)."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict) and key != "dataset_kwargs":
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def load_protocol(tier: str = "full", path: str | Path = PROTOCOL) -> Protocol:
    """The protocol of ``tier``: the full protocol, with the tier's overrides on top (a tier lists the hosts and graphs
    it keeps and may change a part's keys and a graph's keys; its ``knobs`` replace the protocol's). ``ValueError``
    names a bad key."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; valid: {', '.join(TIERS)}")
    raw = load_yaml_file(Path(path), "leaderboard protocol")
    if not isinstance(raw, dict) or not isinstance(raw.get("families"), dict):
        raise ValueError(f"{path}: the protocol needs a 'families' mapping")
    tier_raw = (raw.get("tiers") or {}).get(tier, {}) if tier != "full" else {}
    parts = {}
    for name, family in raw["families"].items():
        override = (tier_raw.get("families") or {}).get(name)
        if tier_raw and override is None:
            continue  # the tier leaves this part out
        parts[name] = read_part(name, family, override or {})
    knobs = tier_raw["knobs"] if "knobs" in tier_raw else raw.get("knobs", {})  # a tier's knob grids replace all
    return Protocol(tier, parts, knobs, raw.get("norm_kwargs", {}), Path(path), raw.get("norms"))


def read_part(name: str, family: dict[str, Any], override: dict[str, Any]) -> Part:
    """One part of the protocol with a tier's ``override`` (its ``hosts`` and ``graphs`` select and change)."""
    keys = ("reference_depth", "tuning_replicates", "depths")
    values = {key: override.get(key, family[key]) for key in keys}
    deep = override.get("deep_replicates", family.get("deep_replicates")) or {}
    if deep and (set(deep) != {"depths", "replicates"} or not isinstance(deep["depths"], list)):
        raise ValueError(f"part {name}: deep_replicates needs a list of depths and a count of replicates; got {deep}")
    base = merged(family.get("base", {}), override.get("base", {}))
    hosts = {host: family["hosts"][host] for host in override.get("hosts", family["hosts"])}
    graph_overrides = override.get("graphs") or dict.fromkeys(family["graphs"], {})
    graphs = {}
    for graph_name, changes in graph_overrides.items():
        if graph_name not in family["graphs"]:
            raise ValueError(f"part {name}: unknown graph {graph_name!r}; valid: {', '.join(family['graphs'])}")
        raw = merged(family["graphs"][graph_name], changes or {})
        if "seeds" in (changes or {}) and "splits" in raw and "splits" not in changes:
            raw.pop("splits")
        if "splits" in (changes or {}) and "seeds" in raw and "seeds" not in changes:
            raw.pop("seeds")
        graphs[graph_name] = read_graph(graph_name, raw)
    if values["reference_depth"] not in values["depths"]:
        raise ValueError(f"part {name}: reference_depth {values['reference_depth']} is not one of {values['depths']}")
    return Part(name, base, hosts, graphs, list(values["depths"]), int(values["reference_depth"]),
                int(values["tuning_replicates"]), list(deep.get("depths", [])),
                int(deep["replicates"]) if deep else None)  # fmt: skip


def read_graph(name: str, raw: dict[str, Any]) -> Graph:
    """A graph of the protocol: replicates are ``splits`` (standard splits, seed 0) or ``seeds``."""
    key = "split" if "splits" in raw else "seed"
    replicates = raw.get("splits" if key == "split" else "seeds") or [0]
    config = {k: v for k, v in raw.items() if k not in GRAPH_KEYS}
    return Graph(name, raw["family"], config, key, [int(r) for r in replicates], raw.get("norm_kwargs") or {})


def setting_config(part: Part, host: str, graph: Graph) -> dict[str, Any]:
    """The RunConfig keys every run of (host, graph) shares."""
    return merged(merged(part.base, part.hosts[host]), graph.config)


def metric_of(graph: Graph) -> tuple[str, str, bool]:
    """(test metric key, validation metric key, higher is better) of the graph's dataset."""
    from graphnorm.data import dataset_spec

    metric = dataset_spec(graph.config["dataset"]).metric
    return f"test_{metric}", f"val_{metric}", METRIC_DIRECTION[metric]


def knob_choices(protocol: Protocol, norm: str) -> list[dict[str, Any]]:
    """Every combination of ``norm``'s knobs (one empty choice when it has none), in the protocol's order."""
    grid = protocol.knobs.get(norm) or {}
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]


def fixed_kwargs(protocol: Protocol, graph: Graph, norm: str) -> dict[str, Any]:
    """``norm``'s fixed keywords on ``graph``: the protocol's, then the graph's."""
    return {**protocol.norm_kwargs.get(norm, {}), **graph.norm_kwargs.get(norm, {})}


def runnable_norms(config: dict[str, Any], only: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The registered norms (or those of ``only``) the setting's host can run (``none`` included), and why each
    other one cannot."""
    from graphnorm.config import RunConfig, unsupported_norm_reason
    from graphnorm.norms import available_norms

    runnable, reasons = [], {}
    for norm in only or available_norms():
        reason = unsupported_norm_reason(RunConfig(**{**config, "norm": norm}))
        if reason is None:
            runnable.append(norm)
        else:
            reasons[norm] = reason
    return runnable, reasons


def setting_name(part: Part, host: str, graph: Graph) -> str:
    """The folder name of a (host, graph) setting's sweeps."""
    return f"{part.name}_{host}_{graph.name}"


def tuning_sweep(protocol: Protocol, part: Part, host: str, graph: Graph, norm: str) -> dict[str, Any]:
    """The sweep that tries every knob combination of ``norm`` at the reference depth on the first replicates."""
    base = setting_config(part, host, graph)
    base.update(norm=norm, num_layers=part.reference_depth)
    fixed = fixed_kwargs(protocol, graph, norm)
    replicates = graph.replicates[: part.tuning_replicates]
    return {
        "name": f"tune_{setting_name(part, host, graph)}_{norm}",
        "metric": metric_of(graph)[1],
        "run_fn": RUN_FN,
        "base": base,
        "grid": {
            graph.replicate_key: replicates,
            "norm_kwargs": [{**fixed, **c} for c in knob_choices(protocol, norm)],
        },
    }


def grid_sweep(part: Part, host: str, graph: Graph, norms: list[str], kwargs: dict[str, dict]) -> dict[str, Any]:
    """The sweep of every norm in ``norms`` at every depth and replicate, ``kwargs[norm]`` its chosen keywords.
    Replicates vary slowest, so a stopped sweep has whole replicates done; the deepest depths first. The replicates
    beyond ``deep_replicates`` at the deep depths are excluded."""
    skipped = graph.replicates[part.deep_replicates :] if part.deep_replicates is not None else []
    exclude = [{"num_layers": part.deep_depths, graph.replicate_key: skipped}] if part.deep_depths and skipped else []
    return {
        "name": f"grid_{setting_name(part, host, graph)}",
        "metric": metric_of(graph)[0],
        "run_fn": RUN_FN,
        "base": setting_config(part, host, graph),
        "grid": {graph.replicate_key: graph.replicates, "norm": norms, "num_layers": sorted(part.depths, reverse=True)},
        "norm_settings": {norm: {"norm_kwargs": kwargs[norm]} for norm in norms if kwargs.get(norm)},
        **({"exclude": exclude} if exclude else {}),
    }
