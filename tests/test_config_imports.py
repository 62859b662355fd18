"""`scripts/config_imports.py` (in `make lint`): below `pipelines/` no module imports omegaconf
or hydra, or names `DictConfig` / `Mapping[str, Any]`, without a stated reason."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from densex.pipelines.compose import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "config_imports.py"


def _check():
    spec = importlib.util.spec_from_file_location("config_imports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_package_passes_and_names_its_few_exceptions(capsys) -> None:
    check = _check()
    assert check.main(["--check", str(PROJECT_ROOT / "src" / "densex")]) == 0
    typed = {
        Path(p).name for p, reason in check.config_type_modules(PROJECT_ROOT / "src" / "densex")
    }
    assert typed == {"config.py", "records.py"}  # at most 3, each saying why
    assert "without a reason" not in capsys.readouterr().out


def test_an_import_or_a_config_type_without_a_reason_fails(tmp_path, capsys) -> None:
    check = _check()
    root = _package(
        tmp_path / "densex",
        {
            "corpus/bad.py": "from omegaconf import DictConfig\n",
            "utils/typed.py": "from typing import Any\nfrom collections.abc import Mapping\n"
            "def f(cfg: Mapping[str, Any]) -> None: ...\n",
            "utils/ok.py": "import hydra  # config-import: Hydra's runtime state\n",
            "pipelines/edge.py": "from omegaconf import DictConfig\n",  # the edge may
            "integrations/x.py": "from omegaconf import OmegaConf\n",  # above it too
        },
    )
    assert check.main(["--check", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"{root / 'corpus/bad.py'}:1: imports omegaconf below pipelines/ without a reason" in out
    assert f"{root / 'utils/typed.py'}: names DictConfig or Mapping[str, Any]" in out
    assert f"{root / 'corpus/bad.py'}: names" in out  # `DictConfig` in the import, unmarked
    assert "ok " + str(root / "utils/ok.py") + ":1: hydra (Hydra's runtime state)" in out
    assert "pipelines/edge.py" not in out and "integrations/x.py" not in out
    (root / "corpus/bad.py").write_text(
        "# config-types: a test module\nfrom omegaconf import DictConfig  # config-import: test\n"
    )
    (root / "utils/typed.py").unlink()
    assert check.main(["--check", str(root)]) == 0
    assert check.main([str(tmp_path / "densex")]) == 0  # without --check: a report only
