"""A lower bound of a training step's device memory: the model states each rank holds (parameters, gradients,
DDP's bucket views, the optimizer's state), against the GPU's ``hbm_capacity``. Activations, the gathered FSDP
units, NCCL's buffers and the CUDA context are not counted, so a step that exceeds it cannot fit; one below may
still not.

What each rank keeps (PyTorch 2.13):

* DDP: the parameters, their ``.grad`` and the Reducer's bucket buffers, which hold a copy of every gradient
  unless ``gradient_as_bucket_view`` makes ``.grad`` a view into them (``torch/csrc/distributed/c10d/reducer.cpp``,
  ``initialize_bucket_views``);
* FSDP ``full_shard`` and ``hybrid_shard``: 1/shards of the parameters, gradients and optimizer state (the flat
  parameter's shard; FSDP2 each parameter's ``DTensor`` shard); ``shard_grad_op`` keeps the whole parameters
  gathered from the forward to the backward (``reshard_after_forward=False``), with 1/shards of the rest;
  ``no_shard`` everything, as DDP without its buckets;
* the optimizer's buffers in the parameter's dtype (``torch/optim/adam.py`` ``exp_avg``, ``exp_avg_sq`` =
  ``zeros_like(p)``; ``sgd.py``'s momentum buffer): as many as its state passes over memory, halved (each buffer is
  read and written once a step: ``optimizer_traffic`` in ``topologies/software/training.yaml``).

Examples
--------
>>> from collsim.training import load_model
>>> gpt2 = load_model("gpt2")  # 124,439,808 float32 parameters: 497.8 MB each copy
>>> round(model_state_bytes(gpt2, 2, style="ddp") / 1e9, 2)  # params, grads, buckets, Adam's two states
2.49
>>> round(model_state_bytes(gpt2, 2, style="fsdp", sharding="full_shard", shards=8) / 1e9, 3)  # a quarter of 4 / 8
0.249
"""

from __future__ import annotations

from collsim.training.model import DTYPE_BYTES, ModelSpec

__all__ = ["model_state_bytes", "state_buffers"]


def state_buffers(state_passes: float) -> float:
    """The optimizer's state buffers per parameter from its state passes over memory a step (each buffer read and
    written once): Adam's 4 passes are its two moments, momentum's 2 its one buffer.

    >>> state_buffers(4.0), state_buffers(0.0)
    (2.0, 0.0)
    """
    return state_passes / 2


def model_state_bytes(
    model: ModelSpec,
    buffers: float,
    *,
    style: str,
    sharding: str = "full_shard",
    shards: int = 1,
    bucket_view: bool = False,
) -> float:
    """Bytes of model states one rank holds at least (module docstring): parameters, gradients, DDP's buckets and
    ``buffers`` optimizer state buffers per parameter, each in the parameter's dtype.

    Parameters
    ----------
    model : ModelSpec
        The parameters (elements and dtype).
    buffers : float
        Optimizer state buffers per parameter (:func:`state_buffers`).
    style : str
        ``"ddp"`` or ``"fsdp"``.
    sharding : str
        FSDP's strategy: ``full_shard``, ``hybrid_shard``, ``shard_grad_op`` or ``no_shard``.
    shards : int
        Ranks a shard group holds (FSDP: the world; HSDP: the shard group).
    bucket_view : bool
        DDP's ``gradient_as_bucket_view`` (no separate bucket copy).

    Returns
    -------
    float
        Bytes.
    """
    p = float(sum(q.numel * DTYPE_BYTES[q.dtype] for q in model.params))  # bytes of one copy of the parameters
    if style == "ddp":
        return p * (2 + (0 if bucket_view else 1) + buffers)
    n = max(1, shards)
    if sharding in ("full_shard", "hybrid_shard"):
        return p * (2 + buffers) / n
    if sharding == "shard_grad_op":
        return p + p * (1 + buffers) / n
    return p * (2 + buffers)  # no_shard
