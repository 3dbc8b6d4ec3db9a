"""Two objects of one kind with one namespace/name: the API server holds one object per kind and
namespace/name (name alone for cluster-scoped kinds), so a snapshot holding two is bad input. The error
names the file, both documents (and List items), the kind and the namespace/name; the CLI prints it on one
line and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bench.workloads import as_list, linux_pool, pod
from cli.app import app
from model.errors import InputError
from model.snapshot import load_snapshot, parse_objects


def _node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def _stream(path: Path, objects: list[dict[str, object]]) -> Path:
    path.write_text(yaml.safe_dump_all(objects))
    return path


def test_two_pods_with_one_namespace_and_name_name_both_documents(tmp_path: Path) -> None:
    path = _stream(tmp_path / "snap.yaml", [pod("web", namespace="shop"), linux_pool(), pod("web", namespace="shop")])
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    text = str(err.value)
    assert text.startswith(f"{path}: Pod shop/web: defined twice")
    assert "document 1 and document 3" in text and "\n" not in text


def test_a_pod_without_a_namespace_is_the_default_namespaces_pod() -> None:
    bare = pod("web")
    del bare["metadata"]["namespace"]  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="Pod default/web: defined twice, in document 1 and document 2"):
        parse_objects([bare, pod("web", namespace="default")], source="snap.yaml")


def test_list_items_are_named_by_document_and_item(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(as_list([_node("a"), _node("b"), _node("a")])))
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    assert "Node a: defined twice, in document 1, item 1 and document 1, item 3" in str(err.value)


def test_one_name_in_two_namespaces_or_two_kinds_is_fine() -> None:
    snap = parse_objects([pod("web", namespace="a"), pod("web", namespace="b"), _node("web"),
                          linux_pool("web")], source="snap.yaml")
    assert len(snap.pods) == 2 and len(snap.nodes) == 1 and len(snap.nodepools) == 1


def test_the_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    path = _stream(tmp_path / "snap.yaml", [linux_pool(), pod("api", namespace="shop"), pod("api", namespace="shop")])
    result = CliRunner().invoke(app, ["solve", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert str(path) in lines[0] and "Pod shop/api" in lines[0] and "document 2 and document 3" in lines[0]
