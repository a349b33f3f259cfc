"""The shared vocabulary of every layer: the training contract, the telemetry wire format. Pure data."""
