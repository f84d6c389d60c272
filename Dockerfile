# The gateway image; the emulator services of docker-compose.yml run it too
# (`gateway emulate ...`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies change less often than code: one layer for the install, keyed on the package.
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install . && useradd --system --uid 10001 --no-create-home gateway

# Shipped configs and policies; docker-compose.yml mounts the checkout's over them.
COPY config /etc/gateway/config
COPY policies /etc/gateway/policies
COPY deploy/docker/entrypoint.sh /usr/local/bin/gateway-entrypoint

USER gateway
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway-entrypoint"]
CMD ["gateway", "serve", "--config", "/etc/gateway/config/compose.yaml"]
