"""The Spark jobs a run launched, listed by purpose: what ``--explain-jobs`` prints.

In a classic session a run counts its jobs in a job group of its own (:func:`counting_jobs`); on an engine
(Spark Connect: no job groups, no JVM here) under a tag of its own, read back from the engine's status API
(:class:`TaggedJobs`). :func:`jobs_of_group` reads, for
every job of the group, its description and its call site (the Python line of the action, or Spark's or
Delta's own frame). Jobs that Delta launches for itself (a snapshot's state, files filtered for a query, the
table's history) are described by Delta ("Delta: ..."), so they show as Delta's.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError

from warehouse.session import is_connect

DESCRIPTION = "spark.job.description"
#: Call sites in these classes are Delta's own work (the rest of a Scala call site is Spark's).
_DELTA_FRAMES = ("Delta", "Snapshot", "Checkpoint", "OptimisticTransaction", "TransactionalWrite", "MergeInto")


@dataclass(frozen=True)
class SparkJob:
    """One Spark job: the step that launched it, where (the call site of its last stage), and its stages."""

    id: int
    step: str
    call_site: str
    stages: int

    @property
    def origin(self) -> str:
        """``delta`` (Delta's own work), ``featurehouse`` (an action in our Python code) or ``spark`` (Spark's own
        jobs: a subquery or broadcast AQE runs ahead, a writer's stages)."""
        frame = self.call_site.rpartition(" at ")[2]
        if self.step.startswith("Delta:") or any(name in frame for name in _DELTA_FRAMES):
            return "delta"
        if ".py:" in frame:
            return "featurehouse"
        return "spark"


class RunJobs:
    """The Spark jobs of one run's job group: how many so far, and which."""

    def __init__(self, spark: Any, group: str) -> None:
        self.spark, self.group = spark, group

    def __call__(self) -> int:
        return len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self.group))

    def listed(self) -> list[SparkJob]:
        return jobs_of_group(self.spark, self.group)


#: The runtime setting through which an engine client knows its engine's UI (``warehouse.engine.client``).
ENGINE_UI = "featurehouse.engine.ui"
#: What Spark Connect makes a job's description: the session and the request's plan as protobuf text, cut short.
_CONNECT_REQUEST = re.compile(r"Spark Connect - session_id: .*?(\.\.\.|$)", re.S)


#: A job's call site on an engine: the engine does not know the client's Python lines (its jobs' names and
#: descriptions are the Connect request's protobuf text).
ENGINE_CALL_SITE = "a request of this client (call sites: --engine off)"


def _engine_step(description: str) -> str:
    """What a job's description on an engine says beyond the Connect request (Delta's step, say), on one line."""
    return " ".join(_CONNECT_REQUEST.sub("", description).split()).replace("Delta: :", "Delta:").strip(": ")


class TaggedJobs:
    """The Spark jobs of one run's tag on an engine, from its UI's REST API (Spark Connect suffixes a session's
    tags with ``_Tag_<tag>``); an engine whose UI is unknown (a remote one) counts none."""

    def __init__(self, spark: Any, tag: str) -> None:
        self.tag, self.ui = tag, spark.conf.get(ENGINE_UI, None)
        self.app = spark.conf.get("spark.app.id", None)

    def _jobs(self) -> list[dict[str, Any]]:
        if not self.ui or not self.app:
            return []
        with urllib.request.urlopen(f"{self.ui}/api/v1/applications/{self.app}/jobs", timeout=10) as answer:
            jobs = json.load(answer)
        return [j for j in jobs if any(t == self.tag or t.endswith(f"_Tag_{self.tag}") for t in j.get("jobTags", []))]

    def __call__(self) -> int:
        return len(self._jobs())

    def listed(self) -> list[SparkJob]:
        return [SparkJob(j["jobId"], _engine_step(j.get("description", "")), ENGINE_CALL_SITE,
                         len(j.get("stageIds", []))) for j in sorted(self._jobs(), key=lambda j: j["jobId"])]  # fmt: skip


@contextmanager
def counting_jobs(spark: Any, what: str) -> Iterator[RunJobs | TaggedJobs]:
    """Count the Spark jobs launched by this thread inside the block: yields the run's :class:`RunJobs`.

    The block runs in a Spark job group of its own (named after ``what``, shown in Spark's UI);
    the thread's previous group is restored on exit. On an engine it runs under a tag of its own
    instead, which also lets it be interrupted alone (``spark.interruptTag``).
    """
    if is_connect(spark):
        tag = f"featurehouse-{uuid.uuid4().hex[:12]}"
        spark.addTag(tag)
        try:
            yield TaggedJobs(spark, tag)
        finally:
            spark.removeTag(tag)
        return
    sc = spark.sparkContext
    previous = {key: sc.getLocalProperty(key) for key in ("spark.jobGroup.id", DESCRIPTION)}
    group = f"featurehouse-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, what)
    try:
        yield RunJobs(spark, group)
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)


def _described(sc: Any, job_id: int) -> str:
    """A job's description, from Spark's status store (the status tracker does not keep it); '' if unknown."""
    try:
        description = sc._jsc.sc().statusStore().job(job_id).description()
        return str(description.get()) if description.isDefined() else ""
    except Py4JError:  # a job evicted from the store (spark.ui.retainedJobs), or a store without the API
        return ""


def jobs_of_group(spark: Any, group: str) -> list[SparkJob]:
    """The jobs of job group ``group``, oldest first."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    jobs = []
    for job_id in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job_id)
        stage_ids = list(info.stageIds) if info else []
        stages = [s for s in (tracker.getStageInfo(i) for i in stage_ids) if s is not None]
        call_site = stages[-1].name if stages else "(no stage)"
        jobs.append(SparkJob(job_id, _described(sc, job_id), call_site, len(stage_ids)))
    return jobs


def explain(jobs: Sequence[SparkJob], *, root: str = "", run: str = "") -> list[str]:
    """One line per description and call site, in the order the run reached them: how many jobs, whose, where.
    ``root`` is cut from the call sites' paths, ``run`` (the run's own description) from the descriptions."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for job in jobs:
        site = job.call_site.replace(root.rstrip("/") + "/", "") if root else job.call_site
        step = job.step.replace(f"{run}: ", "").replace(run, "").strip() if run else job.step
        counts.setdefault((step, job.origin, site), []).append(job.stages)
    by_origin = {o: sum(1 for j in jobs if j.origin == o) for o in ("featurehouse", "delta", "spark")}
    lines = [f"{len(jobs)} Spark jobs: " + ", ".join(f"{n} {origin}'s" for origin, n in by_origin.items() if n)]
    for (name, origin, site), stages in counts.items():
        lines.append(f"  {len(stages):>3} x  {site}" + (f" ({name})" if name else "") + f"  [{origin}, {sum(stages)} stages]")
    return lines
