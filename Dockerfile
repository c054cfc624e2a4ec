# syntax=docker/dockerfile:1
#
# Image of the mcw-xapp (multi-connectivity weights xApp) for the O-RAN SC near-RT RIC.
#
#   docker build -t registry.example.com/mcw/mcw-xapp:0.1.0 .            # runtime image (default)
#   docker build --target test .                                         # runs the test suite
#
# Stages: rmr (RMR's runtime library, as O-RAN SC xApps install it: the .deb from the O-RAN SC
# packagecloud repository, amd64 only, checked against its published sha256), build (the Python
# package in a virtualenv), xapp (the image's content: non-root 10001:10001, nothing written
# outside /tmp, so it runs with a read-only root file system), tools and test (the test suite on
# top of xapp, with RMR present, so the RMR round-trip tests run instead of skipping), and
# runtime, last so that a plain `docker build .` builds it: the image the chart runs. The test
# stage (servers, dev dependencies, the source tree) is only built when asked for by name.
#
# Paths are the contract with config-file.json and charts/mcw-xapp: the chart mounts its
# ConfigMaps over /opt/ric/config and its Secrets at /opt/ric/tls, /opt/ric/secret/influxdb and,
# when given, the model-signing public key's directory /opt/mcw/keys.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm

# --- rmr -------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS rmr
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG RMR_VERSION=4.9.4
# Required: the sha256 of rmr_${RMR_VERSION}_amd64.deb as packagecloud publishes it on the
# package's page (https://packagecloud.io/o-ran-sc/release/packages/debian/stretch/
# rmr_4.9.4_amd64.deb, "Checksums"). A new RMR_VERSION needs its own RMR_DEB_SHA256.
ARG RMR_DEB_SHA256=76b48a28fc7b3fe38b1f3784e2ef958bd85265613b4793f8ec2c6b09bd10f84a
# RMR_DEB_URL=none builds an image without RMR, for builders that cannot reach packagecloud:
# `mcw run` then serves A1 and everything else over HTTP and says at start-up that RMR is
# absent (/ric/v1/config shows it too). The test stage refuses to build without RMR.
ARG RMR_DEB_URL=https://packagecloud.io/o-ran-sc/release/packages/debian/stretch/rmr_${RMR_VERSION}_amd64.deb/download.deb
# Download tools of a throw-away stage: the base image pins the Debian release, not each package.
# hadolint ignore=DL3008
RUN mkdir -p /out/lib \
 && if [ "${RMR_DEB_URL}" = none ]; then echo "building without RMR (RMR_DEB_URL=none)"; exit 0; fi \
 && { printf '%s\n' "${RMR_DEB_SHA256}" | grep -Eqx '[0-9a-f]{64}' \
      || { echo "RMR_DEB_SHA256 must be the sha256 of rmr_${RMR_VERSION}_amd64.deb (64 hex digits)" >&2; exit 1; }; } \
 && apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates wget \
 && rm -rf /var/lib/apt/lists/* \
 && wget -nv -O /tmp/rmr.deb "${RMR_DEB_URL}" \
 && echo "${RMR_DEB_SHA256}  /tmp/rmr.deb" | sha256sum -c - \
 && dpkg -i /tmp/rmr.deb \
 && rm -f /tmp/rmr.deb \
 && cp -a /usr/local/lib*/librmr_si.so* /out/lib/ \
 && test -e "/out/lib/librmr_si.so.${RMR_VERSION}" \
 && test -e /out/lib/librmr_si.so

# --- build -----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# ricsdl pins hiredis==2.0.0, which has no wheel for CPython 3.11: pip compiles it, so this
# throw-away stage has a C compiler (and Python's headers, when the base image is Debian's own
# python3 rather than the python image); the runtime image gets only the built venv.
# hadolint ignore=DL3008
RUN headers=$(python -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "python3-dev")') \
 && apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev ${headers:+"$headers"} \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH}
WORKDIR /src
COPY pyproject.toml README.md* LICENSE ./
COPY xapp/ xapp/
# pip compiles the bytecode here, so the read-only runtime never needs to write it. Then the
# venv loses what the runtime never runs: pycrate's 250 MB of ASN.1 modules but the E2AP one
# the codec imports, the packages' own test suites, and pip/setuptools themselves.
RUN pip install --no-cache-dir . \
 && site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && find "$site/pycrate_asn1dir" -mindepth 1 -maxdepth 1 ! -name '__init__.py' ! -name 'E2AP*' \
      ! -name '__pycache__' -exec rm -rf {} + \
 && find "$site/pycrate_asn1dir/__pycache__" -type f ! -name '__init__.*' ! -name 'E2AP*' -delete \
 && find "$site" -depth -type d -name tests -path '*/site-packages/*/tests' \
      \( -path '*/numpy/*' -o -path '*/scipy/*' -o -path '*/pandas/*' -o -path '*/sklearn/*' \) \
      -exec rm -rf {} + \
 && pip uninstall -y -q pip setuptools \
 && python -c 'import pycrate_asn1dir.E2AP, xapp.adapters.e2.e2ap, xapp.adapters.e2.kpm_encode, sklearn.ensemble, scipy.stats, pandas, ricsdl'

# --- xapp: the runtime image's content (the test stage builds on it) --------------------------
FROM ${PYTHON_IMAGE} AS xapp
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
# The project's release key, which the shipped artifacts are signed with (controls.model.
# public_key_file); the chart mounts an operator's key over /opt/mcw/keys when given one.
COPY keys/model-signing.pub /opt/mcw/keys/model-signing.pub
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

# --- test (only with --target test) -----------------------------------------------------------
FROM xapp AS test
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

# --- runtime (the default target: the last stage) --------------------------------------------
# The xapp stage as it is (its user restated, so the default target is non-root by itself),
# kept last so that `docker build .` never builds the test image.
FROM xapp AS runtime
USER 10001:10001
