"""The built-in DP mechanisms, registered when this module is imported (by :data:`fedsim.config.privacy.PRIVACY`
the first time a run names one): the Gaussian mechanism on the clipped sum (``central``, DP-FedAvg) and on each
client's clipped update (``local``). dp-accounting loads only when a run builds one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fedsim.config.privacy import CentralDP, LocalDP, NoPrivacy, register_privacy
from fedsim.privacy.context import PrivacyContext

if TYPE_CHECKING:
    from fedsim.privacy.dp import DifferentialPrivacy


@register_privacy(NoPrivacy)
def no_privacy(settings: NoPrivacy, context: PrivacyContext, initial: torch.Tensor | None) -> None:
    return None


@register_privacy(CentralDP)
@register_privacy(LocalDP)
def gaussian(
    settings: CentralDP | LocalDP, context: PrivacyContext, initial: torch.Tensor | None
) -> DifferentialPrivacy:
    from fedsim.privacy.dp import DifferentialPrivacy

    return DifferentialPrivacy(settings, context, initial)
