"""The reference environments, created on first use: Agent Lightning 0.3.0 (+ its 1.x gateway) and TRL.

They live in their own virtual environments under bench/ (gitignored), never in the project's venv:

- bench/.venv-agl: `agentlightning==0.3.0` with OpenTelemetry pinned to 1.44.0 (newer SDKs silently drop
  the spans of its LiteLLM proxy);
- bench/.agl1: the newest 1.x wheel, fetched for Python 3.12 without dependencies and unpacked, so its
  gateway can be tried from bench/.venv-agl under this Python;
- bench/.venv-trl: torch 2.13.0 (CPU build, installed first so pip keeps it), then `trl` and `peft` pinned
  to the versions pip resolved here.

Each `ensure_*` returns what it set up, or raises `Unavailable` with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGL_VENV = HERE / ".venv-agl"
AGL1_DIR = HERE / ".agl1"
TRL_VENV = HERE / ".venv-trl"
AGL_VERSION = "0.3.0"
OTEL_VERSION = "1.44.0"
OTEL_BETA_PINS = ("opentelemetry-instrumentation==0.65b0", "opentelemetry-semantic-conventions==0.65b0")
TORCH_VERSION = "2.13.0"
TRL_PINS = ("trl==1.16.0", "peft==0.21.2")  # what pip resolved with torch 2.13.0 on Python 3.11
AGL1_SERVER_DEPS = ("structlog>=24.4.0", "omegaconf==2.3.0")
INSTALL_TIMEOUT_S = 1800


class Unavailable(RuntimeError):
    """A reference that cannot be installed or run here; the message says why."""


def agl_env() -> dict[str, str]:
    """Environment for every Agent Lightning process: LiteLLM without a master key, no network look-ups."""
    return {
        **os.environ,
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "AGENTOPS_API_KEY": "",
        "PYTHONUNBUFFERED": "1",
    }


def _run(args: list[str], what: str, log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise Unavailable(f"{what} failed (exit {done.returncode}): {' '.join(tail)[-200:]}")


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _imports(python: Path, code: str, env: dict[str, str] | None = None) -> bool:
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", code], capture_output=True, timeout=300, env=env)
    return done.returncode == 0


def _make_venv(venv: Path, log: Path) -> Path:
    if not _python(venv).exists():
        _run([sys.executable, "-m", "venv", str(venv)], f"creating {venv.name}", log)
        _run([str(_python(venv)), "-m", "pip", "install", "-q", "--upgrade", "pip"], "upgrading pip", log)
    return _python(venv)


def _otel_pins(python: Path) -> list[str]:
    """Every installed opentelemetry-* distribution on the 1.x line pinned to OTEL_VERSION, and its betas."""
    code = (
        "from importlib import metadata\n"
        "for d in metadata.distributions():\n"
        "    n = d.metadata['Name'] or ''\n"
        "    if n.lower().startswith('opentelemetry') and d.version.startswith('1.'): print(n)"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    return sorted({f"{name}=={OTEL_VERSION}" for name in done.stdout.split()}) + list(OTEL_BETA_PINS)


def ensure_agl(log: Path) -> Path:
    """Python of bench/.venv-agl with agentlightning 0.3.0 importable."""
    python = _python(AGL_VENV)
    check = (
        "import importlib.metadata as m; "
        f"assert m.version('agentlightning') == {AGL_VERSION!r}; "
        f"assert m.version('opentelemetry-sdk') == {OTEL_VERSION!r}"
    )
    if _imports(python, check, agl_env()):
        return python
    python = _make_venv(AGL_VENV, log)
    install = [str(python), "-m", "pip", "install", f"agentlightning=={AGL_VERSION}"]
    _run(install, "pip install agentlightning", log)
    pins = _otel_pins(python)
    if pins:
        _run([str(python), "-m", "pip", "install", *pins], f"pinning OpenTelemetry {OTEL_VERSION}", log)
    if not _imports(python, "import agentlightning", agl_env()):
        raise Unavailable("agentlightning was installed but does not import")
    return python


def ensure_agl1(log: Path) -> Path:
    """Folder holding the unpacked 1.x `agentlightning` package (to put first on PYTHONPATH)."""
    unpacked = AGL1_DIR / "src"
    python = ensure_agl(log)
    if not _imports(python, "import structlog, omegaconf"):
        # what its server imports beyond 0.3.0's dependencies (Hydra is only its command line)
        _run(
            [str(python), "-m", "pip", "install", *AGL1_SERVER_DEPS], "pip install the 1.x server's deps", log
        )
    if (unpacked / "agentlightning").is_dir():
        return unpacked
    wheels = AGL1_DIR / "wheels"
    args = [str(python), "-m", "pip", "download", "agentlightning", "--python-version", "3.12"]
    _run(
        [*args, "--only-binary=:all:", "--no-deps", "-d", str(wheels)], "pip download agentlightning 1.x", log
    )
    candidates = sorted(
        w for w in wheels.glob("agentlightning-*.whl") if not w.name.startswith("agentlightning-0.")
    )
    if not candidates:
        raise Unavailable("pip offered no agentlightning 1.x wheel")
    with zipfile.ZipFile(candidates[-1]) as wheel:
        wheel.extractall(unpacked)
    return unpacked


def agl1_version(unpacked: Path) -> str:
    for meta in unpacked.glob("agentlightning-*.dist-info"):
        return meta.name.removeprefix("agentlightning-").removesuffix(".dist-info")
    return "unknown"


def ensure_trl(log: Path) -> Path:
    """Python of bench/.venv-trl with torch (CPU) and trl importable."""
    python = _python(TRL_VENV)
    if _imports(python, "import trl, torch, peft"):
        return python
    python = _make_venv(TRL_VENV, log)
    _run(
        [str(python), "-m", "pip", "install", f"torch=={TORCH_VERSION}"],
        f"pip install torch=={TORCH_VERSION}",
        log,
    )
    _run([str(python), "-m", "pip", "install", *TRL_PINS], "pip install trl", log)
    if not _imports(python, "import trl, torch, peft"):
        raise Unavailable("trl (or peft) was installed but does not import")
    return python
