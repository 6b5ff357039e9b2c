# cfn-once: every set-up step the project needs, from a fresh machine.
#
#   make demo    run the product on local AWS and show who answered what
#   make test    everything CI checks: format, lints, unit, contract and end-to-end tests
#
# Other targets: local, drill, soak, soak-short, upgrade-check (FROM=<git rev>), golden-records (REV=<git rev> FORMAT=<n>), package,
# release (TAG=v<version>), cdk-synth, simulate, fuzz, bench, bench-quick, profile, build, sam-build, venv, bench-venv, moto, prose, fmt, feature-sets, clippy, doc, lint-templates,
# unit, clean.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo
# The venv's tools (cargo-lambda, zig, sam, cfn-lint, checkov) come first on PATH.
TOOLS_PATH := $(abspath $(VENV))/bin:$(PATH)
# make build ARCH=x86_64 for Intel functions; arm64 (Graviton) is what infra/ deploys.
ARCH ?= arm64

.PHONY: help prose demo local play cdk-synth drill soak soak-short upgrade-check golden-records package release release-tools test test-python test-static test-build test-lane-tests test-lane-soak test-lane-build feature-sets simulate fuzz bench bench-quick profile venv bench-venv build build-tools sam-build moto fmt clippy doc lint-templates unit clean

help:
	@sed -n '3,8p' Makefile | sed 's/^# \{0,1\}//'

## venv: the Python environment with moto[server] (local AWS), rebuilt when requirements change.
## Packages are installed by uv (from PyPI, pinned in requirements-uv.txt): pip took two minutes
## of CPU for these, uv a few seconds, and CI's two cores are shared with the compiler.
UV := $(VENV)/bin/uv
venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt requirements-uv.txt
	@echo "==> creating $(VENV) with $$($(PYTHON_BOOTSTRAP) --version)"
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --requirement requirements-uv.txt
	$(UV) pip install --quiet --python $(PY) --requirement requirements-dev.txt
	@touch $@

## bench-venv: the benchmark's Python peer (crhelper, Powertools, awslambdaric), in its own venv.
## Its bytecode is compiled at install, as pip does, so the peer's cold start imports .pyc files.
BENCH_VENV := .venv-bench
bench-venv: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed: benches/python/requirements.txt $(VENV)/.installed
	@echo "==> creating $(BENCH_VENV) with $$($(PYTHON_BOOTSTRAP) --version)"
	$(PYTHON_BOOTSTRAP) -m venv $(BENCH_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(BENCH_VENV)/bin/python --requirement benches/python/requirements.txt
	@touch $@

# Interleaved pairs `make bench` runs.
BENCH_PAIRS ?= 10

## bench: cfn-once beside crhelper + Powertools under a fake Runtime API on moto; writes BENCHMARKS.md.
bench: venv bench-venv
	@echo "==> building the function as it is deployed (release profile), and the harness"
	$(CARGO) build --release --locked -p cfn-once --bin cfn-once-lambda
	$(CARGO) build --locked -p cfn-once-bench --bin cfn-once-bench
	@echo "==> criterion microbenchmarks of the hot path"
	$(CARGO) bench --locked -p cfn-once-bench --bench hot_path 2>&1 | tee target/hot_path.txt
	@echo "==> $(BENCH_PAIRS) interleaved pairs, Rust and Python"
	./target/debug/cfn-once-bench --pairs $(BENCH_PAIRS) --microbenchmarks target/hot_path.txt \
	  --command "make bench BENCH_PAIRS=$(BENCH_PAIRS)"

## profile: perf of a warm run (30 batches of 10) of a release build with line tables; prints the
## self time by component (benches/perf/components.py): where a warm request's CPU goes.
profile: venv bench-venv
	@command -v perf >/dev/null || { echo "make profile needs perf (Debian: apt-get install linux-perf)"; exit 1; }
	CARGO_TARGET_DIR=target/profiling $(CARGO) build --release --locked -p cfn-once --bin cfn-once-lambda \
	  --config 'profile.release.strip=false' --config 'profile.release.debug="line-tables-only"'
	$(CARGO) build --locked -p cfn-once-bench --bin cfn-once-bench
	rm -f target/profiling/perf.data
	PERF_TARGET=target/profiling/release/cfn-once-lambda PERF_OUT=target/profiling/perf.data \
	  ./target/debug/cfn-once-bench --pairs 1 --warm-batches 30 --modes tls --rust-binary benches/perf/record.sh --out target/profiling/bench.md
	@sleep 5
	perf report -i target/profiling/perf.data --no-children --sort dso,sym -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$$' > target/profiling/flat.txt
	python3 benches/perf/components.py target/profiling/flat.txt

## bench-quick: one pair on the debug build, to prove the harness works (CI); no numbers kept.
bench-quick: venv bench-venv
	@# The workspace's feature set, as `make test` builds it: no second debug build of the SDK.
	$(CARGO) build --locked --workspace --bins
	./target/debug/cfn-once-bench --quick --rust-binary target/debug/cfn-once-lambda

## demo: start moto, provision, send events/ through SNS -> SQS -> handler -> S3, print a table.
demo: venv
	@echo "==> building cfn-once"
	$(CARGO) build --quiet -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	./target/debug/cfn-once demo --python $(PY) --events events

## local: both regions on moto until Ctrl-C, a line per request; writes .local/env.json.
## FUNCTIONS=path/to/functions.yaml serves your functions (docs/functions.md: "Bring your functions"); by
## default the examples'. `cfn-once local` itself runs from any folder and, without --functions,
## serves only the built-in providers (Custom::Echo, Custom::DynamoDBItem).
FUNCTIONS ?= examples/functions/functions.yaml
local: venv
	$(CARGO) build --quiet -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	./target/debug/cfn-once local --python $(PY) --functions $(FUNCTIONS)

## play: a template's custom resources through create, each update and delete, against the
## environment `make local` is running (docs/play.md). TEMPLATE=path (required), UPDATE="a.yaml
## b.yaml" (optional, in order), PLAY_ARGS="--fail X@update --parameter K=V ..." (optional).
play:
	@test -n "$(TEMPLATE)" || { echo "usage: make play TEMPLATE=path/to/template.yaml [UPDATE=\"next.yaml ...\"] [PLAY_ARGS=...]"; exit 2; }
	$(CARGO) build --quiet -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	./target/debug/cfn-once play $(TEMPLATE) $(foreach u,$(UPDATE),--update $(u)) $(PLAY_ARGS)

## cdk-synth: the CDK app of examples/play/cdk/app synthesized into the templates checked in beside
## it (docs/play.md, "A CDK app, as synthesized"): `npm ci` installs the aws-cdk-lib and aws-cdk
## that package-lock.json pins (from the npm registry), then `cdk synth` runs twice, the second
## with the context greeting=v2 for an update. Only the templates are kept, not cdk.out, and the
## provider stack's asset manifest: its nested template keeps its cdk.out name, so play finds it
## from the parent's TemplateURL through CdkProviderStack.assets.json (docs/play.md).
CDK_APP := examples/play/cdk/app
CDK_TEMPLATES := examples/play/cdk
cdk-synth:
	cd $(CDK_APP) && npm ci --no-audit --no-fund
	rm -rf $(CDK_APP)/cdk.out $(CDK_APP)/cdk.out.v2
	cd $(CDK_APP) && npx cdk synth --quiet --output cdk.out
	cd $(CDK_APP) && npx cdk synth --quiet --context greeting=v2 --output cdk.out.v2
	cp $(CDK_APP)/cdk.out/CdkPlayStack.template.json $(CDK_TEMPLATES)/CdkPlayStack.template.json
	cp $(CDK_APP)/cdk.out.v2/CdkPlayStack.template.json $(CDK_TEMPLATES)/CdkPlayStack-v2.template.json
	cp $(CDK_APP)/cdk.out/CdkProviderStack.template.json $(CDK_TEMPLATES)/CdkProviderStack.template.json
	cp $(CDK_APP)/cdk.out/CdkProviderStack*.nested.template.json $(CDK_TEMPLATES)/
	cp $(CDK_APP)/cdk.out/CdkProviderStack.assets.json $(CDK_TEMPLATES)/CdkProviderStack.assets.json
	rm -rf $(CDK_APP)/cdk.out $(CDK_APP)/cdk.out.v2

## drill: a failover drill against the environment `make local` is running.
drill:
	$(CARGO) build --quiet -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	./target/debug/cfn-once drill --env .local/env.json

## test: the whole suite, as CI runs it. Tests start and stop their own moto. Each step is timed
## (.ci/step; `.ci/run` prints the minutes). Work that waits (moto, the queues' delays, the soak's
## drain) runs beside work that computes (compiling, the simulator, clippy), in lanes, so that a
## cold run on 2 cores stays within 10 minutes.
STEP := bash .ci/step
# Tests whose outcome hangs on a call finishing within a timeout of a second or so: the
# failure-class tests time the answer to each failure, and the drill's probes need the primary's
# control read (1 s timeout in the test; a slower read keeps the last answer, as designed) to
# see the flip. Beside the lanes (95% CPU), a moto call can take longer; they run alone after.
ALONE_TESTS := wire_faults::class_ two_regions::the_drill_
test:
	@# 1. The one build of every binary and test (with the tests' features: the logs test, the
	@# soak and the benchmark harness run the binaries, which `cargo test` alone does not build),
	@# beside the Python side (uv, the template linters) and the checks that need no build.
	@echo "==> building every binary and test, beside the Python side and the static checks"
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-python test-static test-build
	@# 2. Three lanes side by side: the tests, the soak then clippy, and what computes.
	@$(STEP) "lanes: tests | short soak, clippy | simulator, docs, packaging, fuzzing, harness" \
	  $(MAKE) --no-print-directory -j3 --output-sync=target test-lane-tests test-lane-soak test-lane-build
	@# 3. The tests that time calls against second-long timeouts run alone, on a quiet machine.
	@echo "==> the failure classes of AWS calls and the drill, alone (each call well under a second)"
	@$(STEP) "failure-class and drill tests, alone" env CFN_ONCE_PYTHON="$(abspath $(PY))" \
	  $(CARGO) test --workspace --locked --test it -- $(ALONE_TESTS) --test-threads 1

test-python:
	@$(STEP) "python venvs (moto, template checkers, the benchmark's peer)" $(MAKE) --no-print-directory venv bench-venv
	@$(STEP) "template linters (cfn-lint, sam validate, checkov)" $(MAKE) --no-print-directory lint-templates

test-static:
	@$(STEP) "the guides' sentences (make prose)" $(MAKE) --no-print-directory prose
	@$(STEP) "cargo fmt --check, one feature set for binaries and tests" $(MAKE) --no-print-directory fmt feature-sets

test-build:
	@$(STEP) "cargo build, every binary and test" $(CARGO) build --locked --workspace --bins --tests

# Eight test threads: the end-to-end tests mostly wait on moto and on the queues' delays, and the
# `it` binary ends sooner with eight than with four while moto's one Python process keeps up. The
# simulator's self-checks compute; they run in the computing lane.
test-lane-tests:
	@echo "==> tests (unit, lease-store contract, end to end on moto, hostile inputs)"
	@$(STEP) "  | cargo test (unit, contract, end to end on moto)" env CFN_ONCE_PYTHON="$(abspath $(PY))" \
	  $(BESIDE_SOAK) $(CARGO) test --workspace --locked --exclude cfn-once-sim -- --skip fuzz_tests \
	  $(addprefix --skip ,$(ALONE_TESTS)) --test-threads 8

# Clippy after the soak, in its lane: the soak computes little (a fifth of the machine), clippy
# then has the proc macros and build scripts the build made, and the lanes end together.
test-lane-soak:
	@$(STEP) "  | short soak" $(MAKE) --no-print-directory soak-short
	@$(STEP) "  | cargo clippy, all targets" $(BESIDE_SOAK) $(MAKE) --no-print-directory clippy

# The simulator runs on the debug build the tests made (the core, the simulator and the crates
# its seeds spend their time in optimised, Cargo.toml's profile.dev): the `sim` profile's own
# build of them would cost more than it saves on 10,000 seeds.
test-lane-build:
	@# First what needs no cargo: the other lanes' cargo takes the build directory's lock for a
	@# moment at their start, which the packaging's compile would otherwise hold.
	@echo "==> simulating $(CI_SEEDS) seeds (debug build)"
	@$(STEP) "  | simulator, $(CI_SEEDS) seeds" $(BESIDE_SOAK) ./target/debug/cfn-once-sim --seeds $(CI_SEEDS)
	@echo "==> the simulator's self-checks (planted bugs, replays, coverage)"
	@$(STEP) "  | simulator's self-checks" $(BESIDE_SOAK) $(CARGO) test --locked -p cfn-once-sim --lib
	@$(STEP) "  | cargo doc (cfn-once, cfn-once-core)" $(BESIDE_SOAK) $(MAKE) --no-print-directory doc
	@# After the docs: the outside crate's check reuses what they checked, its test the tests' build.
	@$(STEP) "  | packaging, and a provider crate built from the packages" $(BESIDE_SOAK) env OUTSIDE_CRATE_REUSE=require $(MAKE) --no-print-directory package
	@echo "==> bounded fuzzing of the decoder and the response builder"
	@# The workspace's own test binaries, filtered: no build of the core on its own.
	@$(STEP) "  | bounded fuzzing" $(BESIDE_SOAK) $(CARGO) test --workspace --locked --lib -- fuzz_tests --nocapture
	@echo "==> the benchmark harness, one quick pair (numbers not kept)"
	@$(STEP) "  | benchmark harness, one quick pair" $(BESIDE_SOAK) $(MAKE) --no-print-directory bench-quick

# The lanes beside the short soak run at a lower CPU priority. The soak is mostly waiting (about
# a fifth of the machine alone) but its fleet and its moto answer against second-long timeouts:
# starved by the simulator and the tests at full tilt (100% busy), its DynamoDB calls passed 3 s,
# their outcomes were unknown, and requests were lost to the soak's clock. Work that only wants
# throughput yields to it; nothing is left out.
BESIDE_SOAK := nice -n 10

# Seeds `make test` simulates.
CI_SEEDS ?= 10000
SEEDS ?= 10000

# A soak's length, size and seed (no seed: drawn from the clock and printed). Up to 5 minutes the
# load is 500 requests a minute, with bursts, and the backlog drains after it; a longer soak runs
# at 300 a minute, what one moto (one Python process) serves with room to spare on this
# repository's 2-core machine, so that the limit a long run shows is the handler's (docs/soak.md).
SOAK_MINUTES ?= 4
SOAK_REQUESTS ?= $(shell awk 'BEGIN { m = $(SOAK_MINUTES); printf "%d", m * (m <= 5 ? 500 : 300) }')
SOAK_SEED ?=

## soak: the release Lambda binary as a two-region fleet on moto, under load and faults; every answer checked (docs/soak.md).
soak: venv
	@echo "==> building the function as it is deployed (release profile), and the soak"
	$(CARGO) build --release --locked -p cfn-once --bin cfn-once-lambda
	$(CARGO) build --locked -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	./target/debug/cfn-once soak --minutes $(SOAK_MINUTES) --requests $(SOAK_REQUESTS) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) \
	  --binary target/release/cfn-once-lambda --python $(PY) --out target/soak

## soak-short: the soak `make test` runs: fixed seed, 1.5 minutes, the debug binary the tests built.
soak-short: venv
	@echo "==> a short soak: the Lambda binary as a fleet under load and faults (seed 19, 1.5 min)"
	$(CARGO) build --locked --workspace --bins
	./target/debug/cfn-once soak --seed 19 --minutes 1.5 --requests 300 --outage-s 30 \
	  --binary target/debug/cfn-once-lambda --python $(PY) --out target/soak-short

## upgrade-check: an upgrade halfway through, run for real (not in CI). `make upgrade-check FROM=v0.1.0` (a release's tag, or any git rev)
## builds FROM's release cfn-once-lambda (.ci/build-rev, in target/revs/) and this tree's, then soaks
## the two side by side, one region each, both ways: FROM in the primary and this tree in the secondary,
## then the other way round. Each soak is the full one (load, SIGKILLs, a primary-region outage, a
## drill's flip of the active region, wire faults) with the same seed; its report goes to
## target/upgrade-check/<direction>/. Fails if either soak fails; both run either way.
FROM ?=
UPGRADE_SEED ?= 4545
UPGRADE_MINUTES ?= 3
UPGRADE_REQUESTS ?= 1200
upgrade-check: venv
	@test -n "$(FROM)" || { echo "usage: make upgrade-check FROM=<release tag or git rev, e.g. v0.1.0> [UPGRADE_SEED=N]" >&2; exit 1; }
	@echo "==> building $(FROM)'s release binary (.ci/build-rev)"
	mkdir -p target/upgrade-check
	bash .ci/build-rev $(FROM) > target/upgrade-check/from.path
	@echo "==> building this tree's release binary, and the soak"
	@# What the new binary is built from: HEAD, and any uncommitted change to its sources.
	@changes=$$(git status --porcelain -- handler/cfn-once handler/cfn-once-core Cargo.toml Cargo.lock .cargo | awk '{ print $$2 }' | paste -sd ' ' -); \
	  echo "this tree at $$(git rev-parse --short=12 HEAD)$${changes:+, with uncommitted changes to $$changes}" > target/upgrade-check/new.txt
	$(CARGO) build --release --locked -p cfn-once --bin cfn-once-lambda
	$(CARGO) build --locked -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	@old=$$(cat target/upgrade-check/from.path); new=target/release/cfn-once-lambda; \
	  echo "old: $(FROM) = $$old"; echo "new: $$(cat target/upgrade-check/new.txt) = $$new"; \
	  failed=""; : > target/upgrade-check/verdicts.txt; \
	  for direction in old-primary-new-secondary new-primary-old-secondary; do \
	    case $$direction in \
	      old-primary-*) primary=$$old; secondary=$$new ;; \
	      *) primary=$$new; secondary=$$old ;; \
	    esac; \
	    echo "==> $$direction: primary runs $$primary, secondary runs $$secondary (seed $(UPGRADE_SEED))"; \
	    start=$$(date +%s); \
	    if ./target/debug/cfn-once soak --seed $(UPGRADE_SEED) --minutes $(UPGRADE_MINUTES) --requests $(UPGRADE_REQUESTS) \
	         --binary $$primary --secondary-binary $$secondary --python $(PY) --out target/upgrade-check/$$direction; \
	    then verdict=passed; else verdict=FAILED; failed="$$failed $$direction"; fi; \
	    echo "$$direction (from $(FROM)): $$verdict in $$(( $$(date +%s) - start )) s; report target/upgrade-check/$$direction/soak-report.md" \
	      | tee -a target/upgrade-check/verdicts.txt; \
	  done; \
	  if [ -n "$$failed" ]; then echo "upgrade-check from $(FROM) FAILED:$$failed" >&2; exit 1; fi; \
	  echo "upgrade-check from $(FROM): both directions passed"

## prose: the guides' sentence lengths (.ci/prose.py): each guide's median sentence at most 20
## words and no paragraph over 150, the README, docs/, ARCHITECTURE.md and the benches' README.
prose:
	@python3 .ci/prose.py --max-median 20 --max-paragraph 150 README.md docs/*.md ARCHITECTURE.md benches/README.md

## simulate: the deterministic simulator over SEEDS seeds on every core, from seed FIRST. Without
## FIRST, a run of 100000 seeds or more starts at a fresh seed drawn at random, printed first so
## the run can be repeated (make simulate SEEDS=1000000 FIRST=...); a shorter one starts at 0.
## Before a change to the protocol lands, run a fresh million (it prints its rate: some 650 seeds/s,
## 26 minutes, on this repository's 2 cores).
FIRST ?=
simulate:
	@echo "==> simulating $(SEEDS) seeds$(if $(FIRST), from seed $(FIRST))"
	$(CARGO) run --quiet --profile sim --locked -p cfn-once-sim -- --seeds $(SEEDS) $(if $(FIRST),--first $(FIRST))

## golden-records: the lease table's items as revision REV wrote them, kept as the fixtures today's
## handler is tested against (tests/it/golden/). `make golden-records REV=<git rev> FORMAT=<n>`, n the
## record format REV writes: builds REV's release cfn-once-lambda (.ci/build-rev), and `cfn-once
## golden-records` runs it on a moto of its own as a soak, scanning the lease table all along, then as a
## small fleet sent resources with wait conditions, and writes the first item of each class to
## tests/golden/records/v<n>/. Refuses a directory that exists: a version's records are generated once
## and never edited (tests/golden/records/README.md says how each was made).
.PHONY: golden-records
REV ?=
FORMAT ?=
golden-records: venv
	@test -n "$(REV)" -a -n "$(FORMAT)" || { echo "usage: make golden-records REV=<git rev> FORMAT=<record format>" >&2; exit 1; }
	@test ! -e tests/golden/records/v$(FORMAT) || { echo "tests/golden/records/v$(FORMAT) exists: golden records are never regenerated or edited" >&2; exit 1; }
	@echo "==> building $(REV)'s release binary (.ci/build-rev), and the generator"
	mkdir -p target/golden-records
	bash .ci/build-rev $(REV) > target/golden-records/binary.path
	$(CARGO) build --locked -p cfn-once-ops -p cfn-once-dev --bin cfn-once --bin cfn-once-dev
	rm -rf target/golden-records/soak target/golden-records/works
	./target/debug/cfn-once golden-records --binary "$$(cat target/golden-records/binary.path)" --format $(FORMAT) \
	  --revision "$$(git rev-parse $(REV)^{commit})" --python $(PY) --work-dir target/golden-records \
	  --out tests/golden/records/v$(FORMAT)

## feature-sets: fails when `cargo build --bins` and `cargo test` would resolve a shared crate's
## features differently, which compiles the SDK twice (.ci/feature-sets).
feature-sets:
	@echo "==> one feature set for the binaries and the tests"
	CARGO="$(CARGO)" bash .ci/feature-sets

fmt:
	@echo "==> cargo fmt --check"
	$(CARGO) fmt --all -- --check

clippy:
	@echo "==> cargo clippy"
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## doc: the library's documentation, which must build without a warning (missing docs, broken links).
doc:
	@echo "==> cargo doc (cfn-once, cfn-once-core)"
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --locked -p cfn-once -p cfn-once-core --features testing,arc

## fuzz: the decoder and response-builder fuzzing with more inputs (make fuzz FUZZ_CASES=200000).
FUZZ_CASES ?= 100000
fuzz:
	@echo "==> fuzzing the decoder and the response builder, $(FUZZ_CASES) inputs each"
	CFN_ONCE_FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --release --locked -p cfn-once-core --lib fuzz -- --nocapture

## lint-templates: cfn-lint, `sam validate --lint` and checkov on every template in infra/.
lint-templates: venv
	@echo "==> cfn-lint infra/*.yaml"
	$(VENV)/bin/cfn-lint infra/*.yaml
	@echo "==> sam validate --lint"
	@for template in infra/*.yaml; do \
		PATH="$(TOOLS_PATH)" SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 sam validate --lint --template $$template || exit 1; \
	done
	@echo "==> checkov (suppressions are justified next to each resource)"
	$(VENV)/bin/checkov --directory infra --framework cloudformation --compact --quiet --skip-download

## build-tools: cargo-lambda and zig from PyPI into the venv, if missing.
build-tools: venv
	@if [ ! -x $(VENV)/bin/cargo-lambda ]; then \
		echo "==> installing cargo-lambda and zig into $(VENV)"; \
		$(UV) pip install --quiet --python $(PY) --requirement requirements-build.txt; \
	fi

## build: the stock Lambda function (cfn-once-lambda) for $(ARCH), zipped; prints its size.
## It serves both Control values: the ARC control is a default feature of cfn-once (`arc`).
## FEATURES=... adds cargo features to the build.
build: build-tools
	@echo "==> cargo lambda build --release --bin cfn-once-lambda ($(ARCH)$(if $(FEATURES), features $(FEATURES)))"
	PATH="$(TOOLS_PATH)" $(CARGO) lambda build --release -p cfn-once --bin cfn-once-lambda --output-format zip \
		$(if $(FEATURES),--features $(FEATURES)) $(if $(filter x86_64,$(ARCH)),--x86-64,--arm64)
	@ls -l target/lambda/cfn-once-lambda/bootstrap.zip | awk '{ printf "target/lambda/cfn-once-lambda/bootstrap.zip: %d bytes (%.2f MB)\n", $$5, $$5 / 1048576 }'
	@# The zip stays small: it is fetched on every cold start.
	@test "$$(stat -c %s target/lambda/cfn-once-lambda/bootstrap.zip)" -le 5000000 \
	  || { echo "bootstrap.zip is over 5 MB (5,000,000 bytes)" >&2; exit 1; }

## sam-build: `sam build` of the lease-table and regional templates with the venv's cargo-lambda,
## offline (cargo may not touch the network; the crates it needs are already fetched). SAM passes
## cargo no features (a Rust function's BuildProperties carry `Binary` alone), so the function
## serves Control=arc through cfn-once's default `arc` feature; the built binary is checked to
## carry the ARC client (its GetRoutingControlState call), or Control=arc would fail at init.
SAM_FUNCTION := .aws-sam/build-regional/Function/bootstrap
sam-build: build-tools
	$(CARGO) fetch --locked
	PATH="$(TOOLS_PATH)" SAM_CLI_TELEMETRY=0 CARGO_NET_OFFLINE=true sam build --config-env lease-table
	PATH="$(TOOLS_PATH)" SAM_CLI_TELEMETRY=0 CARGO_NET_OFFLINE=true sam build --config-env primary
	@grep -q -a GetRoutingControlState $(SAM_FUNCTION) \
	  || { echo "$(SAM_FUNCTION) has no ARC client: Control=arc would fail at init (is cfn-once's default feature arc off?)" >&2; exit 1; }
	@echo "$(SAM_FUNCTION): $$(stat -c %s $(SAM_FUNCTION)) bytes, serves Control=table and Control=arc"

## package: cargo package of cfn-once-core and cfn-once, then a provider crate outside the workspace
## built (default features, as cargo's verification would) and tested against the .crate files
## (.ci/package, .ci/outside-crate). With uncommitted changes: make package PACKAGE_FLAGS=--allow-dirty.
PACKAGE_FLAGS ?=
package:
	CARGO="$(CARGO)" bash .ci/package $(PACKAGE_FLAGS)

## release: what a release ships, in dist/cfn-once-<version>/ (docs/release.md): the function's zip
## and the operator's cfn-once for arm64 and x86_64, the templates, an SBOM per artifact, BUILDINFO
## and SHA256SUMS, the same bytes from the same commit and toolchain (.ci/release). `make release`
## builds HEAD (refused with uncommitted changes); TAG=v<version> builds that tag in a worktree of
## its own. Not run by CI: four release builds of the AWS SDK, 42 minutes an architecture here.
TAG ?=
release: build-tools release-tools
	PATH="$(TOOLS_PATH)" CYCLONEDX="$(abspath $(CYCLONEDX))" bash .ci/release $(TAG)

## release-tools: the pinned cargo-cyclonedx in .tools/, built from crates.io by `cargo install
## --locked` when missing or of another version (10 minutes here, beside other builds).
CYCLONEDX_VERSION := 0.5.9
CYCLONEDX := .tools/bin/cargo-cyclonedx
release-tools:
	@if [ "$$($(CYCLONEDX) cyclonedx --version 2>/dev/null | awk '{ print $$NF }')" != "$(CYCLONEDX_VERSION)" ]; then \
		echo "==> installing cargo-cyclonedx $(CYCLONEDX_VERSION) into .tools"; \
		$(CARGO) install --locked --force --version $(CYCLONEDX_VERSION) --root .tools cargo-cyclonedx; \
	fi

## unit: only the tests that need no local AWS.
unit:
	$(CARGO) test --workspace --locked --lib

## moto: a moto server on a free loopback port (or PORT=n), in the foreground; prints its URL.
moto: venv
	$(PY) tools/cfn-once-local/src/moto_server.py $(PORT)

clean:
	$(CARGO) clean
	rm -rf $(VENV) .local .aws-sam
