"""The catalog's views: plain Spark SQL over the catalog tables, so stock spark-sql reads them too.

* ``feature_popularity``: per dataset and feature, how many distinct jobs read it
  in the last 7 and 30 days (wall clock), how many runs in all, and when last.
* ``unused_features``: features not dropped that no job read in the last 30 days.
* ``stale_features``: active features missing or near-empty (coverage below
  ``STALE_COVERAGE`` in every one) in the dataset's ``RECENT_PARTITIONS`` latest
  partitions that have statistics.
"""

from __future__ import annotations

from schemas.catalog import CATALOG_DATABASE, FEATURE_STATS, FEATURE_USAGE, FEATURES

RECENT_PARTITIONS = 7
STALE_COVERAGE = 0.01

_DB = CATALOG_DATABASE

VIEWS: dict[str, str] = {
    "feature_popularity": f"""
WITH reads AS (
  SELECT dataset, job_id, started_at, explode(features) AS feature
  FROM {_DB}.{FEATURE_USAGE}
)
SELECT f.dataset,
       f.feature,
       f.status,
       count(DISTINCT CASE WHEN r.started_at >= current_timestamp() - INTERVAL 7 DAYS THEN r.job_id END)  AS jobs_7d,
       count(DISTINCT CASE WHEN r.started_at >= current_timestamp() - INTERVAL 30 DAYS THEN r.job_id END) AS jobs_30d,
       count(r.job_id)   AS runs_total,
       max(r.started_at) AS last_read_at
FROM {_DB}.{FEATURES} f
LEFT JOIN reads r ON r.dataset = f.dataset AND r.feature = f.feature
GROUP BY f.dataset, f.feature, f.status
""",
    "unused_features": f"""
SELECT p.dataset, p.feature, p.status, f.owner, f.added_ds, p.runs_total, p.last_read_at
FROM {_DB}.feature_popularity p
JOIN {_DB}.{FEATURES} f ON f.dataset = p.dataset AND f.feature = p.feature
WHERE p.status <> 'dropped' AND p.jobs_30d = 0
""",
    "stale_features": f"""
WITH partitions AS (
  SELECT DISTINCT dataset, ds FROM {_DB}.{FEATURE_STATS}
), recent AS (
  SELECT dataset, ds FROM (
    SELECT dataset, ds, row_number() OVER (PARTITION BY dataset ORDER BY ds DESC) AS k FROM partitions
  ) WHERE k <= {RECENT_PARTITIONS}
), recent_counts AS (
  SELECT dataset, count(*) AS recent_partitions, min(ds) AS since_ds, max(ds) AS until_ds
  FROM recent GROUP BY dataset
), seen AS (
  SELECT s.dataset, s.feature,
         count(*)        AS partitions_present,
         max(s.coverage) AS max_coverage,
         max(CASE WHEN s.coverage >= {STALE_COVERAGE} THEN s.ds END) AS last_ds_with_values
  FROM {_DB}.{FEATURE_STATS} s
  JOIN recent r ON r.dataset = s.dataset AND r.ds = s.ds
  GROUP BY s.dataset, s.feature
)
SELECT f.dataset, f.feature, f.owner,
       CASE WHEN s.feature IS NULL THEN 'missing' ELSE 'near-empty' END AS reason,
       c.since_ds, c.until_ds, c.recent_partitions,
       coalesce(s.partitions_present, 0) AS partitions_present,
       s.max_coverage,
       s.last_ds_with_values
FROM {_DB}.{FEATURES} f
JOIN recent_counts c ON c.dataset = f.dataset
LEFT JOIN seen s ON s.dataset = f.dataset AND s.feature = f.feature
WHERE f.status = 'active' AND (s.feature IS NULL OR s.max_coverage < {STALE_COVERAGE})
""",
}
