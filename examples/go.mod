module github.com/idemkit/idemkit/examples

go 1.26.0

require (
	github.com/idemkit/idemkit v0.0.0
	github.com/idemkit/idemkit/lock/pglock v0.0.0
	github.com/idemkit/idemkit/lock/redislock v0.0.0
	github.com/idemkit/idemkit/store/pgstore v0.0.0
	github.com/idemkit/idemkit/store/redisstore v0.0.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace (
	github.com/idemkit/idemkit => ../
	github.com/idemkit/idemkit/lock/pglock => ../lock/pglock
	github.com/idemkit/idemkit/lock/redislock => ../lock/redislock
	github.com/idemkit/idemkit/store/pgstore => ../store/pgstore
	github.com/idemkit/idemkit/store/redisstore => ../store/redisstore
)
