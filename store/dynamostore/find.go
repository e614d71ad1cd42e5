package dynamostore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// FindClaim implements [github.com/idemkit/idemkit/lock.Finder]: the live
// claim whose fingerprint is the lock id fp, or ok = false (at once, with
// no I/O, for a fingerprint that is not a lock id, since only lock
// claims are indexed). It queries the table's lock-id index (a sparse
// global secondary index: only claims carry the attribute) and reads each
// item it names with a strongly consistent read, so what it returns is
// the item as it is: two round trips. The index itself is eventually
// consistent on DynamoDB: a claim made a moment ago may not be found yet.
func (s *Store) FindClaim(ctx context.Context, fp string) (store.Record, bool, error) {
	const op = "find claim"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	if !engine.LockID(fp) {
		return store.Record{}, false, nil
	}
	out, err := s.client.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.cfg.table,
		IndexName:                 aws.String(lockIndex),
		KeyConditionExpression:    aws.String("lockId = :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: fp}},
	})
	if err != nil {
		return store.Record{}, false, mapError(ctx, op, err)
	}
	for _, m := range out.Items {
		pk, ok := m[attrKey].(*types.AttributeValueMemberS)
		if !ok {
			return store.Record{}, false, malformed(op, "the lock-id index holds an item without a partition key")
		}
		key, ok := decodeKey(pk.Value)
		if !ok {
			return store.Record{}, false, malformed(op, "the partition key is not a record key's encoding")
		}
		it, err := s.read(ctx, op, key)
		if err != nil {
			return store.Record{}, false, err
		}
		if it != nil && it.state == store.StateClaimed && it.fp == fp && it.live(s.now(), s.cfg.skew.Milliseconds()) {
			return it.record(), true, nil
		}
	}
	return store.Record{}, false, nil
}
