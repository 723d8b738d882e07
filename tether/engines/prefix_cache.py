"""Keys and values of token prefixes, kept so that a prompt computed once is not computed again.

Attention is causal, so the keys and values of a sequence's first k tokens depend on those k tokens only
(and on their positions, 0..k-1 in any sequence that starts with them): they are the same in every
sequence that extends them. The engine keeps each prompt's, and each finished generation's (prompt and
generated tokens), per-layer keys and values here, and a new prompt starts from the longest prefix any
entry shares with it: the n samples of a group, and the next turn of a conversation, which extends the
previous prompt and response, prefill only what is new.

An entry belongs to one policy at one version (the adapter changes every layer's keys and values): a
lookup sees only entries of the policy and version the row samples from, and a swap drops the swapped
policy's entries (`drop`). Entries are evicted least recently used first, to stay within a memory budget
in bytes; a budget of 0 keeps nothing. An entry that another entry already covers is not stored twice,
and storing one that extends others drops them (every lookup they answered, it answers as far).

The token ids of each policy version's entries form a trie (a node per distinct prefix, holding the ids
of the entries through it): a lookup walks the prompt once, and storing or evicting an entry walks its
tokens once, however many entries there are (on a CPU, 15 us to look a 500-token prompt up among 300
entries, where comparing it with each entry took 3.5 ms, a GPU decoding step's worth).

Only the engine's worker thread, under the model lock, and the swap path, under the same lock, touch a
`PrefixCache`.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

MIB = 2**20


@dataclass
class PrefixEntry:
    policy: str
    version: int
    tokens: list[int]  # the token ids whose keys and values these are
    keys: list[torch.Tensor]  # one per layer: [heads, T, head dim], positions 0..T-1
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.keys) + sum(t.nbytes for t in self.values)


@dataclass(frozen=True)
class PrefixHit:
    entry: PrefixEntry | None
    length: int  # how many leading tokens of the prompt the entry holds (0 with no entry)


MISS = PrefixHit(None, 0)


class _Node:
    __slots__ = ("children", "entries", "ends")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.entries: dict[int, None] = {}  # the ids of the entries with this prefix, oldest first
        self.ends: set[int] = set()  # the ids of the entries that are exactly this prefix


class _Trie:
    def __init__(self) -> None:
        self.root = _Node()

    def path(self, tokens: list[int]) -> list[_Node]:
        """The nodes of `tokens`' leading tokens that some entry shares (node i: i + 1 tokens)."""
        nodes = []
        node = self.root
        for token in tokens:
            child = node.children.get(token)
            if child is None:
                break
            nodes.append(child)
            node = child
        return nodes

    def insert(self, tokens: list[int], key: int) -> None:
        node = self.root
        for token in tokens:
            node = node.children.setdefault(token, _Node())
            node.entries[key] = None
        node.ends.add(key)

    def remove(self, tokens: list[int], key: int) -> None:
        node = self.root
        for token in tokens:
            child = node.children[token]
            del child.entries[key]
            if not child.entries:  # no other entry goes this way: drop the branch
                del node.children[token]
                return
            node = child
        node.ends.discard(key)


class PrefixCache:
    def __init__(self, budget_mb: float) -> None:
        self.budget = int(max(0.0, budget_mb) * MIB)
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # least recently used first
        self._tries: dict[tuple[str, int], _Trie] = {}  # by policy and version
        self._ids = itertools.count()
        self.nbytes = 0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, policy: str, version: int, prompt: list[int], limit: int) -> PrefixHit:
        """The entry sharing the longest prefix (at most `limit` tokens) with `prompt`."""
        trie = self._tries.get((policy, version))
        path = trie.path(prompt[: max(0, limit)]) if trie is not None else []
        if not path:
            return MISS
        key = next(reversed(path[-1].entries))
        self._entries.move_to_end(key)
        return PrefixHit(self._entries[key], len(path))

    def store(
        self, policy: str, version: int, tokens: list[int], layers: Any, row: int, columns: torch.Tensor
    ) -> bool:
        """Keep the keys and values of `tokens`: batch row `row` of the cache `layers`, at `columns`
        (the row's real columns, in order). False if they do not fit the budget or are already held."""
        if not tokens:
            return False
        nbytes = len(tokens) * sum(
            layer.keys[row, :, 0].nbytes + layer.values[row, :, 0].nbytes for layer in layers
        )
        if nbytes > self.budget:
            return False
        trie = self._tries.get((policy, version))
        path = trie.path(tokens) if trie is not None else []
        if len(path) == len(tokens):  # an entry holds them already (maybe followed by more)
            self._entries.move_to_end(next(reversed(path[-1].entries)))
            return False
        for key in [key for node in path for key in node.ends]:  # prefixes of these tokens
            self._remove(key)
        while self._entries and self.nbytes + nbytes > self.budget:
            self._remove(next(iter(self._entries)))
        try:
            keys = [layer.keys[row].index_select(-2, columns) for layer in layers]
            values = [layer.values[row].index_select(-2, columns) for layer in layers]
        except torch.OutOfMemoryError:  # the cache is an optimisation: never fail a batch for it
            return False
        key = next(self._ids)
        self._entries[key] = PrefixEntry(policy, version, list(tokens), keys, values)
        self._tries.setdefault((policy, version), _Trie()).insert(tokens, key)
        self.nbytes += self._entries[key].nbytes
        return True

    def drop(self, policy: str) -> None:
        """Forget every entry of `policy` (its adapter is being replaced)."""
        for key in [key for key, entry in self._entries.items() if entry.policy == policy]:
            self._remove(key)

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key)
        self.nbytes -= entry.nbytes
        trie = self._tries[(entry.policy, entry.version)]
        trie.remove(entry.tokens, key)
        if not trie.root.children:
            del self._tries[(entry.policy, entry.version)]


def stack_prefixes(hits: list[PrefixHit], width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, a batch's past keys and values [rows, heads, width, head dim]: row i's prefix
    right-aligned, zeros to its left (the attention mask hides them)."""
    sample = next(hit.entry for hit in hits if hit.entry is not None)
    past = []
    for layer, (keys, values) in enumerate(zip(sample.keys, sample.values, strict=True)):
        shape = (len(hits), keys.shape[0], width, keys.shape[-1])
        batch_keys = keys.new_zeros(shape)
        batch_values = values.new_zeros(shape)
        for i, hit in enumerate(hits):
            if hit.entry is not None and hit.length:
                batch_keys[i, :, width - hit.length :] = hit.entry.keys[layer][:, : hit.length]
                batch_values[i, :, width - hit.length :] = hit.entry.values[layer][:, : hit.length]
        past.append((batch_keys, batch_values))
    return past
