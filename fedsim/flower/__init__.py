"""fedsim under Flower: the same client code as a ClientApp with a ServerApp running Flower's FedAvg
(:mod:`fedsim.flower.app`), and the same clients under Flower's own SecAgg+ (:mod:`fedsim.flower.secagg`).

    from fedsim.flower import run_flower_simulation
"""

from __future__ import annotations

from fedsim.flower.app import FlowerWorker, check_supported, client_app, run_flower_simulation, server_app, worker_for

__all__ = ["FlowerWorker", "check_supported", "client_app", "run_flower_simulation", "server_app", "worker_for"]
