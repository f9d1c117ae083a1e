"""The run config's rules on its model: the model predicts at the dataset's level, keys another model owns keep
their defaults, the model's own declared rules hold (``check_config`` of its registration:
:mod:`graphnorm.models.registry`), and ``model_kwargs`` are its constructor's keywords, judged by building the model
on the meta device. :func:`model_keywords` is what the config hands the model's constructor.

``config`` below is a :class:`~graphnorm.config.RunConfig`, its defaults ``type(config)()``: the module that defines
it imports these rules, not the other way round.
"""

from __future__ import annotations

from typing import Any

from graphnorm.config.meta_device import META_TASK_ARGUMENTS, construction_error
from graphnorm.config.ranges import MAX_SIZES, check_size
from graphnorm.config.value_types import check_keyword_types, shown

# RunConfig keys a model receives when its constructor has a parameter of that name (readout at graph level only);
# its other constructor keywords come through model_kwargs, and the task's (in/out channels, feature kinds) from the
# dataset (graphnorm.models.registry.TASK_KEYWORDS).
MODEL_CONFIG_KEYS = (
    "num_layers",
    "hidden_channels",
    "num_heads",
    "norm",
    "norm_kwargs",
    "dropout",
    "residual",
    "adjacency",
    "layer_order",
    "shared_layernorm",
    "readout",
    "virtual_node",
)


def check_model_rules(config: Any) -> None:
    """The model predicts at the dataset's level; keys another model owns keep their defaults; then the model's own
    rules (``check_config`` of its registration: :mod:`graphnorm.models.registry`) and its keywords."""
    from graphnorm.data import available_datasets
    from graphnorm.models import available_models, model_spec

    spec = model_spec(config.model)
    level = "node" if config.is_node_level else "graph"
    if level not in spec.levels:
        wanted = spec.levels[0]
        raise ValueError(
            f"model={config.model!r} predicts per {wanted}: use a {wanted}-level dataset "
            f"({', '.join(available_datasets(wanted))}), not dataset={config.dataset!r}"
        )
    defaults = type(config)()
    for other in available_models():
        for key, message in model_spec(other).own_keys.items():
            if other != spec.name and getattr(config, key) != getattr(defaults, key):
                raise ValueError(message)
    if config.drop_large_graphs and config.max_nodes is None:
        raise ValueError("drop_large_graphs needs max_nodes")
    if spec.check_config is not None:
        spec.check_config(config)
    check_model_kwargs(config)


def model_keywords(config: Any, level: str) -> dict[str, Any]:
    """The keywords of ``config.model``'s constructor that the config sets: every :data:`MODEL_CONFIG_KEYS` key the
    constructor takes (``readout`` at graph level only), then ``model_kwargs``. A key the model does not take must
    keep its default (else ``ValueError``: it would be silently ignored)."""
    from graphnorm.models import model_spec

    accepted = model_spec(config.model).keywords()
    defaults = type(config)()
    keywords = {}
    for key in MODEL_CONFIG_KEYS:
        if key == "readout" and level == "node":
            continue
        if key in accepted:
            keywords[key] = getattr(config, key)
        elif getattr(config, key) != getattr(defaults, key):
            raise ValueError(
                f"{key}={shown(getattr(config, key))} is not an option of model {config.model!r}: leave {key} at "
                f"{getattr(defaults, key)!r}"
            )
    return {**keywords, **config.model_kwargs}


def check_model_kwargs(config: Any) -> None:
    """Unknown keys, then value types (from the model constructor's annotations), then the constructor's own checks,
    run on the meta device so that nothing is allocated."""
    from graphnorm.models import model_spec

    spec = model_spec(config.model)
    model_class = spec.factory
    valid = [key for key in spec.keywords() if key not in MODEL_CONFIG_KEYS]
    unknown = sorted(set(config.model_kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown model_kwargs {shown(unknown)} for {config.model}; valid: {', '.join(valid)}")
    check_keyword_types(
        "model_kwargs", config.model_kwargs, model_class.__init__ if isinstance(model_class, type) else model_class
    )
    model_keywords(config, "node" if config.is_node_level else "graph")
    if not config.model_kwargs:  # the config's own keys are checked already
        return
    for key in sorted(config.model_kwargs.keys() & MAX_SIZES.keys()):
        check_size(f"model_kwargs.{key}", config.model_kwargs[key])
    arguments = meta_arguments(config)
    error = construction_error(model_class, **arguments, **config.model_kwargs)
    if error is not None:
        raise ValueError(f"model_kwargs for model {config.model!r} are invalid: {error}")


def meta_arguments(config: Any) -> dict[str, Any]:
    """The smallest model that judges ``model_kwargs``: one layer, no norm (its keywords are checked apart), a
    one-feature task, and the config's width and heads (which the keywords must fit), each where the model's
    constructor takes it."""
    from graphnorm.models import model_spec

    accepted = model_spec(config.model).parameters()
    size = {"num_layers": 1, "norm": "none", "hidden_channels": config.hidden_channels, "num_heads": config.num_heads}
    arguments = {**META_TASK_ARGUMENTS, **size}
    return {key: value for key, value in arguments.items() if key in accepted}
