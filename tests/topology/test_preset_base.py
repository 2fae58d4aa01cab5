"""A user preset that starts from another (``base: <preset>``): the fields given replace the base's, each kept field
keeps its source, and its mistakes name the user's file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from collsim.api import Simulator
from collsim.cli import main
from collsim.topology import TopologyError, load_presets
from collsim.topology.presets import PresetSource, merge_presets

H800_SOURCE = "test data: the H100 SXM5 with 8 NVLinks (the export part's NVLink count)"


def _merge(data: dict[str, Any]) -> Any:
    return merge_presets(load_presets(), [PresetSource(data, "mine.yaml")])


def test_a_derived_gpu_is_its_base_with_the_fields_given_replaced() -> None:
    lib = _merge({"gpus": {"h800": {"base": "h100-sxm5-80gb", "nvlinks": 8, "source": H800_SOURCE}}})
    base, gpu = lib.gpus["h100-sxm5-80gb"], lib.gpus["h800"]
    assert gpu["nvlinks"] == 8 and gpu["source"] == H800_SOURCE
    assert gpu["preset"] == "h800" and gpu["base"] == "h100-sxm5-80gb"
    # the replaced field's source went with it; every other field and its source is the base's
    assert "nvlinks_source" not in gpu and "nvlinks_source" in base
    kept = {k: v for k, v in base.items() if k not in ("nvlinks", "nvlinks_source", "source", "model", "preset")}
    assert {k: gpu[k] for k in kept} == kept
    assert gpu["model"] == "NVIDIA H100 80GB HBM3 (SXM5), changed (user preset 'h800' from 'h100-sxm5-80gb')"
    assert lib.origin("gpus", "h800") == ("mine.yaml", "gpus.h800")
    assert "base" not in lib.gpus["h100-sxm5-80gb"]  # the shipped entry is untouched


def test_a_field_given_with_its_source_keeps_the_users_source_and_a_mapping_is_replaced_whole() -> None:
    lib = _merge({"gpus": {"h20": {
        "base": "h100-sxm5-80gb", "model": "H20 (test data)", "sm_count": 78, "sm_count_source": "test: 78 SMs",
        "peak_tflops": {"bfloat16": 148}, "source": "test data",
    }}})  # fmt: skip
    gpu = lib.gpus["h20"]
    assert gpu["model"] == "H20 (test data)" and gpu["sm_count"] == 78 and gpu["sm_count_source"] == "test: 78 SMs"
    assert gpu["peak_tflops"] == {"bfloat16": 148.0}  # TFLOP/s; not merged with the H100's float32, fp8, ...


def test_a_base_of_the_entrys_own_name_changes_the_shipped_preset() -> None:
    lib = _merge({"nics": {"connectx-7-ndr": {"base": "connectx-7-ndr", "latency": "3us", "source": "test: slow"}}})
    shipped = load_presets().nics["connectx-7-ndr"]
    nic = lib.nics["connectx-7-ndr"]
    assert nic["latency"] == pytest.approx(3e-6) and nic["speed"] == shipped["speed"] and nic["link"] == shipped["link"]


def test_bases_within_one_file_resolve_in_any_order_and_across_files() -> None:
    first = {"links": {
        "b-link": {"base": "a-link", "latency": "2us", "source": "test"},  # its base is further down
        "a-link": {"base": "eth-100g", "bandwidth": "50Gb/s", "source": "test"},
    }}  # fmt: skip
    second = {"links": {"c-link": {"base": "b-link", "efficiency": 0.5, "source": "test"}}}
    lib = merge_presets(load_presets(), [PresetSource(first, "one.yaml"), PresetSource(second, "two.yaml")])
    c = lib.links["c-link"]
    assert c["bandwidth"] == pytest.approx(50e9 / 8)  # 50 Gb/s in bytes/s
    assert c["latency"] == pytest.approx(2e-6) and c["efficiency"] == 0.5 and c["kind"] == "eth"


def test_a_derived_entry_is_checked_as_any_other() -> None:
    with pytest.raises(TopologyError, match=r"mine.yaml: gpus.x.nvlink: .*kind 'nvlink'"):
        _merge({"gpus": {"x": {"base": "h100-sxm5-80gb", "nvlink": "pcie4", "source": "test"}}})
    # arch and sm agree as NCCL reads them (an H100 with sm 80 kept Hopper's row and its NVLS)
    with pytest.raises(TopologyError, match=r"mine.yaml: gpus.x.arch: arch 'hopper' is not the row NCCL picks for "
                                            r"sm 80 \(ampere"):
        _merge({"gpus": {"x": {"base": "h100-sxm5-80gb", "sm": 80, "source": "test"}}})
    with pytest.raises(TopologyError, match=r"gpus.y.arch: arch 'ampere' is not the row NCCL picks for sm 90"):
        _merge({"gpus": {"y": {"base": "h100-sxm5-80gb", "arch": "ampere", "source": "test"}}})
    assert _merge({"gpus": {"z": {"base": "rtx-2080ti", "arch": "volta", "source": "t"}}}).gpus["z"]["sm"] == 75


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gpus": {"x": {"base": "h1OO", "source": "t"}}}, r"mine.yaml: gpus.x.base: unknown gpu preset 'h1OO' to "
         r"start from; known: .*h100-sxm5-80gb"),
        ({"gpus": {"x": {"base": "h100-sxm5-80gb", "sm_count": 78}}}, r"mine.yaml: gpus.x.source: missing required "
         r"field \(text\): where the fields replacing those of 'h100-sxm5-80gb' come from"),
        ({"gpus": {"x": {"base": "h100-sxm5-80gb", "sm_count": -1, "source": "t"}}}, r"mine.yaml: gpus.x.sm_count: "),
        ({"gpus": {"x": {"base": "h100-sxm5-80gb", "nvlinkz": 8, "source": "t"}}}, r"mine.yaml: gpus.x.nvlinkz: "
         r"unknown field"),
        ({"links": {"a": {"base": "b", "source": "t"}, "b": {"base": "a", "source": "t"}}}, r"mine.yaml: links.a.base: "
         r"the bases of a, b name each other in a circle"),
        ({"nics": {"n": {"base": "efa-v3", "source": "t"}}, "links": {}}, None),
        ({"nodes": {"box": {"base": "hgx", "generator": "hgx"}}}, r"mine.yaml: nodes.box.base: unknown key 'base'.*\(a "
         r"node template has no base: its params"),
    ],
    ids=["unknown-base", "no-source", "bad-value", "unknown-field", "circle", "ok", "node-template"],
)
def test_mistakes_in_a_derived_preset_name_the_file_and_field(data: dict[str, Any], message: str | None) -> None:
    if message is None:
        assert _merge(data).nics["n"]["base"] == "efa-v3"
        return
    with pytest.raises(TopologyError, match=message):
        _merge(data)


def _scenario(tmp_path: Path, gpu: str, presets: dict[str, Any] | None) -> Path:
    data: dict[str, Any] = {
        "name": f"hgx-{gpu}",
        "cluster": {"node": "hgx", "nodes": 1, "node_params": {"gpu": gpu}},
        "workload": {"collective": "allreduce", "dtype": "float32", "sizes": ["4GiB"]},
        "backends": {"nccl": {"enabled": True, "env": {"NCCL_ALGO": "Ring"}}, "gloo": {"enabled": False}},
    }
    if presets:
        data["presets"] = presets
    path = tmp_path / f"{gpu}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_derived_gpu_runs_end_to_end_and_its_nvlinks_set_the_ring(tmp_path: Path) -> None:
    """An H800-like part (the H100 with 8 NVLinks instead of 18) on the HGX board: its ring's plateau is bound by
    its NVLinks, where the H100's is bound by NCCL's channels."""
    h800 = {"gpus": {"h800": {"base": "h100-sxm5-80gb", "nvlinks": 8, "source": H800_SOURCE}}}
    busbw = {}
    for gpu, presets in (("h100-sxm5-80gb", None), ("h800", h800)):
        sim = Simulator.from_source(_scenario(tmp_path, gpu, presets))
        assert {g.spec["preset"] for g in sim.topology.gpus()} == {gpu}
        (rec,) = sim.run().records
        busbw[gpu] = rec.busbw_gbps * 1e9  # GB/s -> bytes/s
    # 8 NVLinks at NCCL's 20.6 GB/s each: 164.8 GB/s a GPU, a ring's busbw at most that
    assert busbw["h800"] <= 8 * 20.6e9 * (1 + 1e-9)
    assert busbw["h100-sxm5-80gb"] > 1.5 * busbw["h800"]


def test_topo_shows_a_derived_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h800 = {"gpus": {"h800": {"base": "h100-sxm5-80gb", "model": "H800 (test data)", "nvlinks": 8,
                              "source": H800_SOURCE}}}  # fmt: skip
    assert main(["topo", str(_scenario(tmp_path, "h800", h800))]) == 0
    out = capsys.readouterr().out
    assert "NV8" in out and "NV18" not in out


def test_an_entry_replacing_another_of_its_name_is_warned_about() -> None:
    """A user NIC named as a shipped one changes every scenario naming it, and a later file's entry hides an
    earlier one: both were silent (a 100 Gb/s 'connectx-7-ndr' gave 95.86 GB/s with no word). ``base:`` its own
    name says the change is meant: no warning."""
    from collsim.topology.errors import TopologyWarning

    nic = {"model": "m", "speed": "100Gb/s", "rdma": True, "link": "ib-ndr", "latency": "1us", "source": "t"}
    with pytest.warns(TopologyWarning, match=r"mine.yaml: nics.connectx-7-ndr: replaces the shipped nic preset "
                                             r"'connectx-7-ndr' \(topologies/presets/nics.yaml\)"):
        _merge({"nics": {"connectx-7-ndr": nic}})
    with pytest.warns(TopologyWarning, match=r"b.yaml: nics.lab: replaces the nic 'lab' of a.yaml \(nics.lab\)"):
        merge_presets(load_presets(), [PresetSource({"nics": {"lab": nic}}, "a.yaml"),
                                       PresetSource({"nics": {"lab": nic}}, "b.yaml")])  # fmt: skip
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _merge({"nics": {"connectx-7-ndr": {"base": "connectx-7-ndr", "speed": "200Gb/s", "source": "t"}}})
        _merge({"nics": {"lab": nic}})
