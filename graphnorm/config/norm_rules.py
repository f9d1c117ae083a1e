"""The run config's rules on its norm: the norm exists, its keywords are known and valid (it is built once, on
the meta device), and the model can run it (:func:`unsupported_norm_reason`, which a sweep also uses to leave such
norms out of ``norm: all``).

``config`` below is a :class:`~graphnorm.config.RunConfig`, its defaults ``type(config)()`` (the module that
defines it imports these rules).
"""

from __future__ import annotations

from typing import Any

from graphnorm.config.meta_device import construction_error
from graphnorm.config.value_types import check_keyword_types, shown


def check_norm_rules(config: Any) -> None:
    """The norm exists, its keywords are known and valid (it is built once, on the meta device), and it can run on
    the model."""
    from graphnorm.norms import build_norm, norm_class, norm_keywords

    norm_class(config.norm)  # unknown norm -> ValueError listing the valid ones
    valid = norm_keywords(config.norm)
    unknown = sorted(set(config.norm_kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown norm_kwargs {shown(unknown)} for norm {config.norm!r}; valid: {', '.join(valid)}")
    check_keyword_types("norm_kwargs", config.norm_kwargs, norm_class(config.norm).__init__)
    error = construction_error(build_norm, config.norm, config.hidden_channels, **config.norm_kwargs)
    if error is not None:
        where = f"norm {config.norm!r} (hidden_channels={config.hidden_channels})"
        raise ValueError(f"norm_kwargs for {where} are invalid: {error}")
    reason = unsupported_norm_reason(config)
    if reason is not None:
        raise ValueError(reason)


def unsupported_norm_reason(config: Any) -> str | None:
    """Why ``config.norm`` cannot run on ``config.model`` (one line), or ``None`` when it can.

    Only the model context is judged here (which rows, masks and edges the model hands its norms), not the norm's
    own keyword values; a sweep uses it to leave such norms out of ``norm: all``.
    """
    norm = config.norm.lower() if isinstance(config.norm, str) else config.norm
    if norm != "sepnorm":
        return None
    if not has_token_rows(config):
        return f"sepnorm needs graph-token rows: {token_rows_hint(config)}"
    norm_kwargs = config.norm_kwargs if isinstance(config.norm_kwargs, dict) else {}
    token_kwargs = norm_kwargs.get("token_kwargs") or {}
    if (
        isinstance(norm_kwargs.get("token_norm"), str)
        and norm_kwargs["token_norm"].lower() == "contranorm"
        and isinstance(token_kwargs, dict)
        and token_kwargs.get("exclude_neighbors", True)
    ):
        # SepNorm hands its token norm the token rows alone, without edges (tokens have no neighbours).
        return "sepnorm's token rows have no edges: token_norm=contranorm needs token_kwargs exclude_neighbors=false"
    return None


def has_token_rows(config: Any) -> bool:
    """Whether ``config.model`` hands its norms graph-token rows in this run (as its registration declares); an
    unknown model has none."""
    from graphnorm.models import available_models, model_spec

    return config.model in available_models() and model_spec(config.model).has_token_rows(config)


def token_rows_hint(config: Any) -> str:
    """How to get graph-token rows: the models that always have them, or the default model with a virtual node."""
    from graphnorm.models import available_models, model_spec

    always = " or ".join(f"model={name}" for name in available_models() if model_spec(name).token_rows)
    return f"use {always}, or model={type(config)().model} with virtual_node=true on a graph-level dataset"
