"""SkewScout: estimate the skew-induced accuracy loss by model traveling and tune a communication knob."""
