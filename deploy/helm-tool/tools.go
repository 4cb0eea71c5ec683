//go:build tools

// Package tools pins Helm so `go build helm.sh/helm/v3/cmd/helm` resolves it from this wrapper module:
// the tests render and lint deploy/helm/jobq with it (tests/deploy/test_helm.py; see docs/deploy.md).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
