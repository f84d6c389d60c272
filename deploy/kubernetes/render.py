"""Render every Kustomize overlay of deploy/kubernetes/ to build/k8s/<overlay>.yaml, offline.

`make k8s-render` runs this. The kubectl is Debian's kubernetes-client package (1.20,
with its embedded Kustomize v2.0.3), unpacked into tools/kubernetes-client/ (build
output, git-ignored) with `apt-get download` and `dpkg -x`, never installed over the
machine's own kubectl. That Kustomize refuses files outside a kustomization's folder, so
the overlays' policy files are staged from the checkout's policies/ into a copy of this
folder under build/k8s/kustomize/ before rendering.

Exit codes: 0 rendered, 1 a render failed, 3 the kubectl tool could not be obtained.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "deploy" / "kubernetes"
TOOLS = REPO / "tools" / "kubernetes-client"
KUBECTL = TOOLS / "usr" / "bin" / "kubectl"
TOOL_MISSING = 3

# overlay -> the checkout's policy files it ships in its gateway-policies ConfigMap
STAGED_POLICIES = {
    "dev": ("dev.yaml",),
    "production": ("models.yaml", "routes.yaml", "tenants.yaml"),
}


class ToolMissing(Exception):
    pass


def _download_deb(into: Path) -> Path:
    def download() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", "download", "kubernetes-client"],
            cwd=into, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    result = download()
    if result.returncode != 0:
        # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        result = download()
    debs = list(into.glob("kubernetes-client_*.deb"))
    if result.returncode != 0 or not debs:
        raise ToolMissing(f"apt-get download kubernetes-client failed: {result.stderr.strip()}")
    return debs[0]


def ensure_kubectl() -> Path:
    """The unpacked kubernetes-client kubectl, fetched on first use."""
    if KUBECTL.is_file():
        return KUBECTL
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise ToolMissing("apt-get and dpkg are needed to fetch Debian's kubernetes-client")
    with tempfile.TemporaryDirectory(prefix="kubernetes-client-") as tmp:
        Path(tmp).chmod(0o777)  # apt's _apt user writes the download here
        deb = _download_deb(Path(tmp))
        staging = Path(tmp) / "root"
        subprocess.run(["dpkg", "-x", str(deb), str(staging)], check=True, timeout=120)
        TOOLS.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(TOOLS, ignore_errors=True)
        shutil.move(str(staging), TOOLS)
    if not KUBECTL.is_file():
        raise ToolMissing(f"the kubernetes-client package has no {KUBECTL.relative_to(TOOLS)}")
    return KUBECTL


def stage(out: Path) -> Path:
    """A copy of deploy/kubernetes with each overlay's policies beside it."""
    tree = out / "kustomize"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(SOURCE, tree, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for overlay, names in STAGED_POLICIES.items():
        folder = tree / "overlays" / overlay / "policies"
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy2(REPO / "policies" / name, folder / name)
    return tree


def render(out: Path) -> dict[str, Path]:
    kubectl = ensure_kubectl()
    tree = stage(out)
    rendered: dict[str, Path] = {}
    for overlay in sorted(p.name for p in (tree / "overlays").iterdir() if p.is_dir()):
        result = subprocess.run(
            [str(kubectl), "kustomize", str(tree / "overlays" / overlay)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"kubectl kustomize overlays/{overlay}: {result.stderr.strip()}")
        target = out / f"{overlay}.yaml"
        target.write_text(result.stdout)
        rendered[overlay] = target
    return rendered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "k8s")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        rendered = render(args.out)
    except ToolMissing as exc:
        print(f"kubectl (kubernetes-client) not available: {exc}", file=sys.stderr)
        return TOOL_MISSING
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for overlay, path in rendered.items():
        print(f"{overlay}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
