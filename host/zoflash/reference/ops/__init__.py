"""The reference kernels (the NumPy oracle), one module per op family, named as compiler/ops/
names them; reference/forward.py dispatches the compiled steps through them."""
