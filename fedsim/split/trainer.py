"""The cloud half of split fine-tuning: validate and decode a batch, train the top with adapters, evaluate.

The same :class:`CloudTrainer` serves ``fedsim split`` (edge clients in one process) and the gRPC service
(``fedsim serve``). A batch is fully validated before the optimiser is touched, and a step whose loss is not
finite is refused too, so a rejected batch never changes the adapters. Steps from several devices are
serialised by a lock. Adapters are checkpointed as a whole directory swapped in by rename.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedsim.config import ConfigError
from fedsim.split.bottleneck import BottleneckTop, split_halves, wire_width
from fedsim.split.config import SplitConfig
from fedsim.split.decode import decode_batch
from fedsim.split.lora import add_adapters, load_adapters, save_adapters
from fedsim.split.memory import SavedTensorMeter
from fedsim.split.model import load_encoder, minilm_path
from fedsim.wire.batch import BatchError, WireBatch

ADAPTERS = "adapters"
TRAINER_STATE = "trainer_state.pt"  # optimiser, dropout stream, step: what resuming needs beside the adapters
PROGRESS = "progress.json"


def saved_adapters(out: Path) -> Path:
    """``out/adapters``, or ``out/.adapters.old`` when a crash came between the two renames of a save."""
    directory = out / ADAPTERS
    if not directory.is_dir() and (out / f".{ADAPTERS}.old").is_dir():
        return out / f".{ADAPTERS}.old"
    return directory


@dataclass(frozen=True)
class StepResult:
    step: int
    loss: float
    examples: int


@dataclass(frozen=True)
class EvalResult:
    examples: int
    correct: int
    loss_sum: float

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.examples, 1)

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.examples, 1)

    def __add__(self, other: EvalResult) -> EvalResult:
        return EvalResult(self.examples + other.examples, self.correct + other.correct, self.loss_sum + other.loss_sum)


def cloud_device(kind: str) -> torch.device:
    """``cfg.accelerator`` as a device: ``cuda`` (the current GPU) or a :class:`ConfigError` when torch sees
    none; ``auto``: a GPU when torch sees one, else the CPU."""
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"accelerator=cuda, but torch {torch.__version__} sees no CUDA device")
    return torch.device("cuda", torch.cuda.current_device())


class CloudTrainer:
    """The top layers of the split encoder with adapters (or fully trainable), and their AdamW optimiser, on
    ``cfg.accelerator``: batches are decoded on the host and trained there."""

    def __init__(self, cfg: SplitConfig, encoder: nn.Module | None = None) -> None:
        self.cfg = cfg
        path = Path(cfg.model.path) if cfg.model.path else minilm_path()
        encoder = load_encoder(path) if encoder is None else encoder
        self.base = str(path)
        self.hidden_size: int = encoder.config.hidden_size  # type: ignore[union-attr,assignment]
        self.wire_width = wire_width(cfg.model, self.hidden_size)  # values per token the edge sends
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            _, self.top = split_halves(encoder, cfg.model)  # type: ignore[arg-type]
        self.top.classifier.requires_grad_(True)
        if isinstance(self.top, BottleneckTop):  # the learned bottleneck: U_r and its bias train
            self.top.up.requires_grad_(True)
            self.top.output.requires_grad_(cfg.adapter.mode == "full")
        add_adapters(self.top.layers, cfg.adapter.mode, cfg.adapter.r, cfg.adapter.alpha, cfg.seed)
        self.device = cloud_device(cfg.accelerator)
        self.top.to(self.device)
        self.trainable = [p for p in self.top.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
        self.meter = SavedTensorMeter(self.top)
        self.step = 0
        self.examples = 0
        self._lock = threading.Lock()
        # dropout draws from this trainer's own stream, seeded by cfg.seed: a run repeats, and neither other
        # trainers in the process (regions) nor anything else using torch's global RNG shifts it
        self._rng_state = torch.Generator().manual_seed(cfg.seed).get_state()
        # on a GPU dropout draws from the GPU's generator: the trainer keeps its own stream there too
        self._gpu_devices = [self.device] if self.device.type == "cuda" else []
        self._gpu_rng_state = [torch.Generator(device=d).manual_seed(cfg.seed).get_state() for d in self._gpu_devices]

    @property
    def trainable_params(self) -> int:
        return sum(p.numel() for p in self.trainable)

    def decode(self, batch: WireBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Validate and decode, or raise :class:`BatchError`; the tensors on the trainer's device."""
        model, server = self.cfg.model, self.cfg.server
        hidden, mask, labels = decode_batch(
            batch, self.wire_width, model.num_labels, model.max_length, self.cfg.max_tokens, server.max_activation
        )
        return hidden.to(self.device), mask.to(self.device), labels.to(self.device)

    def train_step(self, batch: WireBatch) -> StepResult:
        """One optimiser step on ``batch``; :class:`BatchError` leaves the adapters as they were."""
        hidden, mask, labels = self.decode(batch)
        with self._lock:
            self.top.train()
            with torch.random.fork_rng(devices=self._gpu_devices), self.meter.measure():
                torch.set_rng_state(self._rng_state)
                for device, state in zip(self._gpu_devices, self._gpu_rng_state, strict=True):
                    torch.cuda.set_rng_state(state, device)
                loss = F.cross_entropy(self.top(hidden, mask), labels)
                self._rng_state = torch.get_rng_state()
                self._gpu_rng_state = [torch.cuda.get_rng_state(d) for d in self._gpu_devices]
            value = loss.item()
            if not math.isfinite(value):
                raise BatchError(f"loss is {value} on this batch: activations out of range; step refused")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.step += 1
            self.examples += len(labels)
            return StepResult(self.step, value, len(labels))

    @torch.no_grad()
    def evaluate(self, batch: WireBatch) -> EvalResult:
        hidden, mask, labels = self.decode(batch)
        with self._lock:
            self.top.eval()
            logits = self.top(hidden, mask)
        loss = F.cross_entropy(logits, labels, reduction="sum")
        return EvalResult(len(labels), int((logits.argmax(1) == labels).sum()), float(loss))

    @property
    def peak_activation_mb(self) -> float:
        return self.meter.peak / 2**20

    def save(self, out: Path, progress: dict[str, Any] | None = None) -> Path:
        """Write the adapters to ``out/adapters`` as a whole: staged in a temporary directory, then swapped in.

        Beside peft's files go what resuming needs: the optimiser's state, the dropout stream, the step count,
        and the caller's ``progress`` (``progress.json``). A crash mid-save leaves either the previous
        ``adapters`` or, between the two renames, ``.adapters.old`` (which :meth:`load` falls back to); never a
        mix of two versions.
        """
        final, staged, old = out / ADAPTERS, out / f".{ADAPTERS}.tmp", out / f".{ADAPTERS}.old"
        shutil.rmtree(staged, ignore_errors=True)
        with self._lock:
            staged.mkdir(parents=True)
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "rng": self._rng_state,
                    "gpu_rng": self._gpu_rng_state,
                    "step": self.step,
                    "examples": self.examples,
                },
                staged / TRAINER_STATE,
            )
            if progress is not None:
                (staged / PROGRESS).write_text(json.dumps(progress) + "\n")
            save_adapters(
                staged,
                self.top.layers,
                self.top.first_layer,
                self.top.head,
                self.cfg.adapter.r,
                self.cfg.adapter.alpha,
                self.base,
            )
            if self.cfg.adapter.mode == "full":
                from safetensors.torch import save_file

                state = {k: v.detach().cpu().contiguous() for k, v in self.top.layers.state_dict().items()}
                save_file(state, staged / "top_layers.safetensors")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        staged.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, out: Path, resume: bool = False) -> dict[str, Any] | None:
        """Load adapters saved by :meth:`save` (same config) from ``out``; with ``resume`` also the optimiser,
        the dropout stream and the step count, and return the saved progress (None when there was none)."""
        directory = saved_adapters(out)
        progress = None
        with self._lock:
            if resume:
                if not directory.is_dir():
                    raise ConfigError(f"{out}: no checkpoint to resume from (no {ADAPTERS} directory)")
                state_file = directory / TRAINER_STATE
                if not state_file.is_file():
                    raise ConfigError(f"{directory}: no {TRAINER_STATE} (saved without training state): cannot resume")
                state = torch.load(state_file, weights_only=True, map_location="cpu")
                self.optimizer.load_state_dict(state["optimizer"])
                self._rng_state, self.step, self.examples = state["rng"], int(state["step"]), int(state["examples"])
                if len(state.get("gpu_rng", [])) == len(self._gpu_devices):  # saved on the same kind of device
                    self._gpu_rng_state = list(state.get("gpu_rng", []))
                if (directory / PROGRESS).is_file():
                    progress = json.loads((directory / PROGRESS).read_text())
            load_adapters(directory, self.top.layers, self.top.first_layer, self.top.head)
            if self.cfg.adapter.mode == "full":
                from safetensors.torch import load_file

                self.top.layers.load_state_dict(
                    load_file(directory / "top_layers.safetensors", device=str(self.device))
                )
        return progress
