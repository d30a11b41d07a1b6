"""Adapters on a pretrained model (``model.adapter:``): the base frozen and shared, only the adapter trained.

An adapter's settings class subclasses :class:`AdapterConfig` with ``kind: Literal["..."]`` and registers its
builder with :func:`register_adapter`; YAML names your own with ``factory: package.module:Name`` (the module is
imported, which registers it). The builder gets the settings, the model's module and the model's
:class:`~fedsim.models.adapters.AdapterTarget` (where the adapter goes, the new head trained whole) and returns
the adapted module; every parameter it leaves ``requires_grad`` is the client's whole state, upload, clip and
noise (:class:`~fedsim.models.replica.Replica` lays only those flat), and the frozen rest is built once per
replica from the run's seed, never sent.

An adapter declares the model kinds it can adapt (``adapts``); an adapter on any other kind is refused from
that declaration alone. The built-in kinds (:mod:`fedsim.models.adapters`) go through Hugging Face's peft:

- ``lora`` (Hu et al. 2021, arXiv:2106.09685): ``W x + (alpha / r) B A x`` on each target linear, A and B
  trained;
- ``lora_fa`` (Zhang et al. 2023, arXiv:2308.03303, LoRA-FA): the same with A frozen at its random
  initialisation and only B trained, so a round's FedAvg of the clients' B is exactly the average of their
  updates ``B_k A`` (Sun et al., ICLR 2024, FFA-LoRA, freeze A for this reason in federated DP fine-tuning).

Defaults: ``r`` 8 is peft's (``LoraConfig.r``); ``alpha`` 16 (``2 r``) is fedsim's split fine-tuning default
(fedsim/split/config.py), where peft's own is 8; ``dropout`` 0 is peft's; ``target_modules`` default to peft's
mapping for the model's architecture (BERT: the attention ``query`` and ``value`` projections, as in the LoRA
paper's Section 7.1).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from fedsim.config.registry import Registry, StageConfig

T = TypeVar("T")


class AdapterConfig(StageConfig):
    """An adapter on the model; ``none`` trains the model whole."""

    # the model kinds (model.kind) it can adapt; None: it changes no model, so every kind takes it
    adapts: ClassVar[frozenset[str] | None] = frozenset()

    @property
    def enabled(self) -> bool:
        """Whether the model is adapted (a kind that changes no model declares ``adapts = None``)."""
        return type(self).adapts is not None

    def refusal(self, model_kind: str) -> str | None:
        """Why this adapter cannot go on a ``model_kind`` model (None: it can), from ``adapts`` alone."""
        adapts = type(self).adapts
        if adapts is None or model_kind in adapts:
            return None
        takes = f"model.kind {', '.join(sorted(adapts))}" if adapts else "no model kind (it declares no adapts)"
        return f"model.adapter.kind={self.kind} adapts {takes}, not model.kind={model_kind}"


class NoAdapter(AdapterConfig):
    """``none``: no adapter; every parameter of the model trains."""

    adapts: ClassVar[frozenset[str] | None] = None
    kind: Literal["none"] = "none"


class LoraAdapter(AdapterConfig):
    """LoRA through peft (``LoraConfig``, ``get_peft_model``): a rank-``r`` update ``(alpha / r) B A`` beside
    each ``target_modules`` linear, A at peft's kaiming-uniform init and B at zero, both trained; a sequence
    classifier's new head trains whole beside it (peft's ``modules_to_save``)."""

    adapts: ClassVar[frozenset[str] | None] = frozenset({"hf_sequence_classification", "hf_causal_lm"})
    trains_a: ClassVar[bool] = True  # LoRA-FA's difference: A frozen at its init
    kind: Literal["lora"] = "lora"
    r: int = Field(8, ge=1, le=65_536, description="the adapter's rank (peft's default 8)")
    alpha: float = Field(16.0, gt=0, description="the update is scaled by alpha / r (16: 2 r)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input (peft's default 0)")
    target_modules: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="module names (or suffixes) the adapter wraps; default peft's for the architecture (BERT:"
        " query, value)",
    )


class LoraFaAdapter(LoraAdapter):
    """LoRA-FA (Zhang et al. 2023): LoRA with every A frozen at its random init; only B (and the head) train."""

    trains_a: ClassVar[bool] = False
    kind: Literal["lora_fa"] = "lora_fa"  # type: ignore[assignment]


ADAPTERS = Registry[AdapterConfig](
    "model.adapter", AdapterConfig, builtin="fedsim.models.adapters", default="none", decorator="register_adapter"
)
register_adapter = ADAPTERS.register


@register_adapter(NoAdapter)
def no_adapter(cfg: NoAdapter, module: T, target: object) -> T:
    """The model as it is: registered here, so a run without an adapter never imports the adapters' module."""
    return module


def parse_adapter(value: Any) -> AdapterConfig:
    """``model.adapter`` by the settings class its ``kind`` (or ``factory``) names."""
    return ADAPTERS.parse(value)
