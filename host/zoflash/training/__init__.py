"""On-device training: options, the training plan (which tensors train, where the model splits),
the rendered training wiring, datasets, headroom re-quantization, weights files and export."""
