"""FlexLoRA's aggregation of plain LoRA adapters in the space of their products (``flexlora``).

Bai et al., "Federated Fine-tuning of Large Language Models under Heterogeneous Language Tasks and Client
Resources" (NeurIPS 2024, arXiv 2402.11505; its Figure 2): the server does not average the clients' factors
(FedAvg's ``mean(B_k) mean(A_k)``) but, for each LoRA layer, their full-size products,

    W = sum_k p_k B_k A_k,        p_k = n_k / sum_j n_j,

takes W's SVD ``U Sigma V^T`` and gives a client of rank r the factors ``B = U_r Sigma_r``, ``A = V_r^T``: the
singular values go whole into B. That split is the authors' code (github.com/alibaba/FederatedScope, branch
FlexLoRA: ``fed_utils/model_aggregation.py``, ``FlexLoRA``, forms W from each client's ``B_k A_k`` times its
LoRA scaling and its data share; ``fed_utils/adaptive_peft.py``, ``distribute_weight_fast``, sets
``lora_B = U[:, :r] diag(S[:r]) / (alpha / r)`` and ``lora_A = V^T[:r, :]``). peft's scaling ``alpha / r`` is
one constant per layer here, so it scales W, Sigma and B's division alike and cancels: the stage works on the
unscaled ``sum_k p_k B_k A_k`` and sets the same factors.

fedsim gives every client the same rank r, so the heterogeneous ranks FlexLoRA is built for (a client of rank
r_i takes the first r_i components) are not modelled: every client, and the global model, takes the first r.
With one rank the truncation still matters: W is a sum of K products of rank r, so its rank can reach K r, and
``U_r Sigma_r V_r^T`` is its best rank-r approximation (Eckart-Young), where FedAvg's ``mean(B_k) mean(A_k)``
is some other rank-r matrix, not W either. (The paper's Figure 6(a) compares FedIT with and without FlexLoRA
at one rank, 8 and 200; the authors' main.py otherwise runs FedAvg under equal ranks, ``--aggregation homo``.)
The metrics ``flexlora.dropped_max`` and ``.dropped_mean`` are, over the layers, the relative Frobenius norm of
what the truncation drops, ``||W - U_r Sigma_r V_r^T|| / ||W||`` (Figure 6(b) plots that approximation error).

In fedsim the stage runs before the rule and reads each client's update (B_k is the round's B plus the client's
row's part for it, A_k likewise; p_k the client's coefficient in the summed update, its samples under FedAvg's
default weighting, as the paper's n_k). It writes, for every client kept, the change from the round's factors
to FlexLoRA's into the client's row and the matching weighted sum into ``sums["delta"]``, as if every client had
uploaded them: under FedAvg and the plain server step at lr 1 the new global factors are FlexLoRA's exactly;
a server optimiser (FedAdam) steps with that change as its pseudo-gradient. The other trained parameters (the
head, peft's ``modules_to_save``) are averaged by the rule as usual. W's SVD is taken through thin QRs of the
stacked factors, ``[p_1 B_1 ... p_K B_K] [A_1; ...; A_K]``, whose small core's SVD gives W's nonzero singular
triplets without forming the full-size W (the same numbers as W's own SVD, in fewer operations when K r is
below the layer's sides).

Refused: a model with no LoRA layer, a layer whose A is frozen (LoRA-FA: FedAvg of B is already the mean of
the products B_k A, and A is not the server's to set), a factor that is not a matrix; as a stage that reads
rows, SecAgg+ and central DP; as one that sets the update, a rule that combines the rows it gathered itself.
The stage keeps no state across rounds: a resumed run aggregates as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from torch import Tensor

from fedsim.config import ConfigError, register_server_stage
from fedsim.config.server_stage import RowsStageConfig
from fedsim.sim.server_stages.base import ServerView, StageContext, Stateless
from fedsim.sim.server_stages.lora_layers import lora_layers


class FlexLoraConfig(RowsStageConfig):
    """Aggregate plain LoRA's factors as FlexLoRA: the rank-r SVD of the clients' weighted mean product (metrics
    ``flexlora.dropped_max`` and ``.dropped_mean``)."""

    kind: Literal["flexlora"] = "flexlora"
    at: Literal["before_rule"] = "before_rule"
    reads_records: ClassVar[bool] = False  # it reads the updates and their coefficients, not loss or samples
    sets_update: ClassVar[bool] = True  # it writes the LoRA factors' part of sums["delta"] and of the rows


Factors = tuple[slice, tuple[int, int], slice, tuple[int, int]]  # B's place and shape, A's


def truncated_svd_factors(bs: Tensor, As: Tensor, p: Tensor) -> tuple[Tensor, Tensor, float]:
    """The clients' B (K, m, r) and A (K, r, n) with weights ``p`` (K,) summing to 1: ``(U_r Sigma_r, V_r^T,
    dropped)`` for the SVD of ``W = sum_k p_k B_k A_k`` (m, n), with ``dropped = ||W - U_r Sigma_r V_r^T|| /
    ||W||`` (0 for W = 0). Singular values past W's rank are 0 and their vectors any orthonormal completion."""
    k, m, r = bs.shape
    n = As.shape[2]
    stacked_b = (bs * p[:, None, None]).permute(1, 0, 2).reshape(m, k * r)  # [p_1 B_1 | ... | p_K B_K]
    stacked_a = As.reshape(k * r, n)  # [A_1; ...; A_K]: W = stacked_b @ stacked_a
    qb, rb = torch.linalg.qr(stacked_b)
    qa, ra = torch.linalg.qr(stacked_a.T)
    u, s, vh = torch.linalg.svd(rb @ ra.T)  # W = (qb u) diag(s) (vh qa^T)
    u, vh = qb @ u[:, :r], vh[:r] @ qa.T
    total = float(s.square().sum())
    dropped = (float(s[r:].square().sum()) / total) ** 0.5 if total > 0 else 0.0
    return u * s[:r], vh, dropped


def _matrix_layers(parameters: tuple[tuple[str, tuple[int, ...]], ...]) -> dict[str, Factors]:
    """The model's LoRA layers, each with a trained A and matrix factors; one ConfigError line otherwise."""
    layers = lora_layers(parameters)
    if not layers:
        raise ConfigError(
            "the model has no trained lora_B; flexlora aggregates a plain LoRA adapter (model.adapter.kind=lora)"
        )
    matrices: dict[str, Factors] = {}
    for layer, (b, b_shape, a, a_shape) in layers.items():
        if a is None:
            raise ConfigError(
                f"{layer}'s lora_A is frozen (LoRA-FA?): FedAvg of B is then already the mean of the products"
                " B_k A and A is not the server's to set, so flexlora changes nothing; use model.adapter.kind=lora"
            )
        if len(b_shape) != 2 or len(a_shape) != 2:
            raise ConfigError(f"{layer}'s LoRA factors have shapes {b_shape} and {a_shape}; flexlora needs matrices")
        (m, r), n = b_shape, a_shape[1]
        if r > min(m, n):
            raise ConfigError(f"{layer}'s LoRA rank {r} exceeds its smaller side ({m} x {n}); W has fewer than r")
        matrices[layer] = (b, (m, r), a, (r, n))
    return matrices


@register_server_stage(FlexLoraConfig)
class FlexLora(Stateless):
    def __init__(self, cfg: FlexLoraConfig, context: StageContext) -> None:
        self.layers = _matrix_layers(context.parameters)
        self.dropped: dict[str, float] = {}

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        self.dropped = {}

    def apply_(self, view: ServerView) -> bool:
        rows = view.rows
        assert rows is not None  # a RowsStageConfig is handed them
        kept = [i for i, w in enumerate(rows.weights.tolist()) if w > 0]
        if not kept:
            return False
        device, delta = view.model.device, view.sums["delta"]
        w = rows.weights[kept].to(device, torch.float64)
        for layer, (b, b_shape, a, a_shape) in self.layers.items():
            b0 = view.model[b].to(torch.float64).view(b_shape)
            a0 = view.model[a].to(torch.float64).view(a_shape)
            bs = b0 + rows.rows[:, b][kept].to(device, torch.float64).view(-1, *b_shape)  # the LoRA columns only
            As = a0 + rows.rows[:, a][kept].to(device, torch.float64).view(-1, *a_shape)
            new_b, new_a, self.dropped[layer] = truncated_svd_factors(bs, As, w / w.sum())
            for place, new, old in ((b, new_b, b0), (a, new_a, a0)):
                change = (new - old).flatten()
                delta[place] = (change * w.sum()).to(delta)  # as if every client kept had uploaded FlexLoRA's
                for i in kept:
                    rows.rows[i, place] = change.to(rows.rows)
        return False

    def round_metrics(self) -> dict[str, float]:
        if not self.dropped:
            return {}
        values = list(self.dropped.values())
        return {"dropped_max": max(values), "dropped_mean": sum(values) / len(values)}
