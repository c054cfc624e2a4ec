"""The appmgr registration bodies, without RMR (the frame that posts them needs librmr_si.so).

The appmgr (ric-plt-appmgr ``pkg/restful/restful.go``) keeps ``[appName][appInstanceName]``
entries, removes exactly one at ``/ric/v1/deregister``, and derives an instance's RMR route
endpoint from ``appInstanceName`` (``service-ricxapp-<appInstanceName>-rmr.ricxapp``).
:class:`Appmgr` below is that bookkeeping, so the tests check what the appmgr ends up with.
"""

from __future__ import annotations

import json
from typing import Any

from xapp.adapters.rmr import appmgr_deregister_body, appmgr_register_body
from xapp.app.wiring.rmr import appmgr_identity

DESCRIPTOR = {"name": "mcw-xapp", "version": "0.1.0", "controls": {"sdl_namespace": "mcw"}}
HTTP_SVC = "service-ricxapp-mcw-xapp-http.ricxapp:8080"
RMR_SVC = "service-ricxapp-mcw-xapp-rmr.ricxapp:4560"


class Appmgr:
    """The appmgr's map of registered xApps (RegisterXapp, DeregisterXapp, FillInstanceData)."""

    def __init__(self) -> None:
        self.apps: dict[str, dict[str, dict[str, Any]]] = {}

    def register(self, body: dict[str, Any]) -> None:
        port = body["rmrEndpoint"].split(":")[1]
        self.apps.setdefault(body["appName"], {})[body["appInstanceName"]] = {
            "ip": f"service-ricxapp-{body['appInstanceName']}-rmr.ricxapp", "port": int(port),
            "http": body["httpEndpoint"]}

    def deregister(self, body: dict[str, Any]) -> bool:
        instances = self.apps.get(body["appName"])
        if instances is None:
            return False  # "XApp Instance Not Found": 400
        instances.pop(body["appInstanceName"], None)
        if not instances:
            del self.apps[body["appName"]]
        return True

    def route_endpoints(self) -> set[str]:
        """What rtmgr makes of it: endpoints keyed by address and port."""
        return {f"{i['ip']}:{i['port']}" for a in self.apps.values() for i in a.values()}


def body(pod: str, sharded: bool, pod_ip: str) -> dict[str, Any]:
    replica, http = appmgr_identity(pod, sharded, 8080, {"MCW_POD_IP": pod_ip})
    return appmgr_register_body(DESCRIPTOR, hostname="mcw-xapp", replica_id=replica,
                                http_endpoint=http or HTTP_SVC, rmr_endpoint=RMR_SVC)


def test_one_replica_registers_as_the_frame_does() -> None:
    b = body("mcw-xapp-7d9-abcde", False, "10.244.0.7")
    assert b == {"appName": "mcw-xapp", "appVersion": "0.1.0", "configPath": "",
                 "appInstanceName": "mcw-xapp", "httpEndpoint": HTTP_SVC,
                 "rmrEndpoint": RMR_SVC, "config": json.dumps(DESCRIPTOR)}
    assert appmgr_deregister_body(DESCRIPTOR, hostname="mcw-xapp", replica_id="") == {
        "appName": "mcw-xapp", "appInstanceName": "mcw-xapp"}


def test_each_replica_has_its_own_entry_and_one_leaving_keeps_the_others() -> None:
    pods = {"mcw-xapp-7d9-abcde": "10.244.0.7", "mcw-xapp-7d9-fghij": "10.244.0.8"}
    appmgr = Appmgr()
    for pod, ip in pods.items():
        appmgr.register(body(pod, True, ip))
    assert set(appmgr.apps) == set(pods)
    assert {e["http"] for a in appmgr.apps.values() for e in a.values()} == {
        "10.244.0.7:8080", "10.244.0.8:8080"}
    # Every entry's route endpoint is the chart's RMR Service: one endpoint for rtmgr.
    assert appmgr.route_endpoints() == {RMR_SVC}
    leaving = appmgr_deregister_body(DESCRIPTOR, hostname="mcw-xapp",
                                     replica_id="mcw-xapp-7d9-abcde")
    assert appmgr.deregister(leaving)
    assert set(appmgr.apps) == {"mcw-xapp-7d9-fghij"} and appmgr.route_endpoints() == {RMR_SVC}


def test_without_replica_ids_one_deregistration_removes_every_pod() -> None:
    """What the frame's body does with N pods (why each needs its own entry)."""
    appmgr = Appmgr()
    for pod in ("mcw-xapp-7d9-abcde", "mcw-xapp-7d9-fghij"):
        appmgr.register(body(pod, False, ""))
    appmgr.deregister(appmgr_deregister_body(DESCRIPTOR, hostname="mcw-xapp", replica_id=""))
    assert appmgr.apps == {} and appmgr.route_endpoints() == set()


def test_a_sharded_pod_without_its_ip_keeps_the_service_as_http_endpoint() -> None:
    assert appmgr_identity("mcw-xapp-7d9-abcde", True, 8080, {}) == ("mcw-xapp-7d9-abcde", "")
    assert body("mcw-xapp-7d9-abcde", True, "")["httpEndpoint"] == HTTP_SVC
