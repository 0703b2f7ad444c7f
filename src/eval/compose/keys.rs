//! What runner does with each Compose service key: use it, leave it out
//! with a warning saying why, or refuse the file naming service and key.

use serde_json::Value;

use super::ComposeError;
use super::service::{Ctx, scalar};

/// What runner does with a service key.
enum Treat {
    /// Read by the parser.
    Use,
    /// Left out with a warning saying why.
    Ignore(&'static str),
    /// Refused, for this reason.
    Refuse(&'static str),
}

pub(super) const HOST_NS: &str = "it would share a namespace with the host or another container";
const LIMITS: &str = "runner's own limits (--cpus, --memory, --pids) apply to every service";

/// Every Compose service key runner knows, and what it does with it.
fn treat(key: &str) -> Option<Treat> {
    use Treat::*;
    Some(match key {
        "image" | "build" | "environment" | "env_file" | "command" | "entrypoint" | "user"
        | "working_dir" | "healthcheck" | "depends_on" | "volumes" | "read_only" | "init"
        | "pid" | "ipc" | "uts" | "cgroup" => Use,
        "privileged" => Refuse("it would give the service the host's devices and every capability"),
        "network_mode" => Refuse(
            "services share one internal network of runner's; a mode of their own would leave it",
        ),
        "userns_mode" | "volumes_from" | "cgroup_parent" => Refuse(HOST_NS),
        "cap_add" => Refuse("sidecars keep only a fixed few capabilities (see README)"),
        "security_opt" => Refuse("it would change the seccomp, AppArmor or privilege settings"),
        "devices" | "device_cgroup_rules" | "gpus" => {
            Refuse("host devices are not given to services")
        }
        "extra_hosts" | "external_links" => {
            Refuse("it points services at hosts outside the task's network")
        }
        "sysctls" | "storage_opt" | "oom_kill_disable" | "credential_spec" | "runtime"
        | "isolation" | "use_api_socket" => {
            Refuse("it changes how the engine confines the service")
        }
        "secrets" | "configs" => Refuse("it reads files from the host"),
        "extends" => Refuse("services must be defined in this file"),
        "ports" => Ignore(
            "nothing is published to the host; the main sandbox reaches each service by name on \
             its own port",
        ),
        "expose" | "labels" | "pull_policy" | "tty" | "stdin_open" | "annotations" => {
            Ignore("no effect in runner")
        }
        "container_name" | "hostname" | "domainname" => {
            Ignore("runner names containers; each service is reachable by its service name")
        }
        "restart" => Ignore("services are not restarted; one that exits fails the start"),
        "deploy" | "mem_limit" | "memswap_limit" | "mem_reservation" | "cpus" | "cpu_shares"
        | "cpu_quota" | "cpu_period" | "cpuset" | "pids_limit" | "ulimits" | "shm_size"
        | "oom_score_adj" | "blkio_config" | "mem_swappiness" => Ignore(LIMITS),
        "networks" | "dns" | "dns_search" | "dns_opt" | "links" | "mac_address" => {
            Ignore("all services share one internal network; names resolve as service names")
        }
        "platform" | "profiles" | "logging" | "stop_grace_period" | "stop_signal" | "group_add"
        | "tmpfs" | "attach" | "scale" | "post_start" | "pre_stop" | "develop" => {
            Ignore("not supported by runner")
        }
        _ => return None,
    })
}

/// Checks the keys of service `name`, warning about those left out.
pub(super) fn check_keys(
    name: &str,
    body: &serde_json::Map<String, Value>,
    ctx: &mut Ctx<'_>,
) -> Result<(), ComposeError> {
    for key in body.keys() {
        match treat(key) {
            Some(Treat::Use) => {}
            Some(Treat::Refuse(why)) => return Err(ctx.refused(name, key, why)),
            Some(Treat::Ignore(why)) => ctx
                .warnings
                .push(format!("service '{name}': `{key}` left out: {why}")),
            None if key.starts_with("x-") => {}
            None => ctx
                .warnings
                .push(format!("service '{name}': unknown key `{key}` left out")),
        }
    }
    for key in ["pid", "ipc", "uts", "cgroup"] {
        if let Some(v) = body.get(key) {
            let v = scalar(v).unwrap_or_default();
            if !matches!(v.as_str(), "" | "private" | "shareable" | "none") {
                return Err(ctx.refused(name, key, format!("'{v}': {HOST_NS}")));
            }
        }
    }
    Ok(())
}
