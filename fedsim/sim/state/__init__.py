"""Client state between rounds: the state store (memory or disk), its files, writing back, and handing states
between ranks."""
