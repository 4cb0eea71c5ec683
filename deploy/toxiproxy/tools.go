//go:build tools

// Package tools pins Shopify's toxiproxy so `go build github.com/Shopify/toxiproxy/v2/cmd/server`
// resolves it from this wrapper module (the fault proxy of the fault-injection tests; see docs/stack.md).
package tools

import _ "github.com/Shopify/toxiproxy/v2/cmd/server"
