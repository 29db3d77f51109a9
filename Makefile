# The two commands: `make run` and `make test`. Both set everything up from nothing:
# the virtualenv (.venv), the Python dependencies, the Apache Kafka broker jars and
# Spark's connectors (resolved by Maven from infra/kafka/pom.xml and infra/spark/pom.xml).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
KAFKA_READY := .cache/kafka/classpath.txt
SPARK_READY := .cache/spark/classpath.txt

.PHONY: run test setup browser lint unit integration clean

run: setup
	$(BIN)/streamplane run $(ARGS)

test: setup browser lint
	$(BIN)/pytest $(PYTEST_ARGS)

setup: $(INSTALLED) $(KAFKA_READY) $(SPARK_READY)

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Resolving is idempotent: once the classpath file and its jars exist, no network work.
$(KAFKA_READY): infra/kafka/pom.xml $(INSTALLED)
	$(BIN)/streamplane local install

# Debian's Chromium for the dashboard's headless-browser test (PostgreSQL is installed
# and started by the tests that need it, through infra/postgres/ensure.sh).
browser:
	sh infra/chromium/ensure-chromium.sh

# Spark's JVM connectors (Delta Lake, Spark's own Kafka source for the benchmark).
$(SPARK_READY): infra/spark/pom.xml $(INSTALLED)
	$(BIN)/streamplane pipeline install

lint: $(INSTALLED)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -m 'not integration' $(PYTEST_ARGS)

integration: setup browser
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

clean:
	-$(BIN)/streamplane local down
	rm -rf $(VENV) .cache .streamplane
