"""An in-process engine on Hugging Face transformers with its own batched decoding loop.

A single worker thread owns the model. Requests from any asyncio loop are put on a thread-safe
queue; the worker left-pads waiting prompts into a batch, prefills them, and decodes step by step
with a KV cache. Requests that arrive while a batch runs are prefilled separately and merged into
the running batch between steps (when the cache layout allows it; otherwise they wait for the
batch to drain). Tokens go back to each caller's loop with `call_soon_threadsafe`.

Admission is fair across owners (the gateway passes the rollout id), so that one rollout's long
requests cannot hold another's up for longer than one scheduling step:

- Each owner's requests wait in a FIFO queue of their own and are admitted in the order they arrived.
- A free slot (the batch holds fewer than `max_batch_size` rows) goes to the waiting owner with the
  fewest running rows; ties go to the owner whose oldest waiting request arrived first.
- An owner with nothing running is admitted at the next step even when every slot is taken, as long
  as fewer than `max_batch_size` owners share the batch: every owner is entitled to one row beyond the
  slots (so the batch holds at most `2 * max_batch_size - 1` rows). Only when the batch already has
  `max_batch_size` owners does a newcomer wait for a row to finish; it then goes first.

Requests without an owner share one queue, so a caller that never names one gets FIFO order. Running
rows are never preempted; a model whose cache cannot be merged into a running batch still waits for
that batch to drain, and the fair order applies when the next batch starts.

Adapter swaps take the model lock, which the worker holds from the first prefill of a batch until
its last row finishes, and no new rows are admitted while a swap waits: every generation is
produced by exactly one policy version.

Several policies share the base weights: each is a LoRA adapter under its own name (`load_adapter(...,
policy=NAME)`), with its own version counter, and a request names the policy it samples from (the
default one when it names none; the base model, `BASE_POLICY`, when that policy has no adapter yet).
One batch holds rows of any policies: when they differ, every forward pass tags each row with its
adapter (PEFT's mixed-adapter batches), so the base weights run once for all of them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .openmp import prefer_passive_waiting

prefer_passive_waiting()

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer

from tether.models.catalog import CATALOGUE, resolve_model
from tether.models.chat_template import ChatTemplate

from .base import DEFAULT_POLICY, GeneratedToken, Generation, GenerationDone, SamplingParams
from .row_lora import RowLoRA
from .sampling import draw, processed_logprobs

log = logging.getLogger(__name__)

_STOP = object()
_REPLACEMENT = "\ufffd"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BASE_ADAPTER = "__base__"  # PEFT's tag for rows of a mixed batch that run without any adapter


class EngineClosedError(RuntimeError):
    pass


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    results: asyncio.Queue[Any]
    owner: str | None = None
    policy: str = DEFAULT_POLICY
    cancelled: bool = False
    arrival: int = 0  # the worker's count of requests received before this one

    def push(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.results.put_nowait, item)
        except RuntimeError:
            self.cancelled = True


class _Waiting:
    """Requests not admitted yet: one FIFO queue per owner, served as the module docstring says."""

    def __init__(self) -> None:
        self._queues: dict[str | None, deque[_Request]] = {}
        self._arrivals = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._queues)

    def add(self, request: _Request) -> None:
        request.arrival = next(self._arrivals)
        self._queues.setdefault(request.owner, deque()).append(request)

    def requests(self) -> list[_Request]:
        return [request for fifo in self._queues.values() for request in fifo]

    def take(self, running: Counter[str | None], rows: int, slots: int) -> list[_Request]:
        """Pop the requests to admit into a batch of `rows` rows, given each owner's running rows."""
        admitted: list[_Request] = []
        while heads := self._heads():
            head = min(heads, key=lambda request: (running[request.owner], request.arrival))
            newcomer = running[head.owner] == 0 and len(running) < slots
            if rows >= slots and not newcomer:
                break
            self._queues[head.owner].popleft()
            admitted.append(head)
            running[head.owner] += 1
            rows += 1
        return admitted

    def _heads(self) -> list[_Request]:
        """Each owner's oldest live request; cancelled requests and empty queues are dropped."""
        heads = []
        for owner, fifo in list(self._queues.items()):
            while fifo and fifo[0].cancelled:
                fifo.popleft()
            if fifo:
                heads.append(fifo[0])
            else:
                del self._queues[owner]
        return heads


@dataclass
class _Row:
    request: _Request
    generator: torch.Generator | None
    policy_version: int
    stops: list[str]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: str = ""
    finish_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.request.cancelled


@dataclass
class _Batch:
    rows: list[_Row]
    cache: Any
    mask: torch.Tensor
    positions: torch.Tensor
    last_tokens: torch.Tensor
    reshapeable: bool


class TransformersEngine:
    """Engine protocol implementation; see `tether.engines.base.Engine`."""

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: str = "auto",
        max_batch_size: int = 8,
        name: str | None = None,
        threads: int | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.name = name or (model if model in CATALOGUE else Path(model).name)
        self.versions: dict[str, int] = {DEFAULT_POLICY: 0}  # policy -> the version it serves now
        self.max_batch_size = max(1, max_batch_size)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.path = resolve_model(model, cache_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        # On a CUDA device with bf16, `auto` samples in the learner's precision (bf16 autocast over fp32
        # weights, head in fp32): all-bf16 weights moved the first update's mean ratio to 0.986 on an H200.
        self.autocast = dtype == "auto" and self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.model = self._load_model(self.path, _resolve_dtype(dtype))
        if self.autocast:
            self.model.set_output_embeddings(_Fp32Head(self.model.get_output_embeddings()))
        self.config = self.model.config
        self.max_context = int(getattr(self.config, "max_position_embeddings", 0) or 2**31 - 1)
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self.eos_token_ids = _eos_ids(self.tokenizer, self.model)
        self.pad_token_id = _pad_id(self.tokenizer, self.eos_token_ids)
        self._adapters: dict[str, str] = {}  # policy -> the PEFT name of its loaded adapter
        self._row_lora: RowLoRA | None = None  # several adapters in one batch, each row its own
        self._model_lock = threading.Lock()
        self._swap_lock = threading.Lock()
        self._swap_requested = threading.Event()
        self._requests: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name=f"tether-engine-{self.name}", daemon=True)
        self._worker.start()

    @property
    def policy_version(self) -> int:
        """The default policy's version (0: the base model)."""
        return self.versions[DEFAULT_POLICY]

    def version_of(self, policy: str) -> int:
        """The version `policy` serves now; 0 (the base model) for one never loaded."""
        return self.versions.get(policy, 0)

    def _load_model(self, path: Path, dtype: torch.dtype) -> Any:
        # Seen as a torch module: transformers' `@wraps`-decorated `to` does not type-check as a method.
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return model.to(self.device).eval()

    def chat_prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> list[int]:
        """Render with the chat template; tools natively if the template supports them, else in the
        fallback format of `tether.models.tools`."""
        return ChatTemplate(self.tokenizer).prompt_ids(messages, tools, tool_choice)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        """Decode ids, keeping special tokens except trailing EOS, so a generation decodes to its text."""
        ids = list(token_ids)
        while ids and ids[-1] in self.eos_token_ids:
            ids.pop()
        return self._decode_text(ids)

    def _decode_text(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert isinstance(text, str)  # one list of ids decodes to one string (a batch would give a list)
        return text

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        owner: str | None = None,
        policy: str = DEFAULT_POLICY,
    ) -> tuple[Generation, int]:
        async for item in self.stream(prompt_ids, params, owner=owner, policy=policy):
            if isinstance(item, GenerationDone):
                return item.generation, item.policy_version
        raise RuntimeError("generation stream ended without a result")

    async def stream(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        owner: str | None = None,
        policy: str = DEFAULT_POLICY,
    ) -> AsyncIterator[GeneratedToken | GenerationDone]:
        """`Engine.stream`; closing the generator early (break, aclose, cancellation) cancels the request."""
        prompt = [int(t) for t in prompt_ids]
        self._validate(prompt, params)
        request = _Request(prompt, params, asyncio.get_running_loop(), asyncio.Queue(), owner, policy)
        self._requests.put(request)
        if not self._worker.is_alive():
            raise EngineClosedError("engine worker is not running")
        try:
            while True:
                item = await request.results.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, GenerationDone):
                    return
        finally:
            request.cancelled = True  # a no-op once it finished; else the worker drops it

    def _validate(self, prompt: list[int], params: SamplingParams) -> None:
        if self._closed:
            raise EngineClosedError("engine is closed")
        if not prompt:
            raise ValueError("prompt is empty")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {params.max_tokens}")
        if len(prompt) + params.max_tokens > self.max_context:
            raise ValueError(
                f"prompt of {len(prompt)} tokens plus max_tokens={params.max_tokens} exceeds the model's "
                f"context of {self.max_context} tokens"
            )
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt contains token ids outside the vocabulary [0, {self.vocab_size})")
        if params.top_p <= 0 or params.top_p > 1:
            raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
        if params.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or positive, got {params.top_k}")

    def load_adapter(
        self, adapter_path: str, policy_version: int | None = None, policy: str = DEFAULT_POLICY
    ) -> int:
        """Make the LoRA adapter in `adapter_path` what `policy` samples from, between batches (the
        other policies' adapters stay). Blocks."""
        if policy == BASE_ADAPTER:
            raise ValueError(f"{BASE_ADAPTER!r} is the base model's tag, not a policy name")
        with self._swap_lock:
            self._swap_requested.set()
            try:
                with self._model_lock:
                    version = self.version_of(policy) + 1 if policy_version is None else policy_version
                    self._swap_adapter(str(adapter_path), policy, version)
                    self.versions[policy] = version
                    return version
            finally:
                self._swap_requested.clear()

    async def aload_adapter(
        self, adapter_path: str, policy_version: int | None = None, policy: str = DEFAULT_POLICY
    ) -> int:
        return await asyncio.to_thread(self.load_adapter, adapter_path, policy_version, policy)

    async def score(self, token_ids: list[int], policy: str = DEFAULT_POLICY) -> list[float]:
        ids = [int(t) for t in token_ids]
        self._validate(ids, SamplingParams(max_tokens=1))
        return await asyncio.to_thread(self._score, ids, policy)

    def _score(self, ids: list[int], policy: str) -> list[float]:
        """One forward pass over `ids`, between batches as an adapter swap is (the worker admits nothing
        new while it waits, and the running rows finish first)."""
        with self._swap_lock:
            self._swap_requested.set()
            try:
                with self._model_lock, torch.inference_mode():
                    tokens = torch.tensor([ids], dtype=torch.long, device=self.device)
                    logits = self._forward([policy], input_ids=tokens).logits[0, :-1].float()
                    picked = torch.log_softmax(logits, dim=-1).gather(1, tokens[0, 1:, None])
                    return [float(v) for v in picked.squeeze(1).tolist()]
            finally:
                self._swap_requested.clear()

    def _swap_adapter(self, adapter_path: str, policy: str, version: int) -> None:
        from peft import PeftModel

        new_name = f"{policy}-{version}-{time.monotonic_ns()}"
        if not self._adapters:
            self.model = PeftModel.from_pretrained(self.model, adapter_path, adapter_name=new_name).eval()
        else:
            self.model.load_adapter(adapter_path, adapter_name=new_name, is_trainable=False)
            old = self._adapters.get(policy)
            if old is not None:
                self.model.delete_adapter(old)
        self._adapters[policy] = new_name
        self.model.set_adapter(new_name)
        self.model.to(self.device).eval()
        if self._row_lora is not None:
            self._row_lora.remove()
        self._row_lora = RowLoRA.build(self.model, list(self._adapters.values()))

    def _forward(self, policies: list[str], **inputs: Any) -> Any:
        """The model's forward pass for rows sampling from `policies` (one per row). Rows of one loaded
        adapter run it as the active one; any other mix tags each row with its adapter."""
        names = [self._adapters.get(policy, BASE_ADAPTER) for policy in policies]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            if not self._adapters:
                return self.model(**inputs)
            if len(set(names)) == 1 and names[0] != BASE_ADAPTER:
                if self.model.active_adapter != names[0]:
                    self.model.set_adapter(names[0])
                return self.model(**inputs)
            if self._row_lora is not None:
                with self._row_lora.rows(names, self.device):
                    return self.model(**inputs)
            return self.model(**inputs, adapter_names=names)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join()

    def _run(self) -> None:
        pending = _Waiting()
        batch: _Batch | None = None
        while True:
            if batch is None and not pending:
                item = self._requests.get()
                if item is _STOP:
                    break
                pending.add(item)
            if self._drain(pending):
                break
            if batch is None:
                while self._swap_requested.is_set():
                    time.sleep(0.001)
                self._model_lock.acquire()
            try:
                batch = self._iterate(batch, pending)
            finally:
                if batch is None:
                    self._model_lock.release()
        if batch is not None:
            self._fail([row.request for row in batch.rows], EngineClosedError("engine closed"))
            self._model_lock.release()
        self._drain(pending)  # requests put after the stop
        self._fail(pending.requests(), EngineClosedError("engine closed"))

    def _drain(self, pending: _Waiting) -> bool:
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            pending.add(item)

    def _iterate(self, batch: _Batch | None, pending: _Waiting) -> _Batch | None:
        """One scheduling step, run under the model lock: admit new rows, decode one token, prune."""
        try:
            with torch.inference_mode():
                batch = self._admit(batch, pending)
                if batch is not None and not all(row.done for row in batch.rows):
                    self._decode_step(batch)
                return self._prune(batch) if batch is not None else None
        except Exception as exc:
            log.exception("engine batch failed")
            if batch is not None:
                self._fail([row.request for row in batch.rows if not row.done], exc)
            return None

    def _admit(self, batch: _Batch | None, pending: _Waiting) -> _Batch | None:
        if batch is not None and (not batch.reshapeable or self._swap_requested.is_set()):
            return batch
        rows = batch.rows if batch is not None else []
        running = Counter(row.request.owner for row in rows if not row.done)
        admitted = pending.take(running, len(rows), self.max_batch_size)
        if not admitted:
            return batch
        try:
            fresh = self._prefill([self._new_row(r) for r in admitted])
        except Exception as exc:
            log.exception("engine prefill failed")
            self._fail(admitted, exc)
            return batch
        if batch is None:
            return fresh
        try:
            return _merge(batch, fresh)
        except Exception as exc:
            self._fail(admitted, exc)
            raise

    def _new_row(self, request: _Request) -> _Row:
        params = request.params
        generator = None
        if params.temperature > 0:
            generator = torch.Generator(device=self.device)
            if params.seed is None:
                generator.seed()
            else:
                generator.manual_seed(int(params.seed))
        stops = [s for s in params.stop if s]
        return _Row(request, generator, self.version_of(request.policy), stops)

    def _prefill(self, rows: list[_Row]) -> _Batch:
        prompts = [row.request.prompt_ids for row in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[i, width - len(prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.config)
        out = self._forward(
            [row.request.policy for row in rows],
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        reshapeable = all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))
        tokens = self._sample_and_emit(rows, out.logits[:, -1, :])
        return _Batch(rows, cache, mask, mask.sum(-1), tokens, reshapeable)

    def _decode_step(self, batch: _Batch) -> None:
        ones = torch.ones((len(batch.rows), 1), dtype=batch.mask.dtype, device=self.device)
        mask = torch.cat([batch.mask, ones], dim=1)
        out = self._forward(
            [row.request.policy for row in batch.rows],
            input_ids=batch.last_tokens[:, None],
            attention_mask=mask,
            position_ids=batch.positions[:, None],
            past_key_values=batch.cache,
            use_cache=True,
        )
        batch.cache = out.past_key_values
        batch.mask = mask
        batch.positions = batch.positions + 1
        batch.last_tokens = self._sample_and_emit(batch.rows, out.logits[:, -1, :])

    def _sample_and_emit(self, rows: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """Pick each row's next token and record its logprob under the distribution it was drawn from:
        the processed one for sampled rows (`tether.engines.sampling`), the raw softmax for greedy ones."""
        logits = logits.float()
        raw = torch.log_softmax(logits, dim=-1)
        chosen = logits.argmax(dim=-1)
        picked = raw.gather(1, chosen[:, None]).squeeze(1)
        for i, row in enumerate(rows):
            if row.generator is None or row.done:
                continue
            sampler = row.request.params.sampler
            logprobs = processed_logprobs(logits[i], sampler) if sampler.processed else raw[i]
            token = draw(logprobs, row.generator)
            chosen[i] = token
            picked[i] = logprobs[token]
        for row, token, logprob in zip(rows, chosen.tolist(), picked.tolist(), strict=True):
            if not row.done:
                self._emit(row, token, logprob)
        return chosen

    def _emit(self, row: _Row, token: int, logprob: float) -> None:
        delta = self._advance(row, token)
        row.logprobs.append(logprob)
        row.request.push(GeneratedToken(token, logprob, delta))
        if row.finish_reason is not None:
            generation = Generation(list(row.token_ids), list(row.logprobs), row.text, row.finish_reason)
            row.request.push(GenerationDone(generation, row.policy_version))

    def _advance(self, row: _Row, token: int) -> str:
        """Record one generated token; return the text it makes safe to show, and set finish_reason."""
        row.token_ids.append(token)
        if token in self.eos_token_ids:
            row.finish_reason = "stop"
        else:
            row.text_ids.append(token)
            row.text = self._decode_text(row.text_ids)
            cut = _find_stop(row.text, row.stops)
            if cut is not None:
                row.text = row.text[:cut]
                row.finish_reason = "stop"
            elif len(row.token_ids) >= row.request.params.max_tokens:
                row.finish_reason = "length"
        visible = len(row.text) if row.finish_reason else len(row.text) - _holdback(row.text, row.stops)
        if visible <= len(row.emitted) or not row.text.startswith(row.emitted):
            return ""
        delta = row.text[len(row.emitted) : visible]
        row.emitted += delta
        return delta

    def _prune(self, batch: _Batch) -> _Batch | None:
        keep = [i for i, row in enumerate(batch.rows) if not row.done]
        if not keep:
            return None
        if not batch.reshapeable or len(keep) == len(batch.rows):
            return batch
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        batch.rows = [batch.rows[i] for i in keep]
        batch.mask = batch.mask[index]
        batch.positions = batch.positions[index]
        batch.last_tokens = batch.last_tokens[index]
        for layer in batch.cache.layers:
            layer.keys, layer.values = layer.keys[index], layer.values[index]
        _trim_left(batch)
        return batch

    def _fail(self, requests: list[_Request], exc: BaseException) -> None:
        for request in requests:
            if not request.cancelled:
                request.push(exc)
            request.cancelled = True


def _merge(running: _Batch, fresh: _Batch) -> _Batch:
    width = max(running.mask.shape[1], fresh.mask.shape[1])
    for old, new in zip(running.cache.layers, fresh.cache.layers, strict=True):
        old.keys = torch.cat([_pad_seq(old.keys, width), _pad_seq(new.keys, width)])
        old.values = torch.cat([_pad_seq(old.values, width), _pad_seq(new.values, width)])
    running.mask = torch.cat([_pad_mask(running.mask, width), _pad_mask(fresh.mask, width)])
    running.positions = torch.cat([running.positions, fresh.positions])
    running.last_tokens = torch.cat([running.last_tokens, fresh.last_tokens])
    running.rows = running.rows + fresh.rows
    return running


def _pad_seq(states: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(states, (0, 0, width - states.shape[-2], 0))


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(mask, (width - mask.shape[1], 0))


def _trim_left(batch: _Batch) -> None:
    used = batch.mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else 0
    if start == 0:
        return
    batch.mask = batch.mask[:, start:]
    for layer in batch.cache.layers:
        layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]


def _find_stop(text: str, stops: list[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _holdback(text: str, stops: list[str]) -> int:
    """How many trailing characters to hold back: an incomplete UTF-8 tail or a possible stop prefix."""
    held = len(text) - len(text.rstrip(_REPLACEMENT))
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:k]):
                held = k
                break
    return held


def _eos_ids(tokenizer: Any, model: Any) -> frozenset[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(t) for t in configured)
    return frozenset(ids)


def _pad_id(tokenizer: Any, eos_ids: frozenset[int]) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return min(eos_ids) if eos_ids else 0


class _Fp32Head(torch.nn.Module):
    """The output head in fp32 under autocast, as the learner's: bf16 keeps 8 mantissa bits, so a logit
    near 20 would move by up to 0.06."""

    def __init__(self, head: torch.nn.Module) -> None:
        super().__init__()
        self.head = head
        self.weight = head.weight  # tied to the input embeddings in small models; transformers looks here

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            out: torch.Tensor = self.head(hidden.float())
            return out


def _resolve_dtype(dtype: str) -> torch.dtype:
    """The weights' dtype: `auto` keeps them in fp32 (on a bf16 CUDA device the engine adds autocast)."""
    if dtype == "auto":
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: expected auto or one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]
