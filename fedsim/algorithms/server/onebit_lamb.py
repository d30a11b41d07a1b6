"""1-bit LAMB's server half (Li et al., HiPC 2022, "1-bit LAMB: Communication Efficient Large-Scale Large-Batch
Training with LAMB's Convergence Speed"; DeepSpeed's ``OnebitLamb``), as a server optimiser.

LAMB scales each tensor's Adam step by a trust ratio ``||x|| / ||u||``; 1-bit LAMB keeps that ratio through
compression. For ``warmup`` server steps it is LAMB on the mean update (no bias correction, as DeepSpeed's),
meanwhile averaging each tensor's clipped ratio (``coeff``). Then it freezes the variance ``v`` and reads the
clients' mean *momentum*, which the ``onebit`` uplink sends compressed to one bit an entry after the same
warm-up: the ratio becomes the frozen ``coeff`` times a ``factor``, the largest entry of
``(sqrt(v) + eps) / (sqrt(v_fresh) + eps)``, where ``v_fresh`` goes on from ``v`` with gradients reconstructed
from consecutive momenta, ``(m_t - beta1 m_{t-1}) / (1 - beta1)``, clipped to ``[factor_min, factor_max]`` and
to within ``factor_threshold`` of its last value. The mean update points downhill, so each tensor moves by
``+ lr * ratio * m / (sqrt(v) + eps)``.

The warm-up counts server steps; the clients' compressor counts rounds. They agree unless a round makes no
server step (every client dropped out, or the round failed); after such a round in the warm-up, the server's
ends that many rounds after the clients'.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import OneBitLambServer, register_server_optimizer


@register_server_optimizer(OneBitLambServer)
class OneBitLamb:
    def __init__(self, cfg: OneBitLambServer, context: ServerOptimizerContext) -> None:
        self.cfg, self.sizes = cfg, list(context.sizes)
        self.moments = Moments(("m", "v", "v_fresh"))
        self.coeff = torch.zeros(len(self.sizes), dtype=torch.float64)  # the warm-up ratios' running average
        self.factor = torch.ones(len(self.sizes))  # each tensor's last factor
        self.t = 0

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        cfg, state = self.cfg, self.moments.on(x)
        m, v, fresh = state["m"], state["v"], state["v_fresh"]
        warming = self.t < cfg.warmup
        if warming:  # LAMB itself: the server's own moments of the mean update
            m.mul_(cfg.beta1).add_(delta, alpha=1 - cfg.beta1)
            v.mul_(cfg.beta2).addcmul_(delta, delta, value=1 - cfg.beta2)
            if self.t == cfg.warmup - 1:
                fresh.copy_(v)
        else:  # the mean is the clients' momentum; the gradient it implies feeds the fresh variance only
            momentum = delta * (v > 0)  # entries no client moved in the warm-up: 1 bit cannot send their zero
            grad = (momentum - cfg.beta1 * m) / (1 - cfg.beta1)
            fresh.mul_(cfg.beta2).addcmul_(grad, grad, value=1 - cfg.beta2)
            m.copy_(momentum)
        denom = v.sqrt().add_(cfg.eps)
        update = m / denom
        coeffs = self._warmup_coeffs(x, update) if warming else self._frozen_coeffs(denom, fresh)
        for x_l, u_l, coeff in zip(x.split(self.sizes), update.split(self.sizes), coeffs, strict=True):
            x_l.add_(u_l, alpha=lr * coeff)
        self.t += 1

    def _warmup_coeffs(self, x: Tensor, update: Tensor) -> list[float]:
        """LAMB's trust ratio per tensor, clipped; its running average becomes the frozen ``coeff`` (a tensor with
        no weights or no update steps at ratio 1 and leaves the average alone). One read from the device."""
        cfg, coeff = self.cfg, self.coeff
        pairs = zip(x.split(self.sizes), update.split(self.sizes), strict=True)
        norms = torch.stack([torch.stack([x_l.norm(), u_l.norm()]) for x_l, u_l in pairs]).tolist()
        ratios = []
        for i, (w, u) in enumerate(norms):
            if w == 0 or u == 0:
                ratios.append(1.0)
                continue
            ratios.append(min(max(w / u, cfg.min_coeff), cfg.max_coeff))
            coeff[i] = cfg.coeff_beta * coeff[i] + (1 - cfg.coeff_beta) * ratios[-1]
        return ratios

    def _frozen_coeffs(self, denom: Tensor, fresh: Tensor) -> list[float]:
        """The frozen ratio times the paper's factor per tensor: the largest entry of the frozen over the fresh
        denominator, clipped to its bounds and to ``factor_threshold`` of its last value. One read."""
        cfg, last = self.cfg, self.factor
        ratio = denom / fresh.sqrt().add_(cfg.eps)
        factors = torch.stack([block.max() for block in ratio.split(self.sizes)]).tolist()
        coeffs = []
        for i, factor in enumerate(factors):
            factor = min(max(factor, cfg.factor_min), cfg.factor_max)
            bound = float(last[i])
            factor = min(max(factor, bound * (1 - cfg.factor_threshold)), bound * (1 + cfg.factor_threshold))
            last[i] = factor
            coeffs.append(float(self.coeff[i]) * factor)
        return coeffs

    def state_dict(self) -> dict[str, Tensor]:
        own = {"coeff": self.coeff.clone(), "factor": self.factor.clone(), "t": torch.tensor(self.t, device="cpu")}
        return {**self.moments.state_dict(), **own}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)
        if "coeff" in state:
            self.coeff, self.factor = state["coeff"].clone(), state["factor"].clone()
        self.t = int(state["t"]) if "t" in state else 0
