"""What a partition must satisfy to be published: the registry's quality declarations.

Per feature (``quality:`` next to its kind and dtype)::

    - name: user_ctr_7d
      kind: dense
      quality: {range: [0, 1], min_coverage: 0.8}   # every value in [0, 1]; at least 80% of rows have one
    - name: user_interest_topic_ids
      kind: sparse
      quality: {max_length: 5}                      # no list longer than 5 ids

Per dataset (``quality:`` at the top of the registry file), overriding the defaults below::

    quality: {min_coverage: 0.5, history_days: 7, row_count_tolerance: 0.5, positive_rate_tolerance: 0.5,
              min_expected_positives: 30, max_bad_fraction: 0.01}

``warehouse/quality.py`` turns these into a Great Expectations suite.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeatureQuality(_Frozen):
    range: tuple[float, float] | None = None  # dense: every non-null value within [lo, hi]
    max_length: int | None = Field(default=None, gt=0)  # sparse: no list longer
    min_coverage: float | None = Field(default=None, ge=0, le=1)  # share of rows with a value; None: the dataset's

    @model_validator(mode="after")
    def _ordered(self) -> FeatureQuality:
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"quality.range {list(self.range)} is not [lo, hi] with lo <= hi")
        return self


class DatasetQuality(_Frozen):
    min_coverage: float = Field(default=0.0, ge=0, le=1)  # for every populated feature without its own
    history_days: int = Field(default=7, gt=0)  # the published partitions before ds that bound the next one
    row_count_tolerance: float = Field(default=0.5, ge=0)  # rows within mean x [1 - t, 1 + t] of the history
    positive_rate_tolerance: float = Field(default=0.5, ge=0)  # each label's rate likewise, when the history
    min_expected_positives: int = Field(default=30, ge=0)  # expects this many positives: fewer are Poisson noise
    min_rows: int = Field(default=1, ge=0)
    max_bad_fraction: float = Field(default=0.01, ge=0, le=1)  # of a ds's impression or label records; more: refused
