# Redis for the compose stack, from Debian's redis-server package on the debootstrapped
# base (no image registry needed). AOF on: budgets and the ledger survive a restart.
ARG BASE_IMAGE=gateway-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--port", "6379", "--dir", "/data", "--appendonly", "yes", "--appendfsync", "everysec"]
