"""An in-process engine on Hugging Face transformers with its own batched decoding loop.

A single worker thread owns the model. Requests from any asyncio loop are put on a thread-safe
queue; the worker left-pads waiting prompts into a batch, prefills them, and decodes step by step
with a KV cache. Requests that arrive while a batch runs are prefilled separately and merged into
the running batch between steps (when the cache layout allows it; otherwise they wait for the
batch to drain). Tokens go back to each caller's loop with `call_soon_threadsafe`.

Admission is fair across owners (the rollout id), as `tether.engines.admission` says: running rows
are never preempted, and a model whose cache cannot be merged into a running batch waits for it to drain.

Adapter swaps take the model lock, which the worker holds from the first prefill of a batch until
its last row finishes, and no new rows are admitted while a swap waits: every generation is
produced by exactly one policy version.

Several policies share the base weights: each is a LoRA adapter under its own name (`load_adapter(...,
policy=NAME)`), with its own version counter, and a request names the policy it samples from (the
default one when it names none; the base model, `BASE_POLICY`, when that policy has no adapter yet).
One batch holds rows of any policies: when they differ, every forward pass tags each row with its
adapter (PEFT's mixed-adapter batches), so the base weights run once for all of them.

A prompt is computed once: rows admitted together with the same policy and prompt (a group's samples)
are prefilled as one row, then copied; and every prompt, and every finished row's prompt and generated
tokens, is kept in a `PrefixCache` (`prefix_cache_mb`), so a later prompt that extends one (a group's
late samples, a conversation's next turn, a shared system prompt) prefills only its new tokens. The
batch then starts with each row's cached prefix right-aligned in a past region as wide as the longest,
and its new tokens after it, at positions that continue the prefix's (`tether.engines.batch`).
`prefill_stats` counts the prompt tokens requested, prefilled, taken from the cache and shared.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .openmp import prefer_passive_waiting

prefer_passive_waiting()

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer

from tether.models.catalog import CATALOGUE, resolve_model
from tether.models.chat_template import ChatTemplate

from .adapter_reload import reload_in_place
from .admission import Waiting as _Waiting
from .base import DEFAULT_POLICY, GeneratedToken, Generation, GenerationDone, SamplingParams
from .batch import Batch as _Batch
from .batch import Request as _Request
from .batch import Row as _Row
from .batch import merge, prefill_layout, select_rows, trim_left
from .loading import Fp32Head, eos_ids, pad_id, resolve_dtype
from .merged_lora import MergedLoRA
from .prefix_cache import MISS, PrefixCache, PrefixHit, stack_prefixes
from .row_lora import RowLoRA
from .sampling import draw, processed_logprobs

log = logging.getLogger(__name__)

_STOP = object()
_REPLACEMENT = "\ufffd"
BASE_ADAPTER = "__base__"  # PEFT's tag for rows of a mixed batch that run without any adapter
# The budget for prompt keys and values kept for reuse, on the model's device: about 23k tokens of
# SmolLM2-135M in bf16, 4.7k of a 7B model with grouped-query attention (8 heads of 128, 28 layers).
DEFAULT_PREFIX_CACHE_MB = 512.0


class EngineClosedError(RuntimeError):
    pass


class TransformersEngine:
    """Engine protocol implementation; see `tether.engines.base.Engine`."""

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: str = "auto",
        max_batch_size: int = 32,
        name: str | None = None,
        threads: int | None = None,
        cache_dir: Path | None = None,
        prefix_cache_mb: float | None = None,  # None: DEFAULT_PREFIX_CACHE_MB; 0: no prefix cache
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
        self.model = self._load_model(self.path, resolve_dtype(dtype))
        if self.autocast:
            self.model.set_output_embeddings(Fp32Head(self.model.get_output_embeddings()))
        self.config = self.model.config
        self.max_context = int(getattr(self.config, "max_position_embeddings", 0) or 2**31 - 1)
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self.eos_token_ids = eos_ids(self.tokenizer, self.model)
        self.pad_token_id = pad_id(self.tokenizer, self.eos_token_ids)
        # Prefixes are pasted into a fresh cache: only plain full-attention layers can take them.
        self._plain = all(type(layer) is DynamicLayer for layer in DynamicCache(config=self.config).layers)
        budget = DEFAULT_PREFIX_CACHE_MB if prefix_cache_mb is None else prefix_cache_mb
        self._prefixes = PrefixCache(budget if self._plain else 0)
        self._prompt_counts: Counter[str] = Counter()
        self._adapters: dict[str, str] = {}  # policy -> the PEFT name of its loaded adapter
        self._row_lora: RowLoRA | None = None  # several adapters in one batch, each row its own
        self._merged: MergedLoRA | None = None  # on the CPU: one adapter folded into the base weights
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
                    self._prefixes.drop(policy)
                    self._swap_adapter(str(adapter_path), policy, version)
                    self.versions[policy] = version
                    return version
            finally:
                self._swap_requested.clear()

    def prefill_stats(self) -> dict[str, int]:
        """Prompt tokens requested, prefilled, taken from the prefix cache and shared with an identical
        prompt admitted alongside (requested = the other three), and what the prefix cache holds."""
        counts = {key: self._prompt_counts[key] for key in ("prompt", "prefilled", "cached", "shared")}
        stats = {f"{key}_tokens": value for key, value in counts.items()}
        return stats | {"prefix_entries": len(self._prefixes), "prefix_bytes": self._prefixes.nbytes}

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
        if self._merged is not None:
            self._merged.restore()
        old = self._adapters.get(policy)
        if old is not None and reload_in_place(self.model, old, adapter_path):
            new_name = old
        elif not self._adapters:
            self.model = PeftModel.from_pretrained(self.model, adapter_path, adapter_name=new_name).eval()
            if self.device.type == "cpu":
                self._merged = MergedLoRA(self.model)
        else:
            self.model.load_adapter(adapter_path, adapter_name=new_name, is_trainable=False)
        self._adapters[policy] = new_name
        self.model.set_adapter(new_name)
        if old not in (None, new_name):  # once another is active: PEFT warns when the active one goes
            self.model.delete_adapter(old)
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
                if self._merged is not None and self._merged.merge(names[0]):
                    return self.model(**inputs)
                if self.model.active_adapter != names[0]:
                    self.model.set_adapter(names[0])
                return self.model(**inputs)
            if self._merged is not None:
                self._merged.restore()
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
            return merge(batch, fresh)
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
        """Prefill each distinct prompt once, from its longest cached prefix; then give each row its
        prompt's cache row and logits (and its own draw)."""
        firsts, source = _distinct(rows) if self._plain else (rows, list(range(len(rows))))
        hits = [self._lookup(row) for row in firsts]
        prompts = [row.request.prompt_ids for row in firsts]
        ids, mask, positions = prefill_layout(prompts, [hit.length for hit in hits], self.pad_token_id)
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        out = self._forward(
            [row.request.policy for row in firsts],
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self._past(hits, mask.shape[1] - ids.shape[1]),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        reshapeable = all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))
        lengths = mask.sum(-1)  # each row's next position; its last tokens are sampled below
        batch = _Batch(firsts, cache, mask, lengths, lengths, reshapeable)
        self._count(rows, firsts, hits)
        for i, row in enumerate(firsts):
            self._keep(batch, i, row.request.prompt_ids)
        logits = out.logits[:, -1, :]
        if len(firsts) < len(rows):
            select_rows(batch, source)
            logits = logits[torch.tensor(source, dtype=torch.long, device=self.device)]
        batch.rows = rows
        batch.last_tokens = self._sample_and_emit(rows, logits)
        return batch

    def _past(self, hits: list[PrefixHit], width: int) -> DynamicCache:
        """A cache holding each row's cached prefix, right-aligned in `width` columns."""
        cache = DynamicCache(config=self.config)
        if width:
            for layer, (keys, values) in enumerate(stack_prefixes(hits, width)):
                cache.update(keys, values, layer)
        return cache

    def _lookup(self, row: _Row) -> PrefixHit:
        """The longest cached prefix of the row's prompt, short of its last token (whose logits the
        prefill must compute)."""
        prompt = row.request.prompt_ids
        if not self._prefixes.enabled:
            return MISS
        return self._prefixes.lookup(row.request.policy, row.policy_version, prompt, len(prompt) - 1)

    def _keep(self, batch: _Batch, index: int, tokens: list[int]) -> None:
        """Offer the prefix cache the keys and values of batch row `index`, whose columns hold `tokens`
        (and, past a finished row's last fed token, nothing it keeps)."""
        row = batch.rows[index]
        current = row.policy_version == self.version_of(row.request.policy)
        if not (self._prefixes.enabled and batch.reshapeable and current):
            return
        columns = batch.mask[index].nonzero().squeeze(-1)
        tokens = tokens[: len(columns)]
        layers = batch.cache.layers
        self._prefixes.store(
            row.request.policy, row.policy_version, tokens, layers, index, columns[: len(tokens)]
        )

    def _count(self, rows: list[_Row], firsts: list[_Row], hits: list[PrefixHit]) -> None:
        requested = sum(len(row.request.prompt_ids) for row in rows)
        distinct = sum(len(row.request.prompt_ids) for row in firsts)
        cached = sum(hit.length for hit in hits)
        self._prompt_counts.update(
            prompt=requested, prefilled=distinct - cached, cached=cached, shared=requested - distinct
        )

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
        for i, row in enumerate(batch.rows):
            if row.done:  # removed below, unless the batch cannot drop rows (then `_keep` ignores it)
                self._keep(batch, i, row.request.prompt_ids + row.token_ids)
        keep = [i for i, row in enumerate(batch.rows) if not row.done]
        if not keep:
            return None
        if not batch.reshapeable or len(keep) == len(batch.rows):
            return batch
        select_rows(batch, keep)
        trim_left(batch)
        return batch

    def _fail(self, requests: list[_Request], exc: BaseException) -> None:
        for request in requests:
            if not request.cancelled:
                request.push(exc)
            request.cancelled = True


def _distinct(rows: list[_Row]) -> tuple[list[_Row], list[int]]:
    """The first row of each distinct (policy, prompt), and for every row the index of its one there."""
    firsts: list[_Row] = []
    seen: dict[tuple[str, tuple[int, ...]], int] = {}
    source = []
    for row in rows:
        key = (row.request.policy, tuple(row.request.prompt_ids))
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(row)
        source.append(seen[key])
    return firsts, source


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
