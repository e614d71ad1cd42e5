module github.com/idemkit/idemkit/examples/quickstart

go 1.26.0

require github.com/idemkit/idemkit v0.1.0

require golang.org/x/text v0.44.0 // indirect
