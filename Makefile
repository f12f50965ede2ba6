# featurehouse: the two commands of the README, and what they need.
#   make demo   install if needed, then run the main job end to end
#   make test   install if needed (Airflow, Ray and PostgreSQL included: their tests always run), then run the whole test suite
#   make bench  install if needed (Petastorm's own venv too), then the benchmark suite into bench/results/<date>/
#               (make bench-quick: the smaller sizes)
# Installs are stamped, so later runs neither download nor reinstall anything.

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed
JARS   := .jvm/.resolved
KAFKA  := .jvm/.kafka-resolved
S3     := .jvm/.s3-resolved
CDS    := .jvm/.cds-made
PETASTORM := .venv-petastorm/.installed
# TorchRec and FBGEMM, pinned together with torch (pyproject.toml): FBGEMM 1.9 is built for torch 2.14.
# The CPU build (fbgemm-gpu-cpu) where no NVIDIA driver answers, the CUDA build (fbgemm-gpu) where one does;
# both install the module fbgemm_gpu. torchrec goes in with --no-deps: its only FBGEMM requirement is the CUDA
# build, which would overwrite the CPU one and fail to load without the driver (its other requirements are in
# pyproject.toml). So `pip check` reports exactly PIP_CHECK_EXPECTED on a CPU host, and install fails on any
# other line. To move to FBGEMM 1.10: see the README, "Moving the TorchRec pins".
FBGEMM_VERSION   := 1.9.0
TORCHREC_VERSION := 1.9.2
PIP_CHECK_EXPECTED := torchrec $(TORCHREC_VERSION) requires fbgemm-gpu, which is not installed.

.PHONY: demo test bench bench-quick install jars s3-jars postgres clean pip-check gpu-wheels

demo: install
	$(VENV)/bin/featurehouse demo

# Two lanes on two cores: one xdist group per test module, the longest first in the order tests/conftest.py
# gives (xdist would otherwise put the modules with the most tests first). Then the Ray tests alone: where
# they time worker starts and a SIGKILLed worker, the other lane's load made Ray place every actor on one
# raylet and replace rather than restart the killed one (2026-12-02).
test: install postgres
	$(VENV)/bin/pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not ray"
	$(VENV)/bin/pytest -m ray

bench: install $(PETASTORM)
	$(VENV)/bin/featurehouse bench

bench-quick: install $(PETASTORM)
	$(VENV)/bin/featurehouse bench --quick

install: $(STAMP) $(JARS) $(KAFKA) $(S3) $(CDS)

jars: $(JARS) $(KAFKA)

s3-jars: $(S3)

$(STAMP): pyproject.toml Makefile
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev,airflow,dpp,bench]'
	if nvidia-smi -L >/dev/null 2>&1; then fbgemm=fbgemm-gpu; else fbgemm=fbgemm-gpu-cpu; fi; \
		$(VENV)/bin/python -m pip install --quiet "$$fbgemm==$(FBGEMM_VERSION)"
	$(VENV)/bin/python -m pip install --quiet --no-deps "torchrec==$(TORCHREC_VERSION)"
	$(MAKE) --no-print-directory pip-check
	touch $@

# pip's own consistency check, less the one line the --no-deps install of torchrec makes on a CPU host.
pip-check:
	@found="$$($(VENV)/bin/python -m pip check 2>&1)"; \
	rest="$$(printf '%s\n' "$$found" | grep -v -x -F -e '$(PIP_CHECK_EXPECTED)' -e 'No broken requirements found.')"; \
	if [ -n "$$rest" ]; then printf 'pip check found conflicts:\n%s\n' "$$rest" >&2; exit 1; fi; \
	printf 'pip check: %s\n' "$$found"

# For bench/gpu_check.sh on a GPU host with its own Python 3.12 and torch but no network: the reader's packages
# that such an image lacks (not pyarrow, numpy or torch), at the versions installed here, as cp312 wheels in
# .whl/ (56 MiB; carry it). Ray's wheel (about 70 MB) would not fit beside them in the device tool's 64 MiB.
GPU_WHEELS := deltalake arro3-core deprecated wrapt pydantic pydantic-core pyyaml annotated-types typing-inspection
gpu-wheels: $(STAMP)
	rm -rf .whl && mkdir .whl
	$(VENV)/bin/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		--platform manylinux1_x86_64 -d .whl $$($(VENV)/bin/python -c 'import importlib.metadata as m, sys; \
		print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' $(GPU_WHEELS))
	du -sh .whl

# Delta's and Spark's Kafka connector's JVM packages from Maven Central (jvm/pom.xml), resolved once into .jvm/jars.
$(JARS): jvm/pom.xml jvm/sync_jars.sh $(STAMP)
	jvm/sync_jars.sh $(VENV)/bin/python
	touch $@

# The driver JVM's class-data archive (warehouse/cds.py): made once for the embedded default's classpath, so
# that every later session maps its classes instead of loading them (FEATUREHOUSE_CDS=off starts without it).
# An archive that cannot be made is reported and skipped: sessions then start as they would without it.
$(CDS): $(STAMP) $(JARS)
	$(VENV)/bin/python -m warehouse.cds || echo "note: no class-data archive was made; Spark sessions start without one"
	touch $@

# Apache Kafka's broker for local runs and tests (jvm/kafka/pom.xml), resolved once into .jvm/kafka.
$(KAFKA): jvm/kafka/pom.xml jvm/sync_kafka_jars.sh
	jvm/sync_kafka_jars.sh
	touch $@

# Hadoop's S3A connector with the AWS SDK bundle (jvm/s3/pom.xml, about 650 MB), resolved once into .jvm/s3:
# only sessions with s3a:// tables put it on their classpath (warehouse/object_store.py, docs/object-storage.md).
$(S3): jvm/s3/pom.xml jvm/sync_jars.sh $(STAMP)
	jvm/sync_jars.sh $(VENV)/bin/python jvm/s3/pom.xml .jvm/s3
	touch $@

# Petastorm, the reader benchmark's peer, in its own venv: it pins pyarrow < 15, which this project cannot use.
$(PETASTORM):
	test -x .venv-petastorm/bin/python || $(PYTHON) -m venv .venv-petastorm
	.venv-petastorm/bin/python -m pip install --quiet petastorm torch "pyarrow==14.0.2" "numpy<2" "pandas<2.2"
	touch $@

# PostgreSQL's server (Debian's package), for the shared-metastore tests and `featurehouse cluster up`:
# installed only where it is missing, and only as root (apt-get); elsewhere tests/test_cluster.py skips, saying why.
postgres:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || \
	  echo "note: PostgreSQL is not installed and cannot be installed here (not root); the cluster tests will skip"

clean:
	rm -rf $(VENV) .venv-petastorm .jvm data
