# The gateway image; the emulator services of docker-compose.yml run it too
# (`gateway emulate ...`). Built offline by `make compose-images`: the base is a Debian
# bookworm root made with debootstrap and `docker import`ed as gateway-base:bookworm
# (no image registry is needed), Python comes from Debian's packages, and the gateway
# with its dependencies installs with pip from wheels built beside it
# (build/compose/wheels, by deploy/docker/build-images.sh).
ARG BASE_IMAGE=gateway-base:bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/gateway/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

COPY build/compose/wheels /tmp/wheels
RUN python3 -m venv /opt/gateway \
    && /opt/gateway/bin/pip install --no-index --find-links /tmp/wheels gateway \
    && rm -rf /tmp/wheels \
    && useradd --system --uid 10001 --no-create-home gateway \
    && mkdir -p /var/lib/gateway/spill && chown gateway /var/lib/gateway/spill

# Shipped configs and policies; docker-compose.yml mounts the checkout's over them.
COPY config /etc/gateway/config
COPY policies /etc/gateway/policies
COPY deploy/docker/entrypoint.sh /usr/local/bin/gateway-entrypoint

USER gateway
WORKDIR /var/lib/gateway
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway-entrypoint"]
CMD ["gateway", "serve", "--config", "/etc/gateway/config/compose.yaml"]
