package dynamostore

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// listScanItems is the fewest items one Scan of List reads, and
// listMaxScans bounds the Scans of one page (items that are not listed
// are read and skipped); its cursor goes on.
const (
	listScanItems = 100
	listMaxScans  = 8
)

// List implements [store.Lister]: strongly consistent Scans, in
// DynamoDB's order, after the item the cursor names (its partition key in
// unpadded base64url), of at least 100 items each, until the page holds
// limit records or 8 Scans were made, keeping the live records under
// prefix. Under a prefix an item's partition key holds verbatim, DynamoDB
// filters the items (and the encoded keys, which it cannot judge); a
// listing still reads the whole table over its pages, each one's capacity
// counted on what it read.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	var start map[string]types.AttributeValue
	var cursorErr error
	if after != "" {
		pk, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || len(pk) == 0 {
			cursorErr = idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
		}
		start = map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: string(pk)}}
	}
	if err := engine.Ready(ctx, op, engine.ValidateList(limit), cursorErr); err != nil {
		return nil, "", err
	}
	in := &dynamodb.ScanInput{
		TableName: &s.cfg.table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(max(limit, listScanItems))),
		FilterExpression:          aws.String("st > :released"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":released": num(int64(released))},
	}
	if prefix != "" && encodeKey(prefix) == prefix {
		// A key under prefix is held verbatim, or encoded (a "#" ahead).
		in.FilterExpression = aws.String("st > :released AND (begins_with(pk, :prefix) OR begins_with(pk, :encoded))")
		in.ExpressionAttributeValues[":prefix"] = &types.AttributeValueMemberS{Value: prefix}
		in.ExpressionAttributeValues[":encoded"] = &types.AttributeValueMemberS{Value: encodedPrefix}
	}
	cursor := func(pk string) string { return base64.RawURLEncoding.EncodeToString([]byte(pk)) }
	var recs []store.Record
	for range listMaxScans {
		in.ExclusiveStartKey = start
		out, err := s.client.Scan(ctx, in)
		if err != nil {
			return nil, "", mapError(ctx, op, err)
		}
		now, skew := s.now(), s.cfg.skew.Milliseconds()
		for i, m := range out.Items {
			pk, ok := m[attrKey].(*types.AttributeValueMemberS)
			if !ok {
				return nil, "", malformed(op, "an item without a partition key")
			}
			key, ok := decodeKey(pk.Value)
			if !ok {
				return nil, "", malformed(op, "the partition key is not a record key's encoding")
			}
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			it, err := decode(op, key, m)
			if err != nil {
				return nil, "", err
			}
			if !it.live(now, skew) {
				continue
			}
			if recs = append(recs, it.record()); len(recs) == limit {
				if i == len(out.Items)-1 && len(out.LastEvaluatedKey) == 0 {
					return recs, "", nil
				}
				return recs, cursor(pk.Value), nil // the next page goes on after this item
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return recs, "", nil
		}
		start = out.LastEvaluatedKey
	}
	pk, ok := start[attrKey].(*types.AttributeValueMemberS)
	if !ok {
		return nil, "", malformed(op, "DynamoDB's last evaluated key has no partition key")
	}
	return recs, cursor(pk.Value), nil
}
