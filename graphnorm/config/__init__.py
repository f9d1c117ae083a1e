"""One run's configuration: :class:`RunConfig`, with its run id and key-value overrides
(:mod:`~graphnorm.config.run_config`), shared by training, sweeps and the CLI.

Unknown keys and impossible values are errors *before* anything runs: :meth:`RunConfig.validate` raises a one-line
``ValueError`` naming the key, for types (:mod:`~graphnorm.config.value_types`), choices and ranges
(:mod:`~graphnorm.config.ranges`), the rules between keys (:mod:`~graphnorm.config.rules`), the model's and the
norm's own rules, from their registrations (:mod:`~graphnorm.config.model_rules`,
:mod:`~graphnorm.config.norm_rules`), and a model whose training outgrows this machine's memory
(:mod:`~graphnorm.config.fits`); models and norms are judged by building them on the meta device
(:mod:`~graphnorm.config.meta_device`). Values are quoted cut short (:func:`shown`), never expanded in full. Every
public name of these modules is importable from ``graphnorm.config``.
"""

from __future__ import annotations

from graphnorm.config.fits import TRAINING_BYTES_PER_PARAMETER, check_model_fits, model_parameters
from graphnorm.config.meta_device import META_TASK_ARGUMENTS, construction_error, one_line, parameter_count
from graphnorm.config.model_rules import (
    MODEL_CONFIG_KEYS,
    check_model_kwargs,
    check_model_rules,
    meta_arguments,
    model_keywords,
)
from graphnorm.config.norm_rules import check_norm_rules, has_token_rows, token_rows_hint, unsupported_norm_reason
from graphnorm.config.ranges import (
    DEVICES,
    EVAL_NODES,
    FEATURE_NORMS,
    MAX_SEED,
    MAX_SIZES,
    OPTIMIZERS,
    SCHEDULERS,
    check_choices,
    check_ranges,
    check_size,
)
from graphnorm.config.rules import (
    check_dataset_kwargs,
    check_dataset_rules,
    check_device_available,
    check_schedule_rules,
    check_split,
)
from graphnorm.config.run_config import (
    NOT_HASHED,
    RunConfig,
    apply_overrides,
    config_run_id,
    dataset_identity,
    parse_override,
)
from graphnorm.config.value_types import (
    MAX_INT,
    MAX_VALUE_ITEMS,
    SHOWN_CHARS,
    YAML_STRING_NUMBER,
    annotations,
    check_keyword_types,
    check_types,
    check_value_size,
    check_value_type,
    describe,
    matches,
    shown,
    type_hint,
)

__all__ = [
    # run_config
    "RunConfig",
    "NOT_HASHED",
    "config_run_id",
    "dataset_identity",
    "parse_override",
    "apply_overrides",
    # value_types
    "MAX_INT",
    "MAX_VALUE_ITEMS",
    "SHOWN_CHARS",
    "YAML_STRING_NUMBER",
    "annotations",
    "check_keyword_types",
    "check_types",
    "check_value_size",
    "check_value_type",
    "describe",
    "matches",
    "shown",
    "type_hint",
    # ranges
    "DEVICES",
    "EVAL_NODES",
    "FEATURE_NORMS",
    "MAX_SEED",
    "MAX_SIZES",
    "OPTIMIZERS",
    "SCHEDULERS",
    "check_choices",
    "check_ranges",
    "check_size",
    # rules
    "check_dataset_kwargs",
    "check_dataset_rules",
    "check_device_available",
    "check_schedule_rules",
    "check_split",
    # model_rules
    "MODEL_CONFIG_KEYS",
    "check_model_kwargs",
    "check_model_rules",
    "meta_arguments",
    "model_keywords",
    # norm_rules
    "check_norm_rules",
    "has_token_rows",
    "token_rows_hint",
    "unsupported_norm_reason",
    # meta_device
    "META_TASK_ARGUMENTS",
    "construction_error",
    "one_line",
    "parameter_count",
    # fits
    "TRAINING_BYTES_PER_PARAMETER",
    "check_model_fits",
    "model_parameters",
]
