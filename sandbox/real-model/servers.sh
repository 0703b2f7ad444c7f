#!/usr/bin/env bash
# The real model servers of `make test-real-model`, on 127.0.0.1 only:
#   - one llama-cpp-python server per model (SmolLM2-135M-Instruct Q4_1,
#     Gemma 3 270M Q4_K_M), OpenAI's Chat Completions API at /v1;
#   - LiteLLM's proxy in front of both: /v1/chat/completions and Anthropic's
#     /v1/messages, model names `smollm2` and `gemma3`.
#
#   servers.sh start STATE_DIR   start them (free ports), wait until each
#                                answers, write STATE_DIR/servers.env
#   servers.sh stop STATE_DIR    stop what `start` started (by its pids)
#
# servers.env holds shell assignments (also read by tests/real_model):
#   SMOLLM2_URL GEMMA3_URL LITELLM_URL (base URLs ending in /v1), LITELLM_KEY,
#   LLAMA_CPP_PYTHON_VERSION LITELLM_VERSION.
# Logs: STATE_DIR/*.log. Needs sandbox/real-model/install.sh to have run.
#
# llama-cpp-python's `chatml-function-calling` chat format (0.3.36,
# llama_chat_format.py `chatml_function_calling`) decides by `tool_choice`:
#   unset or "none"     the tools are dropped from the prompt: text only;
#   "auto"              a grammar lets the model pick a tool or a message;
#                       not streamable: with `stream: true` the handler raises
#                       after the 200 is sent, so the answer is HTTP 200 with
#                       an empty body;
#   {"type":"function","function":{"name":N}}   the tool N is forced (grammar
#                       on its JSON schema), streamed or not;
#   "required"          fails an `assert` (HTTP 500, empty message); streamed:
#                       HTTP 200 with an empty body.
# No traffic leaves loopback: LiteLLM runs with its local cost map, without
# telemetry, and with `/v1/messages` bridged to chat/completions (not to the
# Responses API, which llama.cpp does not have).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${RUNNER_REAL_MODEL_DIR:-$repo/target/real-model}"
venv="$dest/venv"
models="$dest/models"
py="$venv/bin/python"
# Seconds to wait for a server to answer (LiteLLM's proxy imports for ~10 s).
START_TIMEOUT_SECS="${RUNNER_REAL_MODEL_START_TIMEOUT_SECS:-120}"

die() { printf 'error: %s\n' "$1" >&2; [ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2; exit 1; }
usage() { die "usage: servers.sh start|stop STATE_DIR"; }

[ $# -eq 2 ] || usage
cmd="$1"
state="$2"

# Offline: nothing below may reach past loopback.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1
export LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False LITELLM_LOG=ERROR
export LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES=True DISABLE_SCHEMA_UPDATE=true
export NO_PROXY='*' no_proxy='*'
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy

stop() {
  local pidfile pid
  for pidfile in "$state"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    # Each server is a session leader (setsid): its group is its children.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_up NAME URL [HEADER]: until URL answers 200, or the server died.
wait_up() {
  local name="$1" url="$2" header="${3:-x-none: 0}" deadline=$((SECONDS + START_TIMEOUT_SECS))
  while [ $SECONDS -lt $deadline ]; do
    if "$py" - "$url" "$header" <<'PY' 2>/dev/null; then
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers=dict([sys.argv[2].split(": ", 1)]))
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
sys.exit(0 if opener.open(req, timeout=2).status == 200 else 1)
PY
      return 0
    fi
    kill -0 "$(cat "$state/$name.pid")" 2>/dev/null || {
      tail -n 30 "$state/$name.log" >&2
      die "the $name server exited while starting (log: $state/$name.log)"
    }
    sleep 0.5
  done
  tail -n 30 "$state/$name.log" >&2
  die "the $name server did not answer $url within ${START_TIMEOUT_SECS}s (log: $state/$name.log)"
}

# llama NAME GGUF ALIAS: one llama-cpp-python server for one model.
llama() {
  local name="$1" gguf="$2" alias="$3" port
  [ -f "$gguf" ] || die "no model file $gguf" "run \`make test-real-model\` (sandbox/real-model/install.sh)"
  port="$(free_port)"
  setsid "$py" -m llama_cpp.server --model "$gguf" --model_alias "$alias" \
    --chat_format chatml-function-calling --n_ctx 4096 --n_threads 2 \
    --host 127.0.0.1 --port "$port" >"$state/$name.log" 2>&1 </dev/null &
  echo $! >"$state/$name.pid"
  echo "$port"
}

start() {
  [ -x "$py" ] || die "no real-model venv at $venv" "run \`make test-real-model\` (it installs it first)"
  mkdir -p "$state"
  stop
  rm -f "$state/servers.env"
  # A start that fails half-way stops what it had started.
  trap stop EXIT
  local smol_port gemma_port litellm_port key
  smol_port="$(llama smollm2 "$models/smollm2-135m-instruct-q4_1.gguf" smollm2)"
  gemma_port="$(llama gemma3 "$models/gemma-3-270m-q4_k_m.gguf" gemma3)"
  litellm_port="$(free_port)"
  # LiteLLM's proxy refuses to start without a master key; a fresh one per start.
  key="sk-runner-real-model-$("$py" -c 'import secrets; print(secrets.token_hex(16))')"
  cat >"$state/litellm.yaml" <<EOF
model_list:
  - model_name: smollm2
    litellm_params:
      model: openai/smollm2
      api_base: http://127.0.0.1:$smol_port/v1
      api_key: none
  - model_name: gemma3
    litellm_params:
      model: openai/gemma3
      api_base: http://127.0.0.1:$gemma_port/v1
      api_key: none
litellm_settings:
  telemetry: false
  drop_params: true
  # See litellm_hooks.py: Anthropic's system blocks as one string for llama.cpp.
  callbacks: litellm_hooks.system_as_text
router_settings:
  # A failure reaches runner as it happened: no retry, no cool-down that
  # turns the next request into a 429.
  disable_cooldowns: true
  num_retries: 0
EOF
  cp "$here/litellm_hooks.py" "$state/litellm_hooks.py"
  LITELLM_MASTER_KEY="$key" setsid "$venv/bin/litellm" --config "$state/litellm.yaml" \
    --host 127.0.0.1 --port "$litellm_port" --num_workers 1 >"$state/litellm.log" 2>&1 </dev/null &
  echo $! >"$state/litellm.pid"
  wait_up smollm2 "http://127.0.0.1:$smol_port/v1/models"
  wait_up gemma3 "http://127.0.0.1:$gemma_port/v1/models"
  wait_up litellm "http://127.0.0.1:$litellm_port/v1/models" "Authorization: Bearer $key"
  local llama_version litellm_version
  llama_version="$("$py" -c 'import llama_cpp; print(llama_cpp.__version__)')"
  litellm_version="$("$py" -c 'import importlib.metadata as m; print(m.version("litellm"))')"
  cat >"$state/servers.env.tmp" <<EOF
SMOLLM2_URL=http://127.0.0.1:$smol_port/v1
GEMMA3_URL=http://127.0.0.1:$gemma_port/v1
LITELLM_URL=http://127.0.0.1:$litellm_port/v1
LITELLM_KEY=$key
LLAMA_CPP_PYTHON_VERSION=$llama_version
LITELLM_VERSION=$litellm_version
EOF
  mv "$state/servers.env.tmp" "$state/servers.env"
  trap - EXIT
  echo "real model servers up: smollm2 :$smol_port, gemma3 :$gemma_port, LiteLLM :$litellm_port ($state/servers.env)"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
