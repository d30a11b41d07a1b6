"""Client momentum: local SGD with ``local_momentum`` (and Nesterov) takes torch.optim.SGD's steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedsim.algorithms.fedavg import FedAvgConfig
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ClientData
from fedsim.models import Replica, build_model
from fedsim.sim.engine import Engine
from tests.conftest import tiny_config


@pytest.mark.parametrize("nesterov", [False, True])
def test_local_momentum_matches_torch_sgd(nesterov: bool) -> None:
    cfg = FedAvgConfig(name="fedavg", lr=0.1, batch_size=8, local_epochs=3, local_momentum=0.9, nesterov=nesterov)
    model = build_model(parse_config(tiny_config()).model, (64,), 10, seed=0)
    reference = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    data = ClientData(torch.randn(20, 64, generator=gen, device="cpu"), torch.randint(0, 10, (20,), device="cpu"))
    replica = Replica(model)
    local_sgd(replica, data, cfg, torch.Generator().manual_seed(7))

    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov)
    order = torch.Generator().manual_seed(7)
    for _ in range(3):
        perm = torch.randperm(20, generator=order, device="cpu")
        for lo in range(0, 20, 8):
            batch = perm[lo : lo + 8]
            opt.zero_grad()
            F.cross_entropy(reference(data.x[batch]), data.y[batch]).backward()
            opt.step()
    want = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    torch.testing.assert_close(replica.params, want, rtol=0, atol=1e-6)
    plain = Replica(copy.deepcopy(build_model(parse_config(tiny_config()).model, (64,), 10, seed=0)))
    local_sgd(
        plain, data, cfg.model_copy(update={"local_momentum": 0.0, "nesterov": False}), torch.Generator().manual_seed(7)
    )
    assert (plain.params - replica.params).abs().max() > 1e-3  # momentum changed the path


def test_momentum_settings_are_checked_and_refused_where_they_do_not_fuse(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="nesterov needs local_momentum > 0"):
        parse_config(tiny_config(algorithm={"name": "fedavg", "nesterov": True}))
    with pytest.raises(ConfigError, match=r"algorithm\.local_momentum: Input should be less than 1"):
        parse_config(tiny_config(algorithm={"name": "fedavg", "local_momentum": 1.0}))
    tree = tiny_config(algorithm={"name": "fedavg", "local_momentum": 0.5}, executor={"kind": "fused"})
    with pytest.raises(ConfigError, match=r"executor\.kind=fused: client momentum \(local_momentum\) is not fused"):
        Engine(parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")  # type: ignore[operator]
