"""Where a bundle runs: boards (data files), the host build and runner, the firmware build and its
memory budget, the host simulation of training, and the flash runners."""
