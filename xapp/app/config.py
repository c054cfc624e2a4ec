"""Configuration of ``mcw run``: ``config-file.json``'s ``controls``, environment overrides, reload.

The descriptor file (``$CONFIG_FILE``) is the one the xApp onboarder and the appmgr know; its
``controls`` section is this xApp's own configuration.  An environment variable
``MCW_<SECTION>_<KEY>`` (upper case) overrides ``controls.<section>.<key>`` and
``MCW_<KEY>`` overrides a top-level key, e.g. ``MCW_MQTT_HOST``, ``MCW_LOOP_CONTROL_PERIOD_S``,
``MCW_LOG_LEVEL``, ``MCW_DEFAULT_POLICY_MAX_WEIGHT``.  The value is parsed as JSON when it
parses (numbers, booleans) and taken as a string otherwise.  Kubernetes' service links are not
overrides: the pod has them (the O-RAN SC frame needs them), and a Service whose name starts
with ``mcw-`` -- the chart's own broker, ``mcw-xapp-broker`` -- injects ``MCW_..._SERVICE_HOST``,
``MCW_..._PORT=tcp://...`` and the like, which are skipped.

:class:`ConfigWatcher` polls the file (size, mtime and content hash rather than inotify,
because Kubernetes updates a mounted ConfigMap by swapping a symlink, which a watch on the old
file never sees) and hands a new :class:`Controls` to its listeners; a file that does not parse
or validate is logged and ignored, the running configuration stays.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import jsonschema

from xapp import bounded_json
from xapp.adapters.e2.mapping import DEFAULT_MAP, MeasurementMap, MeasurementMapError
from xapp.core.caps import check_headroom
from xapp.core.loop import LoopSettings
from xapp.core.planning import check_level
from xapp.core.policy import PolicyError
from xapp.core.policy_book import build_policy
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS
from xapp.core.timings import derive_timings
from xapp.core.workers import Worker
from xapp.schemas import schemas_dir

log = logging.getLogger(__name__)

CONTROLS_SCHEMA_FILE = "controls.schema.json"
ENV_PREFIX = "MCW_"
#: MCW_* variables that are not controls overrides.
_NOT_OVERRIDES = frozenset({"MCW_SCHEMAS_DIR", "MCW_REPLICA_ID", "MCW_POD_IP"})
#: This pod's IP (the chart sets it from the downward API, ``status.podIP``).
POD_IP_ENV = "MCW_POD_IP"
#: The names Kubernetes gives a Service's links (``<NAME>_SERVICE_HOST``,
#: ``<NAME>_SERVICE_PORT[_<PORT NAME>]``, ``<NAME>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]``), and the
#: value of ``<NAME>_PORT`` (``tcp://10.96.0.7:8883``).
_SERVICE_LINK_NAME = re.compile(
    r"_SERVICE_(HOST|PORT(_[A-Z0-9_]+)?)$|_PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?$")
_SERVICE_LINK_VALUE = re.compile(r"^(tcp|udp|sctp)://")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: What the descriptor may hold: O-RAN SC descriptors are a few KiB.
CONFIG_LIMITS = bounded_json.JsonLimits(max_bytes=1024 * 1024, max_depth=32)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and the problem."""


@dataclass(frozen=True)
class InfluxSettings:
    url: str = "http://influxdb:8086"
    org: str = "mcw"
    bucket: str = "mcw/autogen"
    token_file: str = "/opt/ric/secret/influxdb/token"


@dataclass(frozen=True)
class MqttSettings:
    host: str = "mosquitto"
    port: int = 8883
    client_id: str = "mcw-xapp"
    ca_file: str = "/opt/ric/tls/ca.crt"
    cert_file: str = "/opt/ric/tls/tls.crt"
    key_file: str = "/opt/ric/tls/tls.key"


@dataclass(frozen=True)
class ModelSettings:
    path: str = "/opt/mcw/models/default"
    reload_check_s: float = 10.0
    # The Ed25519 public key an artifact's signature must verify with (xapp.model.signing).
    # The image carries the project's release key here (it signs models/default); the chart
    # mounts the operator's key over it from a Secret.  Kept apart from path: whoever can
    # write the model volume must not be able to choose the key.
    public_key_file: str = "/opt/mcw/keys/model-signing.pub"
    # The quantile of each WAT's capacity the weights are planned with: "cost" chooses it per
    # WAT from what an error costs under WRR (its forecast share of the CPE's total,
    # xapp.core.planning); a number in [0.01, 0.5] fixes it (0.1: the former bound).
    planning_level: str | float = "cost"
    # The most each WAT's forecast may be on the physics check's reference inputs, over the
    # peak rates in xapp.model.physics.PEAK_MBPS; a model above is refused (issue 22).
    plausible_mbps: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardingSettings:
    """Several ``mcw run`` replicas sharing one fleet (``controls.sharding``, docs/replicas.md).

    Disabled (the default), one replica holds every shard and no lease is written: the former
    behaviour.  Enabled, each replica holds the shards it leases in SDL's Redis."""

    enabled: bool = False
    #: Shards of the fleet; fixed for the fleet's life (changing it moves almost every CPE).
    shards: int = DEFAULT_SHARDS
    #: This replica's id; empty: ``$MCW_REPLICA_ID``, else the host (pod) name.
    replica_id: str = ""
    #: TTL of a shard lease and of the membership; 0: one and a half control periods (at least 1 s).
    #: Must stay below the weights' lease (``loop.lease_s``) so no CPE goes without weights
    #: while its shard changes hands.
    lease_s: float = 0.0

    def effective_lease_s(self, control_period_s: float) -> float:
        """The shard lease at ``control_period_s`` (:func:`xapp.core.timings.derive_timings`)."""
        return derive_timings(control_period_s, self.lease_s).shard_lease_s

    def effective_replica_id(self, environ: Mapping[str, str] | None = None) -> str:
        env = os.environ if environ is None else environ
        return (self.replica_id or env.get("MCW_REPLICA_ID") or env.get("HOSTNAME")
                or socket.gethostname())


@dataclass(frozen=True)
class A1Settings:
    #: The mediator's northbound API; empty: resync by a quiet period only (A1Resync).
    mediator_url: str = ""


@dataclass(frozen=True)
class E2NodeSettings:
    """A statically configured E2 node (``controls.e2.nodes``): for RICs without R-NIB access."""

    inventory_name: str
    ran_function_id: int
    kpm_version: int = 3
    report_styles: tuple[int, ...] = (1,)
    #: NR CGI "<plmn hex>-<nci hex>" of the node's cell, and its carrier's PRBs (0: unknown).
    cell: str = ""
    prb_total: int = 0


#: The KPM measurements the product maps, asked for by default (a node is asked only for those
#: it offers; distributions such as CARR.WBCQIDist.Bin<k> have per-bin names, listed by hand).
DEFAULT_E2_MEASUREMENTS = DEFAULT_MAP.names()


@dataclass(frozen=True)
class E2Settings:
    """E2SM-KPM subscriptions (xapp.adapters.e2): on when ``enabled`` and ``submgr_url`` set."""

    enabled: bool = True
    #: The Subscription Manager's REST base URL; empty: no E2 (the former behaviour).
    submgr_url: str = ""
    #: ClientEndpoint.Host submgr calls back (and derives the RMR endpoint from, "http" ->
    #: "rmr"): the xApp's HTTP service.
    client_host: str = "service-ricxapp-mcw-xapp-http.ricxapp"
    http_port: int = 8080
    rmr_port: int = 4560
    #: The RIC Request ID requestor submgr puts in subscriptions (its constant 123).
    requestor_id: int = 123
    #: Refuse indications whose requestor is not requestor_id (off for nodes that do not
    #: echo it).
    match_requestor: bool = True
    #: Read the nodes from the E2 manager's R-NIB in SDL (needs --sdl redis).
    rnib: bool = True
    poll_period_s: float = 10.0
    report_period_ms: int = 1000
    granularity_ms: int = 1000
    report_styles: tuple[int, ...] = (1, 4)
    measurements: tuple[str, ...] = DEFAULT_E2_MEASUREMENTS
    nodes: tuple[E2NodeSettings, ...] = ()
    #: Vendor measurement names -> wat_kpi field (``MeasurementMap.extended``'s document).
    vendor_measurements: Mapping[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.submgr_url)

    def effective_client_host(self, sharded: bool,
                              environ: Mapping[str, str] | None = None) -> str:
        """The ``ClientEndpoint.Host`` submgr answers and sends indications to.

        With several replicas the Service reaches a random pod, and only the pod that
        subscribed knows the subscription: each pod then gives its own IP (``$MCW_POD_IP``).
        One replica keeps ``client_host``, which outlives the pod (its successor deletes what
        the pod left at submgr anyway)."""
        env = os.environ if environ is None else environ
        pod_ip = env.get(POD_IP_ENV, "").strip()
        return pod_ip if sharded and pod_ip else self.client_host

    def measurement_map(self) -> MeasurementMap:
        """The built-in measurement table extended by ``vendor_measurements``."""
        try:
            return DEFAULT_MAP.extended(self.vendor_measurements)
        except MeasurementMapError as exc:
            raise ConfigError(f"controls.e2.vendor_measurements: {exc}") from exc


@dataclass(frozen=True)
class Controls:
    """The ``controls`` section, typed and checked."""

    log_level: str = "INFO"
    loop: LoopSettings = field(default_factory=LoopSettings)
    sdl_namespace: str = "mcw"
    influxdb: InfluxSettings = field(default_factory=InfluxSettings)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    a1: A1Settings = field(default_factory=A1Settings)
    e2: E2Settings = field(default_factory=E2Settings)
    sharding: ShardingSettings = field(default_factory=ShardingSettings)
    default_policy: Mapping[str, Any] = field(default_factory=lambda: {
        "mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
        "capacity_floor_mbps": 1.0})

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["default_policy"] = dict(self.default_policy)
        return doc


@dataclass(frozen=True)
class LoadedConfig:
    """The whole descriptor (for ``/ric/v1/config`` and registration) and its typed controls."""

    path: Path | None
    document: Mapping[str, Any]
    controls: Controls
    digest: str

    @property
    def name(self) -> str:
        return str(self.document.get("name", "mcw-xapp"))


def apply_env_overrides(controls: Mapping[str, Any],
                        environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A copy of ``controls`` with ``MCW_*`` overrides applied (see the module docstring)."""
    env = os.environ if environ is None else environ
    out = copy.deepcopy(dict(controls))
    targets: dict[str, tuple[str, ...]] = {}
    for key, value in out.items():
        targets[f"{ENV_PREFIX}{key.upper()}"] = (key,)
        if isinstance(value, Mapping):
            for sub in value:
                targets[f"{ENV_PREFIX}{key.upper()}_{sub.upper()}"] = (key, sub)
    # The loop's settings' former names still reach them, where they live now.
    for section, key in _FORMER_PLACES:
        former = f"{ENV_PREFIX}{(section + '_' if section else '').upper()}{key.upper()}"
        targets[former] = ("loop", key)
    # Keys of the typed defaults can be overridden even when the file leaves them out.
    for key, value in Controls().to_dict().items():
        targets.setdefault(f"{ENV_PREFIX}{key.upper()}", (key,))
        if isinstance(value, Mapping):
            for sub in value:
                targets.setdefault(f"{ENV_PREFIX}{key.upper()}_{sub.upper()}", (key, sub))
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name in _NOT_OVERRIDES:
            continue
        path = targets.get(name)
        if name.endswith("_PORT") and _SERVICE_LINK_VALUE.match(raw):
            if path is not None:  # a Service named after a section, e.g. mcw-mqtt
                log.warning("environment variable %s=%s is a Kubernetes service link, not an "
                            "override of controls.%s; ignored", name, raw, ".".join(path))
            continue
        if path is None:
            if not _SERVICE_LINK_NAME.search(name):
                log.warning("environment variable %s matches no controls key; ignored", name)
            continue
        value = _env_value(raw)
        if path[0] == "loop" and name != f"{ENV_PREFIX}LOOP_{path[1].upper()}":
            log.warning("environment variable %s is deprecated: use %sLOOP_%s", name,
                        ENV_PREFIX, path[1].upper())
        if len(path) == 1:
            out[path[0]] = value
        else:
            section = out.setdefault(path[0], {})
            if not isinstance(section, dict):
                raise ConfigError(f"{name}: controls.{path[0]} is not an object")
            section[path[1]] = value
    return out


def _env_value(raw: str) -> Any:
    try:
        return bounded_json.loads(raw, CONFIG_LIMITS)
    except bounded_json.BoundedJsonError:
        return raw


def _controls_schema(directory: str | os.PathLike[str] | None) -> Mapping[str, Any] | None:
    try:
        path = schemas_dir(directory) / CONTROLS_SCHEMA_FILE
    except FileNotFoundError:
        return None
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def parse_controls(raw: Mapping[str, Any], schemas: str | os.PathLike[str] | None = None
                   ) -> Controls:
    """Typed :class:`Controls` from a ``controls`` object (after env overrides).

    Validates against ``schemas/controls.schema.json`` when that file exists, then checks
    ranges and builds the default policy; raises :class:`ConfigError`.
    """
    schema = _controls_schema(schemas)
    if schema is not None:
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(raw),
                        key=lambda e: list(e.absolute_path))
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "controls"
            raise ConfigError(f"controls.{where}: {errors[0].message}".replace(
                "controls.controls", "controls"))
    # Checked where they were written (the schema still describes the former places).
    raw = _moved_to_loop(raw)
    base = Controls()
    try:
        controls = Controls(
            log_level=_level(raw.get("log_level", base.log_level)),
            loop=_loop(_section(raw, "loop", LoopSettings)),
            sdl_namespace=_text(raw.get("sdl_namespace", base.sdl_namespace), "sdl_namespace"),
            influxdb=InfluxSettings(**_section(raw, "influxdb", InfluxSettings)),
            mqtt=MqttSettings(**_section(raw, "mqtt", MqttSettings)),
            model=ModelSettings(**_section(raw, "model", ModelSettings)),
            a1=A1Settings(**_section(raw, "a1", A1Settings)),
            e2=_e2(_section(raw, "e2", E2Settings)),
            sharding=ShardingSettings(**_section(raw, "sharding", ShardingSettings)),
            default_policy=dict(raw.get("default_policy", base.default_policy)),
        )
    except TypeError as exc:
        raise ConfigError(f"controls: {exc}") from exc
    _positive(controls.model.reload_check_s, "model.reload_check_s")
    try:
        check_level(controls.model.planning_level)
    except ValueError as exc:
        raise ConfigError(f"controls.model.planning_level: {exc}") from exc
    if not isinstance(controls.mqtt.port, int) or not 0 < controls.mqtt.port < 65536:
        raise ConfigError(f"controls.mqtt.port must be a port number, got {controls.mqtt.port!r}")
    _sharding(controls)
    try:
        build_policy({}, controls.default_policy)
    except PolicyError as exc:
        raise ConfigError(f"controls.default_policy: {exc}") from exc
    return controls


def _sharding(controls: Controls) -> None:
    sh = controls.sharding
    if isinstance(sh.shards, bool) or not isinstance(sh.shards, int) \
            or not 1 <= sh.shards <= MAX_SHARDS:
        raise ConfigError(f"controls.sharding.shards must be an integer in [1, {MAX_SHARDS}], "
                          f"got {sh.shards!r}")
    if not isinstance(sh.enabled, bool):
        raise ConfigError(f"controls.sharding.enabled must be true or false, got {sh.enabled!r}")
    if isinstance(sh.lease_s, bool) or not isinstance(sh.lease_s, int | float) or sh.lease_s < 0:
        raise ConfigError(f"controls.sharding.lease_s must be a number >= 0, got {sh.lease_s!r}")
    lease = sh.effective_lease_s(controls.loop.control_period_s)
    if sh.enabled and lease >= controls.loop.lease_s:
        raise ConfigError(
            f"controls.sharding.lease_s ({lease:g} s) must be below controls.loop.lease_s "
            f"({controls.loop.lease_s:g} s): a dead replica's CPEs must get weights from its "
            "successor before their agents' lease runs out")
    if "|" in sh.replica_id:
        raise ConfigError("controls.sharding.replica_id must not contain '|'")


def _loop(raw: dict[str, Any]) -> LoopSettings:
    """``controls.loop`` typed; the headroom checked by the rule's own bounds, so the schema
    and the rule cannot disagree silently."""
    loop = LoopSettings(**raw)
    for key in ("control_period_s", "kpi_max_age_s", "lease_s"):
        _positive(getattr(loop, key), f"loop.{key}")
    try:
        return replace(loop, caps_headroom=check_headroom(loop.caps_headroom))
    except ValueError as exc:
        raise ConfigError(f"controls.loop.caps_headroom: {exc}") from exc


#: Where the loop's settings lived before ``controls.loop`` held them all: (section, key).
_FORMER_PLACES: tuple[tuple[str | None, str], ...] = (
    (None, "control_period_s"), (None, "kpi_max_age_s"), ("mqtt", "lease_s"))


def _moved_to_loop(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with the loop's settings from their former places moved into ``loop``, each
    with a warning; a key given in both places keeps ``loop``'s.  Configurations and
    ``MCW_CONTROL_PERIOD_S`` / ``MCW_MQTT_LEASE_S`` overrides written for earlier releases
    keep working."""
    out = dict(raw)
    loop = dict(out.get("loop") or {}) if isinstance(out.get("loop", {}), Mapping) else None
    if loop is None:
        return out  # the schema refuses a loop that is not an object
    moved = False
    for section, key in _FORMER_PLACES:
        holder = out if section is None else out.get(section)
        if not isinstance(holder, Mapping) or key not in holder:
            continue
        where = key if section is None else f"{section}.{key}"
        holder = dict(holder)
        value = holder.pop(key)
        if section is not None:
            out[section] = holder
        else:
            out.pop(key)
        if key in loop:
            log.warning("controls.%s is deprecated and ignored: controls.loop.%s is set",
                        where, key)
        else:
            log.warning("controls.%s is deprecated: read as controls.loop.%s", where, key)
            loop[key] = value
        moved = True
    if moved:
        out["loop"] = loop
    return out


def _e2(raw: dict[str, Any]) -> E2Settings:
    """``controls.e2`` typed (lists to tuples, nodes to records); the schema checked types."""
    out = dict(raw)
    for key in ("report_styles", "measurements"):
        if key in out:
            out[key] = tuple(out[key])
    if "nodes" in out:
        nodes = []
        for i, node in enumerate(out["nodes"]):
            if not isinstance(node, Mapping):
                raise ConfigError(f"controls.e2.nodes[{i}] must be an object")
            doc = dict(node)
            if "report_styles" in doc:
                doc["report_styles"] = tuple(doc["report_styles"])
            nodes.append(E2NodeSettings(**doc))
        out["nodes"] = tuple(nodes)
    e2 = E2Settings(**out)
    if e2.submgr_url and not e2.submgr_url.startswith(("http://", "https://")):
        raise ConfigError(f"controls.e2.submgr_url must be an http(s) URL, got {e2.submgr_url!r}")
    _positive(e2.poll_period_s, "e2.poll_period_s")
    _positive(e2.report_period_ms, "e2.report_period_ms")
    _positive(e2.granularity_ms, "e2.granularity_ms")
    if not e2.measurements:
        raise ConfigError("controls.e2.measurements must name at least one measurement")
    e2.measurement_map()
    return e2


def _section(raw: Mapping[str, Any], name: str, kind: type) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"controls.{name} must be an object")
    known = {f.name for f in fields(kind)}
    unknown = set(value) - known
    if unknown:
        raise ConfigError(f"controls.{name}: unknown keys {sorted(unknown)}")
    return dict(value)


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"controls.{name} must be a number > 0, got {value!r}")
    return float(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"controls.{name} must be a non-empty string")
    return value


def _level(value: Any) -> str:
    level = str(value).upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise ConfigError(f"controls.log_level must be one of {list(LOG_LEVELS)}, got {value!r}")
    return level


def load_config(path: str | os.PathLike[str] | None, *, schemas: str | os.PathLike[str] | None
                = None, environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """Read the descriptor at ``path`` (None: built-in defaults) and type its controls.

    Whatever the file holds, the only exception is :class:`ConfigError` (the watcher keeps the
    running configuration on it; ``mcw run`` exits with its message)."""
    try:
        return _load_config(path, schemas, environ)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{path}: unusable configuration ({type(exc).__name__}: {exc})"
                          ) from exc


def _load_config(path: str | os.PathLike[str] | None,
                 schemas: str | os.PathLike[str] | None,
                 environ: Mapping[str, str] | None) -> LoadedConfig:
    if path is None:
        raw_doc: dict[str, Any] = {}
        digest = ""
    else:
        p = Path(path)
        try:
            with p.open("rb") as f:
                data = f.read(CONFIG_LIMITS.max_bytes + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from exc
        digest = hashlib.sha256(data).hexdigest()
        try:
            raw_doc = bounded_json.loads(data, CONFIG_LIMITS)
        except bounded_json.BoundedJsonError as exc:
            raise ConfigError(f"{p} is not usable JSON: {exc}") from exc
        if not isinstance(raw_doc, dict):
            raise ConfigError(f"{p}: the top level must be an object")
    raw_controls = raw_doc.get("controls", {})
    if not isinstance(raw_controls, Mapping):
        raise ConfigError("controls must be an object")
    controls = parse_controls(apply_env_overrides(raw_controls, environ), schemas)
    return LoadedConfig(None if path is None else Path(path), raw_doc, controls, digest)


class ConfigWatcher:
    """Polls the config file and calls listeners with each new, valid configuration.

    Safe for concurrent use; :meth:`check` can be called directly (tests) or from the thread
    :meth:`start` runs.
    """

    def __init__(self, current: LoadedConfig, *, schemas: str | os.PathLike[str] | None = None,
                 interval_s: float = 2.0) -> None:
        self._current = current
        self._schemas = schemas
        self._listeners: list[Callable[[LoadedConfig, LoadedConfig], None]] = []
        self._lock = threading.Lock()
        self.worker = Worker("mcw-config", self.check, interval_s)
        self._last_bad = ""

    @property
    def current(self) -> LoadedConfig:
        with self._lock:
            return self._current

    def subscribe(self, listener: Callable[[LoadedConfig, LoadedConfig], None]) -> None:
        """``listener(old, new)`` runs in the watcher thread after each accepted change."""
        self._listeners.append(listener)

    def check(self) -> bool:
        """Re-read the file if its content changed; True when a new configuration was applied."""
        with self._lock:
            current = self._current
            if current.path is None:
                return False
            try:
                digest = hashlib.sha256(current.path.read_bytes()).hexdigest()
            except OSError as exc:
                self._complain(f"cannot read {current.path}: {exc}")
                return False
            if digest == current.digest or digest == self._last_bad:
                return False
            try:
                new = load_config(current.path, schemas=self._schemas)
            except (ConfigError, jsonschema.SchemaError) as exc:
                self._last_bad = digest
                log.error("configuration change in %s ignored, the running configuration "
                          "stays: %s", current.path, exc)
                return False
            self._current = new
        log.info("configuration reloaded from %s", new.path)
        for listener in self._listeners:
            try:
                listener(current, new)
            except Exception:
                log.exception("applying the new configuration failed in %r", listener)
        return True

    def _complain(self, message: str) -> None:
        if message != self._last_bad:
            log.error("%s", message)
            self._last_bad = message

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
