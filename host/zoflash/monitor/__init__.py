"""Talking to a running trainer: serial ports, the telemetry protocol, the session log, the live
view and plots, and the serial monitor with its command channel."""
