"""A real `jupyter lab` process with ditto_jupyter's server extension and its lab extension.

Like `LiveServer` (everything under one base directory: Jupyter config, data and runtime
dirs, the notebook root, the ditto data dir), plus what JupyterLab needs to leave nothing
behind and to load the extension built in this checkout:
- workspaces, user settings and app settings in the base directory; the app settings hold
  the `overrides.json` that turns the "Jupyter news" prompt off;
- `JUPYTER_PATH` names a folder whose `labextensions/ditto-jupyter` is this checkout's
  build (`ditto_jupyter/labextension`), so the lab extension under test is this one
  whatever is installed in the environment;
- `PYTHONPATH` starts with this checkout, so the server and its kernels import it too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.server.live_server import LiveServer

REPO = Path(__file__).resolve().parents[2]
BUILT_EXTENSION = REPO / "ditto_jupyter" / "labextension"
EXTENSION_NAME = "ditto-jupyter"

#: Settings every browser test runs with (JupyterLab's overrides.json format).
OVERRIDES: dict[str, Any] = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}


def require_built_extension() -> None:
    """Fail (never skip) with the command that builds the extension when it is missing."""
    if not (BUILT_EXTENSION / "package.json").is_file():
        raise RuntimeError(
            f"the JupyterLab extension is not built ({BUILT_EXTENSION} is missing); "
            "build it with `make labextension`"
        )


class LabServer(LiveServer):
    """`jupyter lab` on a temporary root, with this checkout's extension loaded."""

    def __init__(self, base: Path, **kwargs: Any) -> None:
        super().__init__(base, **kwargs)
        self.extension_path = self.base / "jupyter-path"
        self.settings_dir = self.base / "lab-settings"

    def env(self) -> dict[str, str]:
        env = super().env()
        env["JUPYTER_PATH"] = str(self.extension_path)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
        )
        return env

    def start(self) -> LabServer:
        require_built_extension()
        labextensions = self.extension_path / "labextensions"
        labextensions.mkdir(parents=True, exist_ok=True)
        link = labextensions / EXTENSION_NAME
        if not link.exists():
            link.symlink_to(BUILT_EXTENSION, target_is_directory=True)
        app_settings = self.settings_dir / "app"
        app_settings.mkdir(parents=True, exist_ok=True)
        (app_settings / "overrides.json").write_text(json.dumps(OVERRIDES))
        super().start()
        return self

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "jupyterlab",
            "--port=0",
            "--no-browser",
            f"--LabApp.workspaces_dir={self.settings_dir / 'workspaces'}",
            f"--LabApp.user_settings_dir={self.settings_dir / 'user'}",
            f"--LabApp.app_settings_dir={self.settings_dir / 'app'}",
            "--LabApp.expose_app_in_browser=True",
        ]

    def lab_url(self, path: str = "") -> str:
        """The URL that opens JupyterLab (on `path`, e.g. `tree/work.ipynb`), logged in."""
        return f"{self.url}lab/{path}?token={self.token}"

    def write_notebook(self, path: str, *sources: str) -> None:
        """Write a notebook of code cells into the root directory."""
        cells = [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{index}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for index, source in enumerate(sources or ("",))
        ]
        notebook = {
            "cells": cells,
            "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        target = self.root_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook))
