"""Keyed random streams: every random number a round's stages draw (DP noise, SecAgg+'s secrets, attackers,
compressors' rounding) comes from a generator keyed by (the run's seed, the round, a stream, a client), so
every rank of a pool draws the same numbers without talking, and a run is reproducible. A deployment draws
the secret ones from a secret source instead."""

from __future__ import annotations

import numpy as np
import torch


def stream_seed(*key: int) -> int:
    """A 63-bit seed for ``key``."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0]) & ((1 << 63) - 1)


def noise_generator(device: torch.device, *key: int) -> torch.Generator:
    """A generator on ``device`` seeded by ``key`` (the run's seed, the round, a stream, a client)."""
    return torch.Generator(device=device).manual_seed(stream_seed(*key))


MODEL_STREAM = 0x5DEECE66D  # mixed into a client's seed for its model's own randomness


def seed_model_randomness(client: torch.Generator, device: torch.device) -> None:
    """Seed torch's global generator on the CPU and on ``device``, which a model's own randomness draws from
    (dropout), from a client's ``client`` generator (keyed by the run's seed, the round and the client): the
    masks a client draws then depend on those alone, not on the rank that trains it or on the clients trained
    before it there. Each generator directly (3 us), not ``torch.manual_seed`` (460 us: it visits every
    backend)."""
    seed = client.initial_seed() ^ MODEL_STREAM
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        torch.cuda.default_generators[index].manual_seed(seed)


def derived_secret(*key: int) -> bytes:
    """32 bytes keyed like a stream: a simulation's stand-in for ``os.urandom(32)``."""
    return np.random.SeedSequence([int(k) for k in key]).generate_state(8, np.uint32).tobytes()
