"""The runtime image, built for real and run the way the chart runs it.

podman (Debian's) builds the Dockerfile's default target from a clean clone of the repository's
HEAD, on a base image made with debootstrap (no registry is reachable here; see
``tests/support/rootfs.py``) and without RMR (``RMR_DEB_URL=none``: its package cannot be
downloaded here). The container then runs as the chart's pod does: user 10001, read-only root
file system with a tmpfs on /tmp, every capability dropped, no new privileges, with a real Redis,
InfluxDB and Mosquitto (mTLS) beside it; ``/alive`` and ``/ready`` must answer 200. RMR is off
(``--rmr off``) because the library is absent; the chart's ``--rmr on`` needs an image with it.

The image's size and its venv's are printed and written to ``out/image.json`` for the README.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stack import http_get, operator_env, write_config
from tests.packaging.paths import ROOT, UID
from tests.support.influxd import influxd_binary, start_influxd
from tests.support.mosquitto import MosquittoBroker, make_pki, mosquitto_binary
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.rootfs import python_base_image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

BUILD_TIMEOUT_S = 1500
#: The default rlimits cannot be raised here (root lacks CAP_SYS_RESOURCE), so every
#: ``podman run`` states its own.
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
#: Where the container sees the test's secrets and configuration (read-only bind mount).
SECRETS = "/opt/ric/test"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "building and running images here needs root (rootful podman)"
    for tool in ("podman", "git", "tar"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make deps-system installs it)"
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        return "debootstrap is not installed (make deps-system installs it)"
    if mosquitto_binary() is None or redis_binary() is None or influxd_binary() is None:
        return "mosquitto, redis-server and influxd are needed (make deps)"
    return None


def _podman() -> str:
    exe = shutil.which("podman")
    assert exe is not None
    return exe


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    podman = _podman()
    base = python_base_image(podman)
    src = tmp_path_factory.mktemp("clone") / "src"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(src)], check=True, timeout=120)
    tag = f"localhost/mcw-xapp:test-{os.getpid()}"
    started = time.monotonic()
    build = subprocess.run(
        [podman, "build", "-q", "--network", "host", "--target", "runtime",
         "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", "RMR_DEB_URL=none",
         "-t", tag, str(src)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert build.returncode == 0, build.stderr[-4000:]
    build_s = time.monotonic() - started
    try:
        size = int(subprocess.run([podman, "image", "inspect", "--format", "{{.Size}}", tag],
                                  capture_output=True, text=True, check=True).stdout.strip())
        venv = subprocess.run([podman, "run", "--rm", *ULIMITS, "--entrypoint", "du", tag, "-sb",
                               "/opt/venv"], capture_output=True, text=True, check=True)
        venv_bytes = int(venv.stdout.split()[0])
        figures = {"image_mb": round(size / 1e6), "venv_mb": round(venv_bytes / 1e6),
                   "build_s": round(build_s), "base": base, "rmr": False}
        print(f"\nimage {tag}: {json.dumps(figures)}")
        out = ROOT / "out"
        out.mkdir(exist_ok=True)
        (out / "image.json").write_text(json.dumps(figures, indent=2) + "\n")
        yield tag
    finally:
        subprocess.run([podman, "rmi", "-f", tag], capture_output=True, check=False)


def test_runtime_image_user_and_entrypoint(image: str) -> None:
    doc = json.loads(subprocess.run([_podman(), "image", "inspect", image], capture_output=True,
                                    text=True, check=True).stdout)[0]["Config"]
    assert doc["User"] == f"{UID}:{UID}"
    assert doc["Entrypoint"] == ["mcw", "run"]


def test_runtime_image_has_no_compiler_and_no_pip(image: str) -> None:
    """The build stage's compiler and the venv's installers stay out of the runtime image."""
    probe = subprocess.run(
        [_podman(), "run", "--rm", *ULIMITS, "--entrypoint", "python", image, "-c",
         "import importlib.util as u, shutil; "
         "print(shutil.which('gcc'), u.find_spec('pip'), u.find_spec('pycrate_asn1dir.NBAP'))"],
        capture_output=True, text=True, check=True)
    assert probe.stdout.split() == ["None", "None", "None"], probe.stdout


def test_runtime_image_runs_as_the_chart_runs_it(image: str,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("run")
    pki = make_pki(root / "pki", n_cpes=1)
    broker = MosquittoBroker(pki, root / "broker").start()
    influx = start_influxd(root)
    redis = RedisServer(root / "redis").start()
    name = f"mcw-image-test-{os.getpid()}"
    podman = _podman()
    try:
        config = root / "config-file.json"
        write_config(config)
        env = operator_env(root, pki, broker, influx, redis)
        # The container reads the test's files through one read-only mount; user 10001 must be
        # able to read them (the chart's Secrets are mounted readable by the pod's user too).
        secrets = root / "secrets"
        secrets.mkdir()
        mounted: dict[str, str] = {}
        for key in ("MCW_MQTT_CA_FILE", "MCW_MQTT_CERT_FILE", "MCW_MQTT_KEY_FILE",
                    "MCW_INFLUXDB_TOKEN_FILE"):
            src = Path(env[key])
            shutil.copyfile(src, secrets / src.name)
            mounted[key] = f"{SECRETS}/{src.name}"
        shutil.copyfile(config, secrets / "config-file.json")
        for f in secrets.iterdir():
            f.chmod(0o644)
        secrets.chmod(0o755)
        port = free_port()
        container_env = {
            **{k: v for k, v in env.items()
               if k.startswith(("MCW_", "DBAAS_")) and k not in mounted},
            **mounted,
            # The image's own model and key, as the chart uses them by default.
            "MCW_MODEL_PATH": "/opt/mcw/models/default",
            "MCW_MODEL_PUBLIC_KEY_FILE": "/opt/mcw/keys/model-signing.pub",
            "CONFIG_FILE": f"{SECRETS}/config-file.json",
        }
        cmd = [podman, "run", "-d", "--name", name, "--network", "host",
               "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=64m,mode=1777",
               "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
               "--user", f"{UID}:{UID}", *ULIMITS,
               "-v", f"{secrets}:{SECRETS}:ro"]
        for key, value in sorted(container_env.items()):
            cmd += ["-e", f"{key}={value}"]
        cmd += [image, "--rmr", "off", "--http-host", "127.0.0.1", "--http-port", str(port),
                "--sdl", "redis"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.stderr

        def answers(path: str) -> bool:
            return http_get(port, path, timeout_s=2)[0] == 200

        alive = wait_until(lambda: answers("/ric/v1/health/alive"), timeout_s=90, step_s=0.5)
        ready = alive and wait_until(lambda: answers("/ric/v1/health/ready"), timeout_s=60,
                                     step_s=0.5)
        logs = subprocess.run([podman, "logs", name], capture_output=True, text=True).stdout
        assert alive, f"/alive never answered 200:\n{logs[-3000:]}"
        assert ready, f"/ready: {http_get(port, '/ric/v1/health/ready')}\n{logs[-3000:]}"
        inspect = json.loads(subprocess.run([podman, "inspect", name], capture_output=True,
                                            text=True, check=True).stdout)[0]
        assert inspect["HostConfig"]["ReadonlyRootfs"] is True
        assert inspect["State"]["Running"] is True
        # Nothing but /tmp is writable, and the process holds no capability.
        probe = subprocess.run(
            [podman, "exec", name, "python", "-c",
             "import os; open('/tmp/ok', 'w').close(); "
             "print(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0]);"
             "open('/opt/mcw/x', 'w')"],
            capture_output=True, text=True, check=False)
        assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe.stderr
        uid, cap_eff = probe.stdout.split()
        assert int(uid) == UID and int(cap_eff, 16) == 0
    finally:
        subprocess.run([podman, "rm", "-f", "-t", "5", name], capture_output=True, check=False)
        broker.stop()
        influx.stop()
        redis.stop()
