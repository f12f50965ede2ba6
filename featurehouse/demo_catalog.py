"""The demo's schema evolution and catalog questions.

The demo replays the registry's history: the registry file of each day is the final
file (``schemas/datasets/<dataset>.yaml``) as it stood that day. A feature appears
on its ``added_ds``, a deprecation on its ``deprecated_ds``, and a rename on the
demo's fourth day (registry files record no rename date). Each day's file is written
under ``<home>/registry``, where the jobs read it, as a user would edit it.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import yaml

#: (question, SQL): what the README shows, run by the demo over the catalog.
CATALOG_QUESTIONS: tuple[tuple[str, str], ...] = (
    (
        "Which features of ads have no training job read in the last 30 days?",
        """SELECT status, count(*) AS features, min(feature) AS first, max(feature) AS last
FROM featurehouse_catalog.unused_features
WHERE dataset = 'ads'
GROUP BY status ORDER BY status""",
    ),
    (
        "Coverage over the last week of the features that changed (added day 3, deprecated day 5, derived day 6)?",
        """SELECT ds,
       max(CASE WHEN feature = 'item_ctr_3d'             THEN round(coverage, 3) END) AS item_ctr_3d,
       max(CASE WHEN feature = 'predicted_ctr_legacy'    THEN round(coverage, 3) END) AS predicted_ctr_legacy,
       max(CASE WHEN feature = 'user_topic_x_item_topic' THEN round(coverage, 3) END) AS user_topic_x_item_topic
FROM featurehouse_catalog.feature_stats
WHERE dataset = 'ads' AND ds > date_sub((SELECT max(ds) FROM featurehouse_catalog.feature_stats), 7)
GROUP BY ds ORDER BY ds""",
    ),
    (
        "Which columns are biggest on disk over the week?",
        """SELECT feature, kind, round(sum(bytes_on_disk) / 1e6, 2) AS mb_on_disk,
       round(avg(len_mean), 1) AS avg_list_length, max(approx_distinct_ids) AS distinct_ids
FROM featurehouse_catalog.feature_stats
WHERE dataset = 'ads'
GROUP BY feature, kind ORDER BY mb_on_disk DESC LIMIT 8""",
    ),
    (
        "Which features were added this month?",
        """SELECT feature, kind, dtype, added_ds, owner, coalesce(derived, '(logged)') AS source
FROM featurehouse_catalog.features
WHERE dataset = 'ads' AND added_ds >= trunc(current_date(), 'MM')
ORDER BY added_ds, feature""",
    ),
    (
        "What did each training job read, and what did it cost?",
        """SELECT job_id, ds_from, ds_to, size(features) AS features, rows_read,
       round(bytes_read / 1e6, 1) AS mb_read, round(bytes_all_columns / 1e6, 1) AS mb_all_columns,
       round((unix_micros(ended_at) - unix_micros(started_at)) / 1e6, 1) AS seconds,
       round(samples_per_s) AS train_samples_per_s, round(stall_fraction, 3) AS stall
FROM featurehouse_catalog.feature_usage
WHERE dataset = 'ads'
ORDER BY started_at""",
    ),
    (
        "What changed in the registry: deprecated, dropped or renamed features?",
        """SELECT feature, status, deprecated_ds, renamed_from, owner
FROM featurehouse_catalog.features
WHERE dataset = 'ads' AND (status <> 'active' OR renamed_from IS NOT NULL)
ORDER BY feature""",
    ),
    (
        "Which log records were quarantined, and why?",
        """SELECT ds, stream, problem, count(*) AS records, min(reason) AS example
FROM featurehouse_quarantine.ads
GROUP BY ds, stream, problem ORDER BY ds, stream, problem""",
    ),
    (
        "What did the quality gate decide on each partition?",
        """SELECT ds, decision, expectations, size(failed_expectations) AS failed, rows, table_version,
       quarantined_impressions AS bad_impressions, quarantined_labels AS bad_labels, decided_by
FROM featurehouse_catalog.quality_gate
WHERE dataset = 'ads'
ORDER BY decided_at""",
    ),
)


def registry_as_of(final: dict[str, Any], day: dt.date, *, rename_on: dt.date) -> dict[str, Any]:
    """The registry file ``final`` (as loaded from YAML) as it stood on ``day``."""
    staged = copy.deepcopy(final)
    features = []
    for feature in staged["features"]:
        lifecycle = feature.get("lifecycle") or {}
        added = lifecycle.get("added_ds")
        if added is not None and _date(added) > day:
            continue
        deprecated = lifecycle.get("deprecated_ds")
        if deprecated is not None and _date(deprecated) > day:
            feature["lifecycle"] = {k: v for k, v in lifecycle.items() if k != "deprecated_ds"} | {"status": "active"}
        if feature.get("renamed_from") and day < rename_on:
            feature["name"] = feature.pop("renamed_from")
        features.append(feature)
    staged["features"] = features
    return staged


def _date(value: Any) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def dump(registry: dict[str, Any], day: dt.date) -> str:
    header = f"# Registry as of {day} (written by featurehouse demo from the repository's final registry file).\n"
    return header + yaml.safe_dump(registry, sort_keys=False, width=200)
