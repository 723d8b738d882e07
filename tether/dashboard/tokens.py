"""Token ids back to text, with the policy's tokenizer, loaded once and cached per id."""

from __future__ import annotations

import threading
from typing import Any

from tether.models.catalog import resolve_model


class TokenDecoder:
    """Decodes token ids one by one (each id's text is cached). Without a model, ids stay ids."""

    def __init__(self, model: str | None, tokenizer: Any = None) -> None:
        self.model = model
        self._tokenizer: Any = tokenizer
        self._failed: str | None = None
        self._pieces: dict[int, str] = {}
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self._load() is not None

    def _load(self) -> Any:
        if self._tokenizer is not None:
            return self._tokenizer
        if self.model is None or self._failed is not None:
            return None
        with self._lock:
            if self._tokenizer is None and self._failed is None:
                try:
                    from transformers import AutoTokenizer

                    self._tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(self.model)))
                except (ImportError, OSError, ValueError) as exc:
                    self._failed = f"{type(exc).__name__}: {exc}"
        return self._tokenizer

    def pieces(self, ids: list[int]) -> list[str]:
        tokenizer = self._load()
        if tokenizer is None:
            return [f"#{token_id}" for token_id in ids]
        missing = [token_id for token_id in set(ids) if token_id not in self._pieces]
        if missing:
            decoded = tokenizer.convert_ids_to_tokens(missing)
            for token_id, token in zip(missing, decoded, strict=True):
                self._pieces[token_id] = (
                    f"#{token_id}" if token is None else tokenizer.convert_tokens_to_string([token])
                )
        return [self._pieces[token_id] for token_id in ids]
