#!/usr/bin/env bash
# Resolve the JVM packages of a pom (default jvm/pom.xml) from Maven Central into a folder
# (default .jvm/jars), once. Jars whose artifact the pyspark wheel already ships (Hadoop, Parquet,
# Jackson, log4j, ...) are left out, so Spark's own versions are the only ones on the classpath.
# Usage: jvm/sync_jars.sh PYTHON [POM OUT]   (PYTHON: the Python whose pyspark the jars are for)
#   jvm/sync_jars.sh .venv/bin/python                              Delta & co. -> .jvm/jars (every session)
#   jvm/sync_jars.sh .venv/bin/python jvm/s3/pom.xml .jvm/s3       Hadoop's S3A -> .jvm/s3 (s3a sessions only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python=${1:-"$root/.venv/bin/python"}
pom=${2:-"$here/pom.xml"}
out=${3:-"$root/.jvm/jars"}
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$staging"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
kept=0
for jar in "$staging"/*.jar; do
  base=$(basename "$jar" .jar)
  artifact=${base%-[0-9]*}           # strip the version: jackson-core-2.13.5 -> jackson-core
  if compgen -G "$spark_jars/${artifact}-[0-9]*.jar" >/dev/null; then
    continue                         # pyspark ships its own version
  fi
  mv "$jar" "$out.tmp/" && kept=$((kept + 1))
done
rm -rf "$out" && mv "$out.tmp" "$out"
echo "resolved $kept jars into $out"
