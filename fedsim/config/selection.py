"""Which clients train in a round (``selection:``): uniformly at random, or by a registered selector.

A selector's settings class subclasses :class:`SelectionConfig` with ``kind: Literal["..."]`` and declares what
the compatibility checks need, each refusal derived from these declarations and never from the kind's name:

- ``samples_uniformly``: its cohort is a uniform sample of the reachable clients (fixed-size or Poisson), the
  sampling differential privacy's accountant amplifies by, and the one a run without cohorts (asynchronous,
  decentralised) makes by itself. Default False: only a selector that says so is taken for uniform.
- ``reads_clients``: it reads what clients reported in earlier rounds (their training loss), a choice that
  depends on the clients' data. Default True: a selector that declares nothing is assumed to read them.
- ``reads_durations``: it reads each client's task duration on the run's trace (Oort's system utility).
- ``evaluates_model``: it may have candidate clients score the current global model on their own data before
  it chooses (power-of-choice's pow-d and cpow-d), each sending back its loss: the engine hands it a
  ``loss`` function, and the ledger charges the model sent and the float returned.

The built-in selectors are in :mod:`fedsim.sim.selection`; :data:`SELECTORS` resolves ``selection.kind``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.config.registry import Registry, StageConfig


class SelectionConfig(StageConfig):
    """How a synchronous round's cohort of ``clients_per_round`` is chosen from the population."""

    samples_uniformly: ClassVar[bool] = False  # a uniform sample of the reachable clients: what DP amplifies by
    reads_clients: ClassVar[bool] = True  # chooses by what clients reported (their loss): data-dependent
    reads_durations: ClassVar[bool] = False  # chooses by each client's task duration on the run's trace
    evaluates_model: ClassVar[bool] = False  # has candidates score the current global model on their own data
    loss_screen: Literal["none", "mad"] = Field(
        "none", description="mad: a reported loss far above the batch's median is read as the median (Hampel)"
    )
    loss_screen_z: float = Field(3.5, gt=0, le=1e6, description="mad's threshold on the modified z-score")

    @model_validator(mode="after")
    def _screens_what_it_reads(self) -> SelectionConfig:
        if self.loss_screen != "none" and not (self.reads_clients or self.evaluates_model):
            raise ValueError(
                f"selection.loss_screen={self.loss_screen}: selection.kind={self.kind} reads no reported losses to"
                " screen (it declares reads_clients = False); leave loss_screen out"
            )
        return self

    def settings(self) -> dict[str, object]:
        """As summary.json and the plan print them; the screen only where one is set."""
        fields = super().settings()
        if self.loss_screen == "none":
            fields = {k: v for k, v in fields.items() if k not in ("loss_screen", "loss_screen_z")}
        return fields

    def refusal(
        self, cohort: int, population: int, sampling: str, private: bool, no_cohort: str | None, on_trace: bool = False
    ) -> str | None:
        """Why this selector cannot choose the run's cohorts, or None: ``no_cohort`` names what runs instead of
        synchronous rounds (an asynchronous mode, a decentralised algorithm), ``private`` whether DP accounts
        the run, ``on_trace`` whether the trace clock decides who reports (DP then claims no amplification by
        sampling, and needs only a choice that does not depend on the clients' data)."""
        if self.samples_uniformly:
            return None
        if no_cohort is not None:
            return f"selection.kind={self.kind} chooses a synchronous round's cohort; {no_cohort} has none"
        if sampling == "poisson":
            return f"selection.kind={self.kind} keeps a fixed number of clients a round; sampling=poisson is uniform's"
        declared = any(
            "reads_clients" in k.__dict__ for k in type(self).__mro__[: type(self).__mro__.index(SelectionConfig)]
        )
        reads = "reads what the clients reported" if declared else "may read what the clients reported (it does not"
        reads += "" if declared else " declare reads_clients = False)"
        if private and on_trace and self.reads_clients:  # unsampled accounting: the schedule must be data-free
            return (
                f"selection.kind={self.kind} {reads}, so who reports would depend on their data, which the trace"
                " clock's accounting assumes it does not; use a selector that declares reads_clients = False beside"
                " privacy"
            )
        if private and not on_trace:  # the accountant amplifies by a uniform sample: any other is outside it
            also = f"; it {reads}" if self.reads_clients else ""
            return (
                f"selection.kind={self.kind} is not a uniform sample of the clients (it does not declare"
                f" samples_uniformly{also}), and the privacy accountant amplifies by uniform sampling only; use"
                " selection.kind=uniform beside privacy, or declare samples_uniformly = True if its cohort is one"
            )
        return None


class UniformSelection(SelectionConfig):
    """A uniform draw without replacement (or Poisson sampling, ``sampling: poisson``), of the clients
    reachable in the round (``emulation.availability``)."""

    samples_uniformly: ClassVar[bool] = True
    reads_clients: ClassVar[bool] = False
    kind: Literal["uniform"] = "uniform"


class PowerOfChoiceSelection(SelectionConfig):
    """Power-of-choice (Cho, Wang and Joshi, AISTATS 2022): draw a candidate set of ``candidates`` (d) clients
    of those reachable, without replacement and each in proportion to its share of the training samples (the
    paper's p_k; ``candidates_by: uniform`` draws them uniformly instead), and keep the ``clients_per_round``
    with the highest local loss, ties broken uniformly at random. Which loss is the paper's ``variant``:
    ``pow-d``, each candidate's mean loss of the current global model on all its local data (the candidates
    are sent the model and each sends back one float); ``cpow-d``, the same on a mini-batch of ``loss_batch``
    of its samples; ``rpow-d`` (the default, free of extra communication and computation), the mean training
    loss each client reported the last round it trained, a client not heard from ranking above every other."""

    reads_clients: ClassVar[bool] = True
    evaluates_model: ClassVar[bool] = True  # pow-d and cpow-d have the candidates score the current model
    kind: Literal["power_of_choice"] = "power_of_choice"
    candidates: int | None = Field(
        None, ge=1, description="d, the clients drawn before the highest-loss ones are kept; default 2 x the cohort"
    )
    candidates_by: Literal["size", "uniform"] = Field(
        "size", description="the candidates' draw: in proportion to each client's samples (the paper's), or uniform"
    )
    variant: Literal["pow-d", "cpow-d", "rpow-d"] = Field(
        "rpow-d", description="the loss ranked: of the current model on all local data, on loss_batch, last reported"
    )
    loss_batch: int | None = Field(
        None, ge=1, le=1_000_000, description="b: the samples each candidate scores under cpow-d; default 64"
    )

    @model_validator(mode="after")
    def _batch_is_cpow_ds(self) -> PowerOfChoiceSelection:
        if self.loss_batch is not None and self.variant != "cpow-d":
            raise ValueError(
                f"selection.loss_batch is cpow-d's mini-batch; variant={self.variant} does not score one (set"
                " variant: cpow-d, or leave loss_batch out)"
            )
        return self

    @property
    def minibatch(self) -> int:
        """b, the samples each candidate scores under cpow-d: ``loss_batch``, or 64 (Flower's baseline's b, and
        the batch of the authors' FMNIST runs, which their code scores)."""
        return 64 if self.loss_batch is None else self.loss_batch

    def candidates_for(self, cohort: int, population: int) -> int:
        """d for a cohort of ``cohort`` clients from ``population``: ``candidates``, or twice the cohort (at most
        everyone)."""
        return min(2 * cohort, population) if self.candidates is None else self.candidates

    def refusal(
        self, cohort: int, population: int, sampling: str, private: bool, no_cohort: str | None, on_trace: bool = False
    ) -> str | None:
        if self.candidates is not None and not cohort <= self.candidates <= population:
            return (
                f"selection.candidates={self.candidates} must be between the cohort ({cohort} clients) and"
                f" data.clients={population}: power-of-choice keeps the cohort from its candidates"
            )
        return super().refusal(cohort, population, sampling, private, no_cohort, on_trace)


class OortSelection(SelectionConfig):
    """Oort (Lai et al., OSDI 2021): a cohort that mixes exploitation of the clients of highest utility
    (statistical utility from their reported loss and samples, a staleness bonus, and a penalty
    ``(T / duration) ** round_penalty`` for a client slower than the preferred round duration ``T``) with
    exploration of clients not yet heard from (preferring the fast and the large). ``T`` is the
    ``round_threshold`` percentile of the population's task durations on the run's trace
    (``clock.trace``), moved by the pacer every ``pacer_step`` rounds. The blacklist (``blacklist_rounds``)
    leaves out clients that trained more than that many rounds.

    Every default is FedScale's (SymbioticLab/FedScale 7ec441c, fedscale/cloud/config_parser.py, the argument
    of the field's name, ``exploration`` being ``--exploration_factor``), the code fedsim's selector follows;
    where the artifact's (SymbioticLab/Oort 05a3aa1, training/argParser.py) differs, its value is given."""

    reads_clients: ClassVar[bool] = True
    reads_durations: ClassVar[bool] = True
    kind: Literal["oort"] = "oort"
    exploration: float = Field(0.9, ge=0, le=1, description="epsilon, the share explored, before its decay")
    exploration_decay: float = Field(0.98, gt=0, le=1, description="epsilon's factor each round (artifact: 0.95)")
    exploration_min: float = Field(0.3, ge=0, le=1, description="epsilon's floor (artifact: 0.2)")
    round_threshold: float = Field(
        30.0, gt=0, le=100, description="T: this percentile of the task durations (artifact: 10)"
    )
    round_penalty: float = Field(2.0, ge=0, le=100, description="alpha of the system utility (T / t) ** alpha")
    cut_off_util: float = Field(
        0.05,
        gt=0,
        le=1,
        description="c: exploitation draws from those at or above c x the utility just past the exploited count"
        " (artifact: 0.7)",
    )
    clip_bound: float = Field(
        0.9, gt=0, le=1, description="statistical utility clipped at this quantile (artifact: 0.98)"
    )
    pacer_step: int = Field(20, ge=1, le=1_000_000, description="W: rounds between the pacer's checks")
    pacer_delta: float = Field(5.0, ge=0, le=100, description="the percentile T moves by at a check")
    sample_window: float = Field(5.0, ge=1, le=1000, description="exploration draws from this x as many fastest")
    blacklist_rounds: int | None = Field(
        None,
        ge=0,
        description="leave out clients that trained more than this many rounds; None: off (the references' -1;"
        " the artifact's outlier experiment sets 50)",
    )
    blacklist_max_len: float = Field(
        0.3, ge=0, le=1, description="the blacklist holds at most this share of the population"
    )


SELECTORS = Registry[SelectionConfig](
    "selection", SelectionConfig, builtin="fedsim.sim.selection", default="uniform", decorator="register_selector"
)
register_selector = SELECTORS.register
