# cfn-once: every set-up step the project needs, from a fresh machine.
#
#   make demo    run the product on local AWS and show who answered what
#   make test    everything CI checks: format, lints, unit, contract and end-to-end tests
#
# Other targets: local, drill, venv, build, moto, fmt, clippy, lint-templates, unit, clean.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo

.PHONY: help demo local drill test venv build moto fmt clippy lint-templates unit clean

help:
	@sed -n '3,7p' Makefile | sed 's/^# \{0,1\}//'

## venv: the Python environment with moto[server] (local AWS), rebuilt when requirements change.
venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	@echo "==> creating $(VENV) with $$($(PYTHON_BOOTSTRAP) --version)"
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --requirement requirements-dev.txt
	@touch $@

## demo: start moto, provision, send events/ through SNS -> SQS -> handler -> S3, print a table.
demo: venv
	@echo "==> building cfn-once"
	$(CARGO) build --quiet --bin cfn-once
	./target/debug/cfn-once demo --python $(PY) --events events

## local: both regions on moto until Ctrl-C, a line per request; writes .local/env.json.
local: venv
	$(CARGO) build --quiet --bin cfn-once
	./target/debug/cfn-once local --python $(PY)

## drill: a failover drill against the environment `make local` is running.
drill:
	$(CARGO) build --quiet --bin cfn-once
	./target/debug/cfn-once drill --env .local/env.json

## test: the whole suite, as CI runs it. Tests start and stop their own moto.
test: venv fmt clippy lint-templates
	@echo "==> tests (unit, lease-store contract, end to end on moto)"
	CFN_ONCE_PYTHON="$(abspath $(PY))" $(CARGO) test --workspace --locked

fmt:
	@echo "==> cargo fmt --check"
	$(CARGO) fmt --all -- --check

clippy:
	@echo "==> cargo clippy"
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## lint-templates: cfn-lint on every CloudFormation template in infra/.
lint-templates: venv
	@echo "==> cfn-lint infra/*.yaml"
	$(VENV)/bin/cfn-lint infra/*.yaml

## unit: only the tests that need no local AWS.
unit:
	$(CARGO) test --workspace --locked --lib

build:
	$(CARGO) build --workspace --locked

## moto: a moto server on a free loopback port (or PORT=n), in the foreground; prints its URL.
moto: venv
	$(PY) handler/src/local/moto_server.py $(PORT)

clean:
	$(CARGO) clean
	rm -rf $(VENV) .local
