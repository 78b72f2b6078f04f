# s2s training and export: torch (CPU wheel), the train and export extras. No CUDA, no server.
#
#   docker compose --profile train run --rm train train --task addition --out runs/addition
#   docker compose --profile train run --rm train export ...
#
# Data, runs and the model repository are bind-mounted by docker-compose.yml (./data, ./runs,
# ./models, ./.cache), so nothing trained lives in the image.
FROM python:3.12.12-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv \
    && pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /opt/s2s-src
COPY . .
# torch is already there (the CPU build satisfies torch==2.13.0); the rest is pinned in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".[train,export]" \
    && python -c "import torch; print('torch', torch.__version__)" \
    && groupadd --system --gid 1000 s2s \
    && useradd --system --uid 1000 --gid s2s --no-log-init --create-home --home-dir /home/s2s s2s \
    && mkdir -p /work \
    && chown s2s:s2s /work

ENV HOME=/home/s2s \
    XDG_CACHE_HOME=/work/.cache

# 1000:1000 matches the first user of most Linux hosts, so files written to the bind mounts stay
# theirs; docker-compose.yml lets S2S_UID / S2S_GID override it.
USER 1000:1000
WORKDIR /work

ENTRYPOINT ["s2s"]
CMD ["--help"]
