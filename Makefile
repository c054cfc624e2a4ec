# make demo  - the closed loop with the shipped model on wifi-walk (EWMA, lagged oracle beside it), < 1 min
# make test  - lint + every test (Python against real redis/influxd/mosquitto, Go agent, chart)
# make bench - the benchmarks in bench/, figures printed (see README)
# make e2e   - the whole loop with real servers, agents, Prometheus and a scripted fault story
#              (report, timeline, PNG and figures in out/e2e, nothing tracked; docs/e2e.md)
# make realstack - every policy on a real MPTCP connection between namespaces, scenario by
#              scenario, against the default scheduler alone (bench/bench_realstack.py;
#              docs/realstack.md); REALSTACK_ARGS passes options, e.g. "--runs 1 --scenario lossy"
# make soak  - mcw run's memory over an hour with faults, 200 CPEs, 10 Go agents
#              (bench/soak.py; docs/guarantees.md); SOAK_ARGS passes options, e.g. "--minutes 10"
# make e2e-k8s - the chart installed by helm into a real single-node Kubernetes built and started
#              here (binaries in .tools/k8s), agents outside it in namespaces (docs/k8s.md)
#
# On a fresh Debian machine as root these install what they need: Debian packages with apt-get,
# Python packages into .venv, Go tools (influxd 1.8, helm) into .tools/bin with `go install`.

SHELL := /bin/bash
VENV  := $(CURDIR)/.venv
PY    := $(VENV)/bin/python
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(VENV)/bin:/usr/local/go/bin:$(PATH)
export GOFLAGS ?= -mod=mod

INFLUXD_VERSION := v1.8.10
HELM_VERSION    := v3.16.4

.PHONY: demo e2e realstack soak deps-e2e e2e-k8s deps-k8s test lint test-python test-unit test-agent test-agent-packages test-agent-netns bench deps deps-python deps-system deps-tools agent clean

demo: deps-python
	$(VENV)/bin/mcw demo --out out/demo

# The Python suite and the Go agent's package tests and fuzzing run side by side (pytest mostly
# waits on servers); --output-sync prints each one's output whole when it ends. The agent's
# namespace tests run after, alone: beside pytest their link-down reaction missed its 50 ms
# target (125 ms), which they measure on purpose.
test: deps lint
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-python test-agent-packages
	@$(MAKE) --no-print-directory test-agent-netns

# E2E_AGENTS dry-run Go agents, one per CPE (each is a process: 300 want more than 2 cores).
E2E_AGENTS ?= 50
e2e: deps-e2e agent
	$(PY) -m tests.e2e --agents $(E2E_AGENTS) --out out/e2e

REALSTACK_ARGS ?=
realstack: deps agent
	$(PY) bench/bench_realstack.py --out out/realstack $(REALSTACK_ARGS)

SOAK_ARGS ?=
soak: deps agent
	$(PY) bench/soak.py --out out/soak $(SOAK_ARGS)

deps-e2e: deps-python deps-tools
	@$(MAKE) --no-print-directory deps-system APT_NEEDS="$(APT_NEEDS) prometheus:prometheus"

# Kubernetes v1.34 from the Go module proxy (tests/k8s/kube: a wrapper module), CoreDNS with the
# plugins the cluster needs (tests/k8s/coredns), the pause binary from Kubernetes' pause.c,
# kube-router (NetworkPolicy enforced); the node's runtime from Debian. Compiling cold took 573 s + 69 s here
# (2 shared cores, empty Go caches; docs/k8s.md), about 30 s with a warm Go build cache.
K8S_BIN := $(CURDIR)/.tools/k8s/bin
K8S_APT := etcd:etcd-server containerd:containerd ctr:containerd iptables:iptables ipset:ipset \
           /usr/lib/cni/bridge:containernetworking-plugins /usr/include/stdio.h:libc6-dev
# The NetworkPolicy controller (its firewall alone, beside the bridge CNI): the only version the
# module proxy serves here. Its advisory (GHSA-phqm-jgc3-qf8g) is in the service proxy, which
# the cluster does not run.
KUBE_ROUTER_VERSION := v2.1.0

e2e-k8s: deps-k8s agent
	$(PY) -m tests.k8s --out out/e2e-k8s

deps-k8s: deps-python deps-tools
	@$(MAKE) --no-print-directory deps-system APT_NEEDS="$(APT_NEEDS) $(K8S_APT)"
	@$(MAKE) --no-print-directory $(K8S_BIN)/.version $(K8S_BIN)/coredns $(K8S_BIN)/pause \
	  $(K8S_BIN)/kube-router

$(K8S_BIN)/.version: tests/k8s/build.sh tests/k8s/kube/go.mod tests/k8s/kube/go.sum
	tests/k8s/build.sh $(K8S_BIN)

$(K8S_BIN)/coredns: tests/k8s/coredns/main.go tests/k8s/coredns/go.mod tests/k8s/coredns/go.sum
	cd tests/k8s/coredns && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags='-s -w' -o $@ .

$(K8S_BIN)/kube-router:
	GOBIN=$(K8S_BIN) CGO_ENABLED=0 nice -n 10 go install -trimpath \
	  -ldflags '-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$(KUBE_ROUTER_VERSION)' \
	  github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$(KUBE_ROUTER_VERSION)

$(K8S_BIN)/pause: tests/k8s/kube/go.mod
	cd tests/k8s/kube && go mod download k8s.io/kubernetes
	src=$$(cd tests/k8s/kube && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c \
	  && gcc -Os -Wall -Werror -static -DVERSION=v3.10.1-mcw -o $@ $$src

deps: deps-system deps-python deps-tools agent

# Debian packages: only the ones whose command is missing, so a warm machine does not touch apt.
# command:package pairs (or /absolute/file:package); Go comes with this kind of machine,
# golang-go is the fallback.
APT_NEEDS := redis-server:redis-server mosquitto:mosquitto mosquitto_pub:mosquitto-clients \
             ip:iproute2 tc:iproute2 iptables-restore:iptables openssl:openssl go:golang-go gcc:gcc \
             podman:podman runc:runc debootstrap:debootstrap systemd-nspawn:systemd-container

deps-system:
	@missing=""; \
	for pair in $(APT_NEEDS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  case $$cmd in /*) [ -e $$cmd ] || missing="$$missing $$pkg";; \
	    *) command -v $$cmd >/dev/null || [ -x /usr/sbin/$$cmd ] || missing="$$missing $$pkg";; esac; \
	done; \
	python3 -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $$missing; \
	fi

deps-python: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@python3 -c 'import ensurepip, venv' 2>/dev/null || { apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv; }
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

deps-tools: $(TOOLS)/influxd $(TOOLS)/helm

$(TOOLS)/influxd:
	GOBIN=$(TOOLS) go install github.com/influxdata/influxdb/cmd/influxd@$(INFLUXD_VERSION)

# helm's release builds stamp its version and the Kubernetes version it assumes with -ldflags;
# a plain `go install` would claim Kubernetes 1.20 and refuse charts that need >= 1.25.
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=31 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=31

$(TOOLS)/helm:
	GOBIN=$(TOOLS) go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

agent:
	@if [ -f kernel-agent/go.mod ]; then \
	  cd kernel-agent && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/mcw-agent ./cmd/mcw-agent; \
	fi

lint: deps-python
	$(VENV)/bin/ruff check xapp twin tests bench dashboards
	$(PY) -m dashboards --check
	$(VENV)/bin/mypy
	@if [ -f kernel-agent/go.mod ]; then cd kernel-agent && go vet ./...; fi

# pytest-xdist workers: waiting on servers dominates, so more workers than the 2 cores here win
# (docs/design.md, "Tests"); PYTEST_WORKERS=0 runs the suite serially in one process.
# --dist loadfile: a module's tests stay on one worker, in order (the full stack, the image and
# the booted machine are module fixtures, and some tests build on the one before).
PYTEST_WORKERS ?= 4

test-python: deps
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The in-process tier only (tests/conftest.py): no server, no namespace, no image.
test-unit: deps-python
	$(VENV)/bin/pytest -q -m unit -n $(PYTEST_WORKERS) --dist loadfile

test-agent: test-agent-packages test-agent-netns

# Every package but integration (network namespaces, root), then the fuzz targets.
test-agent-packages: agent
	@if [ -f kernel-agent/go.mod ]; then cd kernel-agent && \
	  go test -race -count=1 $$(go list ./... | grep -v '/integration$$') && ./fuzz.sh 50000; fi

test-agent-netns: agent
	@if [ -f kernel-agent/go.mod ]; then cd kernel-agent && go test -race -count=1 ./integration; fi

bench: deps
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
	@if [ -f kernel-agent/go.mod ]; then cd kernel-agent && go test -run '^$$' -bench . -benchmem ./... && go run ./cmd/mcw-agent-bench; fi

clean:
	rm -rf out .pytest_cache .ruff_cache .mypy_cache kernel-agent/bin
