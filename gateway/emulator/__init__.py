"""A continuous-batching GPU backend emulator: an SGLang stand-in for tests and benches.

`build_app(options)` gives the ASGI app of one replica, `serve(options, host, port)` runs
it. The scheduler (`scheduler.py`) is pure logic on a caller's clock; `engine.py` paces it
in real time; `app.py` speaks OpenAI's HTTP API; `metrics.py` SGLang's or vLLM's metrics.
"""

from gateway.emulator.app import EmulatorApp, build_app
from gateway.emulator.options import EmulatorOptions
from gateway.emulator.server import serve

__all__ = ["EmulatorApp", "EmulatorOptions", "build_app", "serve"]
