"""Where a replica answers: its OpenAI base URL, and the server root for probes.

A pool's `urls` are the replicas' OpenAI base URLs, the same strings a client would use
as `base_url`: `http://gpu-1:30000/v1`. A URL without a path means the server root and
gets `/v1` appended. Health checks (`health_path`, `/health` by default) and `/metrics`
are requested at the root, where SGLang and vLLM serve them:
`http://gpu-1:30000/health`, `http://gpu-1:30000/metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

OPENAI_PATH = "/v1"


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    base_url: str
    root_url: str

    @classmethod
    def parse(cls, url: str) -> ReplicaAddress:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"replica url {url!r} must look like http://host:port/v1")
        path = parts.path.rstrip("/")
        if not path:
            path = OPENAI_PATH
        root_path = path.removesuffix(OPENAI_PATH) if path.endswith(OPENAI_PATH) else ""
        root = urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))
        base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        return cls(base_url=base, root_url=root)

    def at_root(self, path: str) -> str:
        return self.root_url + "/" + path.lstrip("/")
