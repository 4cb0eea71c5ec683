//go:build tools

// Package tools pins the Consul agent so `go build github.com/hashicorp/consul` resolves it from this
// wrapper module. Building through a wrapper ignores Consul's own replace directives (see stack.md).
package tools

import _ "github.com/hashicorp/consul"
