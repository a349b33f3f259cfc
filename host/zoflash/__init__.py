"""zoflash: INT8 TFLite to bit-exact C, and zeroth-order on-device training for NPU microcontrollers."""

__version__ = "0.1.0"
