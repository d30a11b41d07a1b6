"""Server optimisers, one file each, registered by kind (``server_optimizer.kind``): importing this package
registers the built-in ones. :class:`ServerStep` applies the run's to each round's mean update."""

from fedsim.algorithms.server.adagrad import Adagrad
from fedsim.algorithms.server.adam import Adam
from fedsim.algorithms.server.base import Moments, ServerOptimizer, ServerOptimizerContext, ServerStep
from fedsim.algorithms.server.lamb import Lamb
from fedsim.algorithms.server.onebit_lamb import OneBitLamb
from fedsim.algorithms.server.reddi import FedAdagrad, FedAdam, FedYogi
from fedsim.algorithms.server.sgd import Sgd

__all__ = [
    "Adagrad",
    "Adam",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
    "Lamb",
    "Moments",
    "OneBitLamb",
    "ServerOptimizer",
    "ServerOptimizerContext",
    "ServerStep",
    "Sgd",
]
