"""``make e2e-k8s``: the chart installed into a real single-node Kubernetes the project builds
and starts itself (docs/k8s.md)."""
