"""The configuration reference the docs site renders is generated from the models: every top-level field and
section, every registered kind of every stage section and every algorithm is in it, with its bounds."""

from __future__ import annotations

from fedsim.config import RunConfig
from fedsim.config.algorithm import algorithm_names
from fedsim.config.reference import reference_markdown
from fedsim.config.run import STAGES


def test_every_field_section_and_kind_is_in_the_reference() -> None:
    text = reference_markdown()
    for name in RunConfig.model_fields:
        assert f"| `{name}` |" in text or f"## `{name}`" in text, name
    for section, registry in STAGES.items():
        for kind in registry.kinds():
            assert f"### `{section}.kind: {kind}`" in text, (section, kind)
    for name in algorithm_names():
        assert f"`{name}`" in text, name
    assert "| `rounds` | int | `10` | >= 1, <= 10000000 | at most 10 million" in text
    assert "### `data.dataset: mnist`" in text and "#### `clock.trace.synthetic`" in text
    assert "Annotated" not in text and "<function" not in text  # types as a reader writes them
