#!/usr/bin/env bash
# Resolve Apache Kafka's broker (jvm/kafka/pom.xml) with its whole runtime classpath from
# Maven Central into .jvm/kafka, once. A folder of its own: these jars never join Spark's classpath.
# Usage: jvm/sync_kafka_jars.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$(dirname "$here")/.jvm/kafka"
rm -rf "$out.tmp"
mvn -q -B -f "$here/kafka/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$out.tmp"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "resolved $(ls "$out" | wc -l) jars into $out"
