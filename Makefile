# runner: build, test, sandbox images, demo and benchmarks.
# `make test` is what CI runs (through .ci/run).

CARGO ?= cargo
RUNNER := target/debug/runner

.PHONY: all build test lint fmt sandbox-image sandbox-tiny sandbox-full demo clean-runs bench bench-quick eval-demo

all: build

build:
	$(CARGO) build

## The project's own sandbox images, built from Debian packages (no registry needed).
sandbox-image: sandbox-tiny sandbox-full

sandbox-tiny:
	bash sandbox/build-tiny.sh

sandbox-full:
	bash sandbox/build-full.sh

## Every test: unit, binary, model wire formats, and the docker executor against the real engine.
test: sandbox-image
	$(CARGO) test --all-targets -- --test-threads=2

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

## The main job with no API key: the scripted model drives a sandboxed run.
demo: sandbox-full build
	$(RUNNER) --provider scripted --script examples/demo/script.json \
		--image runner-sandbox:bookworm --keep-workspace "$$(cat examples/demo/task.md)"

## Every example task with its reference solution (Harbor format, offline).
eval-demo: sandbox-full build
	$(RUNNER) eval examples/tasks --agent oracle
