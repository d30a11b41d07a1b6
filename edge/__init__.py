"""fedsim edge runtime (see ../shared/DESIGN.md); filled in by later issues."""
