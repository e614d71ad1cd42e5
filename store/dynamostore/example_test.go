package dynamostore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/dynamostore"
)

// awsConfig stands for your AWS configuration, usually from
// config.LoadDefaultConfig(ctx) (github.com/aws/aws-sdk-go-v2/config).
var awsConfig aws.Config

// A guard on DynamoDB: claims and outcomes live in one item per key, one
// client per process; DynamoDB's TTL on expireAt deletes what is no longer
// needed (docs/backends.md, "DynamoDB"). (It needs DynamoDB, so it does
// not run as a test.)
func Example() {
	ctx := context.Background()
	client := dynamodb.NewFromConfig(awsConfig)
	table := dynamostore.WithTable("orders_idempotency")
	if err := dynamostore.CreateTable(ctx, client, table); err != nil { // idempotent: once at deployment, or at start
		log.Fatal(err)
	}
	records, err := dynamostore.New(client, table)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(records)
	if err != nil {
		log.Fatal(err)
	}
	total, replayed, err := middleware.Do(ctx, guard, "charge:order-42", map[string]int{"cents": 1999},
		func(ctx context.Context) (int, error) {
			return 1999, nil // charge the card once
		})
	fmt.Println(total, replayed, err)
}

// Locks on DynamoDB: the same engine, through the lock library; waiters
// poll, and any process can release or extend a lease by its lock id
// (through the table's lock-id index). (It needs DynamoDB, so it does not
// run as a test.)
func Example_lock() {
	ctx := context.Background()
	records, err := dynamostore.New(dynamodb.NewFromConfig(awsConfig), dynamostore.WithTable("locks"))
	if err != nil {
		log.Fatal(err)
	}
	locks, err := lock.New(records)
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, locks, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
		fmt.Println("issuing invoice 42 under fence", lease.Fence)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
