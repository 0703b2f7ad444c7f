"""Harbor's own CLI (`harbor.cli.main:app`), with one offline adaptation.

Harbor 0.26's Docker environment enforces `network_mode = "no-network"`
(and the deprecated `allow_internet = false`) with an egress-control sidecar
built FROM a Docker Hub image pinned by digest, after a kernel probe that runs
another image pinned by digest. With no registry neither can be had: the
probe fails (so Harbor turns egress control off) and every no-network task
is then refused ("network_mode='no-network' is not supported by docker
environment").

Here the Docker environment instead enforces no-network with the overlay
Harbor itself ships for its other compose providers,
`docker-compose-no-network.yaml` (`network_mode: none` on `main`). Nothing
else is changed: task loading, the agents, the verifier, reward parsing and
the job results are Harbor's. Allowlists stay refused.
"""

import sys

from harbor.cli.main import app
from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import NetworkMode

# The probe's image cannot be pulled offline: it would fail and return False.
DockerEnvironment._egress_control_kernel_support = classmethod(lambda cls: False)

_capabilities = DockerEnvironment.capabilities.fget
_compose_paths = DockerEnvironment._docker_compose_paths.fget
_apply_network_policy = DockerEnvironment._apply_network_policy


def _no_network_by_overlay(self) -> bool:
    return (
        not self._enable_egress_control
        and not self._is_windows_container
        and self.network_policy.network_mode == NetworkMode.NO_NETWORK
    )


def capabilities(self):
    caps = _capabilities(self)
    if not self._enable_egress_control and not self._is_windows_container:
        caps = caps.model_copy(update={"disable_internet": True})
    return caps


def docker_compose_paths(self):
    paths = _compose_paths(self)
    if _no_network_by_overlay(self):
        paths.append(COMPOSE_NO_NETWORK_PATH)
    return paths


async def apply_network_policy(self, network_policy):
    if _no_network_by_overlay(self) and network_policy == self.network_policy:
        return
    await _apply_network_policy(self, network_policy)


DockerEnvironment.capabilities = property(capabilities)
DockerEnvironment._docker_compose_paths = property(docker_compose_paths)
DockerEnvironment._apply_network_policy = apply_network_policy

if __name__ == "__main__":
    sys.argv[0] = "harbor"
    sys.exit(app())
