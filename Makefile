# runner: build, test, sandbox images, demo and benchmarks.
# `make test` is what CI runs (through .ci/run).

CARGO ?= cargo
RUNNER := target/debug/runner

.PHONY: demo-run prereqs-demo install all build test prereqs test-unit test-runsc lint fmt sandbox-image sandbox-tiny sandbox-full sandbox-proxy demo clean-runs bench bench-quick bench-peers bench-images eval-demo harbor test-harbor test-real-model

all: build

build:
	$(CARGO) build

## The release binary, its man pages and bash's, zsh's and fish's completions, under
## $(DESTDIR)$(PREFIX). INSTALL_BIN: another build of runner to install instead.
PREFIX ?= /usr/local
INSTALL_BIN ?= target/release/runner
install:
	@if [ "$(INSTALL_BIN)" = target/release/runner ]; then $(CARGO) build --release --bin runner; fi
	install -D -m 755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/runner
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	$(INSTALL_BIN) man $(DESTDIR)$(PREFIX)/share/man/man1
	$(INSTALL_BIN) completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/runner
	$(INSTALL_BIN) completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_runner
	$(INSTALL_BIN) completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/runner.fish

## The project's own sandbox images, built from Debian packages (no registry needed), and the
## egress proxy's image (tinyproxy) that --allow-host and allowlisted tasks need.
sandbox-image: sandbox-tiny sandbox-full sandbox-proxy

sandbox-tiny:
	bash sandbox/build-tiny.sh

sandbox-full:
	bash sandbox/build-full.sh

sandbox-proxy:
	bash sandbox/build-proxy.sh

## Every test: unit, binary, model wire formats, and the docker executor against the real engine;
## then the docker security tests again on gVisor. First checks every prerequisite (one message
## naming all that is missing and the command that installs it); runs every test binary even when
## one fails and ends with one summary (tests/run-all.sh; logs in target/test-logs/).
test: prereqs
	$(MAKE) sandbox-image
	CARGO=$(CARGO) bash tests/run-all.sh all

## What `make test` needs beyond the toolchain: installed as root on Debian
## (sandbox/install-host.sh), else checked (tests/prereqs.sh), exit 2 naming what is missing and
## the one command that installs it.
prereqs:
	bash sandbox/install-host.sh test

## What `make demo` needs: the engine, started, and the image build's tools (as prereqs).
prereqs-demo:
	bash sandbox/install-host.sh demo

## What needs no Docker, on a machine without it: the unit tests, the local executor (tests/local),
## the model clients (tests/model), the binary's tests outside its `docker` modules (tests/cli), and
## the few tests of the docker suites that stop before any engine is reached (usage errors, an
## unreachable engine). Tests that need Docker fail without it, so they are filtered out here.
test-unit:
	$(CARGO) test --lib --bins --test local --test model -- --test-threads=2
	$(CARGO) test --test cli -- --test-threads=2 --skip docker::
	$(CARGO) test --test docker -- --test-threads=2 lifecycle::unreachable_or_hanging_docker_fails_fast
	$(CARGO) test --test eval -- --test-threads=2 \
		suite::wrong_types_in_task_toml_name_the_file_and_key \
		suite::model_agent_without_a_key_fails_before_any_sandbox
	$(CARGO) test --test security -- --test-threads=2 command_timeout:: \
		kill::local_executor_tells_the_model_about_killed_background_processes \
		seccomp::a_seccomp_file_that_is_not_a_profile_is_refused_with_a_hint

## The docker security tests with every sandbox on gVisor: the executor's tests, the binary's
## docker tests (the `docker` modules of tests/cli) and tests/security with
## RUNNER_TEST_RUNTIME=runsc (runsc must be registered with the engine, as .ci/run does; they fail
## otherwise). The eval suites stay on runc only (Debian's runsc 20221219 rejects the statx flags
## of bookworm's coreutils, see README).
test-runsc: prereqs
	$(MAKE) sandbox-image
	CARGO=$(CARGO) bash tests/run-all.sh runsc

## Harbor itself (PyPI `harbor`, pinned in sandbox/harbor/requirements.txt) with Python 3.13 and
## Docker Compose v2, in a Debian trixie root under target/harbor (bookworm has neither); run it
## with sandbox/harbor/harbor.sh. Needs root, Debian's archive and PyPI. Fast when already there.
harbor:
	bash sandbox/harbor/install.sh

## Harbor and runner on the same task directories (tests/harbor): identical verdicts under the
## oracle and nop agents, except tests/harbor-differences.toml; and `runner eval --harbor-job` read
## back by Harbor's own models and viewer (tests/harbor/job_layout.rs). Fails without `make harbor`.
test-harbor: sandbox-image build
	$(CARGO) test --test harbor -- --test-threads=2 --nocapture

## runner end to end against real local model servers (tests/real_model): llama-cpp-python's
## server with SmolLM2-135M and Gemma 3 270M, and LiteLLM's proxy (its Chat Completions and
## Anthropic /v1/messages), all pinned in sandbox/real-model/ and installed into
## target/real-model/venv; llama.cpp is built once per machine (about 10 minutes) into
## $${RUNNER_REAL_MODEL_CACHE:-/var/cache/runner/real-model}. Only 127.0.0.1 is contacted.
## The table of runs: target/real-model/report.md.
test-real-model: sandbox-tiny
	bash sandbox/real-model/install.sh
	$(CARGO) test --test real_model -- --test-threads=1 --nocapture

lint:
	$(CARGO) fmt --all --check
	sh tests/size_limits.sh
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --test harbor -- -D warnings
	$(CARGO) clippy --test real_model -- -D warnings

fmt:
	$(CARGO) fmt --all

## The main job with no API key: the example suite graded with its reference solutions.
demo: prereqs-demo sandbox-full build
	$(RUNNER) eval examples/tasks --agent oracle --junit runs/demo-junit.xml --summary runs/demo-summary.md

## One task, one sandbox, a scripted model driving the loop (no API key).
demo-run: sandbox-full build
	$(RUNNER) --provider scripted --script examples/demo/script.json \
		--image runner-sandbox:bookworm --keep-workspace "$$(cat examples/demo/task.md)"

## Benchmarks (issue 5): runner and its peers, interleaved, in one run. `bench` writes
## bench/results.json and the generated section of BENCHMARKS.md; `bench-quick` only
## checks that the suite still works (CI), writing under target/bench-quick/, with the debug
## build (the one the tests use: no release build in CI; its figures mean nothing).
BENCH_IMAGES := runner-sandbox:tiny runner-sandbox:bookworm

bench-images:
	@for img in $(BENCH_IMAGES); do \
		docker image inspect $$img >/dev/null 2>&1 || { \
			echo "error: image $$img is missing" >&2; \
			echo "hint: run \`make sandbox-image\` first" >&2; exit 2; }; \
	done

bench: bench-images
	$(CARGO) build --release --bin runner
	$(CARGO) bench --bench suite -- --full

## runner against the tools users pick instead, in one run (issue 14): mini-swe-agent and SWE-ReX
## (pinned, in a venv under target/peers, with SWE-ReX's image built offline from PyPI wheels:
## bench/peers/install.sh), Harbor (`make harbor`), and runner on runc and on runsc. Writes the
## `peers` part of bench/results.json and its section of BENCHMARKS.md. The installs are one-time;
## the run itself takes under 15 minutes.
bench-peers: bench-images
	bash bench/peers/install.sh
	$(MAKE) harbor
	$(CARGO) build --release --bin runner
	$(CARGO) bench --bench suite -- --peers

bench-quick: bench-images
	$(CARGO) build --bin runner
	RUNNER_BIN=$(CURDIR)/target/debug/runner $(CARGO) test --bench suite -- --quick

## Every example task with its reference solution (Harbor format, offline).
eval-demo: demo
