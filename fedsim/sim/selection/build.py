"""Building the selector a run names, handed only what it declares it reads."""

from __future__ import annotations

from dataclasses import replace

from fedsim.config import SELECTORS, SelectionConfig
from fedsim.sim.selection.base import SelectionContext, Selector
from fedsim.sim.selection.screen import Screened, screen


def build_selector(cfg: SelectionConfig, context: SelectionContext) -> Selector:
    """The selector ``cfg`` names, handed only what it declares it reads: each client's sample count where it
    reads the clients (``reads_clients``), each one's task seconds where it reads durations, the candidates'
    loss of the current model where it evaluates the model (``evaluates_model``)."""
    samples = context.samples if cfg.reads_clients else None
    duration = context.duration if cfg.reads_durations else None
    probe = context.loss if cfg.evaluates_model else None
    loss = None if probe is None else (lambda r, cids, batch: screen(cfg, probe(r, cids, batch)))
    selector: Selector = SELECTORS.build(cfg, replace(context, samples=samples, duration=duration, loss=loss))
    return selector if cfg.loss_screen == "none" else Screened(selector, cfg)
