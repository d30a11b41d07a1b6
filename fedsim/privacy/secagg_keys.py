"""SecAgg+'s first two stages for one round: every client's keys, the ring of neighbours, and the Shamir shares
of each client's secrets, delivered encrypted to the neighbours that will hold them.

As Flower's ``SecAggPlusWorkflow`` and ``secaggplus_mod`` run it (SecAgg+, Bell et al., CCS 2020: Bonawitz
et al.'s SecAgg of 2017 over a ring of neighbours instead of all pairs): the server shuffles the round's
clients onto a ring, and each client's neighbourhood is the ``num_shares`` clients around it, itself among
them. A client makes two key pairs, one whose agreements seed the pairwise masks and one whose agreements
encrypt the shares, and a self-mask seed; it splits the seed and its mask key into one Shamir share per
member of its neighbourhood (any ``reconstruction_threshold`` of them recover the secret) and sends each
neighbour its share, encrypted for it, through the server.

The primitives are the ones Flower's implementation uses, from the same libraries: elliptic-curve
Diffie-Hellman and HKDF-SHA256 (``cryptography``; X25519 here, SECP384R1 in Flower), Fernet for the shares
in transit, and pycryptodome's Shamir over GF(2^128), a 32-byte secret in two 16-byte chunks. What a
simulation changes: every secret is derived from (seed, round, client), so every rank of a pool makes the
same keys without talking and a run is reproducible; a deployment draws them from the operating system.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from fedsim.streams import derived_secret

_MASK_KEY, _SHARE_KEY, _SELF_SEED, _RING = 0x4D, 0x53, 0x42, 0x52  # secret streams beside seed, round, client
ID_BYTES = 8  # a client id on the wire, as Flower's node ids
SECRET_BYTES = 32
Neighbourhoods = dict[int, tuple[int, ...]]  # client -> the clients holding its shares, itself among them
SHARE_BYTES = 4 + SECRET_BYTES  # a share's index, then the shares of the secret's two 16-byte chunks


def agree(private: X25519PrivateKey, public: bytes, purpose: bytes) -> bytes:
    """The 32-byte key two clients share: X25519 agreement, then HKDF-SHA256 (one key per ``purpose``)."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(public))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(shared)


def public_bytes(private: X25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def split_secret(secret: bytes, threshold: int, shares: int) -> list[bytes]:
    """``shares`` Shamir shares of a 32-byte ``secret``, any ``threshold`` of which recover it."""
    assert len(secret) == SECRET_BYTES
    out = [bytearray(i.to_bytes(4, "little")) for i in range(1, shares + 1)]
    for chunk in (secret[:16], secret[16:]):
        for index, share in Shamir.split(threshold, shares, chunk, ssss=False):
            out[index - 1] += share
    return [bytes(s) for s in out]


def combine_secret(shares: Sequence[bytes]) -> bytes:
    """The secret from ``threshold`` or more of its shares (fewer give a wrong secret, not an error)."""
    indexed = [(int.from_bytes(s[:4], "little"), s[4:]) for s in shares]
    return b"".join(Shamir.combine([(i, s[lo : lo + 16]) for i, s in indexed], ssss=False) for lo in (0, 16))


def ring_neighbourhoods(seed: int, round_idx: int, clients: Sequence[int], num_shares: int) -> Neighbourhoods:
    """Each client's neighbourhood: the clients within ``num_shares // 2`` of it on the round's shuffled ring,
    itself among them (Flower rounds an even ``num_shares`` up, so the ring is symmetric); all clients when
    the ring is no longer than the neighbourhood."""
    order = list(clients)
    np.random.default_rng([seed, round_idx, _RING]).shuffle(order)
    n, half = len(order), num_shares // 2
    around = range(-half, half + 1)
    return {cid: tuple(sorted({order[(i + offset) % n] for offset in around})) for i, cid in enumerate(order)}


@dataclass(frozen=True)
class Party:
    """One client's secrets in a round: the mask key pair, the share-encryption key pair, the self-mask seed."""

    cid: int
    mask_key: X25519PrivateKey
    share_key: X25519PrivateKey
    self_seed: bytes

    @classmethod
    def derive(cls, seed: int, round_idx: int, cid: int) -> Party:
        def key(stream: int) -> X25519PrivateKey:
            return X25519PrivateKey.from_private_bytes(derived_secret(seed, round_idx, stream, cid))

        return cls(cid, key(_MASK_KEY), key(_SHARE_KEY), derived_secret(seed, round_idx, _SELF_SEED, cid))

    def mask_key_bytes(self) -> bytes:
        return self.mask_key.private_bytes_raw()


def fernet_key(key: bytes) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(key))


class RoundKeys:
    """Stages 0 and 1 of one round: the clients' public keys, their neighbourhoods, and the shares each
    neighbour decrypted and now holds: ``held[holder][owner] = (self-seed share, mask-key share)``.
    ``up``/``down`` count each client's protocol bytes so far (public keys, encrypted shares)."""

    def __init__(self, seed: int, round_idx: int, clients: Sequence[int], num_shares: int, threshold: int) -> None:
        self.threshold = threshold
        self.parties = {cid: Party.derive(seed, round_idx, cid) for cid in clients}
        self.public = {cid: (public_bytes(p.mask_key), public_bytes(p.share_key)) for cid, p in self.parties.items()}
        self.neighbours = ring_neighbourhoods(seed, round_idx, clients, num_shares)
        self.held: dict[int, dict[int, tuple[bytes, bytes]]] = {cid: {} for cid in clients}
        self.up = dict.fromkeys(clients, 2 * SECRET_BYTES)  # stage 0: two public keys
        self.down = {cid: len(self.neighbours[cid]) * (ID_BYTES + 2 * SECRET_BYTES) for cid in clients}
        for cid in clients:
            self._share(cid)

    def _share(self, owner: int) -> None:
        """Stage 1 for ``owner``: split its secrets among its neighbourhood, encrypt each pair of shares for
        its holder; the server forwards them, and each holder decrypts and keeps its pair."""
        party, holders = self.parties[owner], self.neighbours[owner]
        seed_shares = split_secret(party.self_seed, self.threshold, len(holders))
        key_shares = split_secret(party.mask_key_bytes(), self.threshold, len(holders))
        for holder, seed_share, key_share in zip(holders, seed_shares, key_shares, strict=True):
            if holder == owner:
                self.held[owner][owner] = (seed_share, key_share)
                continue
            sealed = fernet_key(agree(party.share_key, self.public[holder][1], b"share")).encrypt(
                owner.to_bytes(ID_BYTES, "little") + holder.to_bytes(ID_BYTES, "little") + seed_share + key_share
            )
            self.up[owner] += ID_BYTES + len(sealed)
            self.down[holder] += ID_BYTES + len(sealed)
            opened = fernet_key(agree(self.parties[holder].share_key, self.public[owner][1], b"share")).decrypt(sealed)
            if int.from_bytes(opened[:ID_BYTES], "little") != owner:
                raise ValueError(f"SecAgg+: client {holder} received shares that client {owner} did not send")
            body = opened[2 * ID_BYTES :]
            self.held[holder][owner] = (body[:SHARE_BYTES], body[SHARE_BYTES:])

    def pair_key(self, cid: int, other: int) -> bytes:
        """The key ``cid`` agrees with ``other`` for their pairwise mask (the same from either side)."""
        return agree(self.parties[cid].mask_key, self.public[other][0], b"mask")

    def recover(self, owner: int, survivors: set[int], which: int) -> bytes | None:
        """The server's view of stage 3: ``owner``'s self-mask seed (``which`` 0) or mask key (1) from the shares
        its surviving neighbours send back; None when fewer than the threshold survived."""
        shares = [self.held[h][owner][which] for h in self.neighbours[owner] if h in survivors]
        if len(shares) < self.threshold:
            return None
        return combine_secret(shares[: self.threshold])
