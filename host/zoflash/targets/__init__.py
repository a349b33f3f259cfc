"""Where a bundle runs: boards (data files), the host build and runner, the firmware build and its
memory budget, the host simulation of training, and the flash runners."""

# Importing any targets module first imports this package: the registered kinds a board file is
# checked against (flash methods, NPU backends) are complete before boards.py reads one.
from zoflash.targets import ethosu, neuralart, runners  # noqa: E402, F401  (register NPU backends, flash methods)
