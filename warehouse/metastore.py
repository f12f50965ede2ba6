"""A shared Hive metastore in PostgreSQL: its schema, made once, and the ``featurehouse metastore`` command.

    featurehouse metastore init --profile cluster

Spark's built-in Hive 2.3 metastore client can create its tables lazily
(``datanucleus.schema.autoCreateAll``), but on PostgreSQL that deadlocks: one connection adds a
foreign key to a table while another holds a transaction on it. So the schema is made up front,
in one go, by DataNucleus' own ``SchemaTool`` from the metastore's ``package.jdo`` (both in the
jars pyspark ships), with the settings Hive itself uses; running it again changes nothing. The
database itself must exist (``createdb``; ``featurehouse cluster up`` makes its own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ConfigError, FeaturehouseError
from schemas.exit import run_command
from schemas.redact import secret_values
from schemas.settings import METASTORE_URL
from warehouse.confs import metastore_driver_jars, session_confs
from warehouse.flags import add_common_arguments, common_settings
from warehouse.processes import java

#: Hive's own values for these (HiveConf), which the metastore client expects the schema to follow.
HIVE_DATANUCLEUS = {"datanucleus.identifierFactory": "datanucleus1", "datanucleus.rdbms.useLegacyNativeValueStrategy": "true"}


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def datanucleus_properties(confs: Mapping[str, str]) -> dict[str, str]:
    """The metastore's JDO and DataNucleus settings (``spark.hadoop.javax.jdo.*``, ``...datanucleus.*``)."""
    props = dict(HIVE_DATANUCLEUS)
    for key, value in confs.items():
        bare = key.removeprefix("spark.hadoop.")
        if bare.startswith(("javax.jdo.option.", "datanucleus.")) and bare != "datanucleus.schema.autoCreateAll":
            props[bare] = value
    props["datanucleus.schema.autoCreateAll"] = "true"  # SchemaTool creates what is missing, nothing else
    return props


@dataclass(frozen=True)
class SchemaReport:
    url: str

    def format(self) -> str:
        return f"metastore {self.url}: schema ready (DataNucleus SchemaTool, Hive 2.3 metastore model)"


def init_schema(confs: Mapping[str, str]) -> SchemaReport:
    """Create the metastore's tables in the database ``confs`` name, if missing; existing ones are left as they are."""
    url = confs.get(METASTORE_URL, "")
    drivers = metastore_driver_jars(url)
    if not drivers:
        raise ConfigError(f"{METASTORE_URL}={url.split(';')[0] or '(unset)'} is not a shared metastore database; "
                          "only a PostgreSQL one (jdbc:postgresql://...) needs `metastore init` (embedded Derby "
                          "makes its own), e.g. --profile cluster")  # fmt: skip
    jars = spark_jars_dir()
    metastore_jar = next(iter(sorted(jars.glob("hive-metastore-*.jar"))), None)
    if metastore_jar is None:
        raise ConfigError(f"no hive-metastore jar in {jars}: this pyspark was built without Hive support")
    with tempfile.TemporaryDirectory(prefix="featurehouse-metastore-") as work:
        folder = Path(work)
        with zipfile.ZipFile(metastore_jar) as jar:
            (folder / "package.jdo").write_bytes(jar.read("package.jdo"))
        props = folder / "datanucleus.properties"
        props.touch(mode=0o600)  # it may hold the metastore's password
        props.write_text("".join(f"{k}={v}\n" for k, v in datanucleus_properties(confs).items()), encoding="utf-8")
        command = [java("the metastore schema tool (DataNucleus SchemaTool)"), "-cp",
                   os.pathsep.join([f"{jars}/*", *drivers]), "org.datanucleus.store.schema.SchemaTool",
                   "-create", "-api", "JDO", "-props", str(props), "package.jdo"]  # fmt: skip
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0 or "completed successfully" not in output:
        cause = next((line.strip() for line in output.splitlines()
                      if "FATAL" in line or "Exception:" in line or "refused" in line), output.strip()[-300:])  # fmt: skip
        raise FeaturehouseError(f"the metastore schema at {url.split('?')[0]} could not be made: {cause}; check that "
                                "the database exists (createdb) and the user may create tables in it")  # fmt: skip
    return SchemaReport(url=url.split("?")[0])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="featurehouse metastore",
        description="Make the shared metastore's schema (PostgreSQL), once; running it again changes nothing.",
    )
    parser.add_argument("action", choices=["init"], help="init: create the metastore's tables where missing")
    add_common_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    secrets: list[str] = []

    def body() -> str:
        settings = common_settings(parse_args(argv))
        secrets.extend(secret_values(settings["spark_conf"]))
        return init_schema(session_confs(settings["home"], settings["spark_conf"])).format()

    return run_command(body, secrets)


if __name__ == "__main__":
    sys.exit(main())
