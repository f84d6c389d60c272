"""Observability: Prometheus metrics (multi-process safe) and structured request logs.

`metrics.GatewayMetrics` owns every `gateway_*` metric; `logs` turns one finished request
into one log line. Neither imports the rest of the gateway: the request pipeline calls
them with plain values.
"""
