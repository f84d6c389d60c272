"""Build llama.cpp's `llama-server` once, into a cache folder the project owns.

The sources are the ones vendored in `llama-cpp-python`'s source distribution on PyPI
(fetched with pip, the registry's ordinary client). Only the `llama-server` target is
built: Release, CPU only, static, no web UI, no TLS, `-j2`. Everything lives under
`.cache/llamacpp/` in the repository (git-ignored), or under `$GATEWAY_LLAMACPP_CACHE`:

    .cache/llamacpp/
      llama_cpp_python-<version>.tar.gz    the sdist, as pip downloaded it
      src/llama_cpp_python-<version>/vendor/llama.cpp/
      build/bin/llama-server
      build.json                           version, seconds, sizes of the last build
      models/                              tiny generated models (see tiny_model.py)

Tests never build: they use a finished build or skip, naming `make real-backend`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the llama-cpp-python release whose vendored llama.cpp is built
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CACHE_ENV = "GATEWAY_LLAMACPP_CACHE"
BUILD_JOBS = 2
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    # the web UI is either built with npm or downloaded at configure time: neither here
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each part of the cached build lives."""

    root: Path

    @classmethod
    def default(cls) -> Layout:
        configured = os.environ.get(CACHE_ENV)
        return cls(Path(configured) if configured else REPO / ".cache" / "llamacpp")

    @property
    def sdist(self) -> Path:
        return self.root / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"

    @property
    def source(self) -> Path:
        return (
            self.root
            / "src"
            / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
            / "vendor"
            / ("llama.cpp")
        )

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def server(self) -> Path:
        return self.build_dir / "bin" / "llama-server"

    @property
    def record(self) -> Path:
        return self.root / "build.json"

    @property
    def vocabulary(self) -> Path:
        """llama.cpp's vocabulary-only GGUF of its SentencePiece tokenizer tests."""
        return self.source / "models" / "ggml-vocab-llama-spm.gguf"

    @property
    def models(self) -> Path:
        return self.root / "models"


@dataclass(frozen=True, slots=True)
class BuildRecord:
    llama_cpp_python: str
    build_seconds: float
    server_bytes: int
    build_dir_bytes: int
    finished_at: str


def finished_build(layout: Layout) -> BuildRecord | None:
    """The record of a usable build: the server binary and vocabulary are there."""
    if not (layout.server.is_file() and layout.vocabulary.is_file()):
        return None
    record = read_record(layout)
    if record is None or record.llama_cpp_python != LLAMA_CPP_PYTHON_VERSION:
        return None
    return record


def missing_tools() -> list[str]:
    """What the build needs on PATH that is not there."""
    return [tool for tool in ("cmake", "c++", "cc") if shutil.which(tool) is None]


def why_not_built(layout: Layout) -> str:
    """One line for a skipped test: what is missing and how to get it."""
    missing = missing_tools()
    if missing:
        return (
            f"llama-server cannot be built here: {', '.join(missing)} not on PATH "
            "(install cmake and g++, then run `make real-backend`)"
        )
    return (
        f"llama-server is not built in {layout.root} (run `make real-backend` once: it "
        "compiles llama.cpp's server, ~10-25 minutes on 2 cores)"
    )


def build(layout: Layout, jobs: int = BUILD_JOBS) -> BuildRecord:
    """Download, unpack, configure and compile as needed; each step is skipped when its
    output is already there, so a second call costs seconds."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"cannot build llama-server: {', '.join(missing)} not on PATH")
    layout.root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not layout.sdist.is_file():
        download_sdist(layout)
    if not (layout.source / "CMakeLists.txt").is_file():
        unpack_llama_cpp(layout)
    if not (layout.build_dir / "CMakeCache.txt").is_file():
        run(["cmake", "-S", str(layout.source), "-B", str(layout.build_dir), *CMAKE_FLAGS])
    run(
        [
            "cmake", "--build", str(layout.build_dir), "--config", "Release",
            "--target", "llama-server", f"-j{jobs}",
        ]
    )  # fmt: skip
    record = BuildRecord(
        llama_cpp_python=LLAMA_CPP_PYTHON_VERSION,
        build_seconds=round(time.monotonic() - started, 1),
        server_bytes=layout.server.stat().st_size,
        build_dir_bytes=folder_bytes(layout.build_dir),
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    previous = read_record(layout)
    # a rebuild that found everything compiled keeps the first build's time
    if previous is not None and previous.build_seconds > record.build_seconds:
        record = BuildRecord(**{**asdict(record), "build_seconds": previous.build_seconds})
    layout.record.write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record


def read_record(layout: Layout) -> BuildRecord | None:
    if not layout.record.is_file():
        return None
    return BuildRecord(**json.loads(layout.record.read_text()))


def download_sdist(layout: Layout) -> None:
    run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
            "--dest", str(layout.root),
        ]
    )  # fmt: skip
    if not layout.sdist.is_file():
        raise RuntimeError(f"pip did not leave {layout.sdist.name} in {layout.root}")


def unpack_llama_cpp(layout: Layout) -> None:
    """Only `vendor/llama.cpp` of the sdist (its Python bindings are not needed)."""
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
    target = layout.root / "src"
    with tarfile.open(layout.sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        archive.extractall(target, members=members, filter="data")


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def run(command: list[str]) -> None:
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)
