// Pins the Go modules whose sources hold the CRDs the Helm chart's custom resources are validated against
// (KEDA's ScaledObject and TriggerAuthentication, the Prometheus Operator's ServiceMonitor and
// PrometheusRule): jqstack/testing/helm.py reads them out of `go mod download -json`. Nothing is built.
module jobq.local/helmcrds

go 1.23.0

require (
	github.com/kedacore/keda/v2 v2.21.0
	github.com/prometheus-operator/prometheus-operator v0.85.0
)
