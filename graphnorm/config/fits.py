"""Whether training a run config's model fits this machine's memory (:func:`check_model_fits`), estimated from its
parameters alone (:func:`model_parameters`, counted on the meta device) at :data:`TRAINING_BYTES_PER_PARAMETER`
each: a width and depth far beyond the machine fail at validation, not after building layer upon layer.
"""

from __future__ import annotations

from typing import Any

from graphnorm.config.meta_device import parameter_count
from graphnorm.config.model_rules import model_keywords
from graphnorm.config.value_types import shown

# Bytes a parameter takes in training: its float32 weight, gradient and Adam's two moments.
TRAINING_BYTES_PER_PARAMETER = 16


def model_parameters(config: Any) -> int | None:
    """About how many parameters (and buffer entries) ``config``'s model has on a one-feature task, counted on the
    meta device (nothing allocated); ``None`` if it cannot be built so. A model deeper than four layers is counted
    at three and four and extrapolated: each layer between the first and the last is the same size."""
    from graphnorm.models import model_spec

    spec = model_spec(config.model)
    accepted = spec.parameters()
    keywords = {**model_keywords(config, "node" if config.is_node_level else "graph"), "norm": "none"}
    keywords["norm_kwargs"] = {}  # a norm's few weights per channel do not matter here
    keywords = {key: value for key, value in keywords.items() if key in accepted}
    depth = keywords.pop("num_layers", None)
    if depth is None or depth <= 4:
        return parameter_count(config.model, keywords, depth)
    three, four = parameter_count(config.model, keywords, 3), parameter_count(config.model, keywords, 4)
    return None if three is None or four is None else three + (four - three) * (depth - 3)


def check_model_fits(config: Any) -> None:
    """``ValueError`` (a :class:`graphnorm.memory.InsufficientMemoryError`) when training the model takes more
    memory than this machine has, counting only its parameters (:data:`TRAINING_BYTES_PER_PARAMETER` each): a width
    and depth far beyond the machine fail here, not after building layer upon layer. Runs on CUDA are not judged."""
    import torch

    from graphnorm.memory import check_fits

    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        return
    from graphnorm.models import model_spec

    parameters = model_parameters(config)
    if parameters is None:
        return
    sizes = [f"{key}={getattr(config, key)}" for key in ("num_layers", "hidden_channels", "num_heads")]
    sizes = sizes[:2] + sizes[2:] * ("num_heads" in model_spec(config.model).parameters())
    sizes += [f"model_kwargs={shown(config.model_kwargs)}"] * bool(config.model_kwargs)
    check_fits(
        parameters * TRAINING_BYTES_PER_PARAMETER,
        f"training model={config.model!r} with {', '.join(sizes)} (about {parameters:.3g} parameters, "
        f"{TRAINING_BYTES_PER_PARAMETER} bytes each with gradients and Adam's moments)",
        "lower its sizes",
    )
