"""Client selection: which clients a synchronous round trains, chosen by a registered selector
(``selection.kind``). Importing this package registers the built-in ones."""

from fedsim.sim.selection.base import ClientReports, SelectionContext, Selector, told
from fedsim.sim.selection.build import build_selector
from fedsim.sim.selection.oort import Oort
from fedsim.sim.selection.power_of_choice import PowerOfChoice
from fedsim.sim.selection.uniform import Uniform

__all__ = [
    "ClientReports",
    "Oort",
    "PowerOfChoice",
    "SelectionContext",
    "Selector",
    "Uniform",
    "build_selector",
    "told",
]
