"""The helpers behind the per-node and per-stage metrics (no cluster needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tether.ray.cluster import node_label
from tether.ray.transfer import Folder, can_read, pack, unpack, write_probe
from tether.runner.pool import worker_id, worker_node
from tether.trainer.stages import covered_seconds


def test_generation_time_is_the_union_of_the_call_intervals() -> None:
    assert covered_seconds([]) == 0.0
    assert covered_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0


def test_the_node_of_a_worker_id() -> None:
    label = node_label("a3fc45db241986258eb0", "10.0.0.7")
    assert label == "ray:10.0.0.7:a3fc45db"
    assert worker_node(worker_id(label, 3)) == label
    assert worker_node(worker_id("worker", 0)) == socket.gethostname()


def test_a_streamed_folder_comes_back_whole_and_stays_inside(tmp_path: Path) -> None:
    folder = tmp_path / "v3"
    (folder / "sub").mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)))
    copy = Folder(str(folder), pack(folder)).materialize()
    assert copy != folder and pack(copy) == pack(folder)
    assert Folder(str(folder)).materialize() == folder  # by path: nothing copied
    with pytest.raises(ValueError, match="outside its folder"):
        unpack({"../escape": b"x"}, tmp_path / "target")
    assert not (tmp_path / "escape").exists()


def test_the_probe_is_read_only_where_the_file_is(tmp_path: Path) -> None:
    probe, token = write_probe(tmp_path)
    assert can_read(probe, token) and not can_read(probe, "another") and not can_read(probe + "x", token)
