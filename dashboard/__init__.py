"""fedsim dashboard runtime (see ../shared/DESIGN.md); filled in by later issues."""
