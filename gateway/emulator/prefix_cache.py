"""A radix tree of KV pages with LRU eviction (SGLang's RadixAttention at page granularity).

A prompt is cut into fixed-size pages of tokens; each page is named by a hash chained over
every page before it, so a page's key names its whole prefix and the tree needs no
edge-label compression: a node is one page, its parent the page before it. A lookup
walks the chain from the first page and stops at the first page not held.

Pages used by a running sequence are locked (reference counted) and never evicted.
Unlocked leaves are evicted least recently used first; evicting a leaf can turn its
parent into an evictable leaf, so long prefixes are trimmed from the tail, as SGLang does.
Recency is a logical tick, not a clock, so eviction order is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class PageNode:
    key: int
    parent: PageNode | None
    children: int = 0
    lock_ref: int = 0
    last_access: int = 0


class PrefixCache:
    """Pages of cached prefix KV; `tokens` is the KV memory the tree holds."""

    def __init__(self, page_size: int) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.page_size = page_size
        self._nodes: dict[int, PageNode] = {}
        self._evictable: list[tuple[int, int]] = []
        self._tick = 0
        self._locked_pages = 0

    @property
    def tokens(self) -> int:
        return len(self._nodes) * self.page_size

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens no running sequence uses: free memory in SGLang's accounting."""
        return (len(self._nodes) - self._locked_pages) * self.page_size

    def __contains__(self, key: int) -> bool:
        return key in self._nodes

    def match(self, page_keys: Sequence[int]) -> list[PageNode]:
        """The longest cached prefix of `page_keys`, marked as just used."""
        tick = self._next_tick()
        matched: list[PageNode] = []
        nodes = self._nodes
        for key in page_keys:
            node = nodes.get(key)
            if node is None:
                break
            node.last_access = tick
            matched.append(node)
        if matched:
            self._offer_for_eviction(matched[-1])
        return matched

    def lock(self, nodes: Sequence[PageNode]) -> None:
        for node in nodes:
            if node.lock_ref == 0:
                self._locked_pages += 1
            node.lock_ref += 1

    def unlock(self, nodes: Sequence[PageNode]) -> None:
        for node in nodes:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._locked_pages -= 1
        if nodes:
            self._offer_for_eviction(nodes[-1])

    def insert(self, page_keys: Sequence[int]) -> int:
        """Add the pages of a computed prefix; returns how many pages were new."""
        tick = self._next_tick()
        nodes = self._nodes
        parent: PageNode | None = None
        added = 0
        for key in page_keys:
            node = nodes.get(key)
            if node is None:
                node = PageNode(key=key, parent=parent)
                nodes[key] = node
                if parent is not None:
                    parent.children += 1
                added += 1
            node.last_access = tick
            parent = node
        if parent is not None:
            self._offer_for_eviction(parent)
        return added

    def evict(self, tokens_needed: int) -> int:
        """Drop least recently used unlocked leaves until `tokens_needed` are freed."""
        freed = 0
        heap = self._evictable
        nodes = self._nodes
        while freed < tokens_needed and heap:
            access, key = heapq.heappop(heap)
            node = nodes.get(key)
            if node is None or node.last_access != access or not self._is_evictable(node):
                continue
            del nodes[key]
            freed += self.page_size
            parent = node.parent
            if parent is not None:
                parent.children -= 1
                self._offer_for_eviction(parent)
        return freed

    def _is_evictable(self, node: PageNode) -> bool:
        return node.children == 0 and node.lock_ref == 0

    def _offer_for_eviction(self, node: PageNode) -> None:
        # stale heap entries (touched or locked since) are skipped in evict(); the heap
        # is rebuilt when they outnumber the live nodes
        if self._is_evictable(node):
            heapq.heappush(self._evictable, (node.last_access, node.key))
            if len(self._evictable) > 4 * len(self._nodes) + 1024:
                self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._evictable = [
            (node.last_access, node.key)
            for node in self._nodes.values()
            if self._is_evictable(node)
        ]
        heapq.heapify(self._evictable)

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick
