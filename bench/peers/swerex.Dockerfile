# runner-bench-swerex:1.4.0: runner-sandbox:bookworm plus SWE-ReX's server, the way SWE-ReX's
# DockerDeployment starts it (`/bin/sh -c "swerex-remote --auth-token ..."`): `swerex-remote` on
# PATH. Built by bench/peers/install.sh with `--network none` from wheels downloaded on the host
# (wheels/) at the versions pinned in constraints.txt. The image has no pip and no ensurepip, so
# the pinned pip runs from its own wheel, into a venv of its own that leaves the system Python (the
# one the benchmark's commands use) untouched.
ARG BASE=runner-sandbox:bookworm
FROM ${BASE}
COPY wheels /tmp/swerex-wheels
COPY constraints.txt /tmp/swerex-constraints.txt
RUN set -e; \
    python3 -m venv --without-pip /opt/swerex; \
    pip_wheel="$(ls /tmp/swerex-wheels/pip-*-py3-none-any.whl)"; \
    /opt/swerex/bin/python3 "$pip_wheel/pip" install --no-index --no-cache-dir \
        --disable-pip-version-check --find-links /tmp/swerex-wheels \
        -c /tmp/swerex-constraints.txt swe-rex; \
    ln -s /opt/swerex/bin/swerex-remote /usr/local/bin/swerex-remote; \
    rm -rf /tmp/swerex-wheels /tmp/swerex-constraints.txt; \
    swerex-remote --version
