"""A run seen from outside: each round's metrics by name (:func:`round_metrics`), the trackers that write them
where researchers read them (CSV, TensorBoard, Weights & Biases: :func:`open_trackers`), and a run's rounds as
a pandas DataFrame (:func:`fedsim.tracking.history.read_run`)."""

from fedsim.tracking.metrics import round_metrics
from fedsim.tracking.trackers import Tracker, open_trackers

__all__ = ["Tracker", "open_trackers", "round_metrics"]
