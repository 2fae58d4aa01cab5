"""NCCL's trees: the double binary tree across nodes (trees.cc) joined to a chain inside each node."""

from __future__ import annotations

from collsim.backends.nccl.plan import NcclPlan
from collsim.topology import Topology

__all__ = ["binary_tree", "tree_links"]


def _btree(nodes: int, m: int) -> tuple[int | None, list[int]]:
    """Parent and children of ``m`` in NCCL's binary tree over ``nodes`` (trees.cc ``ncclGetBtree``): rooted at 0
    with a single child (the highest power of two below ``nodes``); a node's lowest set bit ``b`` gives its parent
    ``(m ^ b) | 2b`` (or ``m ^ b`` when that is out of range) and children ``m - b/2`` and ``m + b/2`` (halving the
    offset until in range); odd nodes are leaves."""
    bit = 1
    while bit < nodes and not bit & m:
        bit <<= 1
    if m == 0:
        return None, ([bit >> 1] if nodes > 1 else [])
    up = (m ^ bit) | (bit << 1)
    parent = up if up < nodes else m ^ bit
    low = bit >> 1
    if low == 0:
        return parent, []
    kids = [m - low]
    while m + low >= nodes and low > 0:
        low >>= 1
    if low > 0:
        kids.append(m + low)
    return parent, kids


def binary_tree(node: int, nodes: int, mirror: bool) -> tuple[int | None, list[int]]:
    """Parent and children of ``node`` in NCCL's double binary tree over ``nodes`` (trees.cc ``ncclGetDtree``):
    tree 0 is NCCL's binary tree (rooted at 0 with a single child, odd nodes leaves); tree 1 is its mirror image for
    an even node count and the tree shifted by one node for an odd count, so no node is an inner node of both trees.

    >>> binary_tree(0, 4, False), binary_tree(2, 4, False), binary_tree(1, 4, False)
    ((None, [2]), (0, [1, 3]), (2, []))
    >>> binary_tree(3, 4, True), binary_tree(1, 4, True)
    ((None, [1]), (3, [2, 0]))
    >>> binary_tree(1, 3, True), binary_tree(0, 3, True), binary_tree(2, 3, True)
    ((None, [0]), (1, [2]), (0, []))
    """
    if not mirror:
        return _btree(nodes, node)
    if nodes % 2 == 1:  # shift by one node
        parent, kids = _btree(nodes, (node - 1) % nodes)
        return (None if parent is None else (parent + 1) % nodes), [(k + 1) % nodes for k in kids]
    parent, kids = _btree(nodes, nodes - 1 - node)
    return (None if parent is None else nodes - 1 - parent), [nodes - 1 - k for k in kids]


def tree_links(plan: NcclPlan, c: int, topo: Topology) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """Parent and children of every GPU in channel ``c``'s tree: a chain in each node (from the GPU next to the
    channel's NIC) and, across nodes, one of NCCL's two complementary binary trees (see :func:`binary_tree`), joined
    at the chains' heads. Which tree: the first half of the channels run tree 0, the second half tree 1, channel c
    and c + half on the same graph channel (its NIC and chain): NCCL builds its trees over the graph's channels and
    duplicates them, the copies taking tree 1 (connect.cc connectTrees: ``channel1 = channel0 + nChannels``,
    v2.26.2-1 lines 146-171). So each NIC carries one channel of each tree, and a collective run on at most half the
    channels (NCCL's small-size shrink) runs on tree 0 only. (NVLSTree alternates by channel parity instead:
    ``treeUp[c%2]``, connect.cc line 306.) Children are listed in a fixed order (the next GPU of the chain, then the
    left and right subtree), so mirrored channels are exact images."""
    nodes = plan.nnodes
    ring = plan.rings[c]
    chains = [[g for g in ring if topo.device(g).node == node] for node in range(nodes)]
    mirror = c >= (plan.channels + 1) // 2

    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for node, chain in enumerate(chains):
        for k, g in enumerate(chain):
            kids = [chain[k + 1]] if k + 1 < len(chain) else []
            if k == 0:
                pn, node_kids = binary_tree(node, nodes, mirror)
                parent[g] = None if pn is None else chains[pn][0]
                kids += [chains[x][0] for x in node_kids]
            else:
                parent[g] = chain[k - 1]
            children[g] = kids
    return parent, children
