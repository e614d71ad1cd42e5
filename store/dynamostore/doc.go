// Package dynamostore is idemkit's Amazon DynamoDB engine, on the AWS SDK
// for Go v2: one item per record, carrying its own lease and fence
// ([store.Store]), serving the guard
// ([github.com/idemkit/idemkit/middleware]) and the lock library
// ([github.com/idemkit/idemkit/lock]) alike. It is also a [store.Records],
// a [store.Lister], a [store.Stepper] (a claim's steps live in its item)
// and a lock-id finder ([Store.FindClaim]).
//
//	client := dynamodb.NewFromConfig(awsConfig)
//	if err := dynamostore.CreateTable(ctx, client); err != nil { ... } // or the table of docs/backends.md
//	s, err := dynamostore.New(client)
//	guard, err := middleware.New(s) // idempotent requests
//	locks, err := lock.New(s)       // distributed locks with fencing
//
// Claims, completions, extensions, releases, deletions and steps are each
// one conditional write, so a first execution costs two round trips (a
// claim that takes over a record with steps, and an extension or a step
// that would shorten the item's keep, make one more); a claim
// refused by a live record (a replay, or busy) gets the item back with
// the refusal: one round trip on DynamoDB (two on emulators that do not
// send it back, such as dynalite, the one the tests run on). DynamoDB
// gives a condition no clock of its own, so leases and expiry are judged
// by the clients' clocks: a claim is taken over only once the taker's
// clock is [WithMaxClockSkew] past its lease, and fences, which follow
// [store.Store]'s rule ([WithMaxClockStep]), refuse every stale write
// whatever the clocks say. DynamoDB's TTL on expireAt deletes items, up to
// days late; reads ignore what ran out. DynamoDB cannot notify, so
// waiters poll with idemkit's back-off. Failures are [idemkit.Error]
// values mapped by error type.
//
// The repository's docs/backends.md (section DynamoDB) describes the
// item, the round trips, the clocks with figures, the table for
// CloudFormation and Terraform, and production setup in full.
package dynamostore
