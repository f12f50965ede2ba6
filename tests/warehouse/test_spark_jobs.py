"""How ``--explain-jobs`` names an engine's jobs (``warehouse.spark_jobs``): pure Python, no Spark."""

from __future__ import annotations

from warehouse.spark_jobs import _engine_step

#: A Delta job's description on the engine, as its UI's REST API gave it (2026-12-06): Delta's step after the
#: Connect request's protobuf text, cut short by Spark.
CONNECT = ('Spark Connect - session_id: "cc654afb"\nuser_context {\n  user_id: "featurehouse-7087"\n}\nplan {\n'
           '  command {\n    sql...')


def test_an_engine_jobs_description_keeps_deltas_step_and_drops_the_request_text():
    assert _engine_step(f"Delta: {CONNECT}: Compute snapshot for version: 4") == "Delta: Compute snapshot for version: 4"
    assert _engine_step(CONNECT) == ""
    assert _engine_step("Delta: Filtering files for query") == "Delta: Filtering files for query"
