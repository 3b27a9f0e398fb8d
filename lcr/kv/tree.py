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

    def complete(self, admitted: "Admitted", now: int) -> Node:
        """Insert the blocks ``admitted`` still misses (evicting for room), then unlock its
        path; return the deepest cached node on it (the root if none). Another request
        completed in between may have inserted some of them."""
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
                return last
            need = sum(tokens[matched:])
            if need > self.free_tokens:
                self.evict(need - self.free_tokens, paths[matched], now)
            fit, room = matched, self.free_tokens
            if need <= room:  # all of it fits: no walk page by page
                fit = len(paths)
            while fit < len(paths) and tokens[fit] <= room:
                room -= tokens[fit]
                fit += 1
            if fit == matched:
                return last
            node = self.insert(last, paths[matched:fit], tokens[matched:fit])
            self.policy.on_access([node.key], now, [above + node.size])
            return node
        finally:
            if below is not None:
                self.unlock(below)
            self.unlock(admitted.last)

    def progress(self, admitted: "Admitted", now: int) -> "Admitted":
        """A request still running cached ``admitted.request`` (a live server's prefill):
        insert what is missing and hold the path to its end, as the server holds a running
        request's; the returned admission is completed (or progresses) at its next insert."""
        end = self.complete(admitted, now)
        self.lock(end)
        return Admitted(admitted.request, end, 0, admitted.hit_tokens, -1)  # -1: walk again

    def touch(self, node: Node, now: int) -> None:
        """The path to ``node`` was in use until ``now`` (a live server caching blocks
        under it): the policy re-dates it (``LeafPolicy.on_touch``)."""
        keys = []
        while node is not self.root:
            keys.append(node.key)
            node = node.parent
        self.policy.on_touch(keys[::-1], now)

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
        self.policy.end_eviction(now)
        return freed

    def fit(self, tokens: int, now: int) -> None:
        """Evict down to ``tokens`` held, as far as the unlocked leaves allow."""
        if self.used_tokens > tokens:
            self.evict(self.used_tokens - tokens, None, now)

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

    def reading(self, request: BlockRequest) -> "Admitted":
        """This admission, completed with ``request``'s blocks instead (what the engine
        inserted for it: the prompt it matched, or that prompt and the tokens generated
        after it). Its blocks past the match may be cached already (the match stopped
        short of them), so the tree is walked again (inserts -1)."""
        return Admitted(request, self.last, self.matched, self.hit_tokens, -1)


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


def replay_served(workload, capacity_tokens: int, policy: LeafPolicy, batch: int = 1,
                  output_tokens: int = 0) -> int:
    """Hit tokens of a ``BlockWorkload`` through lcr's tree as a live SGLang server serves
    it. Requests come in prefill batches of ``batch``: a batch is matched at once (none
    hits what another in it adds), the tokens it misses are freed in one eviction pass
    while the batch before it still decodes (its paths locked), and its prompts are then
    cached. Each request also caches ``output_tokens`` generated tokens as a leaf under its
    prompt, which no later prompt carries (a server caches what it generated; a replayed
    workload's next turn does not contain it). One request at a time with no output is
    ``replay_lcr``. The eviction pass hands the policy the last request's first missing
    block, as SGLang's driver does for a batch; a request the pass left short (the batch
    before held what it needed) evicts for itself when it is cached. A batch's paths are
    dated at its last request when they are cached (``RadixTree.touch``), as SGLang's
    driver dates an insert's path."""
    if batch < 1 or output_tokens < 0:
        raise ValueError(f"batch must be at least 1 and output_tokens at least 0, got {batch}, {output_tokens}")
    tree = RadixTree(capacity_tokens, policy)
    tree.caches_requests_later = batch > 1  # the policy's LRU twin waits as the tree does
    next_output = 1 + max((p for r in workload.requests for p in r.paths), default=0)  # ids no prompt uses
    requests, hits, decoding = workload.requests, 0, []
    for start in range(0, len(requests), batch):
        group = [(tree.admit(request, t), t) for t, request in enumerate(requests[start:start + batch], start)]
        hits += sum(admitted.hit_tokens for admitted, _ in group)
        need = sum(sum(a.request.tokens[a.matched:]) for a, _ in group)
        missing = [a.request.paths[a.matched] for a, _ in group if a.matched < len(a.request.paths)]
        if need > tree.free_tokens:
            tree.evict(need - tree.free_tokens, missing[-1] if missing else None, group[-1][1])
        for node in decoding:  # the batch before finishes
            tree.unlock(node)
        decoding, latest = [], group[-1][1]
        for admitted, t in group:
            end = tree.complete(admitted, t)
            policy.on_request_cached(t, now=latest)
            if output_tokens and end is not tree.root and _depth(end) == admitted.request.total_tokens:
                end = _cache_output(tree, end, next_output, output_tokens, t)
                next_output += 1
            if t != latest:  # cached after the batch's last match: as recent as that
                tree.touch(end, latest)
            if batch > 1:
                tree.lock(end)
                decoding.append(end)
    for node in decoding:
        tree.unlock(node)
    return hits


def _cache_output(tree: RadixTree, prompt: Node, key: int, tokens: int, t: int) -> Node:
    """Cache a request's generated tokens as a leaf under its whole ``prompt`` (evicting for
    room, never the prompt itself); the leaf, or the prompt where no room is left. Reported
    alone with its depth, as SGLang's driver reports a finished request's insert."""
    tree.lock(prompt)
    try:
        if tokens > tree.free_tokens:
            tree.evict(tokens - tree.free_tokens, None, t)
        if tokens > tree.free_tokens:
            return prompt
        leaf = tree.insert(prompt, (key,), (tokens,))
    finally:
        tree.unlock(prompt)
    tree.policy.on_access([leaf.key], t, [_depth(leaf)])
    return leaf


def _depth(node: Node) -> int:
    """Tokens from the root to the end of ``node``."""
    total = 0
    while node.parent is not None:
        total, node = total + node.size, node.parent
    return total
