# s2s gRPC server: ONNX Runtime (CUDA execution provider when a GPU is visible, CPU otherwise),
# the default model repository baked in at /models, no torch and no training data.
#
#   docker build -f deploy/docker/server.Dockerfile -t s2s-server:0.1.0 .
#
# BASE_IMAGE must provide CUDA 13 + cuDNN 9 for onnxruntime-gpu 1.31 to run on the GPU. Any other
# Debian/Ubuntu image with Python >= 3.11 also works and serves on the CPU, e.g. the slim variant
# that docker-compose.cpu.yml builds:  --build-arg BASE_IMAGE=python:3.12.12-slim-bookworm
ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS build

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The CUDA images ship no Python: take the distribution's (3.12 on Ubuntu 24.04). Python base images
# already have one in /usr/local/bin, and adding Debian's next to it would only confuse the venv.
# Not pinned to a Debian revision: the archive drops superseded revisions, which would break the build.
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Sources only: .dockerignore keeps out .venv, runs/, data/, checkpoints, caches and stale stubs.
COPY . .

# 1. the serve extra (onnxruntime-gpu, grpcio*, prometheus-client; no torch),
# 2. the gRPC stubs, generated from protos/ exactly as `make protos` does,
# 3. reinstall the package itself so that the generated stubs land in site-packages.
# Versions are pinned in pyproject.toml (the serve extra), which hadolint cannot see.
# hadolint ignore=DL3013
RUN pip install ".[serve]" \
    && find protos -name '*.proto' -print0 \
        | xargs -0 python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \
    && pip install --no-deps --force-reinstall . \
    && if pip show torch >/dev/null 2>&1; then echo "torch must not be in the server image" >&2; exit 1; fi

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime

ARG S2S_VERSION=0.1.0
LABEL org.opencontainers.image.title="s2s-server" \
      org.opencontainers.image.description="seq2seq Transformer inference over gRPC on ONNX Runtime" \
      org.opencontainers.image.version="${S2S_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The venv links to the base image's interpreter: install the same one as in the build stage.
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --system --gid 10001 s2s \
    && useradd --system --uid 10001 --gid s2s --no-log-init --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin s2s

COPY --from=build /opt/venv /opt/venv
COPY deploy/docker/healthcheck.py /opt/s2s/healthcheck.py
# The default model repository (addition, translate-en-ja). Mount another one over /models to replace it.
COPY models/ /models/

# HOME=/tmp: the user has no home, and caches (e.g. CUDA's JIT cache) should land somewhere writable,
# also under Kubernetes' readOnlyRootFilesystem, where /tmp is an emptyDir.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    S2S_MODEL_REPO=/models \
    S2S_HOST=0.0.0.0 \
    S2S_PORT=8001 \
    S2S_HTTP_PORT=8000 \
    S2S_METRICS_PORT=8002 \
    S2S_LOG_LEVEL=info

# Numeric, so that Kubernetes can check runAsNonRoot without resolving a name.
USER 10001:10001
WORKDIR /tmp

# 8000: HTTP (KServe v2 REST, LibreTranslate API, playground); 8001: gRPC (seq2seq service, KServe v2,
# grpc.health.v1.Health, reflection); 8002: Prometheus /metrics. Triton's three ports.
EXPOSE 8000 8001 8002

# Asks grpc.health.v1.Health/Check (service "" = the whole server) on S2S_PORT; exit 0 only if SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/opt/venv/bin/python", "/opt/s2s/healthcheck.py"]

# The CUDA images' entrypoint (a banner, then exec) is kept; settings come from the S2S_* variables.
CMD ["s2s", "serve"]
