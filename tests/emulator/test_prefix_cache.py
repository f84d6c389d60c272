"""The radix tree of pages: longest-prefix match, locking, LRU eviction from the leaves."""

from __future__ import annotations

from gateway.emulator.prefix_cache import PrefixCache


def chain(*names: str) -> tuple[int, ...]:
    """Page keys the way the tokenizer makes them: each names its whole prefix."""
    keys: list[int] = []
    key = 0
    for name in names:
        key = hash((key, name))
        keys.append(key)
    return tuple(keys)


def test_match_returns_the_longest_cached_prefix() -> None:
    cache = PrefixCache(page_size=16)
    cache.insert(chain("sys", "a", "b"))
    assert len(cache.match(chain("sys", "a", "x"))) == 2
    assert len(cache.match(chain("other"))) == 0
    assert cache.tokens == 3 * 16


def test_eviction_takes_the_least_recently_used_leaves_first() -> None:
    cache = PrefixCache(page_size=1)
    first, second, third = chain("1", "1b"), chain("2", "2b"), chain("3", "3b")
    for keys in (first, second, third):
        cache.insert(keys)
    cache.match(first)

    assert cache.evict(2) == 2
    assert all(key not in cache for key in second)
    assert all(key in cache for key in first + third)


def test_a_shared_prefix_outlives_its_branches() -> None:
    cache = PrefixCache(page_size=1)
    cache.insert(chain("sys", "u1"))
    cache.insert(chain("sys", "u2"))
    cache.evict(2)
    assert chain("sys")[0] in cache
    assert len(cache.match(chain("sys", "u1"))) == 1


def test_locked_pages_are_never_evicted() -> None:
    cache = PrefixCache(page_size=1)
    held = chain("held", "h2")
    cache.insert(held)
    cache.insert(chain("free", "f2"))
    nodes = cache.match(held)
    cache.lock(nodes)
    assert cache.evict(10) == 2
    assert all(key in cache for key in held)
    assert cache.evictable_tokens == 0
    cache.unlock(nodes)
    assert cache.evictable_tokens == 2
    assert cache.evict(10) == 2
    assert cache.tokens == 0
