"""One run's configuration: a plain dataclass (nanoGPT style), shared by training, sweeps and the CLI.

A sweep expands a YAML grid into many ``RunConfig``s; each is executed by ``graphnorm.train.run``.
Unknown keys and impossible values are errors *before* anything runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunConfig:
    # --- data ---
    dataset: str = "cora"  # cora | citeseer | zinc | molhiv
    data_root: str | None = None  # None: $GRAPHNORM_DATA, else the user cache
    # --- model ---
    model: str = "gcn"  # gcn | graphormer
    num_layers: int = 2
    hidden_channels: int = 64
    norm: str = "none"
    norm_kwargs: dict[str, Any] = field(default_factory=dict)
    dropout: float = 0.5
    residual: bool = False
    # --- training ---
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    batch_size: int = 128
    seed: int = 0

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """Build and validate from a mapping; unknown keys raise ``ValueError`` listing the valid ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown}; valid keys: {', '.join(cls.field_names())}")
        config = cls(**values)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first impossible value."""
        from graphnorm.norms import norm_class, norm_keywords

        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.hidden_channels < 1:
            raise ValueError(f"hidden_channels must be >= 1, got {self.hidden_channels}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        norm_class(self.norm)  # unknown norm -> ValueError listing the valid ones
        unknown = sorted(set(self.norm_kwargs) - set(norm_keywords(self.norm)))
        if unknown:
            raise ValueError(
                f"unknown norm_kwargs {unknown} for norm {self.norm!r}; valid: {', '.join(norm_keywords(self.norm))}"
            )
