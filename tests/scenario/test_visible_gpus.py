"""cluster.visible_gpus: the job on some GPUs of each node, as CUDA_VISIBLE_DEVICES gives them to it."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError

TWO_NODES = "2node-h100-ib"


def test_one_gpu_a_node_runs_over_its_own_nics_without_nvls() -> None:
    """A network check with one process a node on 2 x HGX H100: GPU 0 and its switch's two NICs. NCCL leaves NVLS
    off with one GPU (nvls.cc, gpuCount < 2), and a ring's busbw is the GPU's 48 GB/s PCIe link."""
    sim = Simulator.from_source(TWO_NODES, ["cluster.visible_gpus=[0]"])
    assert [d.name for d in sim.topology.rank_devices()] == ["n0/gpu0", "n1/gpu0"]
    assert {d.name for d in sim.topology.nics(0)} == {f"n0/nic{i}" for i in range(8)}  # every NIC kept
    facts = sim.nccl_plan_facts()
    assert facts["local_ranks"] == 1 and facts["nics"] == 2 and facts["nvls_channels"] == 0
    nbytes = 1 << 30
    out = sim.simulate_one("nccl", nbytes)
    assert out.algorithm in ("Ring", "Tree")
    assert 0.97 * 48e9 < nbytes / out.time_s <= 48e9  # two ranks: busbw = algbw
    # Gloo's sockets leave by the node's first NIC whichever GPU runs: GPU 4's group still crosses NIC 0
    four = Simulator.from_source(TWO_NODES, ["cluster.visible_gpus=[4]"])
    rec = four.simulate_one("gloo", 1 << 20, record=True, symmetry=False)
    assert any("n0/nic0" in r for f in rec.records for r in f.resources)


def test_half_a_node_is_the_other_half_by_symmetry_and_slower_than_the_whole() -> None:
    low = Simulator.from_source(TWO_NODES, ["cluster.visible_gpus=[0,1,2,3]"])
    high = Simulator.from_source(TWO_NODES, ["cluster.visible_gpus=[4, 5, 6, 7]"])
    whole = Simulator.from_source(TWO_NODES)
    assert len(low.topology.rank_devices()) == 8
    assert low.nccl_plan_facts()["nics"] == 4
    for size in (1 << 20, 1 << 30):
        t_low, t_high = (s.simulate_one("nccl", size).time_s for s in (low, high))
        assert t_low == pytest.approx(t_high, rel=1e-9)
    busbw = {k: 2 * (n - 1) / n * (1 << 30) / s.simulate_one("nccl", 1 << 30).time_s
             for k, s, n in (("half", low, 8), ("whole", whole, 16))}  # fmt: skip
    assert busbw["half"] < busbw["whole"]


@pytest.mark.parametrize(
    ("value", "message"),
    [("[8]", "no GPU 8 on the node"), ("[0, 0]", "a GPU listed twice"), ("[]", "at least 1 item")],
)
def test_gpus_the_node_does_not_have_are_refused(value: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        Simulator.from_source(TWO_NODES, [f"cluster.visible_gpus={value}"])
    assert err.value.field is not None and err.value.field.startswith("cluster.visible_gpus")


def test_a_gpu_a_users_template_does_not_have_is_the_scenarios_field_not_a_malformed_template(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With a user's template the visible_gpus error passed through the template's catch-all for malformed
    templates: "t.yaml: malformed node template (ScenarioError: ...)", blaming the template and cutting the text."""
    (tmp_path / "t.yaml").write_text(
        "name: t\nsource: x\ndevices:\n  - {name: gpu, count: 2, kind: gpu, preset: h100-pcie-80gb}\n"
        "  - {name: cpu, count: 1, kind: cpu, preset: xeon-8480}\n"
        "links:\n  - {a: [gpu0, gpu1], b: cpu0, preset: pcie5}\n",
        encoding="utf-8",
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ncluster: {node: ./t.yaml, visible_gpus: [0, 5]}\nworkload: {sizes: [1MiB]}\n",
                        encoding="utf-8")  # fmt: skip
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source(scenario)
    assert err.value.field == "cluster.visible_gpus" and err.value.file is not None
    assert err.value.file.endswith("s.yaml")
    assert "no GPU 5 on the node" in str(err.value) and "malformed" not in str(err.value)
