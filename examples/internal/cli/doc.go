// Package cli is what every demo server program shares: the backend flags
// (-store and the addresses of its server), the guard built on the backend
// they choose, the -metrics flag (the guard's OpenTelemetry metrics,
// exported in the Prometheus format: [Metrics]), the listener, the logging
// and the graceful shutdown. A program provides its server ([Program]);
// [HTTP] builds the Program of an HTTP demo from the routes that mount the
// demo service.
package cli
