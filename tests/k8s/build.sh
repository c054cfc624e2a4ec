#!/bin/bash
# Builds Kubernetes' commands from the Go module proxy into $1 (default .tools/k8s/bin) with the
# wrapper module in tests/k8s/kube. The version is stamped with component-base's and client-go's
# -X flags as Kubernetes' own release build does (hack/lib/version.sh): without them the
# apiserver reports v0.0.0-master and helm refuses the chart's kubeVersion.
# Cold (empty Go build and module caches) it took 573 s on 2 shared cores (docs/k8s.md); with
# a warm Go build cache, about 30 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../.tools/k8s/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$here/kube"
version=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' go.mod)
IFS=. read -r major minor _ <<<"${version#v}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
echo "building Kubernetes $version (${cmds[*]}) into $out"
CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
echo "$version" >"$out/.version"
