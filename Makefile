# featurehouse: the two commands of the README, and what they need.
#   make demo   install if needed, then run the main job end to end
#   make test   install if needed, then run the whole test suite
# Installs are stamped, so later runs neither download nor reinstall anything.

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed
JARS   := .jvm/.resolved

.PHONY: demo test install jars clean

demo: install
	$(VENV)/bin/featurehouse demo

test: install
	$(VENV)/bin/pytest

install: $(STAMP) $(JARS)

jars: $(JARS)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	touch $@

# Delta's JVM package from Maven Central (jvm/pom.xml), resolved once into .jvm/jars.
$(JARS): jvm/pom.xml jvm/sync_jars.sh $(STAMP)
	jvm/sync_jars.sh $(VENV)/bin/python
	touch $@

clean:
	rm -rf $(VENV) .jvm data
