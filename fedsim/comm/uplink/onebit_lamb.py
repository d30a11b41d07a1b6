"""1-bit LAMB (Li et al., HiPC 2022, "1-bit LAMB: Communication Efficient Large-Scale Large-Batch Training with
LAMB's Convergence Speed"; DeepSpeed's ``OnebitLamb``), over a federated round.

LAMB scales each layer's Adam step by a trust ratio ``||x|| / ||u||``; 1-bit LAMB keeps that ratio through
compression. It runs plain LAMB for a warm-up, meanwhile averaging each layer's clipped ratio (``coeff``),
then freezes the variance ``v`` and communicates only momenta, each worker's compressed to one bit an entry
with error compensation. Its layer-wise ratio becomes the frozen ``coeff`` times a ``factor``: the largest
entry of ``(sqrt(v) + eps) / (sqrt(v_fresh) + eps)``, where ``v_fresh`` goes on from ``v`` with gradients
reconstructed from consecutive momenta, ``(m_t - beta1 m_{t-1}) / (1 - beta1)``; the factor is clipped to
``[factor_min, factor_max]`` and to within ``factor_threshold`` of its last value.

So it has two halves. The client half is :class:`~fedsim.comm.uplink.onebit.OneBit`'s: each client keeps a
momentum of its updates, sends its update dense during the warm-up and after it the compensated 1-bit sign of
its momentum (one scale per tensor, which is why DeepSpeed's ``scaling_coeff``, equalising the tensors' scales
before one scale for all, is not needed here). The server half (:class:`LambServer`) turns the decoded mean,
an update during the warm-up and the clients' mean momentum after it, into LAMB's step of the parameters; the
algorithm's server (FedAvg's) then adds it to the model. The update ``local - global`` points downhill, so the
step is ``+ lr * coeff * u``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from fedsim.comm.uplink.base import Blocks
from fedsim.comm.uplink.onebit import OneBit, OneBitConfig
from fedsim.config.compressor import register_compressor

MOMENTS = ("m", "v", "v_fresh")  # per parameter, on the model's device (coeff and factor, per tensor, on the host)


class LambServer:
    """LAMB on the server over the per-tensor blocks of the parameters; its state is what a checkpoint keeps."""

    def __init__(self, blocks: Blocks, cfg: OneBitLambConfig) -> None:
        self.blocks, self.cfg = blocks, cfg
        self.state: dict[str, Tensor] = {}  # m, v, v_fresh (n_params); coeff, factor (one per tensor)

    def _init(self, like: Tensor, n_params: int) -> None:
        tensors = len(self._params(n_params))
        zeros = {name: torch.zeros(n_params, device=like.device) for name in MOMENTS}
        self.state = {**zeros, "coeff": torch.zeros(tensors, dtype=torch.float64), "factor": torch.ones(tensors)}

    def _params(self, n_params: int) -> list[slice]:
        return [sl for sl, _ in self.blocks if sl.stop <= n_params]

    def step_(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int, round_idx: int) -> None:
        """Rewrite ``sums["delta"]``'s parameters so that the mean the algorithm's server adds is LAMB's step."""
        weight = float(sums["weight"])
        if weight <= 0:
            return
        if not self.state:
            self._init(global_state, n_params)
        mean = sums["delta"][:n_params] / weight
        if self.state["m"].device != mean.device:  # restored from a checkpoint, which is read on the host
            self.state |= {k: self.state[k].to(mean.device) for k in MOMENTS}
        cfg, st = self.cfg, self.state
        m, v, fresh = st["m"], st["v"], st["v_fresh"]
        if round_idx < cfg.warmup:  # LAMB itself: the server's own moments of the mean update
            m.mul_(cfg.beta).add_(mean, alpha=1 - cfg.beta)
            v.mul_(cfg.beta2).addcmul_(mean, mean, value=1 - cfg.beta2)
            if round_idx == cfg.warmup - 1:
                fresh.copy_(v)
        else:  # the mean is the clients' momentum; the gradient it implies feeds the fresh variance only
            mean.mul_(v > 0)  # entries no client ever moved in the warm-up: 1 bit cannot send their zero
            grad = (mean - cfg.beta * m) / (1 - cfg.beta)
            fresh.mul_(cfg.beta2).addcmul_(grad, grad, value=1 - cfg.beta2)
            m.copy_(mean)
        denom = v.sqrt().add_(cfg.eps)
        update = m / denom
        params = self._params(n_params)
        if round_idx < cfg.warmup:
            coeffs = self._warmup_coeffs(global_state, update, params)
        else:
            coeffs = self._frozen_coeffs(denom, fresh, params)
        step = sums["delta"][:n_params]
        for sl, coeff in zip(params, coeffs, strict=True):
            step[sl] = update[sl] * (cfg.lr * coeff * weight)

    def _warmup_coeffs(self, weights: Tensor, update: Tensor, params: list[slice]) -> list[float]:
        """LAMB's trust ratio per tensor, clipped; its running average becomes the frozen ``coeff`` (a tensor with
        no weights or no update steps at ratio 1 and leaves the average alone). One read from the device."""
        cfg, coeff = self.cfg, self.state["coeff"]
        norms = torch.stack([torch.stack([weights[sl].norm(), update[sl].norm()]) for sl in params]).tolist()
        ratios = []
        for i, (w, u) in enumerate(norms):
            if w == 0 or u == 0:
                ratios.append(1.0)
                continue
            ratios.append(min(max(w / u, cfg.min_coeff), cfg.max_coeff))
            coeff[i] = cfg.coeff_beta * coeff[i] + (1 - cfg.coeff_beta) * ratios[-1]
        return ratios

    def _frozen_coeffs(self, denom: Tensor, fresh: Tensor, params: list[slice]) -> list[float]:
        """The frozen ratio times the paper's factor per tensor: the largest entry of the frozen over the fresh
        denominator, clipped to its bounds and to ``factor_threshold`` of its last value. One read."""
        cfg, last = self.cfg, self.state["factor"]
        fresh_denom = fresh.sqrt().add_(cfg.eps)
        factors = torch.stack([(denom[sl] / fresh_denom[sl]).max() for sl in params]).tolist()
        coeffs = []
        for i, factor in enumerate(factors):
            factor = min(max(factor, cfg.factor_min), cfg.factor_max)
            factor = min(
                max(factor, float(last[i]) * (1 - cfg.factor_threshold)), float(last[i]) * (1 + cfg.factor_threshold)
            )
            last[i] = factor
            coeffs.append(float(self.state["coeff"][i]) * factor)
        return coeffs

    def state_dict(self) -> dict[str, Tensor]:
        return {k: t.to("cpu", copy=True) for k, t in self.state.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.state = {k: t.clone() for k, t in state.items()}


class OneBitLamb(OneBit):
    name = "onebit_lamb"

    def __init__(self, blocks: Blocks, cfg: OneBitLambConfig) -> None:
        super().__init__(blocks, cfg.beta, cfg.warmup)
        self.server = LambServer(blocks, cfg)


class OneBitLambConfig(OneBitConfig):
    """``onebit_lamb``: 1-bit LAMB (Li et al. 2022; DeepSpeed's ``OnebitLamb``, whose defaults these are but
    ``lr``). Clients send as ``onebit`` does (``beta`` is LAMB's beta1); the server runs LAMB on the mean with a
    layer-wise trust ratio, plain for ``warmup`` rounds, then on the clients' 1-bit momenta with the variance
    frozen and the ratio's frozen average scaled by ``factor``. The algorithm's server adds the step
    (``fedavg``, ``fedprox``)."""

    kind: Literal["onebit_lamb"] = "onebit_lamb"  # type: ignore[assignment]  # a kind of its own
    warmup: int = Field(10, ge=1, le=1_000_000, description="rounds of plain LAMB, sent dense, before 1-bit")
    lr: float = Field(0.03, gt=0, description="LAMB's learning rate on the server")
    beta2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-4, gt=0, description="added to sqrt(v); DeepSpeed's 1e-8 lets 1-bit noise blow up")
    min_coeff: float = Field(0.01, gt=0, description="the trust ratio's floor")
    max_coeff: float = Field(10.0, gt=0, description="the trust ratio's ceiling")
    coeff_beta: float = Field(0.9, ge=0, lt=1, description="decay of the warm-up ratio's running average")
    factor_min: float = Field(0.5, gt=0)
    factor_max: float = Field(4.0, gt=0)
    factor_threshold: float = Field(0.1, ge=0, lt=1, description="the factor's largest change a round")
    steps_server: ClassVar[bool] = True

    @model_validator(mode="after")
    def _ordered(self) -> OneBitLambConfig:
        if self.min_coeff > self.max_coeff or self.factor_min > self.factor_max:
            raise ValueError("min_coeff <= max_coeff and factor_min <= factor_max")
        return self


@register_compressor(OneBitLambConfig)
def onebit_lamb(cfg: OneBitLambConfig, blocks: Blocks) -> OneBitLamb:
    return OneBitLamb(blocks, cfg)
