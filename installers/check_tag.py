"""Release check: the pushed tag names the version being built (v0.1.0 <-> version 0.1.0).

    python installers/check_tag.py v0.1.0        (CI: python installers/check_tag.py "$GITHUB_REF_NAME")

Reads the version from pyproject.toml (no install needed). Exit 0 when they match, 1 (with
what to fix) when not; a ref that is no tag (a manual run on a branch) passes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def project_version(pyproject: Path = PYPROJECT) -> str:
    """The [project] table's version (the first `version = "..."` line after `[project]`)."""
    in_project = False
    for line in pyproject.read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            in_project = line.strip() == "[project]"
        elif in_project and (m := re.match(r'version\s*=\s*"([^"]+)"', line)):
            return m.group(1)
    raise ValueError(f"no version in the [project] table of {pyproject}")


def check(ref: str, version: str) -> str | None:
    """None when `ref` (a tag name or refs/tags/...) matches `version`; else what is wrong."""
    name = ref.removeprefix("refs/tags/")
    if ref.startswith("refs/heads/") or not name.startswith("v"):
        return None  # not a release tag
    if name[1:] != version:
        return (
            f"tag {name} does not match the version {version} in pyproject.toml: set "
            f'version = "{name[1:]}" there (and tag that commit), or tag v{version}'
        )
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    problem = check(argv[0], project_version())
    if problem:
        print(f"check_tag: {problem}", file=sys.stderr)
        return 1
    print(f"check_tag: {argv[0]} matches {project_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
