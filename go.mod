module github.com/idemkit/idemkit

go 1.26.0

require (
	golang.org/x/mod v0.43.0
	golang.org/x/text v0.44.0
)
