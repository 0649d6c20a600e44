"""The parts the engine and the adapters assemble a training step from: mixed precision and its loss scaler,
optimizers, DeepSpeed's schedules, the planned kernels, activation checkpointing and compressed gradient
communication. A part imports nothing of the engine, the adapters or the runner (docs/architecture.md,
"Floors"). Import the modules directly.
"""
