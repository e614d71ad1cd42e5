// Package otelsuite holds the tests of idemkitotel that need more than
// idemkitotel's own module: the hook on every adapter (net/http, gin, echo
// v4 and v5, gRPC and Connect servers on loopback listeners, with real
// clients) and on Redis, MariaDB and dynalite (no round trip added). They live in the examples module, which requires
// every adapter and backend anyway, so that idemkitotel's go.mod requires
// only OpenTelemetry and the root module and its users' module graphs hold
// no adapter and no backend (docs/modules.md). The package has no code.
package otelsuite
