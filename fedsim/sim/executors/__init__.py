"""How a rank trains its clients: the seam (base), the sequential and fused executors, and the choice between
them (choice)."""
