"""YAML for the manifests people read and edit (pytorchjob.yaml, skypilot.yaml): keys in the order written,
multi-line strings (shell scripts) as literal blocks, and every repeated part written out (no anchors)."""

from __future__ import annotations

from typing import Any


def manifest_yaml(document: dict[str, Any]) -> str:
    import yaml

    class _ManifestDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a pod template shared by Master and Worker is written twice, as kubectl shows it

    def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _ManifestDumper.add_representer(str, _text)
    return yaml.dump(document, Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True)


def comment_lines(lines: list[str]) -> str:
    """`# line` per line; a newline inside one (a path may hold it) is escaped, so it cannot start YAML of its own."""
    return "".join("# " + line.replace("\n", "\\n") + "\n" if line else "#\n" for line in lines)
