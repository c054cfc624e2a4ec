# syntax=docker/dockerfile:1
#
# Image of the mcw-xapp (multi-connectivity weights xApp) for the O-RAN SC near-RT RIC.
#
#   docker build -t registry.example.com/mcw/mcw-xapp:0.1.0 .            # runtime image
#   docker build --target test .                                         # runs the test suite
#
# Stages: rmr (RMR's runtime library, as O-RAN SC xApps install it: the .deb from the O-RAN SC
# packagecloud repository, amd64 only), build (the Python package in a virtualenv), runtime (the
# image the chart runs: non-root 10001:10001, nothing written outside /tmp, so it runs with a
# read-only root file system), tools and test (the test suite, with RMR present, so the RMR
# round-trip tests run instead of skipping).
#
# Paths are the contract with config-file.json and charts/mcw-xapp: the chart mounts its
# ConfigMaps over /opt/ric/config and its Secrets at /opt/ric/tls and /opt/ric/secret/influxdb.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm

# --- rmr -------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS rmr
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG RMR_VERSION=4.9.4
# Optional: the .deb's sha256, checked when given (pin it in CI).
ARG RMR_DEB_SHA256=""
ARG RMR_DEB_URL=https://packagecloud.io/o-ran-sc/release/packages/debian/stretch/rmr_${RMR_VERSION}_amd64.deb/download.deb
# Download tools of a throw-away stage: the base image pins the Debian release, not each package.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates wget \
 && rm -rf /var/lib/apt/lists/*
RUN wget -nv -O /tmp/rmr.deb "${RMR_DEB_URL}" \
 && if [ -n "${RMR_DEB_SHA256}" ]; then echo "${RMR_DEB_SHA256}  /tmp/rmr.deb" | sha256sum -c -; fi \
 && dpkg -i /tmp/rmr.deb \
 && rm -f /tmp/rmr.deb \
 && mkdir -p /out/lib \
 && cp -a /usr/local/lib*/librmr_si.so* /out/lib/ \
 && test -e /out/lib/librmr_si.so

# --- build -----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH}
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY xapp/ xapp/
# pip compiles the bytecode here, so the read-only runtime never needs to write it.
RUN pip install --no-cache-dir .

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 mcw \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin mcw
COPY --from=rmr /out/lib/ /usr/local/lib/
RUN ldconfig
COPY --from=build /opt/venv /opt/venv
# Defaults baked in; in the RIC the chart mounts its ConfigMaps over /opt/ric/config.
COPY config-file.json /opt/ric/config/config-file.json
COPY charts/mcw-xapp/files/router.txt /opt/ric/config/router.txt
COPY schemas/ /opt/mcw/schemas/
COPY models/ /opt/mcw/models/
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    LD_LIBRARY_PATH=/usr/local/lib \
    CONFIG_FILE=/opt/ric/config/config-file.json \
    RMR_SEED_RT=/opt/ric/config/router.txt \
    MCW_SCHEMAS_DIR=/opt/mcw/schemas
EXPOSE 4560 4561 8080
USER 10001:10001
WORKDIR /tmp
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/ric/v1/health/alive', timeout=2)"]
ENTRYPOINT ["mcw", "run"]

# --- tools (for the test stage: the servers and helm the tests start) --------------------------
# helm built with `go install` assumes Kubernetes 1.20 unless told otherwise (the release build
# sets these through its Makefile); the chart needs >= 1.25.
FROM ${GO_IMAGE} AS tools
ARG INFLUXD_VERSION=v1.8.10
ARG HELM_VERSION=v3.16.4
ENV GOFLAGS=-mod=mod
ARG HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=31 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=31"
RUN GOBIN=/out go install github.com/influxdata/influxdb/cmd/influxd@${INFLUXD_VERSION} \
 && GOBIN=/out go install -ldflags="${HELM_LDFLAGS}" helm.sh/helm/v3/cmd/helm@${HELM_VERSION}

# --- test ------------------------------------------------------------------------------------
FROM runtime AS test
USER 0:0
# Test servers only, never in the runtime image; the base image pins the Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server mosquitto mosquitto-clients openssl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=tools /out/ /usr/local/bin/
WORKDIR /src
COPY --chown=10001:10001 . .
# The project itself with its dev extra; versions are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir '.[dev]'
USER 10001:10001
# The RMR tests must run here, not skip: fail early if the library cannot be loaded.
RUN python -c "import ctypes; ctypes.CDLL('librmr_si.so')" \
 && pytest -q -p no:cacheprovider
