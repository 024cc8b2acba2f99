# Everyday entry points. Every target installs what it needs itself (idempotently).
.PHONY: help venv lint format typecheck docs test test-unit test-full soak services-up services-down services-status demo demo-cdc demo-collector bench clean

help:
	@echo "make demo         run the flagship pipeline on embedded defaults"
	@echo "make demo-cdc     PostgreSQL -> Debezium -> Kafka -> spate -> ClickHouse, tables compared"
	@echo "make demo-collector  poll an API into a Hugging Face dataset (local test servers)"
	@echo "make test         set up everything and run lint, types, docs and the test suite"
	@echo "make test-unit    the tests that need no service (no Kafka, NATS, S3 or ClickHouse front), in minutes"
	@echo "make test-full    the same with the full test volumes named in the issues"
	@echo "make soak         the flagship for 30 min under injected faults (SOAK_MINUTES)"
	@echo "make services-up  start Kafka, NATS, S3 (moto) and the ClickHouse HTTP front on 127.0.0.1"
	@echo "make lint | format | typecheck | docs | bench | clean"

venv:
	scripts/bootstrap.sh

lint: venv
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format: venv
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

typecheck: venv
	.venv/bin/mypy

docs: venv
	.venv/bin/mkdocs build --strict

test:
	scripts/test.sh

test-unit: venv
	PATH="$(CURDIR)/.venv/bin:$$PATH" SPATE_TEST_SCALE=$${SPATE_TEST_SCALE:-0.1} \
		.venv/bin/python -m pytest -q -m "not integration and not e2e and not packaging" $(ARGS)

test-full:
	SPATE_TEST_SCALE=1 scripts/test.sh

soak: venv
	scripts/soak.sh

services-up: venv
	scripts/services.sh up

services-down:
	scripts/services.sh down

services-status:
	scripts/services.sh status

demo: venv
	scripts/demo.sh

demo-cdc: venv
	scripts/demo-cdc.sh

demo-collector: venv
	scripts/demo-collector.sh

bench: venv
	scripts/bench.sh

clean:
	rm -rf .venv .bootstrap-stamp .services site dist build .pytest_cache .mypy_cache .ruff_cache \
		packages/spate-avro-native/target
