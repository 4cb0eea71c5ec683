//go:build tools

// Package tools pins Prometheus's promtool so `go build github.com/prometheus/prometheus/cmd/promtool`
// resolves it from this wrapper module (the way deploy/consul pins Consul). jobq uses it to check and
// unit-test deploy/prometheus/alerts.yml (`promtool test rules`, tests/unit/test_alert_rules.py).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
