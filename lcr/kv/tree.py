"""lcr's own radix tree over prefix blocks: the fast engine of ``lcr sim-kv``.

It follows the shape of SGLang's tree so that both engines make the same decisions:
a node is a run of blocks inserted together (the part of a request that was not
cached), a later request that diverges inside a node splits it, a request's cached
path is locked while its new blocks are allocated, and eviction removes whole
unlocked leaves, one policy choice at a time, until enough tokens are free.
"""
from __future__ import annotations

from lcr.kv.policies import CacheView, LeafPolicy, RadixLRU
from lcr.kv.requests import BlockRequest


class Node:
    __slots__ = ("paths", "tokens", "size", "parent", "children", "locks")

    def __init__(self, paths: tuple[int, ...], tokens: tuple[int, ...], parent: "Node | None"):
        self.paths = paths
        self.tokens = tokens
        self.size = sum(tokens)
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.locks = 0

    @property
    def key(self) -> int:
        """The path id of the node's first block: what policies and predictors see."""
        return self.paths[0]


class RadixTree(CacheView):
    def __init__(self, capacity_tokens: int, policy: LeafPolicy):
        if capacity_tokens < 1:
            raise ValueError(f"cache capacity must be at least 1 token, got {capacity_tokens}")
        self.capacity_tokens = int(capacity_tokens)
        self.policy = policy.bind(self)
        self.root = Node((), (), None)
        self.used_tokens = 0
        self.nodes: dict[int, Node] = {}
        self.leaves: dict[int, Node] = {}  # childless cached nodes, locked or not
        self.inserts = 0  # nodes inserted so far

    # CacheView
    def cached_keys(self):
        return self.nodes.keys()

    def tokens_of(self, keys):
        nodes = self.nodes
        return sum(nodes[k].size for k in keys if k in nodes)

    def lru_twin(self) -> "RadixTree":
        return RadixTree(self.capacity_tokens, RadixLRU())

    # Serving
    def serve(self, request: BlockRequest, now: int) -> int:
        """Serve one request at time ``now``; return its cached (hit) tokens."""
        admitted = self.admit(request, now)
        self.complete(admitted, now)
        return admitted.hit_tokens

    def admit(self, request: BlockRequest, now: int) -> "Admitted":
        """A request's first half: match it and lock its cached path, as a request in flight
        holds it; ``complete`` inserts what it misses. ``serve`` does both at once; a shadow
        of a live engine completes a request when that engine caches it."""
        paths, tokens = request.paths, request.tokens
        if self.policy.wants_requests:
            self.policy.on_request(paths, tokens, now)
        last, matched, path = self.match(paths)
        hit_tokens = sum(tokens[:matched])
        self.policy.on_access([n.key for n in path], now, _depths(path))
        if matched < len(paths):
            self.policy.on_miss(paths[matched], now)
        self.lock(last)
        return Admitted(request, last, matched, hit_tokens, self.inserts)

    def complete(self, admitted: "Admitted", now: int) -> None:
        """Insert the blocks ``admitted`` still misses (evicting for room), then unlock its
        path. Another request completed in between may have inserted some of them."""
        paths, tokens = admitted.request.paths, admitted.request.tokens
        last, matched, above = admitted.last, admitted.matched, admitted.hit_tokens
        if self.inserts != admitted.inserts:  # others inserted since: walk again
            last, matched, _ = self.match(paths)
            above = sum(tokens[:matched])
        # The walk may end below the admitted path, on nodes another request inserted since:
        # lock them too, or the eviction below could take the node the insert goes under.
        below = last if last is not admitted.last else None
        if below is not None:
            self.lock(below)
        try:
            if matched == len(paths):
                return
            need = sum(tokens[matched:])
            if need > self.free_tokens:
                self.evict(need - self.free_tokens, paths[matched], now)
            fit, room = matched, self.free_tokens
            while fit < len(paths) and tokens[fit] <= room:
                room -= tokens[fit]
                fit += 1
            if fit > matched:
                node = self.insert(last, paths[matched:fit], tokens[matched:fit])
                self.policy.on_access([node.key], now, [above + node.size])
        finally:
            if below is not None:
                self.unlock(below)
            self.unlock(admitted.last)

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.used_tokens

    def match(self, paths: tuple[int, ...]) -> tuple[Node, int, list[Node]]:
        """The deepest cached node on ``paths``, how many blocks are cached, and the
        cached nodes from the root down. A divergence inside a node splits it."""
        node, i, path = self.root, 0, []
        while i < len(paths):
            child = node.children.get(paths[i])
            if child is None:
                break
            limit = min(len(child.paths), len(paths) - i)
            if child.paths[:limit] == paths[i:i + limit]:  # most often: one C-level compare
                common = limit
            else:
                common = 1
                while child.paths[common] == paths[i + common]:
                    common += 1
            if common < len(child.paths):
                child = self._split(child, common)
            node, i = child, i + common
            path.append(node)
            if common < limit or i == len(paths):
                break
        return node, i, path

    def insert(self, parent: Node, paths: tuple[int, ...], tokens: tuple[int, ...]) -> Node:
        node = Node(tuple(paths), tuple(tokens), parent)
        if not parent.children and parent is not self.root:
            self.leaves.pop(parent.key, None)
        parent.children[node.key] = node
        self.nodes[node.key] = node
        self.leaves[node.key] = node
        self.used_tokens += node.size
        self.inserts += 1
        return node

    def lock(self, node: Node) -> None:
        while node is not self.root:
            node.locks += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            node.locks -= 1
            node = node.parent

    def evictable_leaves(self) -> "EvictableLeaves":
        return EvictableLeaves(self.leaves)

    def evict(self, tokens: int, missing: int | None, now: int) -> int:
        """Free at least ``tokens`` if the unlocked leaves allow; return what was freed.
        A policy with ``evicts_tail_blocks`` frees one tail block of its victim at a time
        (the whole node once it is down to one block)."""
        self.policy.begin_eviction(missing, now)
        freed, leaves = 0, self.evictable_leaves()
        tail = self.policy.evicts_tail_blocks
        while freed < tokens and leaves:
            victim = self.policy.pick_victim(leaves, now)
            node = self.leaves.get(victim)
            if node is None or node.locks:
                raise RuntimeError(f"policy {self.policy.name} chose {victim}, not an evictable leaf")
            if tail and len(node.paths) > 1:
                freed += self._trim(node)
                self.policy.on_trimmed(victim, node.size)
            else:
                freed += self._remove(node)
                self.policy.on_evicted(victim)
        return freed

    def _trim(self, node: Node) -> int:
        """Drop the last block of ``node``; return its tokens."""
        tokens = node.tokens[-1]
        node.paths, node.tokens = node.paths[:-1], node.tokens[:-1]
        node.size -= tokens
        self.used_tokens -= tokens
        return tokens

    def _remove(self, node: Node) -> int:
        parent = node.parent
        del parent.children[node.key]
        del self.nodes[node.key]
        del self.leaves[node.key]
        if not parent.children and parent is not self.root:
            self.leaves[parent.key] = parent
        self.used_tokens -= node.size
        return node.size

    def _split(self, node: Node, at: int) -> Node:
        """Cut ``node`` after ``at`` blocks; return the new upper part (same key)."""
        upper = Node(node.paths[:at], node.tokens[:at], node.parent)
        upper.locks = node.locks
        node.paths, node.tokens = node.paths[at:], node.tokens[at:]
        node.size -= upper.size
        node.parent = upper
        upper.children[node.key] = node
        upper.parent.children[upper.key] = upper
        self.nodes[upper.key] = upper
        self.nodes[node.key] = node
        if upper.key in self.leaves:
            del self.leaves[upper.key]
            self.leaves[node.key] = node
        self.policy.on_split(upper.key, node.key)
        return upper


class Admitted:
    """A request ``RadixTree.admit`` matched: its locked path's end and hit tokens."""

    __slots__ = ("request", "last", "matched", "hit_tokens", "inserts")

    def __init__(self, request: BlockRequest, last: Node, matched: int, hit_tokens: int, inserts: int):
        self.request, self.last, self.matched, self.hit_tokens = request, last, matched, hit_tokens
        self.inserts = inserts  # the tree's insert count at the match


class EvictableLeaves:
    """A live view of the unlocked leaves: O(1) membership, as policies need."""

    __slots__ = ("_leaves",)

    def __init__(self, leaves: dict[int, Node]):
        self._leaves = leaves

    def __contains__(self, key) -> bool:
        node = self._leaves.get(key)
        return node is not None and not node.locks

    def __iter__(self):
        return (key for key, node in self._leaves.items() if not node.locks)

    def __bool__(self) -> bool:
        return any(not node.locks for node in self._leaves.values())

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _depths(path: list[Node]) -> list[int]:
    """Tokens from the root to the end of each node on a root-down path."""
    out, total = [], 0
    for node in path:
        total += node.size
        out.append(total)
    return out


def replay_lcr(workload, capacity_tokens: int, policy: LeafPolicy) -> int:
    """Hit tokens of a ``BlockWorkload`` through lcr's own tree."""
    tree = RadixTree(capacity_tokens, policy)
    return sum(tree.serve(request, now) for now, request in enumerate(workload.requests))


def replay_in_flight(workload, capacity_tokens: int, policy: LeafPolicy, in_flight: int) -> int:
    """Hit tokens of a ``BlockWorkload`` through lcr's tree with ``in_flight`` requests
    served at once, as by a closed loop of that many clients: request t is cached (its
    missing blocks inserted) when request t + ``in_flight`` arrives, as a live server
    caches a prompt after its prefill, so no request hits what those still in flight add.
    ``in_flight`` = 1 is ``replay_lcr``. Leaves out what the pool gives the running
    requests' own tokens, and the outputs a server caches."""
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight}")
    tree = RadixTree(capacity_tokens, policy)
    tree.caches_requests_later = in_flight > 1  # the policy's LRU twin waits as the tree does
    running: list[tuple[Admitted, int]] = []
    hits = 0
    for now, request in enumerate(workload.requests):
        if len(running) == in_flight:
            _cache(tree, *running.pop(0))
        admitted = tree.admit(request, now)
        hits += admitted.hit_tokens
        running.append((admitted, now))
    for admitted, t in running:
        _cache(tree, admitted, t)
    return hits


def _cache(tree: RadixTree, admitted: "Admitted", t: int) -> None:
    tree.complete(admitted, t)
    tree.policy.on_request_cached(t)
