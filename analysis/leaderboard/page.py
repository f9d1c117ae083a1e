"""The leaderboard page, ``analysis/questions/leaderboard.md`` with its figures ``analysis/figures/leaderboard_*``,
from a tier's tidy table (:mod:`.tables`) and knob choices: the answer per graph family in computed sentences, the
sortable and filterable table of every cell (``docs/javascripts/leaderboard.js`` makes it so on the site), a heat map
of ranks per depth, the critical-difference diagrams, the collapse metrics against the accuracy lost, the protocol.
The full tier's results are shown once committed, else the quick tier's, said so at the top. Text from the data is
escaped where it lands (:mod:`graphnorm.escaping`).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from graphnorm.escaping import markdown_code, markdown_text  # noqa: E402
from graphnorm.files import atomic_write_text, check_output_dir, save_figure  # noqa: E402
from graphnorm.sweep.formatting import significant  # noqa: E402

from .anchors import anchor_rows, load_anchors  # noqa: E402
from .cd_diagram import cd_diagram  # noqa: E402
from .protocol import REPO, Graph, Part, Protocol, load_protocol  # noqa: E402
from .run import RESULTS, read_knobs, results_paths  # noqa: E402
from .statistics import average_ranks, best_per_cell, cell_summary, collapse_predicts_accuracy  # noqa: E402
from .tables import finished_settings, ok_runs, read_runs  # noqa: E402

PAGE = "leaderboard.md"
FIGURE_PREFIX = "leaderboard_"
FAMILIES = ("homophilic", "heterophilic", "molecular")
ANSWER_DEPTHS = (16, 64)  # the depths the answer names, where the grid has them (else its deepest)
CELL = ["family", "graph", "host", "depth", "norm", "metric"]
TABLE_HEADER = ["graph", "family", "host", "depth", "norm", "metric", "mean", "95% CI", "seeds", "rank",
                "best: separated?", "CPU s", "note", "command"]  # fmt: skip
BUILD_COMMAND = "python -m experiments.leaderboard page"


def shown_tier(results: Path, tier: str | None) -> str:
    """The tier to show: ``tier``, else the full tier once its table exists, else the quick tier."""
    if tier is not None:
        return tier
    return "full" if any(results_paths("full", results)[0].glob("*.csv")) else "quick"


def p_value(value: float) -> str:
    """A test's p with two significant digits, or why there is none (a single setting, no spread)."""
    return "n/a" if value is None or math.isnan(value) else significant(float(value), 2)


def number(value: float, digits: int = 3) -> str:
    """A number with three significant digits, '' for NaN or None."""
    return (
        "" if value is None or (isinstance(value, float) and math.isnan(value)) else significant(float(value), digits)
    )


def cell_command(tier: str, row: pd.Series) -> str:
    """The command that re-runs a cell and compares it with the recorded values."""
    return (
        f"python -m experiments.leaderboard cell --tier {tier} --host {row['host']} --graph {row['graph']} "
        f"--norm {row['norm']} --depth {int(row['depth'])}"
    )


def cell_notes(runs: pd.DataFrame) -> pd.Series:
    """Per cell: why it has fewer results than runs (a norm the host cannot run, failed or missing runs), and the
    norm's form where it departs from the reference one (ContraNorm's random features)."""

    def note(group: pd.DataFrame) -> str:
        parts = []
        for status, rows in group.groupby("status", sort=True):
            if status == "ok":
                continue
            reason = rows["reason"].iloc[0]
            parts.append(f"{len(rows)} of {len(group)} runs {status}: {reason}" if status != "cannot run" else reason)
        variants = sorted(set(group["variant"]) - {""})
        return "; ".join([*variants, *parts])

    return runs.groupby(CELL, sort=False)[["status", "reason", "variant"]].apply(note).rename("note")


def cell_table(runs: pd.DataFrame, tier: str) -> pd.DataFrame:
    """One row per cell: the summary statistics, its rank among the norms of its (graph, host, depth), whether it
    is the best with a paired test's verdict, its CPU seconds, its note and command."""
    every = runs.groupby(CELL, sort=False).agg(cpu_s=("cpu_s", "sum"), runs=("seed", "size")).join(cell_notes(runs))
    ok = ok_runs(runs)
    table = every.reset_index()
    if not ok.empty:
        table = table.merge(cell_summary(ok), on=CELL, how="left")
        sign = np.where(table["higher_is_better"].fillna(True).astype(bool), -1.0, 1.0)
        table["rank"] = (table.assign(key=sign * table["mean"]).groupby(CELL[:4] + ["metric"])["key"]
                         .rank(method="average"))  # fmt: skip
        group = ["family", "graph", "host", "depth", "metric"]
        best = best_per_cell(ok).rename(columns={"note": "best_note"})[[*group, "best", "p", "separated", "best_note"]]
        table = table.merge(best, on=group, how="left")
    for column in ("mean", "ci95", "n", "rank", "best", "separated", "p"):
        if column not in table.columns:
            table[column] = math.nan
    return table.assign(command=[cell_command(tier, row) for _, row in table.iterrows()])


def verdict(row: pd.Series) -> str:
    """The best column: on the best norm's row, whether a paired t-test separates it from the runner-up."""
    if row.get("best") != row["norm"] or pd.isna(row.get("mean")):
        return ""
    p = row.get("p")
    if not isinstance(p, float) or math.isnan(p):
        return str(row.get("best_note") or "no test")
    return f"{'yes' if bool(row.get('separated')) else 'no'}, p = {p_value(p)}"


def table_lines(table: pd.DataFrame) -> list[str]:
    """The cells as one Markdown table, every text cell escaped, inside the block the page's script sorts."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    for _, row in table.sort_values(["family", "graph", "host", "depth", "rank", "norm"]).iterrows():
        ci = number(row["ci95"])  # below: a rank is 1, or 1.5 for a tie
        cells = [
            markdown_text(row["graph"]), markdown_text(row["family"]), markdown_text(row["host"]),
            str(int(row["depth"])), markdown_text(row["norm"]), markdown_text(row["metric"]), number(row["mean"]),
            f"± {ci}" if ci else "", str(int(row["n"])) if not pd.isna(row["n"]) else "0",
            "" if pd.isna(row["rank"]) else f"{float(row['rank']):g}", markdown_text(verdict(row)),
            number(row["cpu_s"]), markdown_text(row["note"]),
            markdown_code(row["command"]),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return ['<div class="gn-leaderboard" markdown="1">', "", *lines, "", "</div>", ""]


def answer_depths(depths: list[int]) -> list[int]:
    """The depths the answer names: 16 and 64 where the grid has them, else its deepest."""
    return [d for d in ANSWER_DEPTHS if d in depths] or [max(depths)]


def family_answer(summary: pd.DataFrame, best: pd.DataFrame, family: str, depth: int, norms: set[str]) -> str:
    """One sentence: the norm with the best average rank on ``family``'s settings at ``depth``, the norms Nemenyi's
    test cannot tell from it, and in how many settings it is the best norm, separated by a paired t-test; ``norms``:
    every norm of the table there, so that those without a result are named too."""
    at = summary[(summary["family"] == family) & (summary["depth"] == depth) & summary["mean"].notna()]
    if at.empty:
        return f"At {depth} layers on {family} graphs: no results yet."
    result = average_ranks(summary[summary["family"] == family], depth)
    if result.k == 0:
        return f"At {depth} layers on {family} graphs: no norm has a result in every setting, so none is ranked."
    top, rank = result.average.iloc[0]["norm"], float(result.average.iloc[0]["avg_rank"])
    close = [n for n, r in zip(result.average["norm"][1:], result.average["avg_rank"][1:]) if r - rank < result.cd]
    settings = best[(best["family"] == family) & (best["depth"] == depth)]
    wins = settings[settings["best"] == top]
    text = (
        f"At {depth} layers on {family} graphs, {markdown_code(top)} has the best average rank, {number(rank)} of "
        f"{result.k} norms over {result.n} graph-host setting{'s' * (result.n != 1)} "
        f"(Friedman p = {p_value(result.p)})"
    )
    if result.n >= 2 and not math.isnan(result.cd):
        names = ", ".join(markdown_code(n) for n in close) or "none"
        text += f"; within Nemenyi's critical difference {number(result.cd)} of it, so not separated from it: {names}"
    text += (
        f". It has the best mean in {len(wins)} of these {len(settings)} settings, separated from the runner-up by a "
        f"paired t-test over seeds (p < 0.05) in {int(wins['separated'].sum())}."
    )
    unranked = sorted(set(norms) - set(result.average["norm"]))
    if unranked:
        text += f" Not ranked (no result in every setting): {', '.join(markdown_code(n) for n in unranked)}."
    return text


def collapse_answer(ok: pd.DataFrame) -> list[str]:
    """Which last-layer collapse metric best predicts the metric lost with depth: Spearman's rho per family, then
    over every cell of a metric that several families share (accuracy: homophilic and heterophilic together)."""
    groups = list(collapse_predicts_accuracy(ok, by="family").groupby("family", sort=True))
    shared = ok.groupby("metric")["family"].nunique()
    for metric in shared[shared > 1].index:
        table = collapse_predicts_accuracy(ok[ok["metric"] == metric])
        groups.append((f"every {metric} cell", table))
    lines = []
    for family, group in groups:
        top = group[group["best"]]
        if top.empty:
            lines.append(f"- {markdown_text(family)}: too few cells deeper than the shallowest for a correlation.")
            continue
        first = top.iloc[0]
        others = "; ".join(
            f"{markdown_code(r.collapse_metric)} {number(r.rho)}" for r in group.itertuples() if not r.best
        )
        lines.append(
            f"- {markdown_text(family)}: {markdown_code(first['collapse_metric'])}, Spearman's rho = "
            f"{number(first['rho'])} (p = {p_value(first['p'])}, {int(first['n'])} cells)"
            + (f"; the others: {others}" if others else "")
            + "."
        )
    return lines


def save_png(figure: Figure, path: Path) -> None:
    """PNG without a software stamp, so the same data give the same bytes."""
    save_figure(figure, path, "a leaderboard figure", dpi=80, bbox_inches="tight", metadata={"Software": None})


def rank_heatmap(table: pd.DataFrame, path: Path) -> bool:
    """Norm x (graph, host) ranks, one panel per depth (1 the best; blank: no result); False when nothing to draw."""
    ranked = table[table["rank"].notna()].assign(setting=lambda t: t["graph"] + " / " + t["host"])
    if ranked.empty:
        return False
    depths = sorted(ranked["depth"].unique())
    norms = sorted(table["norm"].unique())
    settings = sorted(ranked["setting"].unique())
    figure = Figure(figsize=(1.2 + len(depths) * (0.9 + 0.28 * len(settings)), 1.5 + 0.28 * len(norms)))
    axes = figure.subplots(1, len(depths), squeeze=False)[0]
    for axis, depth in zip(axes, depths):
        grid = ranked[ranked["depth"] == depth].pivot_table(index="norm", columns="setting", values="rank")
        grid = grid.reindex(index=norms, columns=settings)
        image = axis.imshow(grid.to_numpy(float), cmap="viridis_r", vmin=1, vmax=len(norms), aspect="auto")
        axis.set_title(f"{int(depth)} layers", fontsize=9)
        axis.set_xticks(range(len(settings)), settings, rotation=90, fontsize=7)
        axis.set_yticks(range(len(norms)), norms if axis is axes[0] else [""] * len(norms), fontsize=7)
    figure.colorbar(image, ax=list(axes), label="rank (1 = best)", shrink=0.8)
    save_png(figure, path)
    return True


def cd_figures(summary: pd.DataFrame, figures: Path, prefix: str, runs: pd.DataFrame) -> list[str]:
    """One critical-difference diagram per depth over every setting, with its caption (``runs``: the whole table,
    whose norms without a result there are named as left out)."""
    lines = []
    for depth in sorted(summary["depth"].unique()):
        result = average_ranks(summary, int(depth))
        if result.k < 2:
            continue
        name = f"{FIGURE_PREFIX}cd_{int(depth)}.png"
        cd_diagram(result.average, result.cd, figures / name, title=f"{int(depth)} layers")
        left_out = sorted(set(runs.loc[runs["depth"] == depth, "norm"]) - set(result.average["norm"]))
        dropped = ", ".join(markdown_code(n) for n in left_out) or "none"
        lines += [
            f"![critical-difference diagram at {int(depth)} layers]({prefix}{name})",
            "",
            f"{int(depth)} layers: {result.k} norms over {result.n} settings; Friedman p = {p_value(result.p)}, "
            f"Iman-Davenport p = {p_value(result.p_ff)}; Nemenyi CD = {number(result.cd)} at alpha = 0.05 (a bar "
            f"joins norms not separated). Left out for missing a setting: {dropped}.",
            "",
        ]
    return lines


def settings_text(values: dict) -> str:
    """A mapping of config keys as ``key: value`` code spans, comma-separated."""
    return ", ".join(markdown_code(f"{key}: {value}") for key, value in values.items()) or "none"


def graph_text(graph: Graph) -> str:
    """A graph of the protocol in words: its family, replicates and what it sets beyond its name (its dataset when
    named otherwise, a subset, a norm's keywords)."""
    settings = {k: v for k, v in graph.config.items() if not (k == "dataset" and v == graph.name)}
    settings.update({"norm_kwargs": graph.norm_kwargs} if graph.norm_kwargs else {})
    replicates = f"{len(graph.replicates)} {graph.replicate_key}{'s' if len(graph.replicates) != 1 else ''}"
    extra = f"; {settings_text(settings)}" if settings else ""
    return f"{markdown_text(graph.name)} ({markdown_text(graph.family)}, {replicates}{extra})"


def protocol_lines(protocol: Protocol, knobs: pd.DataFrame) -> list[str]:
    """The protocol as stated in ``experiments/leaderboard/protocol.yaml``, and the knobs chosen on validation."""
    lines = [
        "## Protocol" if protocol.tier == "full" else f"## The {protocol.tier} tier's protocol",
        "",
        "One training recipe per task family for every norm and host; each norm's own knobs are chosen on the "
        "validation metric at the family's reference depth, per host and graph, then fixed for every depth; the "
        "test metric is read at the best-validation epoch; nothing is tuned on test. A seed is a run seed, or one "
        "of the standard geom-gcn splits (run seed 0). Stated once in `experiments/leaderboard/protocol.yaml`.",
        "",
    ]
    if protocol.tier != "full":
        lines[2:] = ["The full protocol above, changed as follows (the numbers on this page come from it):", ""]
    for part in protocol.parts.values():
        graphs = "; ".join(graph_text(g) for g in part.graphs.values())
        hosts = "; ".join(f"{markdown_text(h)} ({settings_text(v)})" for h, v in part.hosts.items())
        lines += [
            f"### {markdown_text(part.name)} level{'' if protocol.tier == 'full' else f' ({protocol.tier} tier)'}",
            "",
            f"- training: {settings_text(part.base)}",
            f"- hosts: {hosts}",
            f"- graphs: {graphs}",
            f"- depths: {', '.join(str(d) for d in part.depths)}{deep_text(part)}; knobs tuned at "
            f"{part.reference_depth} layers on the first {part.tuning_replicates} seed(s)",
            "",
        ]
    grids = [f"{markdown_code(n)} ({settings_text(k)})" for n, k in protocol.knobs.items()]
    lines += [f"Knob grids: {'; '.join(grids) or 'none'}; fixed keywords: {settings_text(protocol.norm_kwargs)}.", ""]
    if not knobs.empty:
        chosen = knobs[knobs["chosen"] & (knobs["runs"] > 0)]  # a setting not tuned yet has no choice to show
        rows = ["| part | host | graph | norm | chosen keywords | validation |", "|---|---|---|---|---|---|"]
        rows += [
            f"| {markdown_text(r.part)} | {markdown_text(r.host)} | {markdown_text(r.graph)} | {markdown_text(r.norm)} "
            f"| {markdown_code(r.norm_kwargs)} | {number(r.val_mean)} |"
            for r in chosen.itertuples()
        ]
        lines += ['<details class="note" markdown="1">', "<summary>Knobs chosen on validation</summary>", "", *rows,
                  "", "</details>", ""]  # fmt: skip
    return lines


def deep_text(part: Part) -> str:
    """The budget's cut in words: which depths run only the first replicates, or ''."""
    deep = [d for d in part.deep_depths if d in part.depths]
    if not deep or part.deep_replicates is None:
        return ""
    return f" (at {', '.join(str(d) for d in deep)} layers only the first {part.deep_replicates} replicates)"


def budget_lines(budget: pd.DataFrame) -> list[str]:
    """The CPU budget per part: estimated before running, spent so far (tuning + grid), runs ended of planned."""
    if budget.empty:
        return []
    rows = ["| part | estimated CPU-hours | spent: tuning + grid = total | runs ended / planned |", "|---|---|---|---|"]
    for r in budget.itertuples():
        spent = f"{number(r.spent_tuning_cpu_h)} + {number(r.spent_grid_cpu_h)} = {number(r.spent_cpu_h)}"
        estimated = number(r.estimated_cpu_h)  # blank without timings
        rows.append(f"| {markdown_text(r.part)} | {estimated} | {spent} | {r.runs_ended} / {r.runs_planned} |")
    return ["## CPU budget", "",
            "CPU-hours of one torch thread per run: estimated before running (`python -m experiments.leaderboard "
            "estimate`) and spent so far, from each run's recorded CPU time.", "", *rows, ""]  # fmt: skip


def anchor_lines(runs: pd.DataFrame) -> list[str]:
    """The section that holds our cells against the papers' published numbers (:mod:`.anchors`)."""
    table = anchor_rows(runs, load_anchors())
    rows = ["| paper | cell | published | ours (mean ± 95% CI, seeds) | verdict | protocol differences | source |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in table.itertuples():
        layers = "" if pd.isna(r.depth) else f"{int(r.depth)} layers / "
        cell = f"{r.host} / {r.graph} / {layers}{r.norm}"
        ours = "" if r.n == 0 else f"{number(r.mean)} ± {number(r.ci95) or '?'} ({r.n})"
        published = "" if pd.isna(r.published) else f"{float(r.published):g}"  # as the paper gives it
        texts = [markdown_text(t) for t in (r.paper, cell, published, ours, r.verdict, r.differences, r.source)]
        rows.append("| " + " | ".join(texts) + " |")
    return ["## Held against the papers", "",
            "Published numbers beside our cell (`experiments/leaderboard/anchors.yaml`, each read in the source "
            "named); inside our interval or not. A paper's protocol differs from ours as said, so a gap is expected "
            "where the paper trains longer or wider.", "", *rows, ""]  # fmt: skip


def intro_lines(tier: str, runs: pd.DataFrame) -> list[str]:
    """What the page is, which tier it shows, how to rebuild and re-run it, and where the raw results are."""
    counts = runs["status"].value_counts()
    status = ", ".join(f"{int(n)} {markdown_text(s)}" for s, n in counts.items())
    lines = [
        "# Norm leaderboard",
        "",
        "Which norm, at which depth, on which graph: every registered norm (and none) in deep hosts under one "
        "protocol per task family. Generated: do not edit; rebuilt from the tidy table "
        f"`analysis/leaderboard/results/{tier}/` (one row per run, one CSV per part and host) by `{BUILD_COMMAND}` "
        "(also run by `python analysis/build.py`); the whole leaderboard runs or resumes with "
        f"`python -m experiments.leaderboard run --tier {tier}`.",
        "",
        f"Runs in this table: {len(runs)} ({status}).",
        "",
    ]
    pending = runs[runs["status"] == "not run"]
    if len(pending):
        groups = runs.groupby(["graph", "host"], sort=False)["status"].apply(lambda s: bool((s != "not run").all()))
        done = [f"{markdown_text(g)}/{markdown_text(h)}" for (g, h), finished in groups.items() if finished]
        lines += [
            '!!! note "Under way"',
            f"    {int(runs['status'].isin(['ok', 'failed']).sum())} of "
            f"{int((runs['status'] != 'cannot run').sum())} runs of this tier have ended; the rest are marked "
            "*not run yet*. The answers, ranks and diagrams below compare norms only at the (graph, host, depth) "
            "groups whose runs have all ended. Finished graph/host settings: " + (", ".join(done) or "none") + ".",
            "",
        ]
    if tier == "quick":
        lines += [
            '!!! warning "Quick tier"',
            "    This page shows the quick tier: a few graphs, every norm, three depths, one seed and a few epochs, "
            "run to check the pipeline end to end. Its numbers say nothing about the norms; the full grid's "
            "results replace them once committed.",
            "",
        ]
    return lines


def clear_figures(figures: Path) -> None:
    """The folder of figures, without the leaderboard's old ones (the other pages' figures stay)."""
    check_output_dir(figures, "the results page's figures folder")
    for old in figures.glob(f"{FIGURE_PREFIX}*.png"):
        old.unlink()


def page_lines(
    tier: str, runs: pd.DataFrame, knobs: pd.DataFrame, protocol: Protocol, figures: Path, budget: pd.DataFrame
) -> list[str]:
    """The page's Markdown, its figures written into ``figures``."""
    ok, prefix = finished_settings(runs), "../figures/"
    lines = intro_lines(tier, runs)
    table = cell_table(runs, tier)
    if ok.empty:
        lines += ["No run has finished yet.", ""]
    else:
        summary, best = cell_summary(ok), best_per_cell(ok)
        lines += ["## Which norm at depth L", ""]
        for family in [f for f in FAMILIES if f in set(runs["family"])]:
            family_depths = sorted(set(runs.loc[runs["family"] == family, "depth"]))
            for depth in answer_depths([int(d) for d in family_depths]):
                there = runs[(runs["family"] == family) & (runs["depth"] == depth)]
                lines += [f"- {family_answer(summary, best, family, depth, set(there['norm']))}"]
        lines += ["", "## Which collapse metric predicts the loss with depth", ""]
        lines += ["Spearman's rho between each last-layer collapse metric and the metric lost from the shallowest "
                  "depth, over every cell deeper than it, per family and over every cell of a metric the families "
                  "share (the strongest named first):", "",
                  *collapse_answer(ok), ""]  # fmt: skip
        lines += ["## Ranks by depth", ""]
        if rank_heatmap(table, figures / f"{FIGURE_PREFIX}ranks.png"):
            lines += [f"![ranks of the norms per graph and host at every depth]({prefix}{FIGURE_PREFIX}ranks.png)",
                      "", "Rank of each norm's mean among the norms of its graph and host at that depth (1 the best; "
                      "blank: no result).", ""]  # fmt: skip
        lines += ["## Critical-difference diagrams", "", *cd_figures(summary, figures, prefix, runs)]
    lines += anchor_lines(runs)
    lines += budget_lines(budget)
    lines += [
        "## Every cell",
        "",
        "Sort by a column's heading, filter by words (all must appear in a row). Mean and 95% Student-t interval "
        "over seeds; rank among the norms of the same graph, host and depth; best: on the row of the best mean, "
        "whether a paired t-test over seeds separates it from the runner-up (p < 0.05); CPU s: the CPU seconds of "
        "the cell's runs together, one torch thread each; the command re-runs the cell and compares it with these "
        "values (the same on a CPU of the kind that recorded them, AVX2 or AVX512; another kind rounds differently, "
        "which training can carry into the fourth digit).",
        "",
        *table_lines(table),
    ]
    if protocol.tier == "full":
        return [*lines, *protocol_lines(protocol, knobs)]
    full = load_protocol("full", protocol.source)
    return [*lines, *protocol_lines(full, pd.DataFrame()), *protocol_lines(protocol, knobs)]


def build_leaderboard(out_dir: Path = REPO / "analysis", results: Path = RESULTS, tier: str | None = None,
                      protocol_path: Path | None = None) -> Path:  # fmt: skip
    """Write ``out_dir/questions/leaderboard.md`` and its figures from the tier's committed results (the full
    tier once committed, else the quick one); returns the page's path."""
    from .protocol import PROTOCOL

    tier = shown_tier(Path(results), tier)
    table_path, knobs_path = results_paths(tier, Path(results))
    runs = read_runs(table_path)
    knobs = read_knobs(knobs_path)
    protocol = load_protocol(tier, protocol_path or PROTOCOL)
    figures = Path(out_dir) / "figures"
    clear_figures(figures)
    budget_path = Path(results) / f"{tier}_budget.csv"
    budget = pd.read_csv(budget_path) if budget_path.exists() else pd.DataFrame()
    lines = page_lines(tier, runs, knobs, protocol, figures, budget)
    page = check_output_dir(Path(out_dir) / "questions", "the results' question pages") / PAGE
    atomic_write_text(page, "\n".join(lines).rstrip() + "\n", "the leaderboard page")
    return page
