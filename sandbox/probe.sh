#!/bin/sh
# Confinement probe: run inside the sandbox (as a bash tool call) to see
# what a command there can do. Prints key=value lines; $1 names a canary
# environment variable that must NOT be visible.
# Usage: sh probe.sh [CANARY_VAR_NAME]

status_field() { sed -n "s/^$1:[[:space:]]*//p" /proc/self/status 2>/dev/null | head -n 1; }

echo "cap_eff=$(status_field CapEff)"
echo "no_new_privs=$(status_field NoNewPrivs)"
echo "seccomp=$(status_field Seccomp)"
echo "uid=$(id -u 2>/dev/null)"

# Interfaces from /proc/net/dev (skip its two header lines).
ifaces=$(sed -n '3,$p' /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ',' | sed 's/,$//')
[ -n "$ifaces" ] || ifaces=$(ls /sys/class/net 2>/dev/null | sort | tr '\n' ',' | sed 's/,$//')
echo "net_ifaces=$ifaces"

probe_file="/.runner-probe-$$"
if (echo x > "$probe_file") 2>/dev/null; then
    rm -f "$probe_file"
    echo "root_readonly=0"
else
    echo "root_readonly=1"
fi
if (echo x > /workspace/.runner-probe-$$) 2>/dev/null; then
    rm -f /workspace/.runner-probe-$$
    echo "workspace_writable=1"
else
    echo "workspace_writable=0"
fi

first_of() { for f in "$@"; do [ -r "$f" ] && { cat "$f"; return; }; done; echo unknown; }
echo "memory_limit=$(first_of /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max)"
echo "memsw_limit=$(first_of /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes /sys/fs/cgroup/memory.swap.max)"
echo "pids_limit=$(first_of /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max)"

sock=0
for s in /var/run/docker.sock /run/docker.sock; do
    [ -e "$s" ] && sock=1
done
echo "docker_socket=$sock"

if [ -n "$1" ]; then
    if env | grep -q "^$1="; then echo "canary_visible=1"; else echo "canary_visible=0"; fi
fi
