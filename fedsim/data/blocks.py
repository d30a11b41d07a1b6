"""Clients grouped into contiguous blocks, each block one client: decentralised training's nodes as device groups
or regions (``topology.nodes``), each node training on the union of its block's data.

Block ``g`` of ``blocks`` over ``n`` clients holds clients ``[g n / blocks, (g + 1) n / blocks)``. Over an
:class:`~fedsim.data.base.ArrayDataset` a block's data are one view (its clients' samples are adjacent); over
any other dataset its clients' data are concatenated when asked.
"""

from __future__ import annotations

import torch

from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset


class ClientBlocks:
    """``dataset``'s clients as ``blocks`` contiguous blocks, block ``g`` the client ``g``."""

    def __init__(self, dataset: FederatedDataset, blocks: int) -> None:
        if not 1 <= blocks <= dataset.num_clients:
            raise ValueError(f"{blocks} blocks of {dataset.num_clients} clients: give between 1 and the clients")
        self.inner = dataset  # what placement moves to the accelerator
        self.num_clients = blocks
        self.num_classes = dataset.num_classes
        self.input_shape = dataset.input_shape
        self.test = dataset.test
        n = dataset.num_clients
        self._bounds = [(g * n // blocks, (g + 1) * n // blocks) for g in range(blocks)]

    def members(self, g: int) -> range:
        return range(*self._bounds[g])

    def client(self, cid: int) -> ClientData:
        lo, hi = self._bounds[cid]
        if isinstance(self.inner, ArrayDataset):
            return self.inner.clients(lo, hi)
        parts = [self.inner.client(c) for c in range(lo, hi)]
        return ClientData(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]))

    def n_samples(self, cid: int) -> int:
        return sum(self.inner.n_samples(c) for c in self.members(cid))
