module github.com/idemkit/idemkit/store/mysqlstore

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/idemkit/idemkit v0.1.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
