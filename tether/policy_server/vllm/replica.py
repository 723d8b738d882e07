"""Talking to one vLLM server: health, the base model, LoRA loading, weight reloads, pause and resume,
and the check of what an external server was started with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tether.policy_server.base import PolicyServerError
from tether.policy_server.vllm.launch import VLLMProcess

PROBE_ADAPTER = "tether-capability-probe"


class VLLMError(PolicyServerError):
    """A vLLM server refused or failed an admin request; the message quotes vLLM."""


@dataclass
class Replica:
    """One vLLM server: its root URL (no /v1), and its process when Tether manages it."""

    url: str
    process: VLLMProcess | None = None
    adapters: list[str] = field(default_factory=list)  # LoRA names loaded, oldest first

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def healthy(self) -> bool:
        try:
            with self.client(timeout=2.0) as client:
                return client.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def base_model(self) -> str:
        with self.client(timeout=10.0) as client:
            models = _answer(client.get("/v1/models"), "list its models")["data"]
        roots = [m["id"] for m in models if not m.get("parent")]
        if not roots:
            raise VLLMError(f"vLLM at {self.url} serves no base model")
        return str(roots[0])

    def load_adapter(self, name: str, path: Path) -> None:
        body = {"lora_name": name, "lora_path": str(path.resolve())}
        with self.client() as client:
            _answer(client.post("/v1/load_lora_adapter", json=body), f"load LoRA adapter {path}")
        self.adapters.append(name)

    def unload_adapter(self, name: str) -> None:
        with self.client() as client:
            response = client.post("/v1/unload_lora_adapter", json={"lora_name": name})
        if response.status_code != 404:  # already gone is what we wanted
            _answer(response, f"unload LoRA adapter {name}")
        if name in self.adapters:
            self.adapters.remove(name)

    def reload_weights(self, path: Path, version: int) -> None:
        """Full fine-tuning: vLLM re-reads the model's weights from `path` in place."""
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(path.resolve())}}
        with self.client(timeout=600.0) as client:
            _answer(client.post("/collective_rpc", json=body), f"reload weights from {path}")
            _answer(
                client.post("/update_weight_version", json={"new_version": str(version)}),
                "record the weight version",
            )

    def pause(self) -> None:
        with self.client() as client:
            _answer(client.post("/pause", params={"mode": "keep"}), "pause generation")

    def resume(self) -> None:
        with self.client() as client:
            _answer(client.post("/resume"), "resume generation")


def _answer(response: httpx.Response, doing: str) -> Any:
    if response.status_code >= 400:
        raise VLLMError(
            f"vLLM at {response.url.host}:{response.url.port} could not {doing}: {_message(response)}"
        )
    try:
        return response.json()
    except ValueError:
        return response.text


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))
    if isinstance(data, dict) and ("detail" in data or "error" in data):
        return str(data.get("detail") or data.get("error"))
    return f"HTTP {response.status_code}: {response.text[:300]}"


@dataclass(frozen=True)
class Capabilities:
    base_model: str
    runtime_lora: bool
    pause: bool
    token_ids: bool
    problems: tuple[str, ...]
    processed_logprobs: bool = False  # logprobs are under the sampling distribution (verified)
    max_loras: int | None = None  # adapters one batch may hold (--max-loras), from /metrics; None: unknown


def check_capabilities(replica: Replica) -> Capabilities:
    """What an external server was started with, and what to change where something Tether needs is
    missing (each problem names the flag or variable)."""
    try:
        base = replica.base_model()
    except (httpx.HTTPError, VLLMError, KeyError, TypeError) as exc:
        raise VLLMError(f"cannot reach vLLM at {replica.url}: {exc}") from None
    problems: list[str] = []
    with replica.client(timeout=60.0) as client:
        lora = _probe_lora(client, problems)
        pause = client.get("/is_paused").status_code == 200
        ids = _probe_token_ids(client, base, problems)
        processed = _probe_processed_logprobs(client, base)
        max_loras = _probe_max_loras(client)
    return Capabilities(base, lora, pause, ids, tuple(problems), processed, max_loras)


def _probe_max_loras(client: httpx.Client) -> int | None:
    """vLLM's `--max-loras`, as its Prometheus gauge `vllm:lora_requests_info` labels it."""
    response = client.get("/metrics")
    if response.status_code != 200:
        return None
    found = re.search(r'vllm:lora_requests_info\{[^}]*max_lora="(\d+)"', response.text)
    return int(found.group(1)) if found else None


def _probe_processed_logprobs(client: httpx.Client, base: str) -> bool:
    """Whether the server returns logprobs of the processed distribution (`--logprobs-mode
    processed_logprobs`). With top-k 1 only the top token is left: processed, its logprob is 0; raw,
    it is the raw softmax's, below 0 for a prompt whose next token is uncertain."""
    body = {"model": base, "prompt": "Colours: red,", "max_tokens": 1, "top_k": 1, "logprobs": 0}
    response = client.post("/v1/completions", json=body)
    if response.status_code >= 400:
        return False
    choice = (response.json().get("choices") or [{}])[0]
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    return isinstance(logprobs, list) and bool(logprobs) and abs(float(logprobs[0])) < 1e-4


def _probe_lora(client: httpx.Client, problems: list[str]) -> bool:
    response = client.post("/v1/unload_lora_adapter", json={"lora_name": PROBE_ADAPTER})
    message = _message(response)
    if response.status_code == 404 and "cannot be found" in message:
        return True
    if response.status_code == 404:
        problems.append(
            "runtime LoRA loading is off: start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its "
            "environment"
        )
    else:
        problems.append(
            f"LoRA adapters cannot be loaded ({message}): start vLLM with --enable-lora and "
            "--max-lora-rank at least the trained rank"
        )
    return False


def _probe_token_ids(client: httpx.Client, base: str, problems: list[str]) -> bool:
    body = {"model": base, "prompt": "Hello", "max_tokens": 1, "return_token_ids": True, "logprobs": 0}
    response = client.post("/v1/completions", json=body)
    if response.status_code >= 400:
        problems.append(f"a test completion failed: {_message(response)}")
        return False
    data = response.json()
    choice = (data.get("choices") or [{}])[0]
    if (data.get("prompt_token_ids") or choice.get("prompt_token_ids")) and choice.get("token_ids"):
        return True
    problems.append(
        "answers carry no token ids (return_token_ids): use vLLM 0.11 or newer, so that calls can be "
        "trained on without re-tokenizing"
    )
    return False
