"""The step's memory lower bound (collsim.training.memory): model states per rank in closed form, and the note a
step gets when they approach or pass the GPU's hbm_capacity."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.training import Layer, ModelSpec, Param
from collsim.training.memory import model_state_bytes, state_buffers

MODEL = ModelSpec(
    "m", (Param("a", 1000, "float32"), Param("b", 500, "bfloat16")), (Layer("l", (0, 1), 0.0, 0.0, 0.0),), "test"
)
P = 1000 * 4 + 500 * 2  # bytes of one copy of the parameters


@pytest.mark.parametrize(
    ("style", "sharding", "view", "expected"),
    [
        ("ddp", "", False, P * (2 + 1 + 2)),  # params, grads, buckets, Adam's two moments
        ("ddp", "", True, P * (2 + 2)),  # gradient_as_bucket_view: the buckets are the grads
        ("fsdp", "full_shard", False, P * 4 / 8),
        ("fsdp", "hybrid_shard", False, P * 4 / 8),
        ("fsdp", "shard_grad_op", False, P + P * 3 / 8),  # whole parameters kept from forward to backward
        ("fsdp", "no_shard", False, P * 4),
    ],
)
def test_model_states_in_closed_form(style: str, sharding: str, view: bool, expected: float) -> None:
    buffers = state_buffers(4.0)  # Adam
    got = model_state_bytes(MODEL, buffers, style=style, sharding=sharding or "full_shard", shards=8, bucket_view=view)
    assert got == pytest.approx(expected, rel=1e-12)


def test_a_step_that_cannot_fit_says_so() -> None:
    # Llama-2-7B in float32 with Adam under DDP: 6,738,415,616 x 4 B x 5 copies = 134.8 GB against an H100's 80 GB
    base = {"name": "m", "cluster": {"node": "hgx-h100", "nodes": 1}, "backends": {"gloo": {"enabled": False}}}
    llama = {**base, "training": {"model": "llama-7b", "batch_size": 1, "optimizer": "adam", "param_dtype": "float32"}}
    (r,) = Simulator.from_source(llama).step(["nccl"])
    (note,) = [n for n in r.notes if n.startswith("memory:")]
    assert "134.8 GB a GPU" in note and "168% of its 80 GB" in note and "would not fit" in note
    # sharded over 8 GPUs it fits (26.9 GB), and GPT-2 never comes near: no note
    fsdp = {**llama, "training": {**llama["training"], "style": "fsdp"}}
    (f,) = Simulator.from_source(fsdp).step(["nccl"])
    assert not any(n.startswith("memory:") for n in f.notes)
